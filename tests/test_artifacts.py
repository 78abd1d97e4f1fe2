"""A notebook's artifacts are swapped in whole only when it succeeds (notebooks/run_notebooks.py): a failed
notebook leaves the previous artifacts in place, marked STALE; a run from a tree with uncommitted changes marks what
it writes DRAFT; INDEX.md shows both marks beside every artifact they cover. The notebooks here are two-cell
notebooks run by papermill in a real kernel."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
from artifacts import swap_in, write_index  # noqa: E402
from run_notebooks import run_one  # noqa: E402


def notebook(path: Path, rows: int, fail: bool) -> Path:
    """A notebook that saves a table of ``rows`` rows through Artifacts, then raises if ``fail``."""
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"},
                                            "language_info": {"name": "python"}})
    params = nbformat.v4.new_code_cell("out_root = None")
    params.metadata["tags"] = ["parameters"]
    body = (f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'notebooks')!r}]\n"
            "from pathlib import Path\nfrom artifacts import Artifacts\n"
            "art = Artifacts('toy', Path(out_root))\n"
            f"art.table([{{'x': i}} for i in range({rows})], 'toy_table', document='none', item='toy', "
            "description='a toy table')\n" + ("raise RuntimeError('the toy notebook fails')\n" if fail else ""))
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, path)
    return path


def run(tmp_path: Path, rows: int, fail: bool, draft: dict | None = None) -> str | None:
    nb = notebook(tmp_path / f"toy-{rows}.ipynb", rows, fail)
    return run_one(nb, {"out_root": str(tmp_path)}, "toy", tmp_path / "executed", 1, tmp_path / "figures", draft)


def table_rows(tmp_path: Path) -> int:
    return len((tmp_path / "figures" / "toy" / "toy_table.csv").read_text().splitlines()) - 1


def test_a_failed_notebook_keeps_the_previous_artifacts_marked_stale(tmp_path):
    assert run(tmp_path, rows=3, fail=False) is None and table_rows(tmp_path) == 3
    failure = run(tmp_path, rows=5, fail=True)
    assert "RuntimeError: the toy notebook fails" in failure
    assert table_rows(tmp_path) == 3  # the previous run's table, untouched: the failed run's never swapped in
    stale = json.loads((tmp_path / "figures" / "toy" / "STALE.json").read_text())
    assert "the last run of toy failed" in stale["reason"]
    md, _ = write_index(tmp_path / "figures")
    assert "| **STALE** [toy/toy_table.csv](toy/toy_table.csv)" in md.read_text()
    assert not (tmp_path / ".staging" / "toy").exists()
    assert "range(3)" in (tmp_path / "executed" / "toy.ipynb").read_text()  # the executed copy of the run shown
    # the next success swaps a whole fresh folder in: no STALE mark, the new table
    assert run(tmp_path, rows=4, fail=False) is None and table_rows(tmp_path) == 4
    assert not (tmp_path / "figures" / "toy" / "STALE.json").exists()
    assert "STALE" not in write_index(tmp_path / "figures")[0].read_text()


def test_a_run_from_an_uncommitted_tree_marks_its_artifacts_draft(tmp_path):
    assert run(tmp_path, rows=2, fail=False, draft={"revision": "abc (with uncommitted changes)", "reason": "r"}) is None
    assert json.loads((tmp_path / "figures" / "toy" / "DRAFT.json").read_text())["revision"].startswith("abc")
    text = write_index(tmp_path / "figures")[0].read_text()
    assert "| **DRAFT** [toy/toy_table.csv]" in text and "## Marked artifacts" in text


def test_swap_in_replaces_a_folder_whole(tmp_path):
    (tmp_path / "figures" / "a").mkdir(parents=True)
    (tmp_path / "figures" / "a" / "old.png").write_text("old")
    (tmp_path / "stage" / "a").mkdir(parents=True)
    (tmp_path / "stage" / "a" / "new.png").write_text("new")
    assert swap_in(tmp_path / "stage", tmp_path / "figures") == ["a"]
    assert [p.name for p in (tmp_path / "figures").iterdir()] == ["a"]
    assert [p.name for p in (tmp_path / "figures" / "a").iterdir()] == ["new.png"]


def test_writing_the_committed_figures_from_an_uncommitted_tree_is_refused(monkeypatch, capsys):
    """One line and exit status 2 before any notebook runs, naming --allow-draft."""
    import pytest

    import run_notebooks
    monkeypatch.setattr(run_notebooks, "tree_state", lambda: {"revision": "abc (with uncommitted changes)"})
    monkeypatch.setattr(run_notebooks, "run_one", lambda *a, **k: pytest.fail("a notebook ran"))
    assert run_notebooks.main(["--profile", "quick", "--only", "theory_moe"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "uncommitted changes" in err and "--allow-draft" in err


def test_staleness_names_the_code_changed_since_the_commit_a_notebook_ran(tmp_path):
    """In a scratch git repository: the artifacts of a notebook run at the first commit are stale once specrepro/
    changes, with the file named (a README beside the code is prose, not named); those of a run at HEAD are not; a
    STALE mark is listed either way."""
    import subprocess

    from artifacts import mark, staleness, staleness_lines

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                              capture_output=True, text=True).stdout.strip()
    repo = tmp_path / "repo"
    (repo / "specrepro").mkdir(parents=True)
    (repo / "specrepro" / "a.py").write_text("x = 1\n")
    (repo / "specrepro" / "README.md").write_text("one\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD")
    (repo / "specrepro" / "a.py").write_text("x = 2\n")
    (repo / "specrepro" / "README.md").write_text("two\n")
    git("commit", "-qam", "two")
    head = git("rev-parse", "HEAD")
    figures, executed = tmp_path / "figures", tmp_path / "executed"
    for stem in ("old", "new"):
        (figures / stem).mkdir(parents=True)
        (figures / stem / "index.json").write_text("[]\n")
    executed.mkdir()
    (executed / "old.ipynb").write_text(f'"   git_revision: {first}\\n"')
    (executed / "new.ipynb").write_text(f'"   git_revision: {head}\\n"')
    rows = {r["folder"]: r for r in staleness(figures, executed, repo)}
    assert rows["old"]["changed"] == ["specrepro/a.py"] and rows["new"]["changed"] == []
    assert "None: every artifact" in "\n".join(staleness_lines([rows["new"]]))
    mark(figures / "new", "STALE.json", reason="the last run of new failed")
    text = "\n".join(staleness_lines(staleness(figures, executed, repo)))
    assert "| `old/` | old.ipynb |" in text and "`specrepro/a.py`" in text
    assert "| `new/` | new.ipynb |" in text and "**STALE**: the last run of new failed" in text


def test_one_verdict_per_claim(tmp_path, monkeypatch):
    """Each notebook's verdicts are gathered into VERDICTS.md; a claim decided by two notebooks is refused."""
    from artifacts import Artifacts
    from reproduction import write_verdicts
    from specrepro.metrics.verdict import at_least

    monkeypatch.delenv("SPECREPRO_ARTIFACTS_STAGING", raising=False)
    claim = at_least("toy.speedup", "toy is at least 1.3x", "8 prompts × 2 seeds", 1.5, (1.4, 1.6), 1.3)
    Artifacts("first", tmp_path).verdicts([claim], document="d", item="i", description="x")
    text = write_verdicts(tmp_path / "figures").read_text()
    assert "`toy.speedup`" in text and "**holds**" in text and "[1.4, 1.6]" in text
    Artifacts("second", tmp_path).verdicts([claim], document="d", item="i", description="x")
    try:
        write_verdicts(tmp_path / "figures")
    except ValueError as error:
        assert "decided twice" in str(error) and "first/verdicts.csv" in str(error)
    else:
        raise AssertionError("a claim decided in two notebooks was accepted")


