"""The engine: everything that makes one forward fast (see README.md in this folder).

``attach(model)`` builds a Llama-family model's engine and hangs it on the model, where the caches
(``kvcache.CachedModel``, ``batch_cache.BatchCache``) find it with ``engine_of``; any other model keeps the
transformers path. ``ENGINES`` names the two choices of ``--engine``.
"""
from __future__ import annotations

import os

import torch

from . import kernel
from .llama import FAMILY, LlamaStack, unsupported
from .runner import BUCKETS, SLOT_BLOCK, Engine, EngineHead, Rebuild, StaticKV, bucket, compile_enabled, warm

# --engine: the static-cache engine (weights on a 4-bit grid, as a GGUF's Q4_1, held as 4-bit integers on a bf16 CPU),
# the same engine with every weight dense, or transformers' forward
ENGINES = ("specrepro", "specrepro-dense", "transformers")
ENV = "SPECREPRO_ENGINE"  # the process-wide choice (``--engine`` sets it; notebooks and subprocesses inherit it)
ATTR = "specrepro_engine"  # the attribute of a model that holds its engine

__all__ = ["BUCKETS", "ENGINES", "FAMILY", "SLOT_BLOCK", "Engine", "LlamaStack", "StaticKV", "attach", "bucket",
           "default_engine", "default_engine_label", "detach", "engine_name", "engine_of", "lm_head", "unsupported",
           "warm"]


def attach(model: torch.nn.Module, compiled: bool | None = None, four_bit: bool | None = None) -> Engine | None:
    """Build ``model``'s engine and hang it on the model (None, and nothing hung, for a model outside the family).
    A reduced-vocabulary draft (``draft_model.ReducedVocabDraft``) runs its inner Llama with its reduced head.
    ``four_bit`` None: unless ``$SPECREPRO_ENGINE`` is "specrepro-dense"."""
    if four_bit is None:
        four_bit = default_engine() != "specrepro-dense"
    if engine_of(model) is not None:
        return engine_of(model)
    inner = getattr(model, "reduced_engine_parts", None)
    if inner is not None:
        decoder, head, token_map, kept_ids, vocab = inner()
        engine = Engine.build(decoder, head_weight=head, compiled=compiled, four_bit=four_bit)
        if engine is not None:
            engine.token_map, engine.kept_ids, engine.out_vocab = token_map, kept_ids, vocab
    else:
        engine = Engine.build(model, compiled=compiled, four_bit=four_bit)
    if engine is not None:
        object.__setattr__(model, ATTR, engine)  # a plain attribute: not a submodule, not in the state dict
    return engine


def default_engine() -> str:
    """The engine ``load_model`` uses when not told: ``$SPECREPRO_ENGINE``, else "specrepro"."""
    engine = os.environ.get(ENV, "specrepro")
    if engine not in ENGINES:
        raise ValueError(f"{ENV}={engine!r} names no engine; choose one of {', '.join(ENGINES)}")
    return engine


def default_engine_label(compiled: bool = False) -> str:
    """The engine a run uses, as its records and device profiles name it ("specrepro:4bit", "specrepro",
    "specrepro:compiled" or "transformers"; "specrepro" is the dense engine, as before 4-bit weights; "+off" or
    "+torch-int4" where ``$SPECREPRO_KERNELS`` turns the engine's own kernels off)."""
    engine = default_engine()
    if engine != "transformers" and (compiled or compile_enabled()):
        return "specrepro:compiled"  # (compiled graphs read the dense weights)
    label = {"specrepro": "specrepro:4bit", "specrepro-dense": "specrepro"}.get(engine, engine)
    if engine != "transformers" and kernel.choice() != "on":  # ("+off": torch's ops instead of the engine's kernels)
        label += f"+{kernel.choice()}"
    return label


def detach(model: torch.nn.Module) -> None:
    if engine_of(model) is not None:
        object.__delattr__(model, ATTR)


def engine_of(model: torch.nn.Module) -> Engine | None:
    engine = model.__dict__.get(ATTR)
    if isinstance(engine, Engine):
        param = next(model.parameters())
        if (param.dtype, param.device) != (engine.dtype, engine.device):  # the model was moved or cast since
            engine = Rebuild(engine.compiled, engine.four_bit)
    if isinstance(engine, Rebuild):  # a deep copy of a model on the engine: its engine is built on first use
        object.__delattr__(model, ATTR)
        return attach(model, compiled=engine.compiled, four_bit=engine.four_bit)
    return engine


def lm_head(model: torch.nn.Module) -> torch.nn.Module:
    """The LM head a drafter reading the target's head should call: the engine's (``runner.EngineHead``) where
    ``model`` runs on one, else the model's own."""
    engine = engine_of(model)
    return model.get_output_embeddings() if engine is None or engine.kept_ids is not None else EngineHead(engine)


def engine_name(model: torch.nn.Module) -> str:
    """Which engine runs ``model``: the record's provenance says it."""
    engine = engine_of(model)
    return "transformers" if engine is None else engine.name
