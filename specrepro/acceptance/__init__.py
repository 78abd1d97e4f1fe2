"""Acceptance rules: pure functions on tensors, no model or cache inside, randomness passed in.

- ``chain``: one draft chain,
  ``(p [γ+1, V], q [γ, V], draft_tokens [γ], uniforms [γ+1]) -> (n_accepted, next_token)``
  (``speculative_sampling``, ``greedy_match``).
- ``tree``: a draft tree, ``(p [N+1, V], q [N, V], tokens [N], parents [N], uniforms [N+1]) -> TreeVerdict``
  (``tree_sampling``, ``tree_greedy``, ``typical_acceptance``), named with their lossless flag in ``TREE_RULES``.
- ``base``: the tree rules' contract (``TreeVerdict``, ``TreeRule``) and their shared input checks.
"""
from .base import TreeRule, TreeVerdict, check_tree_inputs
from .chain import greedy_match, speculative_sampling
from .tree import TREE_RULES, TypicalParams, tree_greedy, tree_sampling, typical_acceptance, typical_thresholds

__all__ = [
    "speculative_sampling", "greedy_match",
    "TreeRule", "TreeVerdict", "check_tree_inputs",
    "TREE_RULES", "TypicalParams", "tree_greedy", "tree_sampling", "typical_acceptance", "typical_thresholds",
]
