"""The dependency trace (specrepro/core/deps.py) and the freshness of notebook runs (notebooks/freshness.py).

The tracer is tested on a scratch checkout of modules written here: what ran counts, what was only imported does not,
a constant or a config class a function read counts its module, an import-time call counts only with the module that
made it, a data file opened counts and prose never does. Then, on the committed records: which runs one changed file
stales, for the four cases issue 68 names."""
from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

from specrepro.core.deps import Trace, changed, digest_of, untraced

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
import freshness  # noqa: E402

MODULES = {
    "specrepro/used.py": """
        from specrepro_table import TABLE
        from specrepro_config import Config
        def work():
            return sum(TABLE) + Config().n
        """,
    "specrepro/table.py": "TABLE = [1, 2, 3]\n",
    "specrepro/config.py": """
        from dataclasses import dataclass
        @dataclass(frozen=True)
        class Config:
            n: int = 4
        """,
    "specrepro/only_imported.py": "def never():\n    return 1\n",
    "specrepro/registry.py": """
        import specrepro_helper
        ENTRY = specrepro_helper.build()
        def lookup():
            return ENTRY
        """,
    "specrepro/helper.py": "def build():\n    return {'x': [1, 2]}\n",
    "specrepro/registry_unused.py": """
        import specrepro_helper2
        ENTRY = specrepro_helper2.build()
        """,
    "specrepro/helper2.py": "def build():\n    return {'y': [3, 4]}\n",
    "specrepro/sizes.py": "BLOCK = 256\nDEFAULT = 0.5\n",
    "specrepro/sized.py": """
        from specrepro_sizes import BLOCK, DEFAULT
        def blocks(n):
            return n // BLOCK
        def scaled(x, factor=DEFAULT):
            return x * factor
        """,
    "specrepro/data.json": "{}\n",
    "specrepro/README.md": "prose\n",
    "requirements.lock": "torch==0\n",
}


@pytest.fixture
def checkout(tmp_path):
    """A scratch checkout whose modules are imported as ``specrepro_<name>``, from their files under it."""
    for rel, text in MODULES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    names = ["table", "config", "used", "only_imported", "helper", "registry", "helper2", "registry_unused", "sizes",
             "sized"]
    yield tmp_path, names
    for name in names:
        sys.modules.pop(f"specrepro_{name}", None)


