"""The engine's own CPU kernels (specrepro/engine/kernels.cpp) against torch's ops: the 4-bit and 8-bit GEMMs, RMSNorm
and attention; a row's output whatever the rows beside it; the engine with them against the engine without."""
import pytest
import torch
import torch.nn.functional as F

from specrepro.engine import kernel
from specrepro.engine.llama import Q4, Q8, _scores_mask, attention, q4_pack, q8_pack

ops = pytest.mark.skipif(kernel.rms_norm() is None, reason=f"the kernels did not build: {kernel._state.get('why')}")
gemms = pytest.mark.skipif(kernel.why_not() is not None, reason=f"no 4/8-bit kernel: {kernel.why_not()}")


def on_q4_grid(n: int, k: int, seed: int = 0) -> torch.Tensor:
    """A bf16 weight [n, k] whose every block of 32 inputs is min + q·(max - min)/15 (a GGUF Q4_1 weight)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (n, k // 32, 32), generator=g)
    q[..., 0], q[..., 1] = 0, 15
    step = torch.rand(n, k // 32, 1, generator=g) * 0.01 + 1e-3
    low = -torch.rand(n, k // 32, 1, generator=g) * 0.08
    return (low + step * q).view(n, k).bfloat16()


def on_q8_grid(n: int, k: int, seed: int = 0) -> torch.Tensor:
    """A bf16 weight [n, k] whose every block of 32 inputs is d·q, q in -127..127 with 127 reached (GGUF Q8_0)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-127, 128, (n, k // 32, 32), generator=g)
    q[..., 0] = 127
    d = torch.rand(n, k // 32, 1, generator=g) * 1e-3 + 1e-4
    return (d * q).view(n, k).bfloat16()


def within_rounding(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> bool:
    """y is x (rounded to bf16) times the grid that the bf16 weight w rounds: each weight within bf16's rounding
    (2^-8, relative) of the grid's, the grid's scales in fp16 (2^-11), the sums in fp32."""
    xb = x.bfloat16().float()
    bound = 2 ** -7 * (xb.abs() @ w.float().abs().T) + 1e-5
    return bool(((y - xb @ w.float().T).abs() <= bound).all())


@gemms
@pytest.mark.parametrize("n,k", [(96, 64), (64, 160)])
def test_the_4bit_kernel_computes_the_weight_it_packs_for_any_number_of_rows(n, k):
    w = on_q4_grid(n, k)
    packed = q4_pack(w)
    assert isinstance(packed, Q4) and packed.kernel == "specrepro"
    x = torch.randn(19, k)
    y = packed.linear(x)
    assert y.dtype == torch.float32
    assert within_rounding(y, x, w)
    torch.testing.assert_close(packed.linear(x.bfloat16()), y, atol=0, rtol=0)  # bf16 in: the same rounding
    one_by_one = torch.cat([packed.linear(x[i:i + 1]) for i in range(19)])  # passes of 8 rows, tiles in pairs
    for m in (1, 2, 3, 5, 8, 9, 16, 19):
        assert torch.equal(packed.linear(x[:m]), one_by_one[:m]), m
    assert torch.equal(packed.linear(x.view(1, 19, k)), y.view(1, 19, n))  # any leading dimensions


@gemms
def test_a_prompts_rows_in_bulk_are_within_rounding_and_alike_whatever_rows_beside_them():
    """The bulk path (a prefill's rows: AMX's tiles where the CPU has them) computes the packed weight within bf16's
    rounding; a row's result is the same bit for bit in any number of bulk rows and beside ordinary rows in one call
    (which keep the ordinary path's bits); without AMX a bulk row is an ordinary one."""
    w = on_q4_grid(96, 64, seed=2)
    packed = q4_pack(w)
    x = torch.randn(40, 64)
    def marks(*shape, value=True):
        return torch.full(shape, value, dtype=torch.bool)

    every, ordinary = packed.linear(x, bulk=marks(40)), packed.linear(x)
    assert within_rounding(every, x, w)
    for m in (1, 5, 16, 17, 33):
        assert torch.equal(packed.linear(x[:m], bulk=marks(m)), every[:m]), m
    marked = marks(2, 20, value=False)
    marked[0, :13] = marked[1, :7] = True  # two rows of a batch: each one's prompt columns first
    mixed = packed.linear(x.view(2, 20, 64), bulk=marked).view(40, 96)
    flat = marked.view(-1)
    assert torch.equal(mixed[flat], every[flat]) and torch.equal(mixed[~flat], ordinary[~flat])
    assert torch.equal(packed.linear(x, bulk=marks(40, value=False)), ordinary)  # no row marked: the ordinary path
    with pytest.raises(RuntimeError, match="one per row"):
        packed.linear(x, bulk=marks(39))
    if not kernel.bulk_tiles():
        assert torch.equal(every, ordinary)


@gemms
def test_the_4bit_kernel_agrees_with_torchs_and_either_can_be_chosen(monkeypatch):
    w = on_q4_grid(64, 96, seed=1)
    ours = q4_pack(w)
    monkeypatch.setenv(kernel.ENV, "torch-int4")
    theirs = q4_pack(w)
    assert theirs.kernel == "torch" and kernel.why_not() == "SPECREPRO_KERNELS=torch-int4"
    x = torch.randn(6, 96)
    torch.testing.assert_close(ours.linear(x), theirs.linear(x).float(), atol=0.05, rtol=2 ** -6)  # torch's: bf16
    monkeypatch.setenv(kernel.ENV, "fast")
    with pytest.raises(ValueError, match="SPECREPRO_KERNELS='fast'"):
        kernel.why_not()


@gemms
def test_the_8bit_kernel_holds_a_q8_0_head_and_leaves_other_weights_dense():
    w = on_q8_grid(80, 96)
    packed = q8_pack(w)
    assert isinstance(packed, Q8)
    x = torch.randn(11, 96)
    assert within_rounding(packed.linear(x), x, w)
    one_by_one = torch.cat([packed.linear(x[i:i + 1]) for i in range(11)])
    for m in (1, 4, 8, 9, 11):
        assert torch.equal(packed.linear(x[:m]), one_by_one[:m]), m
    assert q8_pack(torch.randn(80, 96).bfloat16()) is None  # off the grid
    assert q8_pack(on_q4_grid(64, 96)) is None  # a 4-bit block's grid is not symmetric about zero
    assert q8_pack(w.float()) is None  # fp32: the engine's weights stay as they are


@ops
@pytest.mark.parametrize("shape", [(1, 1, 576), (2, 5, 40)])
def test_rms_norm_is_torchs(shape):
    x, w = torch.randn(shape), torch.rand(shape[-1]) + 0.5
    torch.testing.assert_close(kernel.rms_norm()(x, w, 1e-5), F.rms_norm(x, shape[-1:], w, 1e-5), atol=1e-6,
                               rtol=1e-6)


@ops
@pytest.mark.parametrize("d", [64, 16])  # 64: the AVX-512 path where there is one; 16: the generic loop
def test_attention_is_torchs_with_a_tree_and_a_ragged_batch(d):
    torch.manual_seed(0)
    b, h_q, h_kv, q_len, capacity, slots = 2, 6, 2, 3, 40, 21
    q = torch.randn(b, h_q, q_len, d)
    k, v = torch.randn(b, h_kv, capacity, d), torch.randn(b, h_kv, capacity, d)
    mask = torch.zeros(b, 1, q_len, slots)
    mask[0, 0, 1, 18] = mask[0, 0, 2, 5:19] = float("-inf")  # a tree's sibling, a batch row's hole
    mask[1, 0, :, 12:] = float("-inf")  # a shorter row
    ours = kernel.attention()(q, k, v, slots, mask, d ** -0.5)
    theirs = attention(q, k[:, :, :slots], v[:, :, :slots], _scores_mask(mask, h_kv, h_q // h_kv))
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match=r"mask: \[B, 1, Q, S\]"):
        kernel.attention()(q, k, v, slots + 1, mask, d ** -0.5)


@gemms
@pytest.mark.slow
def test_the_offline_model_on_the_kernels_is_the_engine_on_torchs_ops(monkeypatch):
    """The engine with its kernels (4-bit and 8-bit weights, one-op norm and attention) against the same engine on
    torch's ops, bf16, the offline model: the same model within bf16's rounding, and the run names the kernel."""
    from specrepro.engine import engine_of
    from specrepro.engine.models import load_model
    ids = [1, 504, 3458, 314, 253, 1345, 30, 2, 198, 504, 3458, 314, 253]
    rows = {}
    for choice in ("on", "off"):
        monkeypatch.setenv(kernel.ENV, choice)
        model = load_model("smollm2-135m-instruct", dtype="bfloat16").model
        name = engine_of(model).name
        assert ("specrepro's kernel" in name) == (choice == "on"), name
        with torch.inference_mode():
            rows[choice] = engine_rows_of(model, ids)
    fp32 = load_model("smollm2-135m-instruct", dtype="float32").model
    with torch.inference_mode():
        exact = engine_rows_of(fp32, ids)
    ours, theirs = (rows[c].float() - exact for c in ("on", "off"))
    assert ours.abs().mean() <= 1.1 * theirs.abs().mean(), (ours.abs().mean(), theirs.abs().mean())
    assert (rows["on"].argmax(-1) == exact.argmax(-1)).float().mean() >= 0.9


def engine_rows_of(model, ids: list[int]) -> torch.Tensor:
    from specrepro.core.kvcache import CachedModel
    cm = CachedModel(model)
    rows = [cm.logits_for(ids[:8], n_last=8)]
    for t in range(9, len(ids) + 1):
        rows.append(cm.logits_for(ids[:t]))
    return torch.cat(rows)


@gemms
@pytest.mark.slow
def test_a_ragged_batch_prefilled_row_by_row_is_the_batched_forward_bit_for_bit(monkeypatch):
    """The offline model on the kernels, bf16: prompts of 12 to 150 tokens prefilled together one row at a time
    give the logits of one forward over the padded batch, and of each row alone, exactly."""
    from specrepro.core import batch_cache
    from specrepro.engine.models import load_model
    model = load_model("smollm2-135m-instruct", dtype="bfloat16").model
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(100, 40000, (n,), generator=g).tolist() for n in (12, 150, 40)]
    last = {}
    for share in (0.75, 0.0):  # the default (row by row here); 0: one forward
        monkeypatch.setattr(batch_cache, "ROW_BY_ROW_SHARE", share)
        last[share] = batch_cache.BatchCache(model, 3).score(ids)[0][:, -1]
    alone = torch.stack([batch_cache.BatchCache(model, 1).score([row])[0][0, -1] for row in ids])
    assert torch.equal(last[0.75], last[0.0]) and torch.equal(last[0.75], alone)
    lengths = [len(row) - 5 for row in ids]  # each row's prompt: all but its last five tokens (a first call's drafts)
    bulk = {share: None for share in (0.75, 0.0)}
    for share in bulk:
        monkeypatch.setattr(batch_cache, "ROW_BY_ROW_SHARE", share)
        bulk[share] = batch_cache.BatchCache(model, 3, lengths).score(ids)[0][:, -1]
    alone = torch.stack([batch_cache.BatchCache(model, 1, [n]).score([row])[0][0, -1] for n, row in zip(lengths, ids)])
    assert torch.equal(bulk[0.75], bulk[0.0]) and torch.equal(bulk[0.75], alone)
    assert torch.equal(bulk[0.75], last[0.75]) != kernel.bulk_tiles()  # on AMX the prompts ran on its tiles
