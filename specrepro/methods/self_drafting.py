"""Self-drafting methods: Medusa heads and PPD prompt tokens draft a token tree from the target's own forward; the
tree's size is the hardware-aware one on this device's profile unless named."""
from __future__ import annotations

from pathlib import Path

from ..drafters import medusa, ppd
from .base import Cost, Loop, Method, Needs, TreeSizing

MODULES = {Needs.MEDUSA_HEADS: (medusa, medusa.load_heads, medusa.MedusaDrafter),
           Needs.PPD_PROMPT_TOKENS: (ppd, ppd.load_prompt_tokens, ppd.PPDDrafter)}


def self_drafter(needs: Needs):
    """The drafter: the weights from a folder or zoo name (the target's own in the zoo when none is named), on the
    target's LM head, at the config's tree size (else the module's default; the planner resizes it)."""
    def build(draft: str | Path | None, target, config):
        from ..models import self_draft_folder
        if target is None:
            raise ValueError(f"{needs.value} draft from the target's own forward: they need the target")
        module, load, drafter = MODULES[needs]
        param = next(target.model.parameters())
        weights, wcfg = load(self_draft_folder(needs.value, draft, target.name), dtype=param.dtype,
                             device=param.device)
        if wcfg.hidden_size != target.model.config.hidden_size:
            raise ValueError(f"these {needs.value} were trained for hidden size {wcfg.hidden_size}, the target has "
                             f"{target.model.config.hidden_size}")
        size = config.tree_size or module.DEFAULT_TREE_SIZE
        return drafter(weights, wcfg, target.model.get_output_embeddings(), tree_size=size)
    return build


def sizing(needs: Needs) -> TreeSizing:
    module, load, _ = MODULES[needs]

    def read_config(draft: str | Path | None, target: str):
        from ..models import self_draft_folder
        return load(self_draft_folder(needs.value, draft, target))[1]
    return TreeSizing(read_config=read_config, choose=module.choose_tree_size)


def self_drafting(name: str, needs: Needs, summary: str, document: str) -> Method:
    return Method(name, Loop.SPECULATIVE, Cost.SELF_DRAFTING, needs=needs, drafter=self_drafter(needs),
                  tree=sizing(needs), summary=summary, document=document,
                  output="lossless; `--acceptance typical`: lossy, no bound")
