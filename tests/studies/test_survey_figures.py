"""specrepro.studies.survey_figures (the survey notebook's figures and closing summary) and the survey notebook's
profile settings, on hand-made rows."""
from __future__ import annotations

import numpy as np
import torch

from specrepro.drafters.staged import FROM_DRAFT, FROM_INNER, FROM_LOOKUP, FROM_TARGET
from specrepro.studies import survey, survey_figures
from tests.studies.drawn import checked


def test_profile_settings_are_copies_and_smoke_takes_two_points_of_quick():
    for profile in ("smoke", "quick", "full"):
        sizes, grid = survey.profile_settings(profile)
        assert set(sizes) == set(survey.SETTINGS["quick"]) and set(grid) == set(survey.GRIDS["quick"])
    smoke = survey.profile_settings("smoke")[1]
    assert all(smoke[k] == (v[0], v[-1]) for k, v in survey.GRIDS["quick"].items())
    smoke["gammas"] = (9,)
    assert survey.GRIDS["smoke"]["gammas"] == (2, 4)  # the table itself is untouched


def test_acceptance_figure_draws_the_band_the_mean_and_two_bounds_per_row():
    bounds = np.array([0.0, 0.2, 1.0])
    curve = np.array([[0.2, 0.4, 0.6, 0.8], [0.3, 0.5, 0.7, 0.9], [0.5, 0.7, 0.9, 1.0]])  # [nD, R]
    fig = survey_figures.acceptance_figure(bounds, curve, torch.tensor([0.2, 0.4, 0.6, 0.8]), bounds / 2, "instruct")
    per_row = fig.axes[1]
    assert [line.get_label() for line in per_row.lines] == ["$D$ = 0.2", "$D$ = 1", "no gain"]
    assert np.allclose(per_row.lines[1].get_ydata(), curve[2])
    drawn = checked(fig)
    assert "mentored, mean over 4 rows (measured)" in drawn and any("held-out instruct" in t for t in drawn)


def test_speed_quality_figure_puts_each_variant_at_its_quality_and_speed():
    rows = {"ar": dict(rouge_l=0.30, tokens_per_s=10.0, speedup=1.0),
            "speculative:g2": dict(rouge_l=0.31, tokens_per_s=15.0, speedup=1.5),
            "mentored:g2:kl0.2": dict(rouge_l=0.29, tokens_per_s=17.0, speedup=1.7),
            "mentored:g2:kl1": dict(rouge_l=0.25, tokens_per_s=19.0, speedup=1.9)}
    fig = survey_figures.speed_quality_figure(rows, (2,), (0.2, 1.0), 0.305, 0.01, "summarize", 1, 1)
    mentored = next(line for line in fig.axes[0].lines if line.get_label() == "mentored, $\\gamma$ = 2")
    assert list(mentored.get_xdata()) == [0.29, 0.25] and list(mentored.get_ydata()) == [17.0, 19.0]
    assert list(fig.axes[1].lines[0].get_ydata()) == [1.7, 1.9]
    assert "$D$ = 0.2" in checked(fig)


def test_staged_figure_has_one_bar_a_variant_and_two_call_bars():
    table = [dict(tokens_per_s=10.0, draft_calls_per_token=0.0, target_calls_per_token=1.0),
             dict(tokens_per_s=14.0, draft_calls_per_token=2.5, target_calls_per_token=0.4)]
    fig = survey_figures.staged_figure(table, ["AR", "staged"], 4, 1, "instruct")
    assert [p.get_height() for p in fig.axes[0].patches] == [10.0, 14.0]
    assert [p.get_height() for p in fig.axes[1].patches] == [0.0, 2.5, 1.0, 0.4]
    assert "staged" in checked(fig)


def test_token_source_figure_colours_each_piece_by_its_source():
    pictures = {"staged": ([1, 2, 3], [FROM_INNER, FROM_DRAFT, FROM_TARGET]),
                "fused": ([4, 5], [FROM_LOOKUP, FROM_TARGET])}
    fig = survey_figures.token_source_figure(pictures, lambda ids: f"t{ids[0]} ", "p0", 4)
    pieces = {t.get_text(): t.get_color() for ax in fig.axes for t in ax.texts}
    assert pieces == {"t1 ": "C2", "t2 ": "C0", "t3 ": "C3", "t4 ": "C2", "t5 ": "C3"}
    drawn = checked(fig)
    assert "staged: prompt lookup (n-gram), kept by the draft's inner level 1, draft model 1, target (recovered or " \
           "bonus token) 1" in drawn


