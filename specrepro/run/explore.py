"""What the explorer notebook (``notebooks/explore.ipynb``) draws and runs; the notebook only wires widgets to it,
through this one module. The work is split by job:

- ``explore_costs``: :class:`Controls`, every knob of the documents' trade-offs (α, γ, c, β or a measured β(n),
  temperature, tree size, batch size, MoE experts E and k, mentored D), checked once; the cost model β(n) and c,
  from the sliders or a device profile, at a batch size through a roofline (its docstring says how).
- ``explore_benches``: the committed benches' measured points (:func:`bench_points`, read from
  ``committed.bench_dir()``) and their steps' time split three ways (:func:`step_splits`), and which methods each
  theory covers and the run panel offers, from the registry.
- ``explore_figures``: the theory figures from ``simulations/`` (numpy only, each well under a second):
  :func:`tokens_figure`, :func:`speedup_figure`, :func:`tree_figure`, :func:`moe_figure`, :func:`mentored_figure`,
  with a committed bench's point on the theory where it measured a method, labelled with its device; and the
  measured :func:`step_split_figure`: where each committed bench row's step time went.
- ``explore_trace``: :func:`run_traced`, one method on the offline model and one prompt, each token labelled with
  where it came from (:func:`token_sources`), shown by :func:`tokens_html` and :func:`trace_figure`.
"""
from __future__ import annotations

from .explore_benches import (CHAIN_METHODS, DRAFT, RUN_METHODS, TARGET, TREE_METHODS, BenchPoint, StepSplit,
                              at_temperature, bench_points, step_splits)
from .explore_costs import (PROFILE_FORMATS, Controls, DeviceCosts, beta_of, cost_ratio, describe_costs,
                            device_profiles, profiles_dir, read_profile, roofline)
from .explore_figures import (MENTORED_BOUNDS, PROFILE_FOOTER, TREE_SIZES, mentored_figure, moe_figure, png,
                              speedup_figure, speedup_grid, step_split_figure, tokens_figure, tree_figure,
                              tree_rank_probs)
from .explore_trace import (SOURCE_COLOURS, Trace, TracingDrafter, run_traced, token_sources, tokens_html,
                            trace_figure)

__all__ = ["CHAIN_METHODS", "DRAFT", "RUN_METHODS", "TARGET", "TREE_METHODS", "BenchPoint", "StepSplit",
           "at_temperature", "bench_points", "step_splits", "step_split_figure", "PROFILE_FORMATS", "Controls",
           "DeviceCosts", "beta_of", "cost_ratio", "describe_costs", "device_profiles", "profiles_dir", "read_profile",
           "roofline", "MENTORED_BOUNDS", "PROFILE_FOOTER", "TREE_SIZES", "mentored_figure", "moe_figure", "png",
           "speedup_figure", "speedup_grid", "tokens_figure", "tree_figure", "tree_rank_probs", "SOURCE_COLOURS",
           "Trace", "TracingDrafter", "run_traced", "token_sources", "tokens_html", "trace_figure"]
