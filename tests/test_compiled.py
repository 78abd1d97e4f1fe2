"""The compiled forward (specrepro.engine.compiled, issue 23 item 4): a tiny model's compiled forward gives its eager logits
to float rounding, through the package's cache wrapper (prefill, one-token steps, a multi-token verify), so the
AR tokens at T = 0 are the same; compiling twice is a no-op and eager_forward undoes it."""
from __future__ import annotations

import pytest
import torch

from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.engine.compiled import compile_forward, eager_forward, is_compiled
from specrepro.core.config import DecodeConfig
from specrepro.core.kvcache import CachedModel
from specrepro.engine.models import tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def test_compiled_forward_matches_eager():
    model = tiny_model(vocab_size=64, n_layers=2, hidden=32, engine="transformers")  # (the engine: test_engine.py)
    prompt, config = [1, 5, 9, 2, 7], DecodeConfig(method="ar", max_new_tokens=6)
    eager_tokens = autoregressive_generate(model, prompt, config).token_ids
    eager_rows = CachedModel(model).logits_for(prompt + eager_tokens[:3], n_last=3)  # [3, V]

    assert compile_forward(model) is model and is_compiled(model)
    forward = model.forward
    compile_forward(model)
    assert model.forward is forward  # compiling a compiled model does nothing
    assert autoregressive_generate(model, prompt, config).token_ids == eager_tokens
    cm = CachedModel(model)
    cm.logits_for(prompt)
    torch.testing.assert_close(cm.logits_for(prompt + eager_tokens[:3], n_last=3), eager_rows, rtol=1e-5, atol=1e-5)
    cm.check()

    eager_forward(model)
    assert not is_compiled(model) and model.forward.__func__ is type(model).forward
