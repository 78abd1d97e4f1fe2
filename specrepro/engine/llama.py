"""The Llama family's forward over a preallocated KV cache: one function of (weights, cache, inputs), nothing else.

The stack is built from a transformers model's own weights (``LlamaStack.from_hf``): q/k/v fused into one
[(Hq+2Hkv)·D, H] matrix and gate/up into one [2I, H], so a layer runs four GEMMs instead of seven; the transformers
module keeps working, because its projections are re-pointed at row slices of the fused tensors (no copy).

One forward takes the input embeddings of B rows of Q columns, each column's position (RoPE) and cache slot, and an
additive mask over the S attended slots (0 = attend, -inf = not): the tree, the batch's holes and the padding are
all in that mask, so a chain, a tree, a ragged batch and a padded bucket are the same graph. Each column's key and
value are written into its slot before attention (gpt-fast's ``k_out[:, :, input_pos] = k_val``), so a rejected
draft's entries are simply overwritten later: nothing is cropped or copied.

Which models (``supports``): Llama 2/3 (any RoPE scaling transformers implements: the rotary module is the model's
own), SmolLM2, Mistral without a sliding window shorter than the context, Qwen2 (q/k/v biases) and Qwen3 (per-head
q/k RMSNorm). Anything else runs on the transformers path (``specrepro.core.kvcache``), and the run says which.

Shapes: B rows, Q columns (query tokens), S attended slots, L layers, H hidden, Hq / Hkv heads, D head dim, I MLP.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.weak import WeakTensorKeyDictionary

# transformers classes whose decoder layers this forward reproduces (checked against the reference in tests).
PACKED = ("wqkv", "wo", "w_gate_up", "w_down")  # the weights prepacked for oneDNN (or as 4-bit integers) on the CPU
BLOCK = 32  # inputs per block of a GGUF's Q4_1 and Q8_0 weights: one scale (and zero) each
# Row counts that the 4-bit kernel runs faster as two calls: it has a path for at most 4 rows, about 2x cheaper per
# row than its general one (the 120 GEMMs of a step on the Zen 4 EPYC: 7.7 ms at 4 rows, 13.9 ms at 5 or 6, 14.1 at 8)
Q4_SPLIT = {5: 4, 6: 4}
FAMILY = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaModel")


@dataclass(frozen=True)
class Shape:
    """What the forward needs to know of a model, read from its config."""

    n_layers: int  # L
    hidden: int  # H
    n_heads: int  # Hq
    n_kv_heads: int  # Hkv
    head_dim: int  # D
    eps: float  # RMSNorm epsilon
    qk_norm: bool  # Qwen3: RMSNorm over each head's q and k before RoPE
    context: int  # max_position_embeddings

    @property
    def q_width(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_kv_heads * self.head_dim


def unsupported(model: torch.nn.Module) -> str | None:
    """Why the engine cannot run ``model`` (a transformers causal LM or decoder), or None when it can."""
    name = type(model).__name__
    if name not in FAMILY:
        return f"{name} is not in the engine's Llama family ({', '.join(FAMILY[:4])})"
    config = model.config
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act {config.hidden_act!r} (the engine's MLP is SiLU-gated)"
    window = getattr(config, "sliding_window", None)
    if window is not None and getattr(config, "use_sliding_window", True) and window < config.max_position_embeddings:
        return f"a sliding window of {window} < the context {config.max_position_embeddings}"
    if getattr(config, "mlp_bias", False):
        return "MLP biases"
    decoder = model if name == "LlamaModel" else getattr(model, "model", None)
    if decoder is None or not hasattr(decoder, "rotary_emb") or not hasattr(decoder, "layers"):
        return f"{name} has no decoder with a rotary module"
    return None


def prepackable(weight: torch.Tensor) -> bool:
    """Whether ``weight`` is worth packing (see ``LlamaStack.prepack``): bf16 on the CPU."""
    return weight.device.type == "cpu" and weight.dtype == torch.bfloat16


@functools.cache
def onednn_bf16() -> bool:
    """Whether oneDNN has bf16 GEMMs on this CPU (it asks for AVX-512 BW/VL/DQ or AVX-NE-CONVERT; an AVX2-only EPYC
    has neither): where it has not, a bf16 weight that is not held 4- or 8-bit stays as it is, for ``F.linear``."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def prepack(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` [out, in] reordered once into oneDNN's blocked layout (any number of rows may use it), or as it is
    where oneDNN has no bf16 GEMM here (``onednn_bf16``)."""
    if not onednn_bf16():
        return weight.detach()
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)


def packed_linear(x: torch.Tensor, packed: "torch.Tensor | Q4 | Q8", bias: torch.Tensor | None = None,
                  bulk: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` with a ``prepack``ed weight (bit for bit the same in bf16; ``x`` is cast to it), or with a ``Q4``
    one (whose kernel takes and gives what ``Q4.linear`` says; ``bulk``: which rows are a prompt's)."""
    if isinstance(packed, Q4):
        return packed.linear(x, bias, bulk)
    if isinstance(packed, Q8):
        return packed.linear(x, bias)
    if not onednn_bf16():
        return F.linear(x.to(packed.dtype), packed, bias)
    return torch.ops.mkldnn._linear_pointwise(x.to(packed.dtype), packed, bias, "none", [], "")


