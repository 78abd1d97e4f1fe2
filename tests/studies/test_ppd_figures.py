"""specrepro.studies.ppd_figures: the PPD notebook's figures, drawn from hand-made rows and records, each checked as
``Artifacts.figure`` checks it (a title saying measured or theory, no raw markup)."""
from __future__ import annotations

import numpy as np

from specrepro.run import plots
from specrepro.studies import ppd_figures
from tests.studies.drawn import checked


def test_fig6_draws_ppd_and_medusa_per_distance_and_two_epts():
    acc = np.linspace(0.2, 0.9, 15).reshape(3, 5)  # [distance, k]
    fig = ppd_figures.fig6_topk_figure(acc, acc / 2, {1: acc[:2], 3: acc[:2] + 0.05}, "tiny")
    labels = [line.get_label() for line in fig.axes[0].lines]
    assert labels == [f"{m} @{d}" for d in (1, 2, 3) for m in ("PPD", "Medusa")]
    assert np.allclose(fig.axes[1].lines[2].get_ydata(), acc[0] + 0.05)  # 3 EPTs, distance 1
    assert plots.shows_document_number(fig)  # the paper's printed anchors
    assert "(b) EPTs per prompt token (ablation budget)" in checked(fig)


def test_fig9_has_a_panel_per_run_with_the_papers_levels():
    record = {"train": {"losses": list(np.linspace(5.0, 2.0, 40)), "val_losses": [[10, 3.0], [30, 2.2]]}}
    quiet = {"train": {"losses": [3.0] * 30, "val_losses": []}}
    fig = ppd_figures.fig9_loss_figure([("zoo", record, 1), ("ablation", quiet, 100)], "tiny")
    left, right = fig.axes[:2]
    assert left.get_title() == "(a) zoo" and right.get_title() == "(b) ablation"
    assert list(left.lines[2].get_xdata()) == [10, 30]  # the held-out checks, at their steps
    assert [line.get_ydata()[0] for line in right.lines[-2:]] == [3.0, 2.5]  # 100 EPTs: the text's two levels
    checked(fig)


def test_fig8a_draws_measured_and_theory_per_tree_kind():
    rows = [{"tree_size": n, **{f"tau_{k}": n / 4 for k in ("dynamic", "static", "random")},
             **{f"tau_theory_{k}": n / 5 for k in ("dynamic", "static", "random")}} for n in (4, 8)]
    fig = ppd_figures.fig8a_figure(rows, "tiny", 2, 6)
    assert len(fig.axes[0].lines) == 6 and list(fig.axes[0].lines[1].get_ydata()) == [0.8, 1.6]
    assert any("2 prompts x 6 tokens" in t for t in checked(fig))


def test_fig8bc_marks_the_hardware_aware_size_with_its_speedup():
    fig8b = [{"tree_size": n, "speedup_theory_tau": 1 + n / 10, "speedup_measured_tau": 1 + n / 20} for n in (4, 8)]
    both = [{"tree_size": 8, "speedup_vs_L_fp1": 1.3, "speedup_vs_plain": 1.1}]
    fig = ppd_figures.fig8bc_figure(fig8b, both, 0.9, 8, 1.1, "tiny")
    chosen = next(line for line in fig.axes[0].lines if line.get_label().startswith("hardware-aware"))
    assert list(chosen.get_xdata()) == [8, 8] and "1.10x" in chosen.get_label()  # a line: the points stay visible
    assert "plain decoding on the $L_{\\mathrm{fp}}(1)$ baseline: 0.90" in checked(fig)


def test_fig4_fig5_draws_every_method_and_suite():
    fig4 = [{"method": m, "speedup": s, "speedup_median": s} for m, s in (("ppd", 1.4), ("medusa", 1.2))]
    fig5 = [{"suite": s, "ar_tok_s": 10.0, "ppd_tok_s": 14.0, "ppd_speedup": 1.4} for s in ("instruct", "math")]
    fig = ppd_figures.fig4_fig5_figure(fig4, fig5, "tiny")
    assert [p.get_height() for p in fig.axes[0].patches] == [1.4, 1.2]
    assert [p.get_height() for p in fig.axes[1].patches] == [10.0, 10.0, 14.0, 14.0]
    assert "(c) Fig. 5: PPD speedup by task" in checked(fig)


def test_fig7_fig1_sizes_each_circle_by_training_time():
    fig7 = [{"method": m, "extra_pct_of_target": pct, "extra_weight_MB": mb, "bench_dtype": "fp32", "speedup": s,
             "train_cpu_min": t} for m, pct, mb, s, t in (("PPD", 0.001, 0.002, 1.4, 10.0),
                                                            ("Medusa", 2.0, 4.0, 1.2, 20.0),
                                                            ("draft", 30.0, 60.0, 1.1, 100.0))]
    fig = ppd_figures.fig7_fig1_figure(fig7, "tiny")
    assert [p.get_height() for p in fig.axes[0].patches] == [0.001, 2.0, 30.0]
    ours = [c for c in fig.axes[1].collections if c.get_label().startswith("ours")]
    assert [float(c.get_sizes()[0]) for c in ours] == [70.0, 110.0, 430.0]  # 30 + 4 x CPU-minutes
    assert "0.002 MB (fp32)" in checked(fig)