def load(root: Path, name: str):
    spec = importlib.util.spec_from_file_location(f"specrepro_{name}", root / "specrepro" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_what_ran_and_what_it_read_counts_what_was_only_imported_does_not(checkout):
    root, names = checkout
    with Trace(root) as trace:
        modules = {name: load(root, name) for name in names}
        assert modules["used"].work() == 10
        assert modules["registry"].lookup() == {"x": [1, 2]}
        (root / "specrepro" / "data.json").read_text()
        (root / "specrepro" / "README.md").read_text()
    files = trace.files()
    assert "specrepro/used.py" in files  # its function ran
    assert "specrepro/table.py" in files  # a constant it read
    assert "specrepro/config.py" in files  # a config class it built (its __init__ is dataclasses')
    assert "specrepro/registry.py" in files and "specrepro/helper.py" in files  # an import-time call of a used module
    assert "specrepro/data.json" in files and "requirements.lock" in files
    assert "specrepro/only_imported.py" not in files  # imported, never called
    assert "specrepro/registry_unused.py" not in files and "specrepro/helper2.py" not in files  # import-time only
    assert "specrepro/README.md" not in files  # prose never counts


def test_untraced_hides_a_timed_region_and_nested_traces_add_up(checkout):
    root, names = checkout
    modules = {name: load(root, name) for name in names}
    with Trace(root) as outer:
        with untraced():
            modules["only_imported"].never()
        with Trace(root) as inner:
            modules["used"].work()
    assert "specrepro/only_imported.py" not in outer.files()
    assert "specrepro/used.py" in inner.files() and "specrepro/used.py" in outer.files()
    assert sys.gettrace() is None  # the outermost trace restores what was there


def test_changed_names_edited_and_removed_files(checkout):
    root, names = checkout
    modules = {name: load(root, name) for name in names}
    with Trace(root) as trace:
        modules["used"].work()
    record = trace.digests()
    assert changed(record, root) == [] and digest_of(record) == digest_of(trace.digests())
    (root / "specrepro" / "table.py").write_text("TABLE = [1, 2, 4]\n")
    (root / "specrepro" / "config.py").unlink()
    assert changed(record, root) == ["specrepro/config.py (removed)", "specrepro/table.py"]


def test_status_fresh_stale_untraced_missing(tmp_path):
    root, executed = tmp_path / "repo", tmp_path / "executed"
    (root / "specrepro").mkdir(parents=True)
    (root / "specrepro" / "a.py").write_text("x = 1\n")
    executed.mkdir()
    for run in ("kept", "edited", "old"):
        (executed / f"{run}.ipynb").write_text("{}")
    from specrepro.core.deps import file_digest

    for run in ("kept", "edited"):
        freshness.write_record(executed, run, {"specrepro/a.py": file_digest(root / "specrepro" / "a.py")},
                               made_at="abc", traced="this run")
    json_edit = json.loads(freshness.record_path(executed, "edited").read_text())
    json_edit["files"]["specrepro/a.py"] = "0" * 64
    freshness.record_path(executed, "edited").write_text(json.dumps(json_edit))
    rows = {r["run"]: r for r in freshness.status(executed, ["kept", "edited", "old", "never"], root)}
    assert [rows[r]["state"] for r in ("kept", "edited", "old", "never")] == ["fresh", "stale", "untraced", "missing"]
    assert rows["edited"]["changed"] == ["specrepro/a.py"]
    assert freshness.not_fresh(list(rows.values())) == ["edited", "old", "never"]
    text = "\n".join(freshness.status_lines(list(rows.values())))
    assert "1 fresh, 1 stale, 1 untraced, 1 missing of 4 run(s)" in text


def test_stale_with_nothing_stale_ends_at_once(tmp_path, capsys):
    """``--stale`` with every run fresh runs nothing and says so (and ``--status`` runs nothing either)."""
    import run_notebooks

    executed = tmp_path / "executed"
    executed.mkdir()
    (executed / "theory_moe.ipynb").write_text("{}")
    freshness.write_record(executed, "theory_moe", {"requirements.lock": "x"}, made_at="abc", traced="this run")
    rows = freshness.status(executed, ["theory_moe"])
    assert rows[0]["state"] == "stale"  # a digest that is not the lock's
    from specrepro.core.deps import file_digest

    freshness.write_record(executed, "theory_moe", {"requirements.lock": file_digest(ROOT / "requirements.lock")},
                           made_at="abc", traced="this run")
    jobs = [(ROOT / "notebooks" / "theory_moe.ipynb", "theory_moe", {})]
    args = run_notebooks.build_parser().parse_args(["--stale"])
    assert run_notebooks.by_freshness(jobs, executed, args) == []
    assert "nothing to run" in capsys.readouterr().out


def test_a_second_make_figures_keeps_the_runs_this_machine_made(tmp_path, monkeypatch):
    """``made_here``: a run this machine made (noted in its run cache) from files unchanged since is kept; another
    profile, a changed file, or a fresh machine (an empty cache) runs it."""
    monkeypatch.setenv("SPECREPRO_CACHE", str(tmp_path / "cache"))
    from specrepro.core.deps import file_digest

    executed = tmp_path / "executed"
    executed.mkdir()
    (executed / "theory_moe.ipynb").write_text("{}")
    lock = file_digest(ROOT / "requirements.lock")
    freshness.write_record(executed, "theory_moe", {"requirements.lock": lock}, made_at="abc", profile="quick",
                           traced="this run")
    assert freshness.made_here(executed, ["theory_moe"], "quick") == []  # a fresh machine: nothing made here
    freshness.remember(executed, "theory_moe")
    assert freshness.made_here(executed, ["theory_moe"], "quick") == ["theory_moe"]
    assert freshness.made_here(executed, ["theory_moe"], "smoke") == []
    freshness.write_record(executed, "theory_moe", {"requirements.lock": "0" * 64}, made_at="abc", profile="quick",
                           traced="this run")
    assert freshness.made_here(executed, ["theory_moe"], "quick") == []


def test_a_cached_cell_is_recomputed_only_when_code_it_ran_changed(checkout, monkeypatch, tmp_path_factory):
    """A traced run-cache cell (``studies.common.cached_json`` in a ``StudyCache`` folder): reused while nothing
    changed and after a change to a module it never ran; recomputed after a change to one it ran."""
    import specrepro.core.deps as deps
    from specrepro.studies.common import StudyCache, cached_json

    root, names = checkout
    monkeypatch.setattr(deps, "ROOT", root)
    modules = {name: load(root, name) for name in names}
    cache = StudyCache("toy", root=tmp_path_factory.mktemp("cache"))
    calls = []

    def cell():
        folder = cache.dir("grid", {"n": 1})
        return cached_json(folder / "cell.json", lambda: calls.append(1) or modules["used"].work())

    assert cell() == 10 and cell() == 10 and len(calls) == 1  # computed once, then reused
    (root / "specrepro" / "only_imported.py").write_text("def never():\n    return 2\n")
    (root / "specrepro" / "README.md").write_text("other prose\n")
    assert cell() == 10 and len(calls) == 1  # an unrelated module and prose: still reused
    (root / "specrepro" / "table.py").write_text("TABLE = [1, 2, 3]  # edited\n")
    assert cell() == 10 and len(calls) == 2  # a constant it read changed: recomputed
    assert cell() == 10 and len(calls) == 2


# ------------------------------------------------------------------ the committed runs' records: what one change stales

EXECUTED = ROOT / "notebooks" / "executed"
MEASURED = {"batch_speculative", "distillspec_study", "eagle_feature_draft", "medusa_trees", "mentored_speed_quality",
            "mjsd_joint_decoding", "online_speculative_stream", "online_speculative_stream-sequences",
            "ppd_parallel_prompt_decoding", "speculative_slides_tables", "survey_mentored_staged_batch"}


def committed_records() -> dict[str, dict]:
    records = {p.name[:-len(freshness.SUFFIX)]: json.loads(p.read_text())
               for p in EXECUTED.glob(f"*{freshness.SUFFIX}")}
    runs = {p.stem for p in EXECUTED.glob("*.ipynb")}
    assert set(records) == runs, f"executed runs without a dependency record: {sorted(runs - set(records))}"
    return records


def staled_by(path: str) -> set[str]:
    """The committed runs that a change to ``path`` would stale: ``freshness.status`` on the records, with that one
    file's recorded digest replaced (as an edit would make it differ)."""
    stale = set()
    for run, record in committed_records().items():
        files = {f: (file_digest(ROOT / f) if (ROOT / f).is_file() else d) for f, d in record["files"].items()}
        if path in files:
            files[path] = "edited"
        if changed(files, ROOT):
            stale.add(run)
    return stale


def file_digest(path):
    from specrepro.core.deps import file_digest as digest

    return digest(path)


def test_every_committed_run_has_a_record_and_no_prose_in_it():
    for run, record in committed_records().items():
        assert record["files"] and not [f for f in record["files"] if f.endswith(".md")], run
        assert "requirements.lock" in record["files"] and record["notebook"] == f"notebooks/{run.split('-')[0]}.ipynb"


def test_a_study_figure_module_stales_only_the_notebook_that_draws_its_figures():
    assert staled_by("specrepro/studies/ppd_figures.py") == {"ppd_parallel_prompt_decoding"}
    for module, run in (("eagle_figures", "eagle_feature_draft"), ("mjsd_figures", "mjsd_joint_decoding"),
                        ("survey_figures", "survey_mentored_staged_batch")):
        assert staled_by(f"specrepro/studies/{module}.py") == {run}


def test_a_simulator_stales_the_notebooks_that_ran_it_and_no_measured_one_that_did_not():
    assert staled_by("simulations/moe.py") == {"theory_moe"}
    ppd = staled_by("simulations/ppd.py")
    assert "theory_ppd" in ppd and not ppd & (MEASURED - {"ppd_parallel_prompt_decoding", "eagle_feature_draft",
                                                          "medusa_trees"})


def test_the_engine_stales_every_measured_notebook_and_documentation_none():
    assert staled_by("specrepro/engine/llama.py") >= MEASURED
    assert not staled_by("specrepro/engine/llama.py") & {"theory_moe", "theory_energy"}
    for prose in ("README.md", "specrepro/engine/README.md", "notebooks/README.md", "docs/gpu-check/README.md"):
        assert staled_by(prose) == set()


def test_a_notebook_run_records_what_its_kernel_ran(tmp_path):
    """``run_notebooks.run_one`` end to end: the kernel's trace, opened by the IPython startup file before the first
    cell, lists the simulator the notebook called and the data file it read, and neither a simulator it only imported
    nor prose it read."""
    import nbformat
    import run_notebooks

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"}})
    params = nbformat.v4.new_code_cell("out_root = None")
    params.metadata["tags"] = ["parameters"]
    body = (f"import sys; sys.path[:0] = [{str(ROOT)!r}]\n"
            "from simulations import moe, speculative\n"
            "value = speculative.expected_tokens(0.5, 4)\n"
            f"open({str(ROOT / 'specrepro' / 'suites' / 'chat.jsonl')!r}).readline()\n"
            f"open({str(ROOT / 'README.md')!r}).readline()\n")
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, tmp_path / "toy.ipynb")
    assert run_notebooks.run_one(tmp_path / "toy.ipynb", {"out_root": str(tmp_path)}, "toy", tmp_path / "executed", 1,
                                 tmp_path / "figures") is None
    files = freshness.read_record(tmp_path / "executed", "toy")["files"]
    assert "simulations/speculative.py" in files and "specrepro/suites/chat.jsonl" in files
    assert "simulations/moe.py" not in files and "README.md" not in files and "requirements.lock" in files