def test_an_executed_notebook_shows_each_figure_once_and_each_table_rendered(tmp_path):
    """Artifacts.figure shows the figure inline (one PNG, not a second copy from the inline backend) and
    Artifacts.table shows a rendered HTML table, so the executed notebook reads on its own."""
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"}})
    params = nbformat.v4.new_code_cell("out_root = None")
    params.metadata["tags"] = ["parameters"]
    body = (f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'notebooks')!r}]\n"
            "import matplotlib.pyplot as plt\nfrom artifacts import Artifacts\nfrom specrepro.run import plots\n"
            "art = Artifacts('toy', out_root)\n"
            "fig, ax = plots.figure(width=3, height=2)\nax.plot([0, 1], [0, 1])\n"
            "plots.title(ax, plots.THEORY, 'a line')\n"
            "art.figure(fig, 'toy_line', footer=plots.Footer(plots.THEORY, profile='smoke'), document='none',\n"
            "           item='toy', description='a line')\n"
            "art.table([{'x': i, 'y': i * i} for i in range(50)], 'toy_table', document='none', item='toy',\n"
            "          description='a toy table')\n")
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, tmp_path / "toy.ipynb")
    assert run_one(tmp_path / "toy.ipynb", {"out_root": str(tmp_path)}, "toy", tmp_path / "executed", 1,
                   tmp_path / "figures") is None
    cells = nbformat.read(tmp_path / "executed" / "toy.ipynb", as_version=4).cells
    (outputs,) = [c.outputs for c in cells if "art.figure" in c.source]  # papermill adds a parameters cell
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    tables = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert len(images) == 1, [o.get("data", {}).keys() for o in outputs]
    assert len(tables) == 1 and tables[0].count("<tr>") == 1 + 40 and "10 more rows in toy_table.csv" in tables[0]
    assert (tmp_path / "figures" / "toy" / "toy_line.png").is_file()


