"""EAGLE (Li et al. 2024; the PPD paper's baseline): a one-layer draft on the target's features drafts a token tree,
EAGLE-2's dynamic tree by default."""
from dataclasses import dataclass

from ..core.config import MethodParams, param, whole
from ..drafters.eagle import SHAPES
from .base import Needs
from .self_drafting import self_drafting


@dataclass(frozen=True)
class Params(MethodParams):
    tree_shape: str = param("dynamic", "eagle: dynamic (EAGLE-2: top-k children of the best nodes, reranked by path "
                                       "probability), static (the rank-path tree of the held-out rank probabilities) "
                                       "or chain (top-1)", label="shape", choices=SHAPES)
    eagle_top_k: int = param(0, "eagle: children per expanded node of the dynamic tree (0: the draft's own setting)",
                       label="k", check=whole(0))


EAGLE = self_drafting("eagle", Needs.EAGLE_DRAFT,
                      "a one-layer draft on the target's features drafts a dynamic token tree (EAGLE-2); "
                      "`--tree-size`, default hardware-aware", document="PPD paper (baseline), issue 23",
                      params=Params)