_PACKED = WeakTensorKeyDictionary()  # weight -> (its version when packed, the packed weight), for ``linear``


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` that reorders a bf16 CPU weight for oneDNN once and reuses it, bit for bit the same (eager bf16
    pays that reorder at every call: about 100 µs for a 576×576 weight, 3 ms for a 49152×576 LM head), for the
    modules that run beside the engine: an EAGLE draft's layer, Medusa's heads, the LM head they share. Plain
    ``F.linear`` where autograd needs the product, off a bf16 CPU, or for an input of another dtype."""
    grads = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
    if grads or not prepackable(weight) or not onednn_bf16() or x.dtype != weight.dtype:
        return F.linear(x, weight, bias)
    version = -1 if weight.is_inference() else weight._version  # (an inference tensor keeps no version counter)
    held = _PACKED.get(weight)
    if held is None or held[0] != version:
        held = _PACKED[weight] = (version, prepack(weight))
    return packed_linear(x, held[1], bias)


def module_linear(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` through ``linear``: an ``nn.Linear`` of a draft or head, its weight packed once."""
    return linear(x, module.weight, module.bias)


@dataclass(frozen=True)
class Q4:
    """A weight [N, K] held as 4-bit integers q with a scale d and a zero z per group of ``BLOCK`` inputs,
    w = d·q + z: the GGUF's own Q4_1 blocks (w = d·q + m). Two kernels read it:

    - the engine's own (``kernel.q4_mm``, ``kernels.cpp``; a CPU with AVX-512 BF16 or AVX2): d and z in fp16 (the
      GGUF's own precision), the input (fp32 or bf16) rounded to bf16 inside, the output in fp32 (no cast on either
      side); one pass over the weights serves up to 8 rows;
    - torch's CPU int4 kernel (any other CPU, or ``$SPECREPRO_KERNELS=torch-int4``): w = (q − 8)·d + (z + 8d), d
      and z in bf16, bf16 in and out; it dequantises per tile of 4 rows, so 5 or 6 rows go as two calls
      (``Q4_SPLIT``).

    A one-token decode step reads a quarter of the bf16 bytes. A row's output is the same bit for bit whatever the
    rows beside it, in both."""

    packed: torch.Tensor  # ours: [N/32, K/G, 8, 2, 32] uint8 (see kernels.cpp); torch's: its int4 pack
    scales: torch.Tensor  # ours: d [N/32, K/G, 32] fp16; torch's: d and z+8d together, [K/G, N, 2] bf16
    zeros: torch.Tensor | None  # ours: z [N/32, K/G, 32] fp16; torch's: None (in ``scales``)
    out_features: int  # N

    @property
    def kernel(self) -> str:
        return "torch" if self.zeros is None else "specrepro"

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None,
               bulk: torch.Tensor | None = None) -> torch.Tensor:
        """x [..., K] -> [..., N]: fp32 from the engine's kernel, the scales' dtype (bf16) from torch's. ``bulk``
        (bool, x's leading shape, or None: no row): the rows that are a prompt's, which the engine's kernel runs on
        AMX's tiles where the CPU has them (``kernel.bulk_tiles``; their sums round otherwise than the other rows',
        the same for every method); torch's kernel runs them as any other row."""
        if self.zeros is not None:
            y = torch.ops.specrepro.q4_mm(x.contiguous(), self.packed, self.scales, self.zeros, bulk)
            return y if bias is None else y + bias
        rows = x.reshape(-1, x.shape[-1])  # [B·Q, K]
        if len(rows) in Q4_SPLIT:  # (each row's output is the same bit for bit, whatever the rows beside it)
            rows = rows.to(self.scales.dtype)
            y = torch.cat([self._mm(rows[:Q4_SPLIT[len(rows)]]), self._mm(rows[Q4_SPLIT[len(rows)]:])])
        else:
            y = self._mm(rows.to(self.scales.dtype))
        y = y.view(*x.shape[:-1], self.out_features)
        return y if bias is None else y + bias

    def _mm(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, BLOCK, self.scales)


