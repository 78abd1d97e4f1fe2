"""MJSD (seed 000): the draft's beam sampling proposes, the joint-likelihood threshold τ verifies (LOSSY)."""
from dataclasses import dataclass

from ..acceptance import MJSD_RULE
from ..core.config import number, param
from ..drafters.beam import BeamDrafter
from . import mjgd
from .base import Cost, Loop, Method, Needs


@dataclass(frozen=True)  # defaults: the MJSD paper's Table 5 (Llama, ChatGPT-Prompts)
class Params(mjgd.Params):  # num_beams, declared once with MJGD's
    tau: float = param(0.1, "mjsd: a prefix passes when min(1, p(x_1:j)/q(x_1:j)) > tau, tau in [0, 1]",
                       label="tau", check=number(0.0, 1.0))


MJSD = Method("mjsd", Loop.SPECULATIVE, Cost.DRAFT_MODEL, needs=Needs.DRAFT_MODEL, params=Params,
              rule=lambda params: MJSD_RULE.with_params(tau=params.tau),
              drafter=lambda draft, target, config: BeamDrafter(draft.model, num_beams=config.params.num_beams),
              drafter_type=BeamDrafter,
              document="MJSD paper", output="lossy, no bound; τ = 1 is sampling from p",
              summary="γ drafts by beam sampling; longest prefix with min(1, p/q) > τ, then a sample from p")
