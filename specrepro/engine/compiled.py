"""A compiled forward (issue 23, item 4), for ``--compile``, bench's ``:compiled`` label and ``calibrate --compile``.

Since issue 38 a model on the engine (``specrepro.engine``, the default for the Llama family) is compiled there: its
bucketed graphs through inductor with freezing (``compile_forward`` re-attaches the engine compiled). What follows
describes the other case, the transformers forward of a model outside the family (or ``--engine transformers``):
the model's forward through ``torch.compile`` (inductor; C++ with gcc on the CPU), for every loop and method at
once, since they all call the model through ``CachedModel``.

Where a decode step's time goes on the 2-core AVX2 EPYC (fp32, torch profiler, 16 AR steps): the matrix products
are 72% of it and run near MKL's small-M rate; the package's own wrapper and loop add about 3% over a bare
transformers forward; the rest (about a quarter) is transformers' small ops between the matmuls: RMSNorm's pow, mean
and rsqrt, rotary's cat and neg, casts and views, each a separate kernel launched from Python. Inductor fuses them
into a few C++ loops. Measured on that machine in one process (one model, one prompt, 40 tokens, T = 0, fp32), eager
then compiled: AR 75.0 -> 58.5 ms/token, prompt lookup 94.2 -> 77.5, EAGLE 122.2 -> 115.0 (its own draft layer stays
eager), every output token-identical.

The price is the compilation: minutes the first time on two cores (one graph per input signature: the prefill,
the one-token step, a multi-token verify, a tree with its mask), kept in inductor's on-disk cache so that a later
process pays seconds. ``dynamic=True`` keeps the sequence length symbolic, so a growing cache does not recompile at
every step. It is opt-in (``--compile``), recorded in every record's provenance and in the device profile's key.

Exactness: the fused kernels may sum in another order than eager's, so compiled logits match eager ones to float
rounding, not bit for bit; the T = 0 identity and χ² tests of the methods run eagerly, and
``tests/test_compiled.py`` checks a compiled tiny model against its eager self.
"""
from __future__ import annotations

import torch

RECOMPILE_LIMIT = 32


def compile_forward(model: torch.nn.Module) -> torch.nn.Module:
    """Route ``model``'s forward through ``torch.compile`` (dynamic shapes), in place; returns the model. Compiling a
    compiled model again does nothing. A model on the engine (``specrepro.engine``) gets its engine compiled instead
    (its bucketed graphs, inductor with freezing): the caches never call the transformers forward then."""
    from . import attach
    from . import detach
    from . import engine_of
    engine = engine_of(model)
    if engine is not None:
        if not engine.compiled:
            detach(model)
            attach(model, compiled=True)
        return model
    if is_compiled(model):
        return model
    eager = model.forward
    # A cache cropped by ``kvcache.drop_last`` is a strided view until the next append copies it, and dynamo guards on
    # that layout: a speculative run meets up to a dozen signatures (prefill, step, verify sizes, tree masks, each
    # cropped or not) where torch's default limit of 8 falls back to eager for the rest. Process-wide, raised only.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    model.forward = torch.compile(eager, dynamic=True)
    model.specrepro_eager_forward = eager  # (``eager_forward`` undoes it)
    return model


def is_compiled(model: torch.nn.Module) -> bool:
    return getattr(model, "specrepro_eager_forward", None) is not None


def eager_forward(model: torch.nn.Module) -> torch.nn.Module:
    """Undo ``compile_forward``: the model's own forward again, in place."""
    if is_compiled(model):
        model.forward = model.specrepro_eager_forward
        model.specrepro_eager_forward = None
    return model
