"""The reproduction report (notebooks/reproduction.py, with each document's claims in notebooks/claims/): a row for
every catalogue item of the founding documents, counts that add up, moves detected by each tolerance, and a missing
or changed CSV said plainly instead of raised. Reads the committed figures/ only: no models, well under a second."""
from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
import claims  # noqa: E402
from specrepro.metrics.verdict import MIN_PROMPTS, combine  # noqa: E402
import reproduction as rp  # noqa: E402
from claims import mentored_blog, mjsd, ppd, slides, survey_blog  # noqa: E402

FIGURES = ROOT / "figures"
README = rp.SEEDS / "README.md"
needs_seeds = pytest.mark.skipif(not README.is_file(), reason=f"founding documents not beside the clone ({README})")
needs_figures = pytest.mark.skipif(not (FIGURES / "theory_speculative").is_dir(), reason="no committed figures/")


def copy_csvs(source: Path, dest: Path) -> Path:
    """The CSVs and index files of a figures folder: all the report reads."""
    for path in list(source.rglob("*.csv")) + list(source.glob("*/index.json")):
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return dest


def rewrite(path: Path, change) -> None:
    """Let ``change`` edit the rows of a CSV (dicts) in place, and write them back; a column it deleted is gone, one
    it added comes last."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        columns, rows = reader.fieldnames, list(reader)
    change(rows)
    columns = [c for c in columns if c in rows[0]] + [c for c in rows[0] if c not in columns]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def row_for(rows, item_start: str):
    found = [r for r in rows if r.claim.item.startswith(item_start)]
    assert len(found) == 1, item_start
    return found[0]


@needs_seeds
def test_catalogue_parses_every_item():
    items = rp.catalogue(README)
    documents = [d for d, _ in items]
    assert list(dict.fromkeys(documents)) == [slides.DOCUMENT, survey_blog.DOCUMENT, mentored_blog.DOCUMENT,
                                              mjsd.DOCUMENT, ppd.DOCUMENT]
    assert ("Survey blog (004)", "the β bound example (k=5, c=0.01, α=2/3 gives β ≤ 2.69)") in items
    assert documents.count(ppd.DOCUMENT) == 9 and documents.count(slides.DOCUMENT) == 6


@needs_seeds
def test_claims_cover_the_catalogue_one_row_each_in_order():
    assert [(c.document, c.item) for c in claims.CLAIMS] == rp.catalogue(README)
    assert rp.CLAIMS is claims.CLAIMS  # the report judges exactly the claims the documents' modules state


def test_each_documents_module_holds_its_own_claims_and_judges():
    """A claim lives in its document's module: its row, its quote's seed and its judge, all in that one file."""
    assert [m.DOCUMENT for m in claims.DOCUMENTS] == list(dict.fromkeys(c.document for c in claims.CLAIMS))
    for module in claims.DOCUMENTS:
        assert module.CLAIMS, module.__name__
        for claim in module.CLAIMS:
            assert claim.document == module.DOCUMENT, claim.item
            assert claim.source is None or claim.source.seed == module.SEED, claim.item
            assert claim.judge.__module__ == module.__name__, claim.item


def test_the_claims_never_import_the_report():
    """No import cycle: the claims import claims.base and claims.formulas only; the report imports the claims."""
    code = "import sys, claims; assert 'reproduction' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT / "notebooks", check=True)


@needs_seeds
def test_every_quote_is_in_its_seed_text():
    def flat(text):
        return re.sub(r"\s+", " ", text).strip()

    for claim in claims.CLAIMS:
        assert claim.source is not None, claim.item
        seed = flat((rp.SEEDS / claim.source.seed).read_text())
        assert flat(claim.source.text) in seed, (claim.item, claim.source.text)


@needs_seeds
@needs_figures
def test_report_on_committed_figures_has_every_item_and_counts_add_up(tmp_path):
    rows = rp.evaluate(FIGURES, FIGURES)
    assert len(rows) == len(rp.catalogue(README))
    assert not [(r.claim.item, r.outcome.reason) for r in rows if r.outcome.verdict == rp.NO_RESULT]
    assert {r.movement for r in rows} <= {rp.UNCHANGED, rp.MACHINE, rp.NOT_COMPARED}  # compared with itself
    assert all(r.outcome.ours and r.outcome.reason for r in rows)

    out = rp.write_reproduction(FIGURES, FIGURES, tmp_path / "REPRODUCTION.md")
    text = out.read_text()
    for _, item in rp.catalogue(README):
        assert item.replace("|", "\\|") in text, item
    verdicts = re.search(r"\*\*(\d+) items: (\d+) reproduced · (\d+) not reproduced · (\d+) undecided, n too small"
                         r"(?: · (\d+) other regime \([^)]*\))? · (\d+) not comparable", text)
    total, *parts = (int(g or 0) for g in verdicts.groups())
    assert total == len(rows) == sum(parts)
    assert int(verdicts.group(5) or 0) == sum(r.outcome.verdict == rp.OTHER_REGIME for r in rows)  # counted apart
    moves = re.search(r"(\d+) moved · (\d+) unchanged · (\d+) new · (\d+) machine-specific only · (\d+) not "
                      r"compared", text)
    assert sum(map(int, moves.groups())) == total
    assert "profile quick" in text  # read from the notebooks' index.json descriptions


@needs_figures
def test_a_changed_simulation_cell_is_moved_and_an_unchanged_copy_is_not(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    rewrite(run / survey_blog.BETA_BOUND, lambda rows: rows[0].update(ours="2.7"))
    rows = rp.evaluate(run, FIGURES)
    bound = row_for(rows, "the β bound example")
    assert bound.movement == rp.MOVED
    assert "2.68663 → 2.7" in bound.movements[0].detail
    assert bound.outcome.verdict == rp.NOT_REPRODUCED  # 2.7 is no longer τ − kc
    assert row_for(rows, "Fig. 2 expected tokens").movement == rp.UNCHANGED
    assert all(r.movement != rp.MOVED for r in rows if r is not bound)


@needs_figures
def test_an_interval_tolerance_moves_only_outside_the_committed_interval(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")

    def shift(by):
        def change(rows):
            for r in rows:
                if r["source"] == "target" and r["divergence"] == "rkl":
                    r["gain_tau"] = str(float(r["gain_tau"]) + by)
        return change

    rewrite(run / survey_blog.DISTILL, shift(0.01))  # inside the committed 90% interval (+3.3% to +20.7%)
    assert row_for(rp.evaluate(run, FIGURES), "DistillSpec").movement == rp.UNCHANGED
    rewrite(run / survey_blog.DISTILL, shift(0.5))
    moved = row_for(rp.evaluate(run, FIGURES), "DistillSpec")
    assert moved.movement == rp.MOVED and "target-rkl" in moved.movements[0].detail


@needs_figures
def test_speed_is_machine_specific_never_moved(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    rewrite(run / ppd.PPD_FIG5, without("low95", "high95", "prompts"))  # the point estimates alone
    rewrite(run / ppd.PPD_FIG5, lambda rows: [r.update(ppd_speedup="9.9") for r in rows])
    row = row_for(rp.evaluate(run, FIGURES), "Fig. 5 throughput by task")
    assert row.movement == rp.MACHINE and "9.9 now" in row.movements[0].detail
    assert alone(run, "Fig. 5 throughput by task").verdict == rp.REPRODUCED  # every task above 1x now
    assert row.outcome.verdict == rp.UNDECIDED and "no interval" in row.outcome.reason  # on point estimates


@needs_figures
def test_a_missing_csv_or_column_is_a_plain_row_not_an_exception(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    (run / survey_blog.MOE_BETA).unlink()

    def drop_column(rows):
        for r in rows:
            del r["speedup_at_optimum"]

    rewrite(run / slides.FIG3, drop_column)
    rows = rp.evaluate(run, FIGURES)
    moe = row_for(rows, "MoE expected experts")
    assert moe.outcome.verdict == rp.NO_RESULT
    assert moe.outcome.reason == f"not produced by this run: {survey_blog.MOE_BETA}"
    assert moe.movement == rp.NOT_COMPARED
    fig3 = row_for(rows, "Fig. 3 optimal γ")
    assert fig3.outcome.verdict == rp.NO_RESULT and "column 'speedup_at_optimum' missing" in fig3.outcome.reason
    assert fig3.movement == rp.MOVED and "columns changed" in fig3.movements[0].detail
    text = rp.write_reproduction(run, FIGURES).read_text()
    assert "no result" in text and "not produced by this run" in text


@needs_seeds
@needs_figures
def test_a_catalogue_item_without_a_claim_still_gets_its_row(monkeypatch):
    dropped = row_for(rp.evaluate(FIGURES, FIGURES), "Fig. 9 training loss").claim
    monkeypatch.setattr(rp, "CLAIMS", tuple(c for c in claims.CLAIMS if c is not dropped))
    rows = rp.evaluate(FIGURES, FIGURES)
    assert len(rows) == len(claims.CLAIMS)
    missing = row_for(rows, "Fig. 9 training loss")
    assert missing.outcome.verdict == rp.NO_RESULT and "not mapped" in missing.outcome.reason
    assert missing.movement == rp.NOT_COMPARED


@needs_figures
def test_no_committed_copy_makes_every_compared_row_new(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    (run / slides.FIG2).unlink()
    rows = rp.evaluate(run, None)
    assert row_for(rows, "Fig. 2 expected tokens").movement == rp.NOT_COMPARED
    assert {r.movement for r in rows} == {rp.NEW, rp.NOT_COMPARED}


def test_committed_copy_extracts_heads_csvs(tmp_path):
    head = subprocess.run(["git", "ls-tree", "-r", "--name-only", "HEAD", "--", "figures/theory_moe"], cwd=ROOT,
                          capture_output=True, text=True)
    if head.returncode != 0 or not head.stdout.strip():
        pytest.skip("no git checkout with committed figures")
    dest = rp.committed_copy(ROOT, tmp_path / "committed")
    assert dest == tmp_path / "committed"
    expected = {Path(p).relative_to("figures") for p in head.stdout.split() if p.endswith(".csv")}
    assert expected and expected <= {p.relative_to(dest) for p in dest.rglob("*.csv")}
    assert not list(dest.rglob("*.png"))
    assert rp.committed_copy(tmp_path / "not-a-repo", tmp_path / "other") is None


@needs_figures
def test_profile_and_machine_come_from_the_runners_timings(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    (run / "timings.json").write_text(json.dumps({
        "last_run": {"profile": "smoke", "jobs": 2, "threads_per_notebook": 1, "wall_s": 300.0,
                     "started_utc": "2026-01-01T00:00:00+00:00",
                     "machine": {"cpu": "Intel Xeon", "cores": 2, "gpu": None}},
        "runs": {"theory_moe": {"wall_s": 12.0, "profile": "smoke", "cpu": "Intel Xeon", "gpu": None},
                 "online_speculative_stream-sequences": {"wall_s": 60.0, "profile": "smoke", "cpu": "Intel Xeon"}},
        "calls": [{"runs": {"theory_moe": 12.0, "online_speculative_stream-sequences": 60.0}}]}))
    text = rp.write_reproduction(run, FIGURES).read_text()
    assert ("The last `make figures` call: profile smoke · machine Intel Xeon (2 cores) · 2 notebook(s) at a time, "
            "5.0 min for 2 run(s)") in text
    timings = json.loads((run / "timings.json").read_text())
    timings["last_run"]["machine"]["cpu_model"] = "GenuineIntel family 6 model 143 stepping 8"
    (run / "timings.json").write_text(json.dumps(timings))  # the family and model name the CPU a VM's name may hide
    assert ("machine Intel Xeon (GenuineIntel family 6 model 143 stepping 8, 2 cores) · "
            in rp.write_reproduction(run, FIGURES).read_text())
    made = rp.write_reproduction(run, FIGURES, executed=ROOT / "notebooks" / "executed").read_text()
    commits = re.search(r"The figures come from (\d+) notebook folders made at (\d+) commit\(s\) \(([0-9a-f, ]+);",
                        made)  # the header says the figures are several runs' work, not the last call's
    assert commits and int(commits.group(2)) == len(commits.group(3).split(", ")) >= 1
    assert "| theory_moe | smoke | Intel Xeon | 0.2 | timings.json |" in text
    assert "| online_speculative_stream_sequences | smoke | Intel Xeon | 1.0 | timings.json |" in text
    assert "Committed copy: profile quick" in text  # the committed folder has no timings.json: its indexes say


@needs_figures
def test_another_profile_than_the_committed_copy_is_not_compared(tmp_path):
    """A smoke run's tiny settings against the committed quick run: its numbers differ by design, not 'moved'."""
    run, committed = copy_csvs(FIGURES, tmp_path / "run"), copy_csvs(FIGURES, tmp_path / "committed")
    for folder, profile in ((run, "smoke"), (committed, "quick")):
        (folder / "timings.json").write_text(json.dumps(
            {"runs": {"theory_speculative": {"profile": profile, "cpu": "CPU X", "wall_s": 1.0}}}))
    rewrite(run / survey_blog.BETA_BOUND, lambda rows: rows[0].update(ours="2.7"))
    bound = row_for(rp.evaluate(run, committed), "the β bound example")
    assert bound.movement == rp.NOT_COMPARED
    assert "this run is profile smoke, the committed copy quick" in bound.movements[0].detail


