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
