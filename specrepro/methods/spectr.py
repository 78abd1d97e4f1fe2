"""SpecTr (the MJSD paper's baseline): m i.i.d. draft chains verified with k-sequential selection (lossless)."""
from ..acceptance import SPECTR_RULE
from .base import Cost, Loop, Method, Needs
from .multi_draft import MultiDraftDrafter, Params, drafter, m_chains

SPECTR = Method("spectr", Loop.SPECULATIVE, Cost.DRAFT_MODEL, needs=Needs.DRAFT_MODEL, params=Params,
                rule=lambda params: SPECTR_RULE, drafter=drafter, drafter_type=MultiDraftDrafter, nodes=m_chains,
                document="MJSD paper (baseline)", summary="m i.i.d. draft chains, SpecTr's k-sequential selection")
