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
