"""specrepro.studies.mjsd_figures: the MJSD notebook's figures and claims summary, drawn from hand-made rows, each
figure checked as ``Artifacts.figure`` checks it (a title saying measured, no raw markup)."""
from __future__ import annotations

import numpy as np

from specrepro.run import plots
from specrepro.studies import mjsd_figures
from specrepro.studies.mjsd import GAMMA, METHODS5, PAPER_T1, PAPER_T2, plain
from tests.studies.drawn import checked

KINDS = {"instruct": ("CP", "ChatGPT-Prompts", "instruction"), "chat": ("CA", "ChatAlpaca", "multi-turn chat")}


def test_fig1_draws_perplexity_with_its_interval_and_rouge_against_k():
    fig = mjsd_figures.fig1_figure([{"K": k, "perplexity": 10 - k, "perplexity_low95": 9 - k,
                                     "perplexity_high95": 12 - k, "prompts": 5, "rouge_l": 0.1 * k} for k in (1, 3)])
    assert list(fig.axes[0].lines[0].get_ydata()) == [9, 7] and list(fig.axes[1].get_xticks()) == [1, 3]
    bars = [c for c in fig.axes[0].collections if len(c.get_segments()) == 2][0].get_segments()
    assert [tuple(s[:, 1]) for s in bars] == [(8, 11), (6, 9)]  # the 95% interval of each K
    assert "5 prompts" in fig.axes[0].get_title()
    checked(fig)
    one = mjsd_figures.fig1_figure([{"K": k, "perplexity": 3.0, "perplexity_low95": float("nan"),
                                     "perplexity_high95": float("nan"), "prompts": 1, "rouge_l": 0.1} for k in (1, 2)])
    checked(one)  # one prompt (smoke): no interval, still drawn


def test_table2_figure_sets_each_method_beside_the_papers_row():
    table2 = [{"kind": kind, "source": "ours: tiny", "method": plain(name), "variant": "ar" if i == 0 else name,
               "speedup": 1 + i / 10, "perplexity": 4.0 + i, "tokens_per_call": 1 + i / 2}
              for kind in KINDS for i, name in enumerate(METHODS5)]
    fig = mjsd_figures.table2_figure(table2, KINDS)
    speedups = [p.get_height() for p in fig.axes[0].patches]
    assert speedups == [1 + i / 10 for i in range(5) for _ in KINDS]  # five methods, one bar a kind each
    relative = [p.get_height() for p in fig.axes[1].patches]
    assert relative[-2:] == [8.0 / 4.0] * 2  # MJSD's perplexity over AR sampling's
    markers = [c for c in fig.axes[0].collections if c.get_gid() == plots.DOCUMENT_GID]
    assert np.allclose(markers[0].get_offsets()[:, 1], [PAPER_T2[k, "Llama-2"]["speedup"][0] for k in KINDS])
    assert "chat (CA)" in checked(fig)


def test_fig3_draws_the_means_the_distribution_and_the_ratio():
    fig3 = [{"speculative_mean_accepted": 1.0, "mjsd_mean_accepted": 2.0, "ratio_mjsd_over_speculative": 2.0},
            {"speculative_mean_accepted": None, "mjsd_mean_accepted": None, "ratio_mjsd_over_speculative": None}]
    accepted = {("instruct", "speculative"): [1, 1], ("instruct", "MJSD"): [2, 2], ("chat", "speculative"): [],
                ("chat", "MJSD"): []}
    overall = {"estimate": 1.8, "low": 1.2, "high": 2.6, "prompts": 6}
    fig = mjsd_figures.fig3_figure(fig3, accepted, KINDS, overall)
    assert [p.get_height() for p in fig.axes[0].patches] == [1.0, 0, 2.0, 0]
    ratios = [p.get_height() for p in fig.axes[2].patches]
    assert ratios[0] == 2.0 and np.isnan(ratios[1]) and ratios[2] == 1.8  # per kind, then every kind
    bar = [c for c in fig.axes[2].collections if c.get_gid() != plots.DOCUMENT_GID][0].get_segments()[0]
    assert tuple(bar[:, 1]) == (1.2, 2.6)  # the verdict's interval
    assert len(fig.axes[1].patches) == 2 * (GAMMA + 1)  # one bin per accepted count 0..γ, per method
    assert "paper" in checked(fig)


def test_fig4_sets_mjsd_against_tau_beside_ar_sampling():
    fig4 = [{"tau": t, "perplexity": 3 + t, "tokens_per_s": 20 - 10 * t} for t in (0.0, 0.5, 1.0)]
    fig = mjsd_figures.fig4_figure(fig4, {"perplexity": 3.2, "tokens_per_s": 12.0})
    assert list(fig.axes[1].lines[0].get_ydata()) == [20.0, 15.0, 10.0]
    assert fig.axes[1].lines[1].get_ydata()[0] == 12.0
    checked(fig)


def test_table1_figure_draws_energy_only_where_it_was_counted():
    ours = [{"source": "ours: tiny", "batch_size": b, "time_per_run_vs_b1": 1 + b / 10, "energy_per_run_vs_b1": None,
             f"beta_b_{GAMMA + 1}": 1.5} for b in (1, 2)]
    paper = [{"source": "paper: OPT-13B", "batch_size": row[0], "time_per_run_vs_b1": row[5] / PAPER_T1[0][5],
              "energy_per_run_vs_b1": row[2] / PAPER_T1[0][2]} for row in PAPER_T1]
    fig = mjsd_figures.table1_figure(ours + paper, 4)
    labels = [line.get_label() for line in fig.axes[0].lines]
    assert "time per run, ours" in labels and "energy per run, ours" not in labels
    assert list(fig.axes[0].get_xticks()) == [1, 2, 4, 8, 16]
    assert "measured: MJSD Table 1, 4 runs per $b$" in checked(fig)


def test_claims_markdown_lists_each_claim_and_the_validation_choices():
    claims = [{"claim": "speedup", "paper": "2.21x", "ours": "1.1x [1.0, 1.2]", "threshold": "> 1", "verdict": "holds"}]
    text = mjsd_figures.claims_markdown("**head**", claims, {"instruct": {"tau1": 0.9, "tau2": 2.0, "m": 4}}, "none")
    assert text.splitlines() == ["**head**", "", "| claim | paper | ours (95% interval) | threshold | verdict |",
                                 "|---|---|---|---|---|", "| speedup | 2.21x | 1.1x [1.0, 1.2] | > 1 | holds |", "",
                                 "Validation choices: instruct: τ1 = 0.9, τ2 = 2, m = 4.", "Energy: none."]