def test_a_small_constant_and_a_default_value_count_their_module(checkout):
    root, names = checkout
    modules = {name: load(root, name) for name in names}
    with Trace(root) as blocks:
        modules["sized"].blocks(1024)
    with Trace(root) as scaled:
        modules["sized"].scaled(2.0)
    assert "specrepro/sizes.py" in blocks.files() and "specrepro/sizes.py" in scaled.files()


def test_a_cell_counts_what_made_its_inputs_and_a_reused_cell_counts_for_its_reader(checkout, monkeypatch,
                                                                                       tmp_path_factory):
    """A cell is handed what code before it made (a model, a table): that code is in its record. A cell read back
    from the cache counts its record's files for the notebook that reads it."""
    import specrepro.core.deps as deps
    from specrepro.studies.common import StudyCache, cached_json

    root, names = checkout
    monkeypatch.setattr(deps, "ROOT", root)
    cache = StudyCache("toy", root=tmp_path_factory.mktemp("cache"))
    with Trace(root) as notebook:  # a notebook's kernel: it imports, then makes the cell's input
        modules = {name: load(root, name) for name in names}
        table = modules["registry"].lookup()
        folder = cache.dir("grid", {"n": 2})
        cached_json(folder / "cell.json", lambda: len(table["x"]))
    record = json.loads((folder / "cell.json.code.json").read_text())
    assert "specrepro/registry.py" in record and "specrepro/helper.py" in record
    assert "specrepro/registry.py" in notebook.digests()
    with Trace(root) as reader:  # a later notebook run: the cell is reused, nothing of it runs
        assert cached_json(folder / "cell.json", lambda: 1 / 0) == 2
    assert "specrepro/registry.py" in reader.digests()


