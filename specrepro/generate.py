"""Text in, record out: tokenise (with the chat template), dispatch to a method, decode."""
from __future__ import annotations

from typing import Sequence

from .autoregressive import autoregressive_generate
from .config import DecodeConfig
from .decoding import eos_ids
from .drafters import Drafter, LMDrafter
from .models import LoadedModel
from .record import GenerationRecord
from .speculative import speculative_generate

METHODS = ("ar", "speculative")

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


def drafter_for(draft: LoadedModel | Drafter | None, method: str) -> Drafter:
    if isinstance(draft, Drafter):
        return draft
    if draft is None:
        raise ValueError(f"method {method!r} needs a draft (--draft NAME)")
    return LMDrafter(draft.model)


def single_sequence(prompt_ids) -> list[int]:
    """Accept ids as a list, a [T] tensor or a [1, T] tensor; batch > 1 is a clear error (a later goal)."""
    if hasattr(prompt_ids, "tolist"):
        prompt_ids = prompt_ids.tolist()
    if prompt_ids and isinstance(prompt_ids[0], (list, tuple)):
        if len(prompt_ids) != 1:
            raise ValueError(f"batch size {len(prompt_ids)} is not supported yet: decoding runs one sequence at a time")
        prompt_ids = prompt_ids[0]
    return [int(t) for t in prompt_ids]


def generate_ids(target: LoadedModel, prompt_ids, config: DecodeConfig,
                 draft: LoadedModel | Drafter | None = None) -> GenerationRecord:
    """Run ``config.method`` on token ids (batch size 1); returns the record with decoded text."""
    prompt_ids = single_sequence(prompt_ids)
    eos = eos_ids(target.model, target.tokenizer)
    if config.method == "ar":
        rec = autoregressive_generate(target.model, prompt_ids, config, eos, target.context_length)
    elif config.method == "speculative":
        rec = speculative_generate(target.model, drafter_for(draft, config.method), prompt_ids, config, eos,
                                   context_length=target.context_length)
    else:
        raise ValueError(f"unknown method {config.method!r}; choose one of {', '.join(METHODS)}")
    if target.tokenizer is not None:
        rec.text = target.tokenizer.decode(rec.token_ids, skip_special_tokens=True)
    return rec


def generate(target: LoadedModel, prompt: str | Messages, config: DecodeConfig,
             draft: LoadedModel | Drafter | None = None, chat_template: bool = True) -> GenerationRecord:
    return generate_ids(target, encode_prompt(target, prompt, chat_template), config, draft)
