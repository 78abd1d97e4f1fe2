"""specrepro: exact speculative decoding methods, their analysis, and the figures of the founding documents.

Notation: p = target model, q = draft model, γ = draft tokens per step, α = acceptance rate,
c = draft/target cost ratio, β = cost of verifying γ+1 tokens relative to decoding one.
"""
from .acceptance import greedy_match, speculative_sampling
from .config import DecodeConfig, SamplingConfig
from .generate import encode_prompt, generate, generate_ids
from .models import LoadedModel, check_pair, load_draft, load_model
from .record import GenerationRecord

__all__ = [
    "DecodeConfig", "SamplingConfig", "GenerationRecord", "LoadedModel",
    "load_model", "load_draft", "check_pair", "generate", "generate_ids", "encode_prompt",
    "speculative_sampling", "greedy_match",
]
__version__ = "0.1.0"