def test_beta_figure_draws_beta_and_the_expected_speedup_per_gamma():
    table = [{"batch_size": b, "gamma": 2, "beta": beta, "blog_break_even_beta": 2.2, "expected_speedup": s}
             for b, beta, s in ((1, 1.1, 1.6), (4, 1.8, 1.2))]
    fig = survey_figures.beta_figure(table, (1, 4), (2,), 0.7, 0.1, 16)
    assert list(fig.axes[0].lines[0].get_ydata()) == [1.1, 1.8]
    assert list(fig.axes[1].lines[0].get_ydata()) == [1.6, 1.2]
    checked(fig)


def test_task_speedup_figure_marks_the_papers_number_only_where_there_is_one():
    table = [dict(suite="summarize", decoding="greedy", temperature=0.0, speedup=1.2, speedup_low=1.0,
                  speedup_high=1.4, predicted_speedup=1.3, paper_speedup=2.01),
             dict(suite="humaneval", decoding="greedy", temperature=0.0, speedup=1.5, speedup_low=1.3,
                  speedup_high=1.7, predicted_speedup=1.4, paper_speedup=None)]
    fig = survey_figures.task_speedup_figure(table, 4)
    assert [p.get_height() for p in fig.axes[0].patches] == [1.2, 1.5]
    assert "humaneval\ngreedy (T = 0)" in checked(fig)


def test_summary_markdown_sets_our_numbers_beside_the_documents():
    at_bound = [{"gamma": 2, "largest_D_drop_within_run_range": 0.2, "mentored_over_speculative": 1.1},
                {"gamma": 4, "largest_D_drop_within_run_range": None, "mentored_over_speculative": None}]
    chart = [{"D": d, "mean_accept": a} for d, a in ((0.0, 0.5), (0.1, 0.6), (0.5, 0.7), (1.0, 0.8), (2.0, 0.9))]
    cost = [{"vs_target_forward_1_token": 0.05, "ms": 1.0}, {}, {"ms": 20.0}]
    staged = [{"method": m, "speed_over_draft_alone": s, "draft_calls_per_token": d, "identical_to_ar": i}
              for m, s, d, i in (("draft model alone", 1.0, 0.8, 1.0), ("staged", 1.2, 0.3, 1.0),
                                 ("fused", 1.1, 0.5, None), ("prompt lookup alone", 0.9, 0.0, 1.0))]
    task = [dict(suite="summarize", decoding="greedy", speedup=1.2, speedup_low=1.0, speedup_high=1.4, alpha=0.6,
                 paper_speedup=2.01, paper_task="XSum", paper_decoding="greedy"),
            dict(suite="humaneval", decoding="greedy", speedup=1.5, speedup_low=1.3, speedup_high=1.7, alpha=0.7,
                 paper_speedup=None)]
    text = survey_figures.summary_markdown("**head**", at_bound, 0.01, chart, 0.45, 10, cost, staged,
                                           lambda b, n: b * n / 10, (1, 8), (2,), task)
    lines = text.splitlines()
    assert lines[:4] == ["**head**", "", "| quantity | ours | document |", "|---|---|---|"]
    assert "1.10× (γ = 2, D = 0.2; range 0.0100)" in lines[4]
    assert "D = 0 (speculative): 0.450; D = 0.1: 0.600; D = 0.5: 0.700; D = 1: 0.800 |" in lines[5]
    assert "| 0.05 (1.0 ms vs 20.0 ms) |" in lines[6]
    assert "| fused vs the draft model alone (T = 0) | 1.10× tokens/s; draft calls per token 0.50 vs 0.80; records " \
           "identical to AR: n/a |" in lines[8]
    assert [line.split(" | ")[1] for line in lines[10:12]] == ["γ = 2: 0.30", "γ = 2: 2.40"]  # B = 1, 8; no 64
    assert lines[-2].endswith("| 2.01× (XSum, greedy; Chen et al. 2023, Table 1) |")
    assert lines[-1].endswith("α = 0.70 | Table 1 has no such row |")
    no_best = survey_figures.summary_markdown("h", at_bound[1:], 0.01, chart, 0.45, 10, cost, staged,
                                              lambda b, n: 1.0, (1,), (2,), task)
    assert "| no such D (range 0.0100) |" in no_best