def test_a_cache_folder_with_work_but_no_record_starts_again(tmp_path, capsys):
    """A run killed before it wrote its record: its work cannot be vouched for, so a traced folder restarts; a
    bench's own --out folder (no run-cache key) is left alone."""
    from specrepro.run.cache import BENCH_RECORD, restart_if_code_changed, run_dir

    folder = run_dir("bench", {"n": 1}, root=tmp_path, traced=True)
    (folder / "records.jsonl").write_text("{}\n")
    restart_if_code_changed(folder, folder / BENCH_RECORD)
    assert not (folder / "records.jsonl").exists() and (folder / "key.json").exists()
    assert "no record of the code it ran" in capsys.readouterr().err
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "records.jsonl").write_text("{}\n")
    restart_if_code_changed(mine, mine / BENCH_RECORD)
    assert (mine / "records.jsonl").exists()


def test_a_file_edited_while_a_trace_is_open_is_never_fresh(checkout):
    import time

    root, names = checkout
    modules = {name: load(root, name) for name in names}
    with Trace(root) as trace:
        modules["used"].work()
        time.sleep(0.01)
        (root / "specrepro" / "table.py").write_text("TABLE = [9]\n")
    record = trace.digests()
    assert record["specrepro/table.py"] == deps_edited() and changed(record, root) == ["specrepro/table.py"]


def deps_edited() -> str:
    from specrepro.core.deps import EDITED

    return EDITED