def test_a_hand_run_writes_a_scratch_folder_not_the_committed_figures(tmp_path, monkeypatch, capsys):
    """Without run_notebooks.py's staging folder and without out_root, artifacts go to build/scratch/ of the
    checkout the notebook runs in; naming a root writes <root>/figures/."""
    from artifacts import STAGING_ENV, Artifacts

    (tmp_path / "simulations").mkdir()
    (tmp_path / "notebooks").mkdir()
    monkeypatch.delenv(STAGING_ENV, raising=False)
    monkeypatch.chdir(tmp_path / "notebooks")
    art = Artifacts("toy")
    assert art.dir == tmp_path / "build" / "scratch" / "figures" / "toy" and art.dir.is_dir()
    assert "a hand run" in capsys.readouterr().out
    assert not (tmp_path / "figures").exists()
    assert Artifacts("toy", tmp_path / "elsewhere").dir == tmp_path / "elsewhere" / "figures" / "toy"


def test_a_timed_notebook_runs_alone_outside_smoke():
    import run_notebooks as rn
    stems = {p.stem for p in rn.NOTEBOOKS.glob("*.ipynb")}
    assert rn.TIMED <= stems, rn.TIMED - stems
    timed, plain = (rn.NOTEBOOKS / "medusa_trees.ipynb", "medusa_trees", {}), (rn.NOTEBOOKS / "theory_ppd.ipynb",
                                                                               "theory_ppd", {})
    assert rn.startable(timed, [], "quick") and rn.startable(plain, [], "quick")
    assert not rn.startable(timed, [False], "quick")  # nothing may run beside a timed run
    assert not rn.startable(plain, [True], "quick")
    assert rn.startable(plain, [False], "quick")
    assert rn.startable(timed, [False], "smoke") and rn.startable(plain, [False], "smoke")  # smoke shares


