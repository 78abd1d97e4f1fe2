"""Text in, record out: tokenise (with the chat template), dispatch to a method, decode."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .acceptance import TREE_RULES
from .adaptive import GammaPolicy
from .autoregressive import autoregressive_generate
from .config import DecodeConfig
from .decoding import eos_ids
from .drafters import Drafter, LMDrafter, NGramDrafter, NGramTable, PromptLookupDrafter
from .models import LoadedModel
from .record import GenerationRecord
from .speculative import speculative_generate


@dataclass(frozen=True)
class Method:
    """A decoding method: "ar", or the one speculative loop with a drafter built from ``draft``."""

    needs: str | None  # what ``draft`` must be: "draft model", "n-gram table", a key of models.SELF_DRAFTS, or None
    build: Callable[[Any, LoadedModel | None, DecodeConfig | None], Drafter] | None  # (draft, target, config)
    # How it spends time, for the device profile's choices: "plain" (one target call per token), "draft model"
    # (a draft model runs, c > 0), "model-free" (drafts cost nothing), "self-drafting" (the target's own
    # forward drafts: Medusa heads, PPD prompt tokens; a token tree whose size the device decides)
    kind: str = "model-free"
    # (drafter, device profile, γ) -> (hardware-aware tree size, why) for token-tree drafters; None otherwise
    choose_tree_size: Callable[[Drafter, Any, int | str], tuple[int, str]] | None = None

    def describe(self) -> dict:
        """The method as data, for every record's provenance (with the config's γ, tree size and rule)."""
        return {"kind": self.kind, "needs": self.needs, "token_tree": self.choose_tree_size is not None}


def _ngram(order: int) -> Callable[[Any, LoadedModel | None, DecodeConfig | None], Drafter]:
    def build(draft: NGramTable | str | Path, target=None, config=None) -> Drafter:
        table = draft if isinstance(draft, NGramTable) else NGramTable.load(draft)
        if table.order < order:
            raise ValueError(f"a {'bigram' if order == 2 else 'unigram'} draft needs an order-{order} table, "
                             f"got a {table.name} table")
        # A bigram table carries its unigram counts, so one fitted file serves both methods.
        return NGramDrafter(dataclasses.replace(table, order=order))
    return build


def _self_draft(kind: str, method: str) -> Callable[[Any, LoadedModel | None, DecodeConfig | None], Drafter]:
    """Builder of a self-drafting method (``kind``: "medusa heads" or "ppd prompt tokens"): the weights from a
    folder or zoo name, or the target's own in the zoo when none is named, on the target's LM head."""
    def build(draft: str | Path | None, target: LoadedModel | None, config: DecodeConfig | None) -> Drafter:
        from .drafters import medusa, ppd
        from .models import self_draft_folder
        if target is None:
            raise ValueError(f"{method} drafts from the target's own forward: it needs the target")
        module, load = {"medusa heads": (medusa, medusa.load_heads),
                        "ppd prompt tokens": (ppd, ppd.load_prompt_tokens)}[kind]
        param = next(target.model.parameters())
        weights, wcfg = load(self_draft_folder(kind, draft, target.name), dtype=param.dtype, device=param.device)
        if wcfg.hidden_size != target.model.config.hidden_size:
            raise ValueError(f"these {kind} were trained for hidden size {wcfg.hidden_size}, the target has "
                             f"{target.model.config.hidden_size}")
        size = config.tree_size if config is not None and config.tree_size else module.DEFAULT_TREE_SIZE
        drafter = medusa.MedusaDrafter if kind == "medusa heads" else ppd.PPDDrafter
        return drafter(weights, wcfg, target.model.get_output_embeddings(), tree_size=size)
    return build


def _medusa_size(drafter, profile, gamma):
    from .drafters.medusa import choose_tree_size
    return choose_tree_size(drafter.config, profile, gamma)


def _ppd_size(drafter, profile, gamma):
    from .drafters.ppd import choose_tree_size
    return choose_tree_size(drafter.config, profile)


REGISTRY: dict[str, Method] = {
    "ar": Method(needs=None, build=None, kind="plain"),
    "speculative": Method(needs="draft model", build=lambda draft, target=None, config=None: LMDrafter(draft.model),
                          kind="draft model"),
    "prompt-lookup": Method(needs=None, build=lambda draft, target=None, config=None: PromptLookupDrafter()),
    "unigram": Method(needs="n-gram table", build=_ngram(1)),
    "bigram": Method(needs="n-gram table", build=_ngram(2)),
    "medusa": Method(needs="medusa heads", build=_self_draft("medusa heads", "medusa"), kind="self-drafting",
                     choose_tree_size=_medusa_size),
    "ppd": Method(needs="ppd prompt tokens", build=_self_draft("ppd prompt tokens", "ppd"), kind="self-drafting",
                  choose_tree_size=_ppd_size),
}
TREE_METHODS = tuple(m for m, spec in REGISTRY.items() if spec.choose_tree_size is not None)
METHODS = tuple(REGISTRY)

Messages = Sequence[tuple[str, str]]


def encode_prompt(target: LoadedModel, prompt: str | Messages, chat_template: bool = True) -> list[int]:
    """Token ids for a prompt: plain text, or (role, content) turns ending with the user's message.

    Chat models get their chat template (with the assistant's generation prompt) unless turned off.
    """
    tok = target.tokenizer
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("the prompt is empty")
        messages = [("user", prompt)]
    else:
        messages = list(prompt)
        if not messages or not messages[-1][1].strip():
            raise ValueError("the prompt is empty: the last message has no content")
    if chat_template and getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template([{"role": r, "content": c} for r, c in messages],
                                      add_generation_prompt=True, tokenize=True, return_dict=False)
        return list(ids)
    text = "\n\n".join(c for _, c in messages)
    return tok(text, add_special_tokens=True)["input_ids"]


def drafter_for(draft: LoadedModel | Drafter | NGramTable | str | None, method: str,
                target: LoadedModel | None = None, config: DecodeConfig | None = None) -> Drafter:
    """The drafter of a speculative ``method``: ``draft`` itself if it is one, else built from it (Medusa heads
    also need the ``target`` they read, and the ``config``'s tree size)."""
    if method not in REGISTRY or REGISTRY[method].build is None:
        raise ValueError(f"{method!r} is not a speculative method; choose one of "
                         f"{', '.join(m for m in METHODS if REGISTRY[m].build is not None)}")
    if isinstance(draft, Drafter):
        return draft
    needs = REGISTRY[method].needs
    if needs in ("draft model", "n-gram table") and draft is None:
        flag = "--draft NAME" if needs == "draft model" else "--ngram-table FILE"
        raise ValueError(f"method {method!r} needs a {needs} ({flag})")
    return REGISTRY[method].build(draft, target, config)


def single_sequence(prompt_ids) -> list[int]:
    """Accept ids as a list, a [T] tensor or a [1, T] tensor; batch > 1 is a clear error (a later goal)."""
    if hasattr(prompt_ids, "tolist"):
        prompt_ids = prompt_ids.tolist()
    if prompt_ids and isinstance(prompt_ids[0], (list, tuple)):
        if len(prompt_ids) != 1:
            raise ValueError(f"batch size {len(prompt_ids)} is not supported yet: decoding runs one sequence at a time")
        prompt_ids = prompt_ids[0]
    return [int(t) for t in prompt_ids]


def method_kind(method: str) -> str:
    """How a method spends time, for the device profile's choices: "plain" (one target call per token),
    "draft model" (a draft model runs, c > 0) or "model-free" (drafts cost nothing, c = 0)."""
    base = method.removeprefix("hf-")
    base = {"assisted": "speculative"}.get(base, base)
    if base not in REGISTRY:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    kind = REGISTRY[base].kind
    return "model-free" if kind == "self-drafting" else kind  # (self-drafting spends no draft-model time either)


def generate_ids(target: LoadedModel, prompt_ids, config: DecodeConfig,
                 draft: LoadedModel | Drafter | NGramTable | str | None = None,
                 gamma_policy: GammaPolicy | None = None, provenance: dict | None = None) -> GenerationRecord:
    """Run ``config.method`` on token ids (batch size 1); returns the record with decoded text.

    ``draft``: a draft model ("speculative"), an n-gram table or its .npz path ("unigram", "bigram"),
    nothing ("ar", "prompt-lookup"), or a ready ``Drafter`` for any speculative method.
    ``gamma_policy``: how many drafts per step (``config.gamma == "auto"`` needs an ``AdaptiveGamma``).
    ``provenance``: what the caller knows about the run (dtype and why), copied into the record.
    """
    prompt_ids = single_sequence(prompt_ids)
    eos = eos_ids(target.model, target.tokenizer)
    if config.method == "ar":
        rec = autoregressive_generate(target.model, prompt_ids, config, eos, target.context_length)
    elif config.method in REGISTRY:
        rec = speculative_generate(target.model, drafter_for(draft, config.method, target, config), prompt_ids, config, eos,
                                   rule=TREE_RULES[config.acceptance], context_length=target.context_length,
                                   method=config.method, gamma_policy=gamma_policy)
    else:
        raise ValueError(f"unknown method {config.method!r}; choose one of {', '.join(METHODS)}")
    rec.provenance = {"dtype": str(next(target.model.parameters()).dtype).replace("torch.", ""),
                      "device": str(next(target.model.parameters()).device),
                      "method": {"name": config.method, **REGISTRY[config.method].describe()},
                      **(provenance or {}), **rec.provenance}
    if target.tokenizer is not None:
        rec.text = target.tokenizer.decode(rec.token_ids, skip_special_tokens=True)
    return rec


def generate(target: LoadedModel, prompt: str | Messages, config: DecodeConfig,
             draft: LoadedModel | Drafter | NGramTable | str | None = None, chat_template: bool = True,
             gamma_policy: GammaPolicy | None = None, provenance: dict | None = None) -> GenerationRecord:
    return generate_ids(target, encode_prompt(target, prompt, chat_template), config, draft, gamma_policy, provenance)
