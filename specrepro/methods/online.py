"""Online speculative decoding (survey blog): the draft distilled towards the target's rows while it serves, one
update after every L-th sequence, from a FIFO buffer of verification steps."""
import copy
from dataclasses import dataclass

from ..core.config import ONLINE_DIVERGENCES, ONLINE_EXAMPLES, MethodParams, number, param, whole
from ..drafters.online import OnlineDrafter
from ..training.online import OnlineConfig, online_drafter
from .base import Cost, Loop, Method, Needs


@dataclass(frozen=True)
class Params(MethodParams):
    online_buffer: int = param(128, "online: verification steps (with the target's rows) kept in the FIFO buffer",
                               check=whole(1))
    online_every: int = param(8, "online: L, one update of the draft after every L served sequences", check=whole(1))
    online_steps: int = param(1, "online: optimiser steps per update", check=whole(1))
    online_lr: float = param(1e-4, "online: the draft's learning rate (AdamW)", check=number(0.0, above=True))
    online_divergence: str = param("fkl", "online: the distillation loss of the updates (DistillSpec's fkl, rkl, "
                                          "jsd, tvd)", choices=ONLINE_DIVERGENCES)
    online_examples: str = param("steps", "online: train each verification step over its own context (steps), or "
                                          "each served sequence once with the target's rows on it (sequences: far "
                                          "cheaper updates)", choices=ONLINE_EXAMPLES)


def drafter(draft, target, config):
    """A copy of the draft in fp32 that learns while serving: the draft other variants of a run use stays frozen."""
    p = config.params
    online = OnlineConfig(buffer_size=p.online_buffer, update_every=p.online_every, steps_per_update=p.online_steps,
                          lr=p.online_lr, divergence=p.online_divergence, examples=p.online_examples,
                          seed=config.seed)
    return online_drafter(copy.deepcopy(draft.model).float(), online)


ONLINE = Method("online", Loop.SPECULATIVE, Cost.DRAFT_MODEL, needs=Needs.DRAFT_MODEL, params=Params,
                drafter=drafter, drafter_type=OnlineDrafter,
                document="survey blog",
                summary="an fp32 copy of the draft distilled towards the target's rows while serving")