# --- One judge per claim: the report's rows decided by the notebooks' claims, and VERDICTS.md -----------------------

def verdicts_table(text: str) -> dict[str, str]:
    """VERDICTS.md's rows: claim id -> verdict."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \|.*?\| \*\*([^*]+)\*\* \|", text, re.M)}


def report_rows_decided_by(text: str) -> list[tuple[str, str, list[str]]]:
    """REPRODUCTION.md's table rows whose criterion says "decided by": (item, verdict, claim ids)."""
    found = []
    for line in text.splitlines():
        cells = line.split(" | ")
        if not line.startswith("| ") or len(cells) < 5 or "decided by" not in line:
            continue
        verdict_cell = cells[3]
        verdict = re.match(r"\*\*([^*]+)\*\*", verdict_cell).group(1)
        criterion = verdict_cell.split("*criterion:*", 1)[1]
        ids = re.findall(r"`([a-z_]+\.[\w.]+)`", criterion.split("decided by", 1)[1])
        found.append((cells[0].split("<br>")[0].lstrip("| "), verdict, ids))
    return found




@needs_seeds
@needs_figures
def test_the_committed_reports_are_what_the_committed_csvs_give():
    """Every row of the committed REPRODUCTION.md and VERDICTS.md, rendered again from the committed CSVs by
    today's claims: no number in a row is typed, and a change to a claim needs the reports written again
    (``python notebooks/reproduction.py``)."""
    committed = rp.report_rows((FIGURES / "REPRODUCTION.md").read_text())
    again = rp.report_rows(rp.render(rp.evaluate(FIGURES, None), FIGURES, None, FIGURES))
    assert len(committed) == len(rp.catalogue(README)) and committed.keys() == again.keys()
    for item, cells in again.items():
        assert committed[item] == cells, item
    from artifacts import collect_verdicts
    assert (FIGURES / "VERDICTS.md").read_text() == rp.render_verdicts(collect_verdicts(FIGURES),
                                                                       rp.rows_decided_by())