def _blocks(weight: torch.Tensor) -> torch.Tensor | None:
    """``weight`` [N, K] as fp32 blocks [N, K/G, G] of ``BLOCK`` inputs, or None where it cannot be packed (K not a
    multiple of the block, N not of 16, or ``prepackable`` says no)."""
    n, k = weight.shape
    if k % BLOCK or n % 16 or not prepackable(weight):
        return None
    return weight.detach().float().view(n, k // BLOCK, BLOCK)


def q4_pack(weight: torch.Tensor) -> Q4 | None:
    """``weight`` [N, K] (bf16, CPU) as a ``Q4`` for the engine's kernel where it runs (and N is a multiple of 32),
    else for torch's, or None where it does not lie on a 4-bit grid per group of 32 inputs, to within the rounding
    of its bf16 values (a GGUF's Q4_1 weights, dequantised, do: every element of a block is min + q·(max - min)/15;
    any other weight misses the grid by up to a 30th of its block's range)."""
    blocks = _blocks(weight)
    if blocks is None:
        return None
    n, k = weight.shape
    low = blocks.amin(-1, keepdim=True)
    step = (blocks.amax(-1, keepdim=True) - low) / 15
    q = ((blocks - low) / step.clamp_min(1e-30)).round()  # [N, K/G, G] in 0..15 (0 where a block is constant)
    miss = (low + step * q - blocks).abs()
    if (miss > 2 ** -7 * blocks.abs().amax(-1, keepdim=True)).any():  # bf16's rounding of w, min and max: < 2^-7
        return None
    from .kernel import q4_mm
    if q4_mm() is not None and n % 32 == 0:
        return _ours(q.to(torch.uint8), step[..., 0], low[..., 0])
    scales = torch.cat([step, low + 8 * step], dim=-1).transpose(0, 1)  # [K/G, N, 2]
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.view(n, k).to(torch.int32), 8)
    return Q4(packed=packed, scales=scales.to(weight.dtype).contiguous(), zeros=None, out_features=n)


