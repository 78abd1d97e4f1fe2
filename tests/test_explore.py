"""The explorer (specrepro/run/explore.py, notebooks/explore.ipynb): controls checked, theory figures that agree with
simulations/ and pass the figure checks, the committed benches' points read with their devices, token sources that
add up to the loop's own record, and the notebook executing headless. tests/test_browser.py drives it in JupyterLab."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import simulations as sim
from specrepro.run import explore as ex
from specrepro.run import explore_figures
from specrepro.run import plots
from specrepro.core.config import DecodeConfig
from specrepro.drafters import LMDrafter
from specrepro.metrics.profile import save_profile
from specrepro.decode.speculative import speculative_generate
from tests.helpers import fake_profile

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("field, value, words", [("alpha", 1.0, "alpha must be in [0, 1)"),
                                                 ("gamma", 0, "gamma must be in 1..gamma_max"),
                                                 ("top_k", 9, "top_k must be in 1..experts = 8"),
                                                 ("batch", 0, "batch must be ≥ 1")])
def test_a_bad_control_is_one_clear_error(field, value, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace(")", r"\)").replace(".", r"\.")):
        ex.Controls(**{field: value})


def test_the_speedup_surface_agrees_with_the_optimal_gamma_of_simulations():
    ctrl = ex.Controls(c=0.05, beta=1.0)
    alphas = np.array([0.3, 0.6, 0.8, 0.9])
    grid = ex.speedup_grid(ctrl, alphas)
    for a, row in zip(alphas, grid):
        assert int(row.argmax()) + 1 == int(sim.optimal_gamma(a, ctrl.c, ctrl.gamma_max))
        assert row[ctrl.gamma - 1] == pytest.approx(float(sim.expected_speedup(a, ctrl.gamma, ctrl.c)))


def test_batch_costs_nothing_below_the_knee_and_tokens_above_it():
    assert ex.roofline(5, batch=1, knee=64) == pytest.approx(1.0)
    assert ex.roofline(5, batch=8, knee=64) == pytest.approx(1.0)  # 40 tokens: still memory-bound
    assert ex.roofline(5, batch=256, knee=64) == pytest.approx(5.0)  # compute-bound already at one token each
    beta = ex.beta_of(ex.Controls(beta=1.2, batch=256, knee=64))
    assert beta(1) == pytest.approx(1.0) and beta(5) == pytest.approx(1.2 * 5.0)
    wide = ex.beta_of(ex.Controls(beta=1.2, batch=1, knee=32))
    assert wide(32) == pytest.approx(1.2) and wide(128) == pytest.approx(1.2 * 4)  # a tree wider than the knee


def test_a_device_profile_gives_its_measured_beta_and_c(tmp_path):
    path = save_profile(fake_profile("bf16", decode_ms=40.0, betas={2: 1.1, 4: 1.3, 8: 2.0}, draft_ms=4.0),
                        tmp_path / "p.json")
    ctrl = ex.Controls(profile=str(path), beta=3.0, c=0.4)
    assert ex.beta_of(ctrl)(4) == pytest.approx(1.3) and ex.beta_of(ctrl)(3) == pytest.approx(1.2)
    assert ex.beta_of(ctrl)(20) == pytest.approx(2.0)  # beyond the measured sizes: the largest measured β
    at_batch = ex.beta_of(dataclasses.replace(ctrl, batch=64, knee=32))  # r_64(4) / r_1(4) = 8 / 2
    assert at_batch(4) == pytest.approx(1.3 * 4.0)
    assert ex.cost_ratio(ctrl) == pytest.approx(0.1)
    assert ex.device_profiles(tmp_path) == {"p.json": path}
    (tmp_path / "q.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a specrepro device profile"):
        ex.read_profile(str(tmp_path / "q.json"))


def test_the_committed_benches_give_points_with_their_device():
    points = ex.bench_points()
    assert points, "figures/bench/ holds the committed benches"
    assert all(p.device and np.isfinite(p.speedup) and p.tokens_per_call >= 1.0 for p in points)
    assert {p.base for p in points} >= {"speculative", "prompt-lookup", "medusa"}
    trees = [p for p in points if p.base in ex.TREE_METHODS]
    assert trees and all(p.tree_size is not None and p.tree_size >= 1 for p in trees)
    batched = [p for p in points if p.bench == "batch-b8"]  # bench --batch-size 8: its points say so
    assert batched and all(p.batch_size == 8 and p.label().endswith("B = 8") for p in batched)


def test_the_method_lists_follow_the_registry():
    """A tree method of the registry is on the tree figure and in the run panel without a change to the explorer:
    EAGLE, whose committed benches (eagle-t0, eagle-t1) measured it, is the case at hand."""
    from specrepro.methods import REGISTRY
    assert set(ex.TREE_METHODS) == {name for name, m in REGISTRY.items() if m.token_tree} >= {"medusa", "ppd", "eagle"}
    assert {"speculative", "prompt-lookup"} <= set(ex.CHAIN_METHODS)
    assert not set(ex.CHAIN_METHODS) & set(ex.TREE_METHODS)
    assert not {"spectr", "mjsd", "mentored", "multi-draft", "hf-assisted"} & set(ex.CHAIN_METHODS)  # other laws
    assert "ar" in ex.RUN_METHODS and set(ex.TREE_METHODS) <= set(ex.RUN_METHODS)
    assert not {"mjgd", "unigram", "hf-ar", "llamacpp-ar"} & set(ex.RUN_METHODS)  # no chain of ours, or no table
    eagle = [p for p in ex.bench_points() if p.base == "eagle"]
    assert {p.bench for p in eagle} >= {"eagle-t0", "eagle-t1"} and all(p.tree_size for p in eagle)
    shown = " ".join(plots.texts(ex.tree_figure(ex.Controls(temperature=0.0), eagle)))
    assert "measured, bench eagle-t0" in shown


def test_the_committed_benches_are_found_through_one_setting(tmp_path, monkeypatch):
    from specrepro.run import committed
    monkeypatch.delenv("SPECREPRO_FIGURES", raising=False)
    assert committed.bench_dir() == ROOT / "figures" / "bench"
    copy = tmp_path / "figures" / "bench" / "medusa-t0"
    copy.mkdir(parents=True)
    for name in ("summary.csv", "config.json", "provenance.json"):
        (copy / name).write_bytes((ROOT / "figures" / "bench" / "medusa-t0" / name).read_bytes())
    monkeypatch.setenv("SPECREPRO_FIGURES", str(tmp_path / "figures"))
    assert committed.bench_dir() == tmp_path / "figures" / "bench"
    points = ex.bench_points()
    assert points and {p.bench for p in points} == {"medusa-t0"}
    assert committed.figures_dir(ROOT / "figures") == ROOT / "figures"  # a folder given wins over the setting


@pytest.mark.parametrize("draw", [ex.tokens_figure, ex.speedup_figure, ex.tree_figure, ex.moe_figure,
                                  ex.mentored_figure])
def test_every_figure_says_what_it_is_and_renders(draw):
    points = ex.bench_points()
    fig = draw(ex.Controls(), points) if draw in (ex.tokens_figure, ex.speedup_figure, ex.tree_figure) \
        else draw(ex.Controls())
    plots.check(fig)  # a footer, a title saying theory or measured, no raw markup
    assert ex.png(fig)[:4] == b"\x89PNG"
    text = " ".join(plots.texts(fig))
    if draw in (ex.tokens_figure, ex.speedup_figure):
        assert "measured, bench" in text and "cpu" in text  # the committed points, labelled with their device


def test_the_step_split_shows_each_committed_rows_three_parts_and_its_predictions():
    splits = ex.step_splits()
    assert {s.method for s in splits} >= {"ar", "prompt-lookup", "eagle"}  # the benches that split their steps
    assert all(s.target_ms > 0 and s.draft_ms >= 0 and s.host_ms >= 0 for s in splits)
    eagle = [s for s in splits if s.method == "eagle"]
    assert eagle and all(s.draft_ms > 0 for s in eagle)  # EAGLE's draft layer is not free
    assert all(s.draft_ms == 0 for s in splits if s.method == "ar")
    fig = ex.step_split_figure(ex.Controls(temperature=0.0), splits)
    plots.check(fig)
    text = " ".join(plots.texts(fig))
    assert "host's work" in text and "with host" in text and "measured" in text
    empty = " ".join(plots.texts(ex.step_split_figure(ex.Controls(temperature=0.5), splits)))
    assert "no committed bench split its steps at T = 0.5" in empty


def test_the_tree_curve_grows_with_size_and_with_alpha():
    sizes = (2, 4, 8, 16, 32)
    low, _ = explore_figures._tree_curves(0.3, sizes)
    high, _ = explore_figures._tree_curves(0.7, sizes)
    assert np.all(np.diff(high) >= -1e-9) and np.all(high > low) and np.all(low >= 1.0)


def test_token_sources_of_hand_made_steps():
    chain = [-1, 0, 1]  # a chain of three
    tree = [-1, 0, -1, 2]  # two chains of two: 0 -> 1 (first) and 2 -> 3
    steps = [(chain, [0, 1, 2]),  # all accepted: three draft tokens and a bonus
             (chain, [0]),  # one accepted, then a correction
             ([], []),  # nothing proposed: a plain step
             (tree, [2, 3]),  # the second branch, to its leaf
             (chain, [])]  # the first draft rejected
    assert ex.token_sources(steps, 100) == (["accepted draft"] * 3 + ["bonus"] + ["accepted draft", "corrected"]
                                            + ["target"] + ["accepted tree branch"] * 2 + ["bonus"] + ["corrected"])
    assert len(ex.token_sources(steps, 5)) == 5  # a stop inside a step commits fewer


def test_traced_sources_add_up_to_the_loops_record(tiny_pair_64):
    target, draft = tiny_pair_64
    drafter = ex.TracingDrafter(LMDrafter(draft))
    rec = speculative_generate(target, drafter, [1, 5, 3, 7, 2], DecodeConfig(max_new_tokens=40, gamma=3), set())
    sources = ex.token_sources(drafter.steps, rec.new_tokens)
    assert len(sources) == rec.new_tokens == 40
    assert sum(s.startswith("accepted") for s in sources) == sum(rec.accept_lengths)
    assert sources.count("bonus") == sum(a == g for a, g in zip(rec.accept_lengths, rec.proposed_lengths))
    assert sources.count("corrected") + sources.count("bonus") + sources.count("target") == rec.target_calls


def test_a_run_on_the_offline_model_colours_every_token():
    trace = ex.run_traced("medusa", "Name three colours.", max_new_tokens=12, tree_size=8, dtype="fp32")
    assert len(trace.pieces) == len(trace.sources) == trace.record["new_tokens"]
    assert sum(s.startswith("accepted") for s in trace.sources) == sum(trace.accept_lengths)
    assert trace.tokens_per_s > 0 and trace.ar_tokens_per_s > 0 and trace.predicted_speedup > 0
    page = ex.tokens_html(trace)
    assert page.count("<span title=") == len(trace.pieces) and "measured" in page and "predicted" in page
    plots.check(ex.trace_figure(trace))
    assert ex.png(ex.trace_figure(trace))[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="the run panel runs one of"):
        ex.run_traced("mjgd", "x")


def test_the_explorer_notebook_runs_headless(tmp_path):
    """Every cell of notebooks/explore.ipynb runs in a real kernel (widgets render nothing there) without an error,
    and writes nothing under figures/."""
    import papermill as pm

    before = sorted(p.name for p in (ROOT / "figures").iterdir())
    pm.execute_notebook(str(ROOT / "notebooks" / "explore.ipynb"), str(tmp_path / "explore.ipynb"),
                        kernel_name="python3", cwd=str(tmp_path), progress_bar=False)
    text = (tmp_path / "explore.ipynb").read_text()
    assert "measured points from" in text  # the first code cell's summary line; the theory cell asserts its drawing
    assert sorted(p.name for p in (ROOT / "figures").iterdir()) == before


def test_the_explorer_opens_on_its_controls():
    """Every code cell of the explorer opens collapsed in JupyterLab (``jupyter.source_hidden``), so that a reader
    sees the controls and plots, not the wiring; the parameters cell keeps its tag."""
    import nbformat
    cells = nbformat.read(ROOT / "notebooks" / "explore.ipynb", as_version=4).cells
    code = [c for c in cells if c.cell_type == "code"]
    assert code and all(c.metadata.get("jupyter", {}).get("source_hidden") is True for c in code)
    assert "parameters" in code[0].metadata.get("tags", [])


def test_controls_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ex.Controls().alpha = 0.5  # type: ignore[misc]


def test_the_explorer_reads_the_profile_formats_the_package_writes():
    from specrepro.metrics import profile
    assert set(ex.PROFILE_FORMATS) == {profile.FORMAT, profile.FORMAT_1}
