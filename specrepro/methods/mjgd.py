"""MJGD: multi-token joint greedy decoding, K = γ tokens per step by the target's beam search (MJSD paper §3.1)."""
from dataclasses import dataclass

from ..core.config import MethodParams, param, whole
from .base import Cost, Loop, Method


@dataclass(frozen=True)
class Params(MethodParams):
    num_beams: int = param(8, "mjgd: beams of the target's beam search; mjsd: beams of the draft's beam sampling",
                           label="b", check=whole(1))  # the MJSD paper's Table 5


MJGD = Method("mjgd", Loop.MJGD, Cost.PLAIN, params=Params,
              document="MJSD paper §3.1", output="lossy: a search, no bound; K = 1 is argmax decoding",
              summary="K = γ tokens per step by beam search with the target (T = 0)")
