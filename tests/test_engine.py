"""The engine (specrepro.engine) against transformers' reference forward, its family, compilation and recompiles."""
import pytest
import torch
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.config import DecodeConfig
from specrepro.engine import Engine, attach, detach, engine_of, unsupported, warm
from specrepro.core.kvcache import CachedModel
from specrepro.engine.models import tiny_model

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9]
SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512)


def family_member(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config, cls = {
        "llama3": (LlamaConfig(**SMALL, rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                          "original_max_position_embeddings": 64}), LlamaForCausalLM),
        "mistral": (MistralConfig(**SMALL, sliding_window=None), MistralForCausalLM),
        "qwen2": (Qwen2Config(**SMALL), Qwen2ForCausalLM),
        "qwen3": (Qwen3Config(**SMALL, head_dim=8), Qwen3ForCausalLM),
    }[name]
    return cls(config).eval().requires_grad_(False)


def reference_rows(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0]  # [T, V]


def engine_rows(model, ids: list[int], split: int) -> torch.Tensor:
    """The engine's logits for every position of ids: a prefill of ``split`` tokens, then one token at a time."""
    cm = CachedModel(model)
    rows = [cm.logits_for(ids[:split], n_last=split)]
    for t in range(split + 1, len(ids) + 1):
        rows.append(cm.logits_for(ids[:t]))
    cm.check()
    return torch.cat(rows)


