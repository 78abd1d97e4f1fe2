"""The measured rows that PPD's and the slides' notebooks now write with 95% intervals
(``specrepro.studies.intervals``): each judge decides on the interval, fails on the opposite result, and stays
undecided when the interval straddles its threshold or rests on fewer than ``MIN_PROMPTS`` prompts. Reads copies of
the committed CSVs, edited."""
from __future__ import annotations

import csv
from pathlib import Path

from specrepro.metrics.verdict import MIN_PROMPTS
from tests.test_reproduction import FIGURES, alone, copy_csvs, needs_figures, rewrite, rp
from claims import ppd, slides

ENOUGH, FEW = str(MIN_PROMPTS + 2), str(MIN_PROMPTS - 1)


def verdicts(run: Path, item: str, path: str, changes) -> list[str]:
    out = []
    for change in changes:
        rewrite(run / path, change)
        out.append(alone(run, item).verdict)
    return out


def interval(columns: tuple[str, str], low, high, prompts=ENOUGH, where=lambda r: True):
    def change(rows):
        for r in rows:
            if where(r):
                r.update({columns[0]: str(low), columns[1]: str(high)})
            r["prompts"] = prompts
    return change


@needs_figures
def test_ppd_fig4_is_decided_on_ppd_over_every_other_method(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    others = lambda r: r["method"] != "ppd"
    cols = ("ppd_over_low95", "ppd_over_high95")
    assert verdicts(run, "Fig. 4 speedup", ppd.PPD_FIG4, [
        interval(cols, 1.05, 1.3, where=others), interval(cols, 0.7, 0.9, where=lambda r: r["method"] == "medusa"),
        interval(cols, 0.9, 1.2, where=others), interval(cols, 1.05, 1.3, FEW, where=others)]) == [
        rp.REPRODUCED, rp.NOT_REPRODUCED, rp.UNDECIDED, rp.UNDECIDED]


@needs_figures
def test_ppd_fig5_needs_every_task_above_1_on_enough_prompts(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    cols = ("low95", "high95")
    first = lambda r: r["suite"] == "instruct"
    assert verdicts(run, "Fig. 5 throughput", ppd.PPD_FIG5, [
        interval(cols, 1.1, 1.4), interval(cols, 0.6, 0.9, where=first), interval(cols, 0.9, 1.2),
        interval(cols, 1.1, 1.4, FEW)]) == [rp.REPRODUCED, rp.NOT_REPRODUCED, rp.UNDECIDED, rp.UNDECIDED]


@needs_figures
def test_ppd_fig6_is_decided_on_each_gaps_interval(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    cols = ("gap_low95", "gap_high95")

    def units(n):
        def change(rows):
            for r in rows:
                r["units"] = str(n)
        return change
    top1 = lambda r: r["k"] == "1"
    assert verdicts(run, "Fig. 6 accumulated", ppd.PPD_FIG6, [
        units(84), interval(cols, 0.01, 0.05, where=lambda r: True), interval(cols, -0.09, -0.01, where=top1),
        interval(cols, -0.05, 0.05, where=lambda r: True), units(5)])[1:] == [
        rp.REPRODUCED, rp.NOT_REPRODUCED, rp.UNDECIDED, rp.UNDECIDED]  # behind at top-1 only: not "all positions"


@needs_figures
def test_ppd_fig8_fails_when_another_size_beats_the_theorys_best_and_never_holds_on_tau_points(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    cols = ("over_theory_best_low95", "over_theory_best_high95")
    outcome = alone(run, "Fig. 8 dynamic")
    if "theory's best" not in outcome.ours:  # (the theory grid holds no measured size here: nothing to compare)
        assert outcome.verdict == rp.UNDECIDED
        return
    assert verdicts(run, "Fig. 8 dynamic", ppd.PPD_FIG8C, [
        interval(cols, 1.05, 1.3), interval(cols, 0.6, 0.9), interval(cols, 0.6, 0.9, FEW)]) == [
        rp.NOT_REPRODUCED, rp.UNDECIDED, rp.UNDECIDED]


@needs_figures
def test_ppd_table1_fails_on_the_throughput_interval_and_never_holds_on_tau_points(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")

    def throughput(low, high):
        def change(rows):
            for r in rows:
                if r["method"] == "PPD":
                    r.update(over_medusa_low95=str(low), over_medusa_high95=str(high))
        return change
    rewrite(run / ppd.PPD_FIG4, interval(("low95", "high95"), 1.05, 1.3, where=lambda r: r["method"] == "ppd"))
    assert verdicts(run, "Table 1 throughput", ppd.PPD_COST, [throughput(1.05, 1.3), throughput(0.7, 0.9)]) == [
        rp.UNDECIDED, rp.NOT_REPRODUCED]


def write_gaps(run: Path, low: float, high: float, prompts: str = ENOUGH) -> None:
    path = run / slides.T3_GAPS
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["T", "comparison", "gap", "gap_low95", "gap_high95", "prompts"])
        for t in (0, 1):
            for name in ("bigram − unigram", "LM − bigram"):
                writer.writerow([t, name, (low + high) / 2, low, high, prompts])


@needs_figures
def test_slides_table3_is_decided_on_the_order_steps_intervals(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    out = []
    for low, high, prompts in ((0.02, 0.1, ENOUGH), (-0.1, -0.02, ENOUGH), (-0.02, 0.05, ENOUGH), (0.02, 0.1, FEW)):
        write_gaps(run, low, high, prompts)
        out.append(alone(run, "Table 3 empirical α").verdict)
    assert out == [rp.REPRODUCED, rp.NOT_REPRODUCED, rp.UNDECIDED, rp.UNDECIDED]


@needs_figures
def test_slides_table2_holds_on_one_point_above_1_and_fails_only_when_every_point_is_below(tmp_path):
    run = copy_csvs(FIGURES, tmp_path / "run")
    cols = ("low95", "high95")
    lm = lambda r: slides.is_lm_draft(r["draft"])

    def one_above(rows):
        lms = [r for r in rows if lm(r)]
        for r in lms:
            r.update(low95="0.6", high95="0.9", prompts=ENOUGH)
        lms[0].update(low95="1.05", high95="1.3")
    assert verdicts(run, "Table 2 empirical", slides.T2_OURS, [
        one_above, interval(cols, 0.6, 0.9, where=lm), interval(cols, 0.9, 1.1, where=lm),
        interval(cols, 1.05, 1.3, FEW, where=lm)]) == [rp.REPRODUCED, rp.NOT_REPRODUCED, rp.UNDECIDED, rp.UNDECIDED]
