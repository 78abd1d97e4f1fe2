"""specrepro.studies.eagle_figures: the EAGLE notebook's figures, drawn from hand-made ablation records, rows and
bench summaries, each checked as ``Artifacts.figure`` checks it (a title saying measured or theory, no raw markup)."""
from __future__ import annotations

from types import SimpleNamespace

from specrepro.run import plots
from specrepro.studies import eagle_figures
from tests.studies.drawn import checked


def variant(name: str, accept: list[float]) -> dict:
    return {"name": name, "features": "last", "ttt": False, "draft_vocab": 64, "accept_by_position": accept,
            "accept_by_position_full_head": [a + 0.05 for a in accept]}


def test_fig1_draws_both_heads_of_each_variant_and_the_shipped_one_thicker():
    ablations = {"variants": [variant("a", [0.6, 0.4]), variant("b", [0.7, 0.5])], "shipped": "b"}
    fig = eagle_figures.fig1_accept_figure(ablations, 2, "tiny")
    lines = fig.axes[0].lines
    assert [line.get_linewidth() for line in lines[:4:2]] == [1.2, 2.2]
    assert list(lines[3].get_ydata()) == [0.75, 0.55]  # b through the full head
    assert any(t.startswith("b (shipped): ") for t in checked(fig))


def test_fig2_draws_each_tree_and_the_chain():
    rows = [{"tree_size": n, "tau_dynamic": 1 + n / 8, "tau_static": 1 + n / 10, "tau_random": 1 + n / 20,
             "tau_theory_static": 1 + n / 9} for n in (2, 8)]
    fig = eagle_figures.fig2_tau_figure(rows, {"tau_chain": 1.5, "tau_theory_chain": 1.6}, 4, 3, "tiny", 1, 6)
    assert list(fig.axes[0].lines[0].get_ydata()) == [1.25, 2.0]
    assert "measured, top-1 chain of 3: 1.50 (theory 1.60)" in checked(fig)


def bench(speedups: dict[str, float | None]) -> SimpleNamespace:
    """A bench result as rows_of reads it: one summary row per variant."""
    return SimpleNamespace(summary=[{"method": v, "speedup": s, "tokens_per_call": 2.0 if s else None}
                                    for v, s in speedups.items()])


def test_fig3_has_a_panel_per_temperature_with_the_anchors_at_t0_and_the_paper_at_t1():
    shown = ["speculative:gauto", "medusa", "ppd", "eagle"]
    results = {0.0: bench({"ar": 1.0, "speculative:gauto": 1.1, "medusa": 1.2, "ppd": None, "eagle": 1.5}),
               1.0: bench({"ar": 1.0, "speculative:gauto": 1.0, "medusa": 1.1, "ppd": 1.05, "eagle": 1.3})}
    fig = eagle_figures.fig3_speedup_figure(results, shown, "fp32", "tiny")
    t0, t1 = fig.axes[:2]
    assert [p.get_height() for p in t0.patches] == [1.1, 1.2, 0.0, 1.5]  # no speedup drawn as 0
    assert [p.get_facecolor() == t0.patches[3].get_facecolor() for p in t0.patches] == [False, False, False, True]
    assert [t.get_text() for t in t0.texts] == ["$\\tau$ 2.00", "$\\tau$ 2.00", "$\\tau$ n/a", "$\\tau$ 2.00"]
    assert len(t0.collections) == 2 and plots.shows_document_number(fig)  # Spec-Bench and SGLang; the paper at T = 1
    assert t0.get_title() == "T = 0" and t1.get_title() == "T = 1"
    checked(fig)


def test_fig4_draws_each_methods_extra_weights_and_ppds_shares():
    memory = [{"method": m, "extra_pct_of_target": pct, "extra_MB_at_run_dtype": pct, "run_dtype": "fp32"}
              for m, pct in (("EAGLE", 5.0), ("Medusa", 2.0), ("PPD", 0.001), ("separate draft model", 30.0))]
    shares = [{"ratio": "PPD as % of Medusa", "ours_pct": 0.05, "paper_pct": 0.004},
              {"ratio": "PPD as % of EAGLE", "ours_pct": 0.02, "paper_pct": 0.007}]
    fig = eagle_figures.fig4_memory_figure(memory, shares, "tiny")
    assert [p.get_height() for p in fig.axes[0].patches] == [5.0, 2.0, 0.001, 30.0]
    assert [p.get_height() for p in fig.axes[1].patches] == [0.05, 0.02]
    assert "PPD\nas % of Medusa" in checked(fig)


def curve_inputs():
    """Hand-made records as the zoo keeps them: EAGLE's same-split rows, Medusa's and PPD's training records (PPD's
    with its curve during training) and PPD's earlier tokens measured again on the same split."""
    eagle = {"same_split": {"held_out": "every 20th", "last (shipped before: 576 conversations, 600 steps)":
                            {"accept_by_depth": [0.36, 0.24, 0.2]}, "eagle-1536 (900 steps)": {"accept_by_depth":
                            [0.42, 0.3, 0.27]}, "eagle-1536-2700 (2,700 steps)": {"accept_by_depth": [0.5, 0.4, 0.35]}}}
    medusa = {"data": {"conversations": 1664}, "config": {"steps": 5000},
              "held_out_topk_accuracy": {"head_1": [0.27, 0.4], "head_2": [0.15, 0.3]}}
    acc = {"distance_1": [0.3, 0.5], "distance_2": [0.17, 0.3], "distance_3": [0.12, 0.2]}
    ppd = {"data": {"conversations": 1664}, "config": {"steps": 1500}, "held_out_topk_accuracy": acc,
           "learning_curve": [{"step": s, "conversations_seen": s, "topk_accuracy": acc} for s in (250, 1500)]}
    before = {"runs": [{"name": "shipped before", "conversations": 576, "steps": 1500, "topk_accuracy": acc}]}
    return eagle, medusa, ppd, before


def test_the_learning_curve_reads_every_proposers_record_on_one_split():
    from specrepro.studies import eagle as study
    rows = study.learning_curve_rows(*curve_inputs(), depths=2)
    eagle = [(r["run"], r["conversations_written"], r["steps"], r["top1"]) for r in rows
             if r["method"] == "EAGLE" and r["depth"] == 1]
    assert eagle == [("last", 576, 600, 0.36), ("eagle-1536", 1664, 900, 0.42), ("eagle-1536-2700", 1664, 2700, 0.5)]
    assert [r["top1"] for r in rows if r["method"] == "Medusa"] == [0.27, 0.15]
    during = [r for r in rows if r["conversations_seen"] is not None]
    assert [(r["conversations_seen"], r["depth"]) for r in during] == [(250, 1), (250, 2), (1500, 1), (1500, 2)]
    assert {r["held_out_conversations"] for r in rows} == {84}
    fig = eagle_figures.learning_curve_figure(rows, "tiny")
    left, right = fig.axes
    eagle_d1 = next(line for line in left.lines if line.get_label().startswith("EAGLE, depth 1"))
    assert list(eagle_d1.get_xdata()) == [576, 1664] and list(eagle_d1.get_ydata()) == [0.36, 0.5]
    assert "900 steps" in [t.get_text() for t in left.texts]  # the shorter run on the same data, hollow
    assert len(right.lines) == 2 and list(right.lines[0].get_xdata()) == [250, 1500]
    assert any(t.startswith("PPD anchor 0.485") for t in checked(fig))