@needs_figures
def test_the_committed_reports_agree_claim_by_claim():
    """The two committed views cannot disagree: every REPRODUCTION.md row decided by notebook claims carries the
    verdict VERDICTS.md gives those claims (all together), and every claim a row names is in VERDICTS.md."""
    report, verdicts = (FIGURES / "REPRODUCTION.md").read_text(), verdicts_table((FIGURES / "VERDICTS.md").read_text())
    rows = report_rows_decided_by(report)
    assert len(rows) >= 6 and len(verdicts) >= 10
    for item, verdict, ids in rows:
        assert ids and set(ids) <= set(verdicts), (item, ids)
        assert verdict == rp.FROM_NOTEBOOK[combine([verdicts[i] for i in ids])], (item, verdict, ids)
    named = {i for c in claims.CLAIMS for i in c.decided_by}
    assert named == {i for _, _, ids in rows for i in ids}  # every decided_by row is rendered as such


@needs_figures
def test_a_judge_that_disagrees_with_the_notebooks_verdict_gives_no_result(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    fig3 = row_for(rp.evaluate(run, None), "Fig. 3 accepted tokens per iteration")
    assert fig3.outcome.verdict == rp.REPRODUCED  # the notebook: holds
    rewrite(run / "mjsd_joint_decoding/verdicts.csv", lambda rows: [
        r.update(verdict="fails", estimate="0.8", low="0.7", high="0.9")  # (a fail the family keeps: its interval)
        for r in rows if r["claim"] == "mjsd.accepted_per_iteration_over_speculative"])
    assert row_for(rp.evaluate(run, None), "Fig. 3 accepted").outcome.verdict == rp.NOT_REPRODUCED
    lying = claims.base.Claim(fig3.claim.document, fig3.claim.item, (), "", None, "x",
                              lambda t: claims.base.Outcome("x", rp.REPRODUCED, "says so"),
                              decided_by=fig3.claim.decided_by)
    outcome = rp.judge(lying, claims.base.Tables(run))
    assert outcome.verdict == rp.NO_RESULT and "VERDICTS.md" in outcome.reason


@needs_figures
def test_an_undecided_claim_is_undecided_in_the_report_with_the_notebooks_rule(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    rewrite(run / "online_speculative_stream/verdicts.csv", lambda rows: [
        r.update(verdict="undecided, n too small", rule="fewer than 5 prompts: undecided whatever the interval")
        for r in rows])
    row = row_for(rp.evaluate(run, None), "online speculative decoding")
    assert row.outcome.verdict == rp.UNDECIDED and "fewer than 5 prompts" in row.outcome.reason


@needs_figures
def test_verdicts_md_shows_each_rule_and_the_row_it_decides(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    text = rp.write_verdicts(run).read_text()
    assert "| rule |" in text and f"fewer than {MIN_PROMPTS} prompts" in text
    line = next(x for x in text.splitlines() if x.startswith("| `mentored.speedup_within_quality_noise`"))
    assert "holds if both claims hold at some D" in line and "Mentored blog (001): speed vs task quality" in line


def alone(run: Path, item_start: str) -> claims.base.Outcome:
    """The claim's own judge on ``run``, before the report's rules (a measured row needs an interval)."""
    return next(c for c in claims.CLAIMS if c.item.startswith(item_start)).judge(claims.base.Tables(run))


@needs_figures
def test_criteria_that_can_fail(tmp_path):
    """Fig. 9 is judged on the document's numbers (above 5, below 2), β against batch size on 'near 1 at small
    batch' and a rise, PPD's Table 1 (on a run without intervals) on throughput as well as τ: each judge flips when
    its CSV says otherwise. (Without an interval the report calls each undecided: the next test.)"""
    run = copy_csvs(FIGURES, tmp_path / "run")
    assert alone(run, "Fig. 9 training loss").verdict == rp.NOT_REPRODUCED
    rewrite(run / ppd.PPD_FIG9, lambda rows: rows[0].update(first_loss="5.4", last_50_mean="1.9"))
    assert alone(run, "Fig. 9 training loss").verdict == rp.REPRODUCED

    def beta(values):
        def change(rows):
            for r in rows:
                if r["gamma"] == "4":
                    r["beta"] = str(values[r["batch_size"]])
        return change
    rewrite(run / survey_blog.BETA_BATCH, without("beta_low95", "beta_high95", "rise_low95", "rise_high95"))
    rewrite(run / survey_blog.BETA_BATCH, beta({"1": 1.1, "4": 1.3, "16": 2.0, "64": 3.5}))  # (point estimates)
    assert alone(run, "β measured against batch").verdict == rp.REPRODUCED
    rewrite(run / survey_blog.BETA_BATCH, beta({"1": 1.4, "4": 1.3, "16": 1.2, "64": 1.1}))  # falls with B
    assert alone(run, "β measured against batch").verdict == rp.NOT_REPRODUCED
    rewrite(run / survey_blog.BETA_BATCH, beta({"1": 2.3, "4": 1.9, "16": 3.1, "64": 4.6}))  # not near 1 at B = 1:
    compute_bound = alone(run, "β measured against batch")  # a compute-bound step, not the claim's regime
    assert compute_bound.verdict == rp.OTHER_REGIME and compute_bound.second.verdict == rp.UNDECIDED
    assert "β(5) = 2.30" in compute_bound.reason and "prediction is undecided" in compute_bound.reason
    rewrite(run / survey_blog.BETA_BATCH, beta({"1": 1.1, "4": 0.9, "16": 0.8, "64": 1.2}))  # no rise
    assert alone(run, "β measured against batch").verdict == rp.NOT_REPRODUCED

    def throughput(rows):
        for r in rows:
            if r["model"].startswith("smollm2") and r["method"].startswith("PPD"):
                r["throughput_tok_s"] = "99"
    rewrite(run / ppd.PPD_FIG4, without("low95"))  # a run written before the intervals: its point estimates
    table1 = alone(run, "Table 1 throughput")
    rewrite(run / ppd.PPD_T1, throughput)
    faster = alone(run, "Table 1 throughput")
    assert table1.verdict == rp.NOT_REPRODUCED and "throughput" in table1.reason
    assert faster.verdict == rp.REPRODUCED


def without(*columns):
    """A CSV change that drops ``columns``: a run written before the notebooks gave those rows their intervals, whose
    judges still read the point estimates (the report then leaves the row undecided; the interval path is tested in
    tests/test_reproduction_intervals.py)."""
    def change(rows):
        for r in rows:
            for c in columns:
                r.pop(c, None)
    return change


# The measured rows that the claims issue found decided from point estimates: each is measured, so the report
# decides it only on an interval.
ON_POINTS = {"slides_table2", "slides_table3", "survey_beta_batch", "mjsd_table1",
             "ppd_table1", "ppd_fig4", "ppd_fig5", "ppd_fig6", "ppd_fig8", "ppd_ablations", "ppd_fig9"}


def test_the_rows_measured_on_our_runs_are_marked_measured():
    measured = {c.judge.__name__ for c in claims.CLAIMS if c.measured}
    assert ON_POINTS <= measured
    assert {c.judge.__name__ for c in claims.CLAIMS if c.decided_by} <= measured
    assert not {name for name in measured if name.startswith(("slides_fig", "slides_s3", "survey_surface",
                                                              "survey_beta_bound", "survey_moe"))}  # theory rows


def test_a_measured_row_is_decided_only_on_an_interval_or_an_exact_count():
    base = claims.base

    def row(measured: bool, outcome: base.Outcome) -> base.Outcome:
        return rp.judge(base.Claim("d", "i", (), "", None, "c", lambda t: outcome, measured=measured),
                        base.Tables(Path("/nonexistent")))
    for verdict in (rp.REPRODUCED, rp.NOT_REPRODUCED):
        point = base.judged(verdict == rp.REPRODUCED, "ours", "yes", "no")
        assert row(False, point).verdict == verdict  # a theory row: an exact check
        said = row(True, point)
        assert said.verdict == rp.UNDECIDED and "no interval" in said.reason and verdict in said.reason
        by_interval = base.judged_by_interval(verdict == rp.REPRODUCED, verdict == rp.NOT_REPRODUCED, "o", "y", "n",
                                              "open")
        assert row(True, by_interval).verdict == verdict
        counted = base.Outcome("o", verdict, "a parameter count", basis=base.EXACT)
        assert row(True, counted).verdict == verdict


@needs_figures
def test_no_measured_row_of_the_committed_figures_is_decided_without_an_interval():
    for r in rp.evaluate(FIGURES, None):
        if r.claim.measured and r.outcome.verdict in (rp.REPRODUCED, rp.NOT_REPRODUCED):
            assert r.outcome.basis in (claims.base.INTERVAL, claims.base.EXACT), r.claim.item
        if r.claim.judge.__name__ in ON_POINTS:
            assert r.outcome.verdict in (rp.UNDECIDED, rp.NOISY, rp.NO_RESULT, rp.NOT_COMPARABLE, rp.OTHER_REGIME) or (
                r.outcome.basis == claims.base.INTERVAL), (r.claim.item, r.outcome)
        if r.outcome.verdict == rp.OTHER_REGIME:  # its decided line: on an interval, or undecided
            assert r.outcome.second.verdict == rp.UNDECIDED or r.outcome.second.basis == claims.base.INTERVAL


@needs_figures
def test_ppd_fig1_is_decided_on_the_paired_interval_when_the_csv_has_one(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")

    enough, short = str(MIN_PROMPTS), str(MIN_PROMPTS - 1)

    def interval(low, high, prompts):
        def change(rows):
            for r in rows:
                on = r["method"] == "PPD"
                r.update(over_medusa="1.0" if on else "", over_medusa_low95=str(low) if on else "",
                         over_medusa_high95=str(high) if on else "", prompts=prompts)
        return change
    verdicts = []
    for low, high, prompts in ((1.02, 1.2, enough), (0.8, 0.95, enough), (0.9, 1.1, enough), (1.02, 1.2, short)):
        rewrite(run / ppd.PPD_COST, interval(low, high, prompts))
        verdicts.append(row_for(rp.evaluate(run, None), "Fig. 1 memory/speedup").outcome.verdict)
    assert verdicts == [rp.REPRODUCED, rp.NOT_REPRODUCED, rp.UNDECIDED, rp.UNDECIDED]


@needs_figures
def test_a_speed_row_timed_under_load_is_noisy_in_the_report_not_decided(tmp_path):
    """The load each artifact was made under (its index.json) decides whether a speed row may be judged; a row
    decided by the notebooks' claims takes their noisy verdict."""
    run = copy_csvs(FIGURES, tmp_path / "run")
    index = run / ppd.PPD_FIG5.split("/")[0] / "index.json"
    entries = json.loads(index.read_text())
    for e in entries:
        e["machine_load"] = {"mean": 0.2, "max": 0.4, "seconds": 60.0}
    index.write_text(json.dumps(entries))
    assert row_for(rp.evaluate(run, None), "Fig. 5 throughput by task").outcome.verdict != rp.NOISY  # quiet
    for e in entries:
        e["machine_load"] = {"mean": 1.3, "max": 1.9, "seconds": 60.0} if e["artifact"] == ppd.PPD_FIG5 else None
    index.write_text(json.dumps(entries))
    row = row_for(rp.evaluate(run, None), "Fig. 5 throughput by task")
    assert row.outcome.verdict == rp.NOISY and "1.30 cores busy" in row.outcome.reason
    assert "the criterion alone would say" in row.outcome.reason
    rewrite(run / "mjsd_joint_decoding/verdicts.csv", lambda rows: [
        r.update(verdict=rp.NOISY) for r in rows if r["claim"] == "mjsd.accepted_per_iteration_over_speculative"])
    report_rows = rp.evaluate(run, None)
    assert row_for(report_rows, "Fig. 3 accepted tokens per iteration").outcome.verdict == rp.NOISY
    text = rp.render(report_rows, run, None, run)
    assert f"2 {rp.NOISY}" in text.split("\n\n")[2]  # the header counts them


# --- Criteria rewritten from the documents' own words: each fails on the opposite result ----------------------------

def verdicts_under(run: Path, item: str, path: str, *changes) -> list[str]:
    """The claim's own verdict after each change to the CSV at ``path`` (applied one after the other)."""
    out = []
    for change in changes:
        rewrite(run / path, change)
        out.append(alone(run, item).verdict)
    return out


def ours_at_largest_b(energy):
    def change(rows):
        ours = [r for r in rows if r["source"].startswith("ours")]
        max(ours, key=lambda r: float(r["batch_size"]))["energy_per_run_vs_b1"] = energy
    return change


def column(name, values):
    def change(rows):
        for r, v in zip(rows, values):
            r[name] = str(v)
    return change


@needs_figures
def test_mjsd_table1_is_judged_on_energy_per_run_as_its_sentence_says(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    assert verdicts_under(run, "Table 1 batch size", mjsd.MJSD_T1, ours_at_largest_b("1.3"), ours_at_largest_b("0.9"),
                          ours_at_largest_b("17"), ours_at_largest_b("None")) == [
        rp.REPRODUCED, rp.NOT_REPRODUCED, rp.NOT_REPRODUCED, rp.UNDECIDED]


@needs_figures
def test_ppd_fig6_needs_ppd_ahead_at_every_distance_and_k(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")

    def ahead(by_top1):
        def change(rows):
            for r in rows:
                lead = float(r["distance"]) * 0.01 if r["k"] != "1" else by_top1
                r["ppd_zoo"] = str(float(r["medusa_zoo"]) + lead)
        return change
    rewrite(run / ppd.PPD_FIG6, without("gap", "gap_low95", "gap_high95", "units"))
    assert verdicts_under(run, "Fig. 6 accumulated top-k", ppd.PPD_FIG6, ahead(0.02), ahead(-0.02)) == [
        rp.REPRODUCED, rp.NOT_REPRODUCED]  # behind at top-1 only: not "across all token positions"


@needs_figures
def test_ppd_fig7_is_held_to_the_documents_order_of_magnitude(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")

    def ppd_share(share):
        def change(rows):
            medusa = next(float(r["extra_weight_MB"]) for r in rows if r["method"] == "Medusa")
            next(r for r in rows if r["method"] == "PPD")["extra_weight_MB"] = str(medusa * share)
        return change
    assert verdicts_under(run, "Fig. 7 memory", ppd.PPD_COST, ppd_share(0.00005), ppd_share(0.005)) == [
        rp.REPRODUCED, rp.NOT_REPRODUCED]  # 0.005%: within it; 0.5% passed "under 1%" before


@needs_figures
def test_slides_tables_2_and_3_test_direction(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")

    def lm_speedup(value):
        def change(rows):
            for r in rows:
                if slides.is_lm_draft(r["draft"]):
                    r["speedup"] = str(value)
        return change
    rewrite(run / slides.T2_OURS, without("low95", "high95", "prompts"))
    (run / slides.T3_GAPS).unlink(missing_ok=True)
    assert verdicts_under(run, "Table 2 empirical speedups", slides.T2_OURS, lm_speedup(1.2), lm_speedup(0.9)) == [
        rp.REPRODUCED, rp.NOT_REPRODUCED]

    def alpha(unigram, bigram, lm):
        def change(rows):
            for r in rows:
                value = {"unigram": unigram, "bigram": bigram}.get(r["draft"], lm if r["draft"].startswith("LM") else
                                                                   None)
                if value is not None:
                    r["alpha_ours"] = str(value)
        return change
    assert verdicts_under(run, "Table 3 empirical α", slides.T3_ALPHA, alpha(0.05, 0.1, 0.3), alpha(0.05, 0.4, 0.3)
                          ) == [rp.REPRODUCED, rp.NOT_REPRODUCED]


@needs_figures
def test_a_call_that_ran_nothing_leaves_the_report_when_its_rows_stand(tmp_path):
    """Rewriting the report with nothing run would compare the committed CSVs with themselves and erase what the
    last run moved; it is rewritten only when a row changes (a claim's code did)."""
    run = copy_csvs(FIGURES, tmp_path / "run")
    out = tmp_path / "REPRODUCTION.md"
    out.write_text(rp.render(rp.evaluate(run, None), run, None, tmp_path) + "\nthe last run's movements\n")
    rp.write_reproduction(run, run, out, unless_rows_same=True)
    assert out.read_text().endswith("the last run's movements\n")  # rows the same: left as it was
    rewrite(run / ppd.PPD_FIG9, lambda rows: rows[0].update(first_loss="5.4", last_50_mean="1.9"))
    rp.write_reproduction(run, run, out, unless_rows_same=True)
    assert "the last run's movements" not in out.read_text()  # a row changed: written again
