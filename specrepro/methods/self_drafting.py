"""Self-drafting methods: Medusa heads, PPD prompt tokens and an EAGLE draft draft a token tree from the target's own
forward; the tree's size is the hardware-aware one on this device's profile unless named."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, NamedTuple

from ..drafters import eagle, medusa, ppd
from ..engine import lm_head
from .base import Cost, Loop, Method, Needs, TreeSizing


class Weights(NamedTuple):
    """How one kind of self-drafting weights is read and turned into a drafter."""

    module: Any  # the drafter's module: DEFAULT_TREE_SIZE and choose_tree_size(config, profile, γ)
    drafter: type  # the Drafter class ``build`` returns
    read_config: Callable[[Path], Any]  # folder -> the weights' config (rank probabilities), without the tensors
    build: Callable[[Path, Any, int, Any], Any]  # (folder, target LoadedModel, tree size, method params) -> drafter


def head_drafter(load, drafter):
    """Medusa heads and PPD prompt tokens: weights on the target's LM head."""
    def build(folder: Path, target, size: int, params):
        param = next(target.model.parameters())
        weights, wcfg = load(folder, dtype=param.dtype, device=param.device)
        if wcfg.hidden_size != target.model.config.hidden_size:
            raise ValueError(f"these weights ({folder}) were trained for hidden size {wcfg.hidden_size}, the target "
                             f"has {target.model.config.hidden_size}")
        return drafter(weights, wcfg, lm_head(target.model), tree_size=size)
    return build


def eagle_drafter(folder: Path, target, size: int, params):
    draft, config = eagle.load_draft(folder, target.model)
    return eagle.EagleDrafter(draft, config, tree_size=size, shape=params.tree_shape, top_k=params.eagle_top_k or None)


WEIGHTS = {
    Needs.MEDUSA_HEADS: Weights(medusa, medusa.MedusaDrafter, lambda f: medusa.load_heads(f)[1],
                                head_drafter(medusa.load_heads, medusa.MedusaDrafter)),
    Needs.PPD_PROMPT_TOKENS: Weights(ppd, ppd.PPDDrafter, lambda f: ppd.load_prompt_tokens(f)[1],
                                     head_drafter(ppd.load_prompt_tokens, ppd.PPDDrafter)),
    Needs.EAGLE_DRAFT: Weights(eagle, eagle.EagleDrafter, eagle.read_config, eagle_drafter),
}


def self_drafter(needs: Needs):
    """The drafter: the weights from a folder or zoo name (the target's own in the zoo when none is named), on the
    target, at the config's tree size (else the module's default; the planner resizes it)."""
    def build(draft: str | Path | None, target, config):
        from ..engine.models import self_draft_folder
        if target is None:
            raise ValueError(f"{needs.value} draft from the target's own forward: they need the target")
        kind = WEIGHTS[needs]
        size = config.tree_size or kind.module.DEFAULT_TREE_SIZE
        return kind.build(self_draft_folder(needs.value, draft, target.name), target, size, config.params)
    return build


def sizing(needs: Needs) -> TreeSizing:
    kind = WEIGHTS[needs]

    def read_config(draft: str | Path | None, target: str):
        from ..engine.models import self_draft_folder
        return kind.read_config(self_draft_folder(needs.value, draft, target))
    return TreeSizing(read_config=read_config, choose=kind.module.choose_tree_size)


def self_drafting(name: str, needs: Needs, summary: str, document: str, **fields) -> Method:
    return Method(name, Loop.SPECULATIVE, Cost.SELF_DRAFTING, needs=needs, drafter=self_drafter(needs),
                  drafter_type=WEIGHTS[needs].drafter,
                  tree=sizing(needs), summary=summary, document=document,
                  output="lossless; `--acceptance typical`: lossy, no bound", **fields)
