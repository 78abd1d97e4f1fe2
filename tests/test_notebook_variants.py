"""notebooks/run_notebooks.py runs some notebooks again with other parameters (VARIANTS): each variant must name a
notebook that exists and parameters its tagged parameters cell declares (papermill would inject an unknown name
silently, and the variant would rerun the default)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
import run_notebooks  # noqa: E402
from run_notebooks import declared_parameters  # noqa: E402


def test_every_variant_sets_parameters_its_notebook_declares():
    assert run_notebooks.VARIANTS
    for stem, variants in run_notebooks.VARIANTS.items():
        notebook = ROOT / "notebooks" / f"{stem}.ipynb"
        assert notebook.exists(), stem
        names = declared_parameters(notebook)
        for variant, parameters in variants.items():
            assert set(parameters) <= names, (stem, variant, set(parameters) - names)
        runs = run_notebooks.runs_of(notebook)
        assert runs[0] == (stem, {}) and [name for name, _ in runs[1:]] == [f"{stem}-{v}" for v in variants]


def test_every_notebook_takes_the_runners_parameters():
    """run_notebooks passes profile (smoke, quick or full) and out_root (the smoke profile's scratch folder) to all."""
    for notebook in run_notebooks.select(None):
        assert {"profile", "out_root"} <= declared_parameters(notebook), notebook.name
        code = "".join("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code")
        assert '"smoke"' in code, f"{notebook.name} has no smoke settings"


def test_papermill_reads_every_parameter_of_every_notebook():
    """papermill's parameter parser skips (with only a log line) a line with a second '=' (in its comment, say): such
    a parameter vanishes from ``papermill --help-notebook`` and the JupyterLab parameter view."""
    import nbformat
    from papermill.translators import PythonTranslator
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(notebook, as_version=4)
        cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        if not cells:
            continue
        read = {p.name for p in PythonTranslator.inspect(cells[0])}
        assert read == declared_parameters(notebook), (notebook.name, declared_parameters(notebook) - read)


def test_each_finished_run_is_recorded_before_the_call_ends(tmp_path, monkeypatch):
    """A run's time is kept as it finishes (``call=False``: no call entry, the last call's setup kept), so a stopped
    call loses none; ``finish`` then adds the call once."""
    monkeypatch.setattr(run_notebooks, "timings_cache", lambda: tmp_path / "cache" / "notebook_timings.json")
    setup = {"started_utc": "t0", "profile": "quick", "jobs": 2, "machine": {"cpu": "x", "gpu": None}}
    run = {"wall_s": 60.0, "profile": "quick"}
    run_notebooks.record_timings(tmp_path, {"a": run}, setup, call=False)
    kept = json.loads((tmp_path / "timings.json").read_text())
    assert kept["runs"] == {"a": run} and kept["calls"] == []
    run_notebooks.record_timings(tmp_path, {"b": {**run, "wall_s": 30.0}}, setup, call=False)
    run_notebooks.record_timings(tmp_path, {"a": run, "b": {**run, "wall_s": 30.0}}, {**setup, "wall_s": 95.0})
    for path in (tmp_path / "timings.json", tmp_path / "cache" / "notebook_timings.json"):
        final = json.loads(path.read_text())
        assert set(final["runs"]) == {"a", "b"} and len(final["calls"]) == 1
        assert final["calls"][0]["runs"] == {"a": 60.0, "b": 30.0} and final["last_run"]["wall_s"] == 95.0
