"""transformers ``model.generate`` baselines, run on the same model, prompt ids and settings as ours.

- ``hf-ar``             ``generate(do_sample=T > 0, ...)``: plain decoding;
- ``hf-assisted``       ``generate(assistant_model=draft, ...)`` with a constant γ drafts per step;
- ``hf-prompt-lookup``  ``generate(prompt_lookup_num_tokens=γ)``.

They are registered in ``methods.REGISTRY`` (loop "transformers") with the method of ours each must reproduce
token for token at T = 0 (``Method.counterpart``).

What transformers 5.23 needs (``generation/utils.py``, ``generation/candidate_generator.py``):

- The assisted candidate generator reads ``num_assistant_tokens``, ``num_assistant_tokens_schedule`` and
  ``assistant_confidence_threshold`` from the *assistant's* ``generation_config``, not from
  ``generate``'s arguments. Its defaults (a confidence threshold of 0.4 that stops drafting early) would
  make γ vary, so the assistant gets a copy of its generation config with γ, "constant" and threshold 0
  for the duration of the call (a ``layers:K`` self-draft shares the target's config object, hence the
  copy).
- Values ``generate`` is not given are filled from the model's own ``generation_config``, so every
  sampling knob is passed explicitly: ``top_k=0`` disables top-k, ``top_p=1.0`` disables nucleus.
- Batch size 1 only (assisted decoding refuses more), as our loops.
- A reduced-vocabulary draft (``draft_model.ReducedVocabDraft``) is not a transformers model; it runs as an
  assistant through ``ReducedVocabAssistant``, a ``LlamaPreTrainedModel`` over the same module whose config
  says V (the width of the draft's logits) where the inner Llama config counts the N kept ids + 1:
  ``generate`` refuses an assistant whose ``config.vocab_size`` differs from the target's (it takes that to
  mean another tokenizer). The forward pass is the draft's own, so both loops run the same draft.

Randomness comes from torch's global generator, seeded with the run's seed before each call: at T > 0 the
samples are exact draws from p but not the same draws as ours. Target and draft forward passes are counted
with forward pre-hooks (a ``layers:K`` draft shares the target's hook table, so each hook checks which
module it was called for); α is not observable from outside, so records say None.
"""
from __future__ import annotations

import contextlib
import copy
from typing import Iterator

import torch
from transformers import GenerationMixin, LlamaPreTrainedModel

from ..core.config import DecodeConfig
from ..core.decoding import Clock, check_prompt, model_device
from ..engine.draft_model import ReducedVocabDraft
from ..methods import HF_METHODS, Cost, Loop, Method
from ..methods import method as get_method
from ..engine.models import LoadedModel
from ..core.record import GenerationRecord



class ReducedVocabAssistant(LlamaPreTrainedModel, GenerationMixin):
    """A reduced-vocabulary draft as transformers' assisted generation needs an assistant model to be.

    ``generate`` wants a ``PreTrainedModel`` with a ``generation_config`` and a ``config.vocab_size`` equal
    to the target's; the forward pass is the wrapped draft's own (logits [B, T, V], −inf outside the kept
    ids, so q is the same q as in our loop). No weights are copied.
    """

    def __init__(self, draft: ReducedVocabDraft):
        config = copy.deepcopy(draft.config)
        config.vocab_size = draft.output_vocab_size
        super().__init__(config)
        self.draft = draft

    def forward(self, input_ids: torch.Tensor, cache=None, use_cache: bool | None = None,
                attention_mask: torch.Tensor | None = None, **_):
        # position_ids and cache_position are not needed at batch size 1 without padding: the Llama
        # layers count positions from the cache length, as in our loop.
        # generate hands the draft's KV cache over as ``cache`` (a ``past_key_values`` parameter would leave it in
        # ``**_`` and run every draft step on its newest token alone).
        return self.draft(input_ids=input_ids, cache=cache, use_cache=use_cache,
                          attention_mask=attention_mask)


def assisted_unsupported(draft: torch.nn.Module) -> str | None:
    """Why transformers cannot use ``draft`` as an assistant model, or None if it can.

    Assisted generation calls the assistant's own ``generate`` and reads its ``generation_config``: a draft
    that is a plain ``torch.nn.Module`` shaped for our loop has neither (a reduced-vocabulary draft is
    wrapped, see ``as_assistant``).
    """
    if isinstance(draft, ReducedVocabDraft):
        return None
    if not isinstance(draft, GenerationMixin) or getattr(draft, "generation_config", None) is None:
        return (f"the draft is a {type(draft).__name__}, not a transformers generation model, so "
                f"model.generate(assistant_model=...) cannot run it")
    return None