@pytest.mark.parametrize("name", ["llama3", "mistral", "qwen2", "qwen3"])
def test_the_family_matches_transformers(name):
    model = family_member(name)
    reference = reference_rows(model, PROMPT)
    assert attach(model, compiled=False) is not None and unsupported(model) is None
    torch.testing.assert_close(engine_rows(model, PROMPT, 6), reference, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(reference_rows(model, PROMPT), reference, atol=0, rtol=0)  # its own path untouched


def test_a_model_outside_the_family_stays_on_transformers():
    model = family_member("mistral")
    model.config.sliding_window = 4  # a window shorter than the context: not what the engine computes
    assert "sliding window" in unsupported(model)
    assert attach(model) is None and engine_of(model) is None and CachedModel(model).backend == "transformers"


def test_engine_and_transformers_paths_agree_on_a_tree_and_detach():
    model = tiny_model(vocab_size=64, seed=5)
    assert CachedModel(model).backend.startswith("specrepro engine")
    tokens, parents = torch.tensor([7, 8, 9, 10]), torch.tensor([-1, 0, 0, 2])
    ours = CachedModel(model).logits_for_tree(PROMPT, tokens, parents, output_hidden=True)
    detach(model)
    theirs = CachedModel(model).logits_for_tree(PROMPT, tokens, parents, output_hidden=True)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_the_offline_model_matches_transformers_in_fp32_and_rounds_like_it_in_bf16():
    from specrepro.engine.models import load_model
    ids = list(range(100, 160))
    exact = load_model("smollm2-135m-instruct", dtype="fp32", device="cpu", engine="transformers").model
    reference = reference_rows(exact, ids).float()
    ours = load_model("smollm2-135m-instruct", dtype="fp32", device="cpu").model
    assert engine_of(ours) is not None
    assert (engine_rows(ours, ids, 40).float() - reference).abs().max() <= 1e-4
    # bf16: the engine's distance to the fp32 logits is transformers' own bf16 distance, up to rounding
    theirs16 = load_model("smollm2-135m-instruct", dtype="bf16", device="cpu", engine="transformers").model
    ours16 = load_model("smollm2-135m-instruct", dtype="bf16", device="cpu").model
    err_theirs = (reference_rows(theirs16, ids).float() - reference).abs().mean()
    err_ours = (engine_rows(ours16, ids, 40).float() - reference).abs().mean()
    assert err_ours <= 1.5 * err_theirs, (err_ours, err_theirs)
    if torch.backends.mkldnn.is_available():  # its Q4_1 weights are held as the GGUF's 4-bit integers
        assert engine_of(ours16).stack.four_bit_share == 1


def test_compiled_engine_matches_eager_and_compiles_nothing_after_warm_up():
    torch._dynamo.reset()
    model = tiny_model(vocab_size=64, seed=6)
    eager = autoregressive_generate(model, PROMPT, DecodeConfig(method="ar", max_new_tokens=6))
    compiled = tiny_model(vocab_size=64, seed=6, engine="transformers")
    engine = attach(compiled, compiled=True)
    warm(engine, columns=(1, 16), slots=(256,))
    frames = dict(torch._dynamo.utils.counters["stats"])
    warmed = engine.compiles
    out = autoregressive_generate(compiled, PROMPT, DecodeConfig(method="ar", max_new_tokens=6))
    assert out.token_ids == eager.token_ids
    assert engine.compiles == warmed == 4, engine.seen  # the stack and the head at Q = 1 and 16
    assert dict(torch._dynamo.utils.counters["stats"]) == frames  # no new frame compiled after warm-up


def test_deep_copies_and_casts_get_engines_of_their_own():
    import copy
    model = tiny_model(vocab_size=64, seed=7)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.lm_head.weight.add_(1.0)
    assert engine_of(twin) is not engine_of(model)
    torch.testing.assert_close(engine_rows(twin, PROMPT, 4), reference_rows(twin, PROMPT), atol=1e-4, rtol=1e-4)
    model.to(torch.float64)
    assert engine_of(model).dtype == torch.float64 and isinstance(engine_of(model), Engine)


def test_prepacked_weights_follow_in_place_updates_of_the_model():
    """An online draft's optimizer updates the model's own Parameters in place: the engine's prepacked bf16 weights
    (stack and LM head) must follow, as a freshly built engine would."""
    model = tiny_model(vocab_size=64, seed=8, dtype=torch.bfloat16)
    engine_rows(model, PROMPT, 4)  # packed now (where oneDNN is available)
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight.mul_(1.5)
        model.model.layers[1].mlp.down_proj.weight.add_(0.01)
        model.lm_head.weight.mul_(0.5)
    updated = engine_rows(model, PROMPT, 4)
    fresh = tiny_model(vocab_size=64, seed=8, dtype=torch.bfloat16, engine="transformers")
    with torch.no_grad():
        fresh.model.layers[0].self_attn.q_proj.weight.mul_(1.5)
        fresh.model.layers[1].mlp.down_proj.weight.add_(0.01)
        fresh.lm_head.weight.mul_(0.5)
    attach(fresh, compiled=False)
    torch.testing.assert_close(updated, engine_rows(fresh, PROMPT, 4), atol=0, rtol=0)


def snapped_to_4bit(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every projection weight moved onto a 4-bit grid per 32 inputs, as a GGUF's Q4_1 weights lie."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "proj" in name:
                n, k = p.shape
                blocks = p.float().view(n, k // 32, 32)
                low = blocks.amin(-1, keepdim=True)
                step = (blocks.amax(-1, keepdim=True) - low) / 15
                p.copy_((low + step * ((blocks - low) / step).round()).view(n, k))
    return model


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="the 4-bit kernel is torch's CPU one")
def test_weights_on_a_4bit_grid_are_held_as_4bit_integers_and_others_stay_dense():
    from specrepro.engine.llama import q4_pack
    torch.manual_seed(0)
    dense = torch.randn(64, 64).bfloat16()
    assert q4_pack(dense) is None  # off the grid by up to a 30th of a block's range
    assert q4_pack(dense.float()) is None  # fp32: the int4 kernel is for bf16 activations
    grid = snapped_to_4bit(torch.nn.ModuleDict({"proj": torch.nn.Linear(64, 64, bias=False)})).proj.weight
    grid = grid.detach().bfloat16()
    packed = q4_pack(grid)
    assert packed is not None
    x = torch.randn(3, 5, 64).bfloat16()
    torch.testing.assert_close(packed.linear(x).float(), torch.nn.functional.linear(x, grid).float(),
                               atol=0.05, rtol=2 ** -6)  # bf16 rounding of the scales and the outputs
    rows = x.view(15, 64)  # a row's output is the same bit for bit whatever the rows beside it (1 to 8 of them)
    one_by_one = torch.cat([packed.linear(rows[i:i + 1]) for i in range(15)])
    for m in range(1, 9):
        assert torch.equal(packed.linear(rows[:m]), one_by_one[:m]), m

    # a model on the grid runs 4-bit, close to its dense engine; an update off the grid repacks it dense
    model = attach_fresh(snapped_to_4bit(tiny_model(vocab_size=64, seed=3, dtype=torch.bfloat16,
                                                   engine="transformers")))
    assert engine_of(model).stack.four_bit_share == 1 and "4-bit weights" in engine_of(model).name
    dense_engine = attach_fresh(snapped_to_4bit(tiny_model(vocab_size=64, seed=3, dtype=torch.bfloat16,
                                                          engine="transformers")), four_bit=False)
    assert engine_of(dense_engine).stack.four_bit_share == 0
    torch.testing.assert_close(engine_rows(model, PROMPT, 4).float(), engine_rows(dense_engine, PROMPT, 4).float(),
                               atol=0.1, rtol=0.02)
    fresh = snapped_to_4bit(tiny_model(vocab_size=64, seed=3, dtype=torch.bfloat16, engine="transformers"))
    with torch.no_grad():
        for m in (model, fresh):
            m.model.layers[0].self_attn.q_proj.weight.add_(0.001 * torch.arange(32.0).bfloat16())
    attach_fresh(fresh)
    torch.testing.assert_close(engine_rows(model, PROMPT, 4), engine_rows(fresh, PROMPT, 4), atol=0, rtol=0)
    assert engine_of(model).stack.four_bit_share == engine_of(fresh).stack.four_bit_share == 7 / 8


def test_the_lm_head_is_8bit_on_a_q8_0_grid_and_dense_otherwise():
    """The engine prepacks its stack and its head with one call: a head off a Q8_0 grid (here a 4-bit one) gives
    F.linear's bits; on one (the offline GGUF's head), it is held as 8-bit integers where the engine's kernel runs."""
    from specrepro.engine import kernel
    from specrepro.engine.llama import Q4, Q8
    from specrepro.engine.runner import _Head
    grid = snapped_to_4bit(torch.nn.ModuleDict({"proj": torch.nn.Linear(64, 64, bias=False)})).proj.weight
    head = _Head(grid.detach().bfloat16())
    assert head.prepack(True) and not isinstance(head.packed, (Q4, Q8))
    x = torch.randn(2, 3, 64).bfloat16()
    assert torch.equal(head(x), torch.nn.functional.linear(x, head.weight))
    assert not _Head(grid.detach()).prepack(True)  # fp32: nothing to prepack
    if kernel.why_not() is None:
        q8 = _Head((torch.randint(-127, 128, (64, 64)) * 1e-3).bfloat16())
        q8.weight.data[:, ::32] = 0.127  # (each block's largest |q| is 127)
        assert q8.prepack(True) and isinstance(q8.packed, Q8)
        torch.testing.assert_close(q8(x), torch.nn.functional.linear(x, q8.weight).float(), atol=2e-2, rtol=2 ** -7)
        assert q8.prepack(False) and not isinstance(q8.packed, Q8)  # the dense engine's head stays dense


def attach_fresh(model: torch.nn.Module, four_bit: bool = True) -> torch.nn.Module:
    attach(model, compiled=False, four_bit=four_bit)
    return model


def test_linear_reuses_a_packed_weight_bit_for_bit_and_leaves_autograd_alone():
    """``engine.llama.linear``: bf16 on the CPU, the product of the weight packed once equals ``F.linear`` bit for
    bit, and a weight changed in place is packed again; where autograd needs the product it is ``F.linear``'s."""
    from specrepro.engine.llama import linear, prepackable
    torch.manual_seed(0)
    weight, bias = torch.randn(48, 32, dtype=torch.bfloat16), torch.randn(48, dtype=torch.bfloat16)
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    with torch.inference_mode():
        assert torch.equal(linear(x, weight, bias), torch.nn.functional.linear(x, weight, bias))
        weight.mul_(2)
        assert torch.equal(linear(x, weight), torch.nn.functional.linear(x, weight))
    w = torch.nn.Parameter(torch.randn(8, 32, dtype=torch.bfloat16))
    linear(x, w).sum().backward()
    assert w.grad is not None and w.grad.shape == w.shape
    assert linear(x.float(), weight.float()).dtype == torch.float32  # fp32: F.linear itself
    assert prepackable(weight) and not prepackable(weight.float())


def test_lm_head_is_the_engines_where_the_model_runs_on_one():
    """``engine.lm_head``: the head Medusa and PPD read, the engine's (same logits in fp32) where the model has one,
    else the model's own module."""
    from specrepro.engine import lm_head
    from specrepro.engine.runner import EngineHead
    model = tiny_model(vocab_size=64, seed=7)
    x = torch.randn(3, 2, 32)
    assert lm_head(tiny_model(vocab_size=64, seed=7, engine="transformers")).__class__ is torch.nn.Linear
    head = lm_head(model)
    assert isinstance(head, EngineHead) and head.weight.dtype == torch.float32
    torch.testing.assert_close(head(x), model.get_output_embeddings()(x))
    assert head(x[0, 0]).shape == (64,)


def test_the_exact_dtype_is_bf16_only_on_a_cpu_where_the_engines_kernels_run(monkeypatch):
    """``exact_dtype``: the dtype in which the notebooks' lossless methods write AR's tokens at T = 0."""
    from specrepro.engine import kernel, models
    monkeypatch.setattr(kernel, "why_not", lambda: None)
    assert models.exact_dtype("cpu") == "bf16"
    assert models.exact_dtype("cuda") == "fp32"  # a GPU's bf16 rounds a multi-token forward unlike a one-token one
    monkeypatch.setattr(kernel, "why_not", lambda: "this CPU lacks avx512_bf16")
    assert models.exact_dtype("cpu") == "fp32"
