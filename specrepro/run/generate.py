"""Text in, record out: tokenise (with the chat template), dispatch to a method, decode."""
from __future__ import annotations

from ..decode.adaptive import GammaPolicy
from ..decode.autoregressive import autoregressive_generate
from ..decode.batched import batched_autoregressive, batched_generate
from ..core.config import DecodeConfig
from ..core.decoding import eos_ids
from ..drafters import Drafter, NGramTable
from ..methods import Loop, Method, method
from ..decode.mjgd import mjgd_generate
from ..engine.models import LoadedModel
from ..core.prompts import Messages, encode_prompt
from ..core.record import GenerationRecord
from ..decode.speculative import speculative_generate


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
    spec: Method = method(config.method)
    config = spec.resolve(config)
    if spec.loop is Loop.AR:
        rec = autoregressive_generate(target.model, prompt_ids, config, eos, target.context_length)
    elif spec.loop is Loop.MJGD:
        if not isinstance(config.gamma, int):
            raise ValueError(f"MJGD commits K = gamma tokens per step: give an integer gamma, not {config.gamma!r}")
        rec = mjgd_generate(target.model, prompt_ids, config, eos, target.context_length, k=config.gamma,
                            num_beams=config.params.num_beams)
    elif spec.loop is Loop.SPECULATIVE:
        rec = speculative_generate(target.model, spec.build_drafter(draft, target, config), prompt_ids, config, eos,
                                   rule=spec.verification_rule(config), context_length=target.context_length,
                                   method=spec.name, gamma_policy=gamma_policy)
    else:
        raise ValueError(f"{spec.name!r} is {spec.loop.value}'s own decoder, a baseline that runs in bench")
    return described(rec, target, spec, provenance)


def described(rec: GenerationRecord, target: LoadedModel, spec: Method, provenance: dict | None) -> GenerationRecord:
    """The record with what ran it (dtype, device, method, the caller's provenance) and its decoded text."""
    rec.provenance = {"dtype": str(next(target.model.parameters()).dtype).replace("torch.", ""),
                      "device": str(next(target.model.parameters()).device),
                      "method": {"name": spec.name, **spec.describe()},
                      **(provenance or {}), **rec.provenance}
    if target.tokenizer is not None:
        rec.text = target.tokenizer.decode(rec.token_ids, skip_special_tokens=True)
    return rec


def generate_batch(target: LoadedModel, prompts: list[list[int]], config: DecodeConfig,
                   draft: LoadedModel | NGramTable | str | None = None, seeds: list[int] | None = None,
                   provenance: dict | None = None) -> list[GenerationRecord]:
    """Run ``config.method`` on B prompts at once (``specrepro.decode.batched``): one record per prompt, in order, each the
    record the batch-1 run of that prompt and seed would give (its tokens; its times are the batch's). Methods that
    cannot batch (MJGD, and every drafter ``batched`` does not run) and γ auto stop with one clear error."""
    spec: Method = method(config.method)
    spec.check_batch(len(prompts) if isinstance(prompts, (list, tuple)) and len(prompts) > 1 else 2, config.gamma)
    eos = eos_ids(target.model, target.tokenizer)
    config = spec.resolve(config)
    if spec.loop is Loop.AR:
        records = batched_autoregressive(target.model, prompts, config, eos, seeds, target.context_length)
    else:
        records = batched_generate(target.model, lambda b: spec.build_drafter(draft, target, config), prompts,
                                   config, eos, rule=spec.verification_rule(config), seeds=seeds,
                                   context_length=target.context_length, method=spec.name)
    return [described(rec, target, spec, provenance) for rec in records]


def generate(target: LoadedModel, prompt: str | Messages, config: DecodeConfig,
             draft: LoadedModel | Drafter | NGramTable | str | None = None, chat_template: bool = True,
             gamma_policy: GammaPolicy | None = None, provenance: dict | None = None) -> GenerationRecord:
    return generate_ids(target, encode_prompt(target, prompt, chat_template), config, draft, gamma_policy, provenance)