def test_the_longest_untimed_run_gets_every_core_when_it_sets_the_untimed_runs_length():
    import run_notebooks as rn
    def job(stem, name=None):
        return (rn.NOTEBOOKS / f"{stem}.ipynb", name or stem, {})
    distill, theory, online = job("distillspec_study"), job("theory_ppd"), job("online_speculative_stream")
    timed = job("medusa_trees")
    expected = {"distillspec_study": 950.0, "theory_ppd": 30.0, "online_speculative_stream": 290.0,
                "medusa_trees": 2000.0}
    assert rn.wide_runs([distill, theory, online, timed], expected, "quick") == {"distillspec_study"}
    assert rn.wide_runs([distill, theory, online], {**expected, "theory_ppd": 700.0}, "quick") == frozenset()
    assert rn.wide_runs([distill, theory], {"distillspec_study": 950.0}, "quick") == frozenset()  # one unknown
    assert rn.wide_runs([theory, timed], {}, "quick") == {"theory_ppd"}  # the only untimed run of the call
    assert rn.wide_runs([distill, theory, online], expected, "smoke") == frozenset()
    wide = frozenset({"distillspec_study"})
    assert not rn.startable(distill, [False], "quick", wide) and not rn.startable(theory, [True], "quick", wide)
    assert rn.startable(theory, [False], "quick", wide) and rn.startable(distill, [], "quick", wide)


def test_a_timed_claim_is_noisy_when_other_processes_kept_the_cpu_busy_and_the_report_says_so(tmp_path, monkeypatch):
    """The notebook's LoadWatch decides it: a timed claim made under load is written noisy, with the load; the
    verdicts' page counts it; a claim resting on no timing is decided as ever."""
    import csv

    from artifacts import Artifacts
    from reproduction import write_verdicts
    from specrepro.metrics.verdict import NOISY, at_least

    monkeypatch.delenv("SPECREPRO_ARTIFACTS_STAGING", raising=False)
    art = Artifacts("loaded", tmp_path)
    monkeypatch.setattr(art.load, "summary", lambda: {"mean": 1.25, "max": 1.9, "seconds": 60.0})
    speed = at_least("toy.speedup", "toy ≥ 1.3x", "8 prompts", 1.5, (1.4, 1.6), 1.3, timed=True)
    alpha = at_least("toy.alpha", "α ≥ 0.5", "8 prompts", 0.7, (0.6, 0.8), 0.5)
    art.verdicts([speed, alpha], document="d", item="i", description="x")
    with (tmp_path / "figures" / "loaded" / "verdicts.csv").open() as handle:
        rows = {r["claim"]: r for r in csv.DictReader(handle)}
    assert rows["toy.speedup"]["verdict"] == NOISY and rows["toy.speedup"]["others_busy_cores"] == "1.25"
    assert rows["toy.alpha"]["verdict"] == "holds" and rows["toy.alpha"]["others_busy_cores"] == "None"
    text = write_verdicts(tmp_path / "figures").read_text()
    assert f"1 holds, 0 fails, 0 undecided, n too small, 1 {NOISY} (2 claims)" in text
    assert f"**{NOISY}**" in text and "1.25 cores busy" in text
    index = json.loads((tmp_path / "figures" / "loaded" / "index.json").read_text())
    assert all(e["machine_load"]["mean"] == 1.25 for e in index)  # each artifact: the load it was made under


def test_a_runs_expected_time_is_what_it_cost_when_it_computed_its_cells(tmp_path, monkeypatch):
    """A run served from the run cache is short (MJSD 143.5 s against 471.3 s computed): its last time alone would
    schedule it last among the timed runs; the longest recorded time of this profile is its expected time."""
    import run_notebooks as rn
    monkeypatch.setattr(rn, "ROOT", tmp_path / "repo")
    monkeypatch.setattr(rn, "timings_cache", lambda: tmp_path / "cache.json")
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "timings.json").write_text(json.dumps({
        "runs": {"mjsd_joint_decoding": {"wall_s": 143.5, "profile": "quick"},
                 "theory_ppd": {"wall_s": 30.0, "profile": "smoke"}},
        "calls": [{"profile": "quick", "runs": {"mjsd_joint_decoding": 471.3, "theory_ppd": 36.6}},
                  {"profile": "smoke", "runs": {"mjsd_joint_decoding": 9000.0}}]}))
    expected = rn.expected_seconds("quick", ["mjsd_joint_decoding", "theory_ppd"], figures)
    assert expected == {"mjsd_joint_decoding": 471.3, "theory_ppd": 36.6}
    assert rn.expected_seconds("quick", ["medusa_trees"], figures) == {}