def _ours(q: torch.Tensor, d: torch.Tensor, z: torch.Tensor) -> Q4:
    """q [N, K/G, G] uint8 in 0..15, d and z [N, K/G] -> the layout of ``kernels.cpp``'s q4_mm: tiles of 32 outputs;
    in a block, step r holds the k pairs (4r, 4r+1) in the low nibbles and (4r+2, 4r+3) in the high ones, for outputs
    16h..16h+15 in half h, a byte per (output, k of the pair)."""
    n, blocks, _ = q.shape
    q = q.view(n // 32, 2, 16, blocks, 8, 2, 2)  # tile, half h, output o, block b, step r, nibble, k in the pair
    q = q.permute(0, 3, 4, 1, 5, 2, 6).reshape(n // 32, blocks, 8, 2, 2, 32)  # tile, b, r, h, nibble, (o, k)
    packed = (q[..., 0, :] | (q[..., 1, :] << 4)).contiguous()  # [N/32, K/G, 8, 2, 32]
    tiles = [t.half().view(n // 32, 32, blocks).transpose(1, 2).contiguous() for t in (d, z)]  # [N/32, K/G, 32]
    return Q4(packed=packed, scales=tiles[0], zeros=tiles[1], out_features=n)


@dataclass(frozen=True)
class Q8:
    """A weight [N, K] held as 8-bit integers q with a scale d per group of ``BLOCK`` inputs, w = d·q: a GGUF's
    Q8_0 blocks (the offline model's LM head, 56 MB in bf16, 30 MB so), read by the engine's ``q8_mm`` (the input
    rounded to bf16 inside, as a bf16 ``F.linear`` reads it; fp32 out; d in fp16, as the GGUF's). A row's output is
    the same bit for bit whatever the rows beside it."""

    packed: torch.Tensor  # [N/16, K/2, 32] int8: a tile's 16 outputs at each pair of inputs (see kernels.cpp)
    scales: torch.Tensor  # d [N/16, K/G, 16] fp16
    out_features: int  # N

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        y = torch.ops.specrepro.q8_mm(x, self.packed, self.scales)
        return y if bias is None else y + bias


def q8_pack(weight: torch.Tensor) -> Q8 | None:
    """``weight`` [N, K] (bf16, CPU) as a ``Q8`` where the engine's kernel runs and the weight lies on a Q8_0 grid
    to within its bf16 rounding (every block of 32 is d·q, q in -127..127, its largest |q| 127: a GGUF's Q8_0
    weights, dequantised, do), else None. (Within bf16's rounding, the 255 levels of a block hide among its
    representable values but for the small |q|, which is where the check looks.)"""
    from .kernel import q8_mm
    blocks = _blocks(weight)
    if blocks is None or q8_mm() is None:
        return None
    n, k = weight.shape
    step = blocks.abs().amax(-1, keepdim=True) / 127
    q = (blocks / step.clamp_min(1e-30)).round()  # [N, K/G, G] in -127..127
    # On the grid, w/d is q to within bf16's rounding of w and of the block's largest |w| (2^-8 each, relative):
    # |w/d - q| <= |q|·2^-7, which tells a grid from any other weight where |q| is small (off a grid, the misses
    # spread over [0, 0.5]).
    small = q.abs() <= 8
    if ((blocks / step.clamp_min(1e-30) - q).abs()[small] > 9 * 2 ** -7).any():
        return None
    q = q.view(n // 16, 2, 8, k // 2, 2)  # tile, half, output, input pair, k in the pair
    packed = q.permute(0, 3, 1, 2, 4).reshape(n // 16, k // 2, 32).to(torch.int8).contiguous()  # [N/16, K/2, 32]
    scales = step[..., 0].half().view(n // 16, 16, k // BLOCK).transpose(1, 2).contiguous()  # [N/16, K/G, 16]
    return Q8(packed=packed, scales=scales, out_features=n)


def tensor_bytes(weight: "torch.Tensor | Q4 | Q8") -> int:
    """Bytes a weight occupies as held (a ``Q4``/``Q8``: its integers and scales)."""
    if not isinstance(weight, (Q4, Q8)):
        return weight.numel() * weight.element_size()
    parts = [weight.packed, weight.scales, getattr(weight, "zeros", None)]
    return sum(t.numel() * t.element_size() for t in parts if t is not None)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm (the mean square in fp32, the product in the input dtype), bit for bit, in torch's
    one fused op for the normalisation."""
    return weight * F.rms_norm(x.float(), x.shape[-1:], None, eps).to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x [B, h, Q, D] rotated by cos/sin [B, 1, Q, D] (transformers' rotate_half convention: x·cos + (−x₂, x₁)·sin),
    with ``signed_sin`` = (−sin₁, sin₂) (``_signed``), so the halves swap by one roll."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), signed_sin)


class LlamaStack(torch.nn.Module):
    """The decoder layers and the final norm of a Llama-family model, with fused projections.

    ``forward(x [B, Q, H], positions [B, Q], slots [Q], mask [B, 1, Q, S], k [L, B, Hkv, C, D], v) ->
    hidden [L+1, B, Q, H]``: entry 0 is the input embeddings, entry i the output of layer i, entry L the final-norm
    output the LM head reads (transformers' ``hidden_states`` convention). ``k``/``v`` (capacity C ≥ S) are written
    in place at ``slots``; attention reads slots [0, S). Everything between the GEMMs runs in the cache's dtype (fp32
    for a bf16 model on the CPU: ``Engine.kv_dtype``), the residual stream included; a GEMM's input alone is cast to
    the model's dtype (the engine's 4-bit kernel rounds it to bf16 inside and gives fp32: no cast around it), and the
    hidden states come back in the model's dtype.
    """

    def __init__(self, shape: Shape, rotary: torch.nn.Module):
        super().__init__()
        self.shape = shape
        self.rotary = rotary  # the model's own rotary module (its inv_freq and scaling)
        self.attn_norm = torch.nn.ParameterList()
        self.mlp_norm = torch.nn.ParameterList()
        self.wqkv = torch.nn.ParameterList()  # [(Hq+2Hkv)·D, H] each
        self.bqkv = torch.nn.ParameterList()  # [(Hq+2Hkv)·D] each, Qwen2 only
        self.wo = torch.nn.ParameterList()  # [H, Hq·D]
        self.w_gate_up = torch.nn.ParameterList()  # [2I, H]
        self.w_down = torch.nn.ParameterList()  # [H, I]
        self.q_norm = torch.nn.ParameterList()  # [D], Qwen3 only
        self.k_norm = torch.nn.ParameterList()
        self.norm = None  # final norm weight [H]
        self.packed: dict[str, list[torch.Tensor | Q4]] | None = None  # prepacked weights (``prepack``)
        self.four_bit = False  # whether ``prepack`` holds the weights that lie on a 4-bit grid as 4-bit integers
        self.bulk_kernel = False  # whether a prompt's columns may run on the 4-bit kernel's bulk path (``prepack``)
        self.layer_weights: list[list[torch.Tensor]] | None = None  # for ``kernel.llama_layer`` (``prepack``)
        self.sources: list[torch.Tensor] = []  # the model's projection Parameters the fused weights view

    @classmethod
    def from_hf(cls, model: torch.nn.Module) -> "LlamaStack":
        """Fuse ``model``'s projections (re-pointing its own modules at slices of the fused tensors)."""
        why = unsupported(model)
        if why is not None:
            raise ValueError(f"the engine cannot run this model: {why}")
        decoder = model if type(model).__name__ == "LlamaModel" else model.model
        config = model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = Shape(n_layers=len(decoder.layers), hidden=config.hidden_size, n_heads=config.num_attention_heads,
                      n_kv_heads=config.num_key_value_heads, head_dim=head_dim, eps=float(config.rms_norm_eps),
                      qk_norm=hasattr(decoder.layers[0].self_attn, "q_norm"),
                      context=int(config.max_position_embeddings))
        stack = cls(shape, decoder.rotary_emb)
        with torch.no_grad():
            for layer in decoder.layers:
                attn, mlp = layer.self_attn, layer.mlp
                stack.attn_norm.append(layer.input_layernorm.weight)
                stack.mlp_norm.append(layer.post_attention_layernorm.weight)
                stack.wqkv.append(_fuse([attn.q_proj, attn.k_proj, attn.v_proj]))
                if attn.q_proj.bias is not None:
                    stack.bqkv.append(_fuse([attn.q_proj, attn.k_proj, attn.v_proj], "bias"))
                stack.wo.append(attn.o_proj.weight)
                stack.sources += [m.weight for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj,
                                                     mlp.gate_proj, mlp.up_proj, mlp.down_proj)]
                stack.w_gate_up.append(_fuse([mlp.gate_proj, mlp.up_proj]))
                stack.w_down.append(mlp.down_proj.weight)
                if shape.qk_norm:
                    stack.q_norm.append(attn.q_norm.weight)
                    stack.k_norm.append(attn.k_norm.weight)
            stack.norm = decoder.norm.weight
        return stack  # (the norms are the model's own Parameters: their requires_grad stays the model's)

    def prepack(self, four_bit: bool = False) -> bool:
        """Reorder every weight once into oneDNN's blocked layout, for the eager CPU forward in bf16: eager
        ``F.linear`` reorders its weight at every call (~45% of a decode step's GEMM time measured on a Zen 4 EPYC),
        which is what inductor's freezing does once when the forward is compiled. Same results bit for bit in bf16.
        ``four_bit``: a weight that lies on a 4-bit grid (``q4_pack``: a GGUF's Q4_1 weights) is held as 4-bit
        integers instead. Returns whether it packed (a CPU with oneDNN and a bf16 model)."""
        if not prepackable(self.wqkv[0]):
            return False
        self.four_bit = four_bit
        self.packed = {name: [(four_bit and q4_pack(w)) or prepack(w) for w in getattr(self, name)]
                       for name in PACKED}
        self.layer_weights = self._layer_weights()
        self._packed_versions = self._versions()
        from .kernel import bulk_tiles  # (the weights are held 4-bit and the CPU has AMX-BF16: ``forward``'s bulk)
        self.bulk_kernel = four_bit and bulk_tiles()
        return True

    @property
    def four_bit_share(self) -> float:
        """The share of the packed weights held as 4-bit integers (0 when nothing is packed)."""
        if self.packed is None:
            return 0.0
        held = [w for ws in self.packed.values() for w in ws]
        return sum(isinstance(w, Q4) for w in held) / len(held)

    @property
    def held_bytes(self) -> int:
        """Bytes of the projection weights as held (4-bit where packed so, with their scales), the norms included: what
        a decode step reads of the stack."""
        held = [w for ws in self.packed.values() for w in ws] if self.packed else [
            w for name in PACKED for w in getattr(self, name)]
        norms = [*self.attn_norm, *self.mlp_norm, *self.q_norm, *self.k_norm, *self.bqkv, self.norm]
        return sum(tensor_bytes(w) for w in held + norms)

    @property
    def four_bit_kernel(self) -> str | None:
        """Which kernel reads the 4-bit weights: "specrepro" (``kernels.cpp``), "torch", both (a model whose
        widths are not all multiples of 32), or None when none is 4-bit."""
        kernels = sorted({w.kernel for ws in (self.packed or {}).values() for w in ws if isinstance(w, Q4)})
        return " and ".join(kernels) or None

    def _versions(self) -> tuple[int, ...]:
        """The version counters of the model's own projection Parameters, which an optimizer step on the model (an
        online draft) bumps. (Not the fused tensors': a view set through ``.data`` counts its own versions.)"""
        return tuple(w._version for w in self.sources)

    def _one_op_layer(self, x: torch.Tensor, k: torch.Tensor):
        """``kernel.llama_layer`` where it can run every layer: fp32 on the CPU, every projection on the engine's own
        4-bit kernel, no q/k/v biases (Qwen2) or per-head q/k norms (Qwen3); else None (the loop of ops below)."""
        if (self.layer_weights is None or x.device.type != "cpu" or x.dtype != torch.float32 or not k[0].is_contiguous()
                or torch.compiler.is_compiling()):
            return None
        from .kernel import llama_layer
        return llama_layer()

    def _layer_weights(self) -> list[list[torch.Tensor]] | None:
        """Each layer's (packed, d, z) of wqkv, wo, w_gate_up and w_down for ``kernel.llama_layer``, where every
        projection is a ``Q4`` of the engine's kernel and the layer has neither biases nor q/k norms."""
        if self.packed is None or len(self.bqkv) or self.shape.qk_norm:
            return None
        layers = [[self.packed[name][i] for name in PACKED] for i in range(self.shape.n_layers)]
        if not all(isinstance(w, Q4) and w.kernel == "specrepro" for ws in layers for w in ws):
            return None
        return [[t for w in ws for t in (w.packed, w.scales, w.zeros)] for ws in layers]

    def _linear(self, x: torch.Tensor, name: str, i: int, bias: torch.Tensor | None = None,
                bulk: torch.Tensor | None = None) -> torch.Tensor:
        """x (any float dtype) through weight ``name`` of layer i: the input is cast to the weight's dtype, except
        for the engine's 4-bit kernel, which takes and gives fp32 (``Q4``; ``bulk``: which rows are a prompt's)."""
        if self.packed is None:
            weight = getattr(self, name)[i]
            return F.linear(x.to(weight.dtype), weight, bias)
        return packed_linear(x, self.packed[name][i], bias, bulk)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor,
                k: torch.Tensor, v: torch.Tensor, bulk: torch.Tensor | None = None) -> torch.Tensor:
        """``bulk`` [B, Q] bool: the columns that are a prompt's, which the 4-bit kernel may run on AMX (``Q4.linear``),
        or None where none is (the caller's test, once a forward: every projection reads it as it is)."""
        s = self.shape
        if self.packed is not None and self._versions() != self._packed_versions:
            self.prepack(self.four_bit)  # the weights were trained in place since they were packed
        b, q_len, _ = x.shape
        dtype, work = x.dtype, k.dtype  # the model's dtype (the hidden states'); the cache's, which the rest runs in
        x = x.to(work)  # the residual stream
        cos, sin = self.rotary(x, positions)  # [B, Q, D] each
        sin = _signed(sin)
        mask = mask.to(work)
        attended = mask.shape[-1]  # S
        attn_norm, mlp_norm, norm = self._norms(work)
        rms = _rms_norm_for(x)
        layer = self._one_op_layer(x, k)
        bulk = None if bulk is None else bulk.contiguous()
        if layer is not None:  # each layer as one op of the engine's (kernels.cpp), on its 4-bit weights
            cos, sin, mask, states = cos.contiguous(), sin.contiguous(), mask.contiguous(), [x]
            for i in range(s.n_layers):
                x = layer(x, attn_norm[i], mlp_norm[i], s.eps, self.layer_weights[i], cos, sin, k[i], v[i], slots,
                          attended, mask, s.n_heads, bulk)
                states.append(x)
            states[-1] = rms(x, norm, s.eps)
            return torch.stack(states).to(dtype)  # [L+1, B, Q, H]
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, Q, D]
        fused = _fused_attention_for(k)  # the engine's one-op attention, or None (torch's, over ``scores``)
        scores = None if fused else _scores_mask(mask, s.n_kv_heads, s.n_heads // s.n_kv_heads)  # [B·Hkv, g·Q, S]
        states = [x]
        for i in range(s.n_layers):
            h = rms(x, attn_norm[i], s.eps)
            bias = self.bqkv[i] if len(self.bqkv) else None
            qkv = self._linear(h, "wqkv", i, bias, bulk).to(work)  # [B, Q, (Hq+2Hkv)·D]
            if s.qk_norm:
                q, key, val = qkv.split([s.q_width, s.kv_width, s.kv_width], dim=-1)
                q = rms_norm(q.view(b, q_len, s.n_heads, s.head_dim), self.q_norm[i], s.eps)
                key = rms_norm(key.view(b, q_len, s.n_kv_heads, s.head_dim), self.k_norm[i], s.eps)
                qk = torch.cat([q, key], dim=2)  # [B, Q, Hq+Hkv, D]
            else:
                qk = qkv[..., :s.q_width + s.kv_width].view(b, q_len, s.n_heads + s.n_kv_heads, s.head_dim)
            qk = rope(qk.transpose(1, 2), cos, sin)  # [B, Hq+Hkv, Q, D]: q and k rotated in one go
            val = qkv[..., s.q_width + s.kv_width:].view(b, q_len, s.n_kv_heads, s.head_dim).transpose(1, 2)
            k[i].index_copy_(2, slots, qk[:, s.n_heads:])  # the columns' entries, written by slot
            v[i].index_copy_(2, slots, val)
            if fused:  # [B, Q, Hq·D]
                att = fused(qk[:, :s.n_heads], k[i], v[i], attended, mask, s.head_dim ** -0.5)
            else:
                att = attention(qk[:, :s.n_heads], k[i, :, :, :attended], v[i, :, :, :attended], scores)
            x = x + self._linear(att, "wo", i, bulk=bulk)
            h = rms(x, mlp_norm[i], s.eps)
            gate, up = self._linear(h, "w_gate_up", i, bulk=bulk).chunk(2, dim=-1)  # [B, Q, I] each
            x = x + self._linear(F.silu(gate) * up, "w_down", i, bulk=bulk)
            states.append(x)
        states[-1] = rms(x, norm, s.eps)
        return torch.stack(states).to(dtype)  # [L+1, B, Q, H]

    def _norms(self, dtype: torch.dtype) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """The RMSNorm weights (attention's, the MLP's per layer, the final one) in ``dtype``, cast once and cast
        again only when one of them changed (the model's own Parameters: an online draft trains them in place)."""
        n = self.shape.n_layers  # (indexed: torch 2.11's dynamo cannot unpack a ParameterList, seen on a GPU)
        params = [self.attn_norm[i] for i in range(n)] + [self.mlp_norm[i] for i in range(n)] + [self.norm]
        if torch.compiler.is_compiling():  # (the graph casts them, once, as constants)
            cast = [p.to(dtype) for p in params]
            return cast[:n], cast[n:2 * n], cast[-1]
        key = (dtype, tuple(p._version for p in params), tuple(p.data_ptr() for p in params))
        if getattr(self, "_norm_key", None) != key:
            cast = [p.detach().to(dtype) for p in params]
            self._norm_cast, self._norm_key = (cast[:n], cast[n:2 * n], cast[-1]), key
        return self._norm_cast


def _rms_norm_for(x: torch.Tensor):
    """The RMSNorm ``(x, w, eps) -> y`` for the residual stream ``x``: the engine's one-op kernel for fp32 on the CPU
    (``kernel.rms_norm``; torch's is six ops there), else torch's."""
    if x.device.type == "cpu" and x.dtype == torch.float32 and not torch.compiler.is_compiling():
        from .kernel import rms_norm
        if rms_norm() is not None:
            return rms_norm()
    return lambda x, w, eps: F.rms_norm(x, x.shape[-1:], w, eps)


def _fused_attention_for(k: torch.Tensor):
    """The engine's one-op attention (``kernel.attention``) for an fp32 cache on the CPU whose layers are contiguous
    (a row's view of a batch's cache is), else None."""
    if (k.device.type == "cpu" and k.dtype == torch.float32 and k[0].is_contiguous()
            and not torch.compiler.is_compiling()):
        from .kernel import attention as fused
        return fused()
    return None


def _signed(sin: torch.Tensor) -> torch.Tensor:
    """sin [..., D] with its first half negated, so that ``rope`` rotates by one roll instead of a cat of halves."""
    half = sin.shape[-1] // 2
    return torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)


def _scores_mask(mask: torch.Tensor, h_kv: int, g: int) -> torch.Tensor:
    """The additive mask [B, 1, Q, S] as the attention scores' initial value [B·Hkv, g·Q, S] (built once a forward,
    shared by every layer)."""
    b, _, q_len, s = mask.shape
    return mask.expand(b, h_kv * g, q_len, s).reshape(b * h_kv, g * q_len, s)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Grouped-query attention: q [B, Hq, Q, D], k/v [B, Hkv, S, D], mask [B·Hkv, g·Q, S] additive (``_scores_mask``)
    -> [B, Q, Hq·D], all in the cache's dtype.

    Written out rather than through SDPA: the CPU flash kernel cost ~0.6 ms per call at Q = 1 (bf16, S = 256),
    more than the layer's GEMMs. The scale and the mask go into one ``baddbmm``; the g = Hq/Hkv query heads of a
    group share their k/v without a copy."""
    b, h_q, q_len, d = q.shape
    h_kv, s = k.shape[1], k.shape[2]
    g = h_q // h_kv
    q = q.reshape(b * h_kv, g * q_len, d)
    scores = torch.baddbmm(mask, q, k.reshape(b * h_kv, s, d).transpose(1, 2), alpha=d ** -0.5)  # [B·Hkv, g·Q, S]
    probs = scores.softmax(-1, dtype=torch.float32).to(v.dtype)  # (fp32, as transformers' eager attention)
    out = torch.bmm(probs, v.reshape(b * h_kv, s, d))  # [B·Hkv, g·Q, D]
    return out.view(b, h_q, q_len, d).transpose(1, 2).reshape(b, q_len, h_q * d)


def _fuse(linears: list[torch.nn.Linear], attr: str = "weight") -> torch.nn.Parameter:
    """One tensor [sum(out), …] holding the linears' ``attr`` (weight or bias) rows; each linear's becomes a view.

    The linears keep their Parameter objects (``.data`` is re-pointed, no second copy), so an optimizer that holds
    them (an online draft's) trains the fused tensor the engine reads."""
    fused = torch.cat([getattr(m, attr).detach() for m in linears])  # [sum(out), …]
    start = 0
    for m in linears:
        rows = getattr(m, attr).shape[0]
        getattr(m, attr).data = fused[start:start + rows]
        start += rows
    return torch.nn.Parameter(fused, requires_grad=False)
