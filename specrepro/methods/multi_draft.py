"""Multi-draft speculative sampling: m i.i.d. draft chains of γ verified together as a tree, with SpecInfer's
recursive rejection over siblings (exact) or SpecTr's k-sequential selection (``spectr.py``)."""
from dataclasses import dataclass

from ..core.config import MethodParams, param, whole
from ..drafters.lm_tree import MultiDraftDrafter
from .base import Cost, Loop, Method, Needs


@dataclass(frozen=True)
class Params(MethodParams):
    num_drafts: int = param(4, "spectr, multi-draft: i.i.d. draft sequences verified together (m)", label="m",
                            check=whole(1))


def drafter(draft, target, config):
    return MultiDraftDrafter(draft.model, num_drafts=config.params.num_drafts)


def m_chains(gamma: int, params: Params) -> int:
    return params.num_drafts * gamma  # m draft chains of γ tokens


MULTI_DRAFT = Method("multi-draft", Loop.SPECULATIVE, Cost.DRAFT_MODEL, needs=Needs.DRAFT_MODEL, params=Params,
                     drafter=drafter, drafter_type=MultiDraftDrafter, nodes=m_chains,
                     document="none (SpecInfer), beside SpecTr",
                     summary="m i.i.d. draft chains as one tree, recursive rejection sampling")
