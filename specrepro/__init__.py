"""specrepro: exact speculative decoding methods, their analysis, and the figures of the founding documents.

Notation: p = target model, q = draft model, γ = draft tokens per step, α = acceptance rate,
c = draft/target cost ratio, β = cost of verifying γ+1 tokens relative to decoding one.

The names below load with their modules on first use (PEP 562), so that ``python -m specrepro`` starts without
torch and a Ctrl-C while it loads is one line, not a traceback (``specrepro.core.cli``).
"""
from importlib import import_module

_WHERE = {
    "greedy_match": "acceptance", "speculative_sampling": "acceptance",
    "DecodeConfig": "core.config", "SamplingConfig": "core.config",
    "encode_prompt": "run.generate", "generate": "run.generate", "generate_ids": "run.generate",
    "LoadedModel": "engine.models", "check_pair": "engine.models", "load_draft": "engine.models",
    "load_model": "engine.models",
    "GenerationRecord": "core.record",
}
__all__ = [
    "DecodeConfig", "SamplingConfig", "GenerationRecord", "LoadedModel",
    "load_model", "load_draft", "check_pair", "generate", "generate_ids", "encode_prompt",
    "speculative_sampling", "greedy_match",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
