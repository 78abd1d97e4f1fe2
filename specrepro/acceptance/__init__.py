"""Acceptance rules: pure functions on tensors, no model or cache inside, randomness passed in.

- ``chain``: one draft chain,
  ``(p [γ+1, V], q [γ, V], draft_tokens [γ], uniforms [γ+1]) -> (n_accepted, next_token)``
  (``speculative_sampling``, ``greedy_match``).
- tree rules, ``(p [N+1, V], q [N, V], tokens [N], parents [N], uniforms [N+1]) -> TreeVerdict``, one file per
  family, named with their lossless flag in ``TREE_RULES``:

      exact    tree.py     recursive rejection sampling over siblings (SpecInfer)       lossless
      greedy   tree.py     longest path of target argmaxes                              lossless at T = 0
      typical  tree.py     Medusa's typical acceptance                                  LOSSY
      spectr   spectr.py   SpecTr's k-sequential selection over i.i.d. drafts           lossless
      mjsd     mjsd.py     MJSD's joint-likelihood threshold (Algorithm 1, corrected)   LOSSY
      bild     bild.py     BiLD's rollback on the target's cross-entropy                LOSSY
      mentored mentored.py KL-bounded optimal acceptance (mentored blog)                LOSSY (exact at D = 0)

- ``base``: the tree rules' contract (``TreeVerdict``, ``TreeRule``) and their shared input checks.
"""
from .base import TreeRule, TreeVerdict, check_chain_inputs, check_tree_inputs
from .bild import BILD_RULE, BiLDParams, bild_rollback
from .chain import greedy_match, speculative_sampling
from .mentored import MENTORED_RULE, MentoredParams, mentored, solve_rows
from .mjsd import MJSD_RULE, MJSDParams, mjsd_joint_threshold
from .spectr import SPECTR_RULE, SpecTrParams, kseq_tree
from .tree import TypicalParams, tree_greedy, tree_sampling, typical_acceptance, typical_thresholds
from .tree import RULES as _TREE_FILE_RULES

TREE_RULES: dict[str, TreeRule] = {**_TREE_FILE_RULES, "spectr": SPECTR_RULE, "mjsd": MJSD_RULE, "bild": BILD_RULE,
                                 "mentored": MENTORED_RULE}

__all__ = [
    "speculative_sampling", "greedy_match",
    "TreeRule", "TreeVerdict", "check_tree_inputs", "check_chain_inputs",
    "TREE_RULES", "TypicalParams", "tree_greedy", "tree_sampling", "typical_acceptance", "typical_thresholds",
    "SPECTR_RULE", "SpecTrParams", "kseq_tree", "MJSD_RULE", "MJSDParams", "mjsd_joint_threshold",
    "BILD_RULE", "BiLDParams", "bild_rollback", "MENTORED_RULE", "MentoredParams", "mentored", "solve_rows",
]