def as_assistant(draft: torch.nn.Module) -> torch.nn.Module:
    """The module to hand to ``generate(assistant_model=...)`` for ``draft``."""
    if reason := assisted_unsupported(draft):
        raise ValueError(f"hf-assisted: {reason}")
    return ReducedVocabAssistant(draft).eval() if isinstance(draft, ReducedVocabDraft) else draft


@contextlib.contextmanager
def _count_calls(module: torch.nn.Module, counter: list[int]) -> Iterator[None]:
    def hook(mod, args, kwargs):
        if mod is module:
            counter[0] += 1
    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


@contextlib.contextmanager
def _assistant_settings(assistant: torch.nn.Module, gamma: int) -> Iterator[None]:
    """Give the assistant a generation config with exactly γ drafts per step, restored afterwards."""
    saved = assistant.generation_config
    config = copy.deepcopy(saved)
    config.num_assistant_tokens = gamma
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0  # 0 disables the early stop on low draft confidence
    assistant.generation_config = config
    try:
        yield
    finally:
        assistant.generation_config = saved


def hf_generate(method: str | Method, target: LoadedModel, prompt_ids: list[int], config: DecodeConfig,
                eos: set[int], draft: LoadedModel | None = None) -> GenerationRecord:
    """Run one transformers baseline; the record has the same fields as ours where they make sense. Which of
    transformers' decoders runs follows from the baseline's cost: a draft model is assisted generation, a model-free
    draft is prompt lookup, plain is ``generate`` itself."""
    spec = get_method(method)
    if spec.loop is not Loop.TRANSFORMERS:
        raise ValueError(f"{spec.name!r} is not a transformers baseline; choose one of {', '.join(HF_METHODS)}")
    assisted = spec.cost is Cost.DRAFT_MODEL
    if assisted and draft is None:
        raise ValueError(f"{spec.name} needs a draft model (--draft NAME)")
    assistant = as_assistant(draft.model) if assisted else None
    check_prompt(prompt_ids, config, target.context_length)
    model, s = target.model, config.sampling
    device = model_device(model)
    eos_list = sorted(eos) if config.stop_at_eos and eos else None
    kwargs = dict(max_new_tokens=config.max_new_tokens, min_new_tokens=0, do_sample=not s.greedy,
                  repetition_penalty=1.0, num_beams=1, eos_token_id=eos_list,
                  pad_token_id=eos_list[0] if eos_list else 0)
    if not s.greedy:  # the warpers run in our order (temperature, top-k, top-p); 0 / 1.0 disable the last two
        kwargs.update(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)
    settings: contextlib.AbstractContextManager = contextlib.nullcontext()
    if assisted:
        kwargs.update(assistant_model=assistant, num_assistant_tokens=config.gamma,
                      num_assistant_tokens_schedule="constant")
        settings = _assistant_settings(assistant, config.gamma)
    elif spec.cost is Cost.MODEL_FREE:
        kwargs.update(prompt_lookup_num_tokens=config.gamma)

    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)  # [1, T]
    attention_mask = torch.ones_like(input_ids)
    target_calls, draft_calls = [0], [0]
    clock = Clock(device)
    torch.manual_seed(config.seed)
    with settings, _count_calls(model, target_calls), contextlib.ExitStack() as stack:
        if assisted:
            stack.enter_context(_count_calls(draft.model, draft_calls))
        start = clock.now()
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)  # [1, T + n]
        wall = clock.now() - start
    tokens = out[0, len(prompt_ids):].tolist()
    stop = "eos" if eos_list and tokens and tokens[-1] in eos else "max_new_tokens"
    rec = GenerationRecord(method=spec.name, token_ids=tokens, prompt_tokens=len(prompt_ids), wall_time_s=wall,
                           target_calls=target_calls[0], draft_calls=draft_calls[0], time_other_s=wall,
                           stop_reason=stop, config=config.to_dict())
    if target.tokenizer is not None:
        rec.text = target.tokenizer.decode(tokens, skip_special_tokens=True)
    return rec
