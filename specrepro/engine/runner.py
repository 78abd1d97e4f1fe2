"""The engine: a model's stack and LM head, compiled over a few shape buckets, and the static KV cache it writes.

``Engine.forward`` pads every call to a bucket of columns (Q ∈ ``BUCKETS``: 1, 2, 4, 8, 16, 32, 64; longer inputs
run as 64-column chunks) and attends over a bucket of slots (a multiple of ``SLOT_BLOCK``), so that every method,
tree size, γ and prompt reuses a handful of graphs. Padding columns attend to themselves only and write into
slots past the real ones, which no real column reads before they are written again.

Compilation (``torch.compile``, inductor): on the CPU with freezing, so the weights are constants that inductor
prepacks for oneDNN/MKL once (eager bf16 pays a weight reorder at every call), and the C++ wrapper; on CUDA the
graphs are captured as CUDA graphs (mode "reduce-overhead"). Inductor's own on-disk cache sits under
``$SPECREPRO_CACHE/inductor`` (``cache.py`` sets it), so a machine pays each (model, dtype, bucket) once.
Eager by default (``compile_enabled``), with the CPU's bf16 weights prepacked for oneDNN once; ``--compile`` or
``SPECREPRO_ENGINE_COMPILE=1`` compiles.

Recompiles are counted (``Engine.compiles``): after ``warm`` a run makes none, which ``tests/test_engine.py`` holds.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

import torch

from . import timing
from .llama import LlamaStack, packed_linear, prepack, prepackable, q8_pack, tensor_bytes, unsupported

BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # columns per forward
SLOT_BLOCK = 256  # attended slots are rounded up to a multiple of this (compiled), and capacity grows by it
EAGER_SLOTS = 32  # the same for the eager forward, which takes any shape
RECOMPILE_LIMIT = 256  # graphs per compiled module: columns x slot blocks x batch sizes


def bucket(n: int) -> int:
    """The smallest column bucket holding n columns (n ≤ 64)."""
    for size in BUCKETS:
        if n <= size:
            return size
    raise ValueError(f"{n} columns exceed the largest bucket {BUCKETS[-1]} (chunk them)")


def compile_enabled() -> bool:
    """``SPECREPRO_ENGINE_COMPILE=1`` (``--compile`` sets it per model): compile the buckets. Off by default: on the
    2-core Zen 4 EPYC the compiled stack stepped in 24.3 ms against the eager engine's 27.6 ms, at 77 s of
    compilation per bucket (this folder's README)."""
    return os.environ.get("SPECREPRO_ENGINE_COMPILE", "0") == "1"


class StaticKV:
    """Keys and values of B rows, preallocated: [L, B, Hkv, C, D] each, written by slot, never cropped.

    Capacity C grows (in ``SLOT_BLOCK`` steps, a copy) only when a call needs slots past it; rows' lengths live in
    the caller (``kvcache.CachedModel``, ``batch_cache.BatchCache``), which owns what each slot means.
    """

    def __init__(self, stack: LlamaStack, batch: int, capacity: int, dtype: torch.dtype, device: torch.device):
        s = stack.shape
        self.batch = batch
        self.parent: StaticKV | None = None  # the cache this one is a row of (``row``)
        shape = (s.n_layers, batch, s.n_kv_heads, _round(capacity), s.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        # [B] long on the device, each row's prompt length: the columns at positions below it are a prefill's, which
        # the 4-bit kernel may run in bulk (``LlamaStack.forward``); None: no column is (the caller did not say)
        self.prompt: torch.Tensor | None = None

    def set_prompt(self, lengths: list[int]) -> None:
        """Each row's prompt length (see ``prompt``): every method of a run sets the same, so every method computes a
        prompt's columns alike."""
        self.prompt = torch.tensor(lengths, dtype=torch.long, device=self.k.device) if any(lengths) else None

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def reserve(self, slots: int) -> None:
        """Make room for ``slots`` slots (a copy into a larger buffer when C is too small)."""
        if slots <= self.capacity:
            return
        if self.parent is not None:
            raise ValueError(f"a row's view of a cache cannot grow to {slots} slots: reserve the cache first")
        grown = _round(max(slots, 2 * self.capacity))
        for name in ("k", "v"):
            old = getattr(self, name)
            new = old.new_zeros(*old.shape[:3], grown, old.shape[4])
            new[:, :, :, :old.shape[3]] = old
            setattr(self, name, new)

    def move(self, rows: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Entry (rows[i], src[i]) to (rows[i], dst[i]) in every layer: the kept path of a tree (one gather)."""
        for t in (self.k, self.v):
            t[:, rows, :, dst] = t[:, rows, :, src]  # [L, K, Hkv, D] (the right side is a copy)

    def entries(self, slots: int, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's keys and values over slots [0, slots), [B, Hkv, slots, D], in ``dtype`` (views where the
        cache holds that dtype, copies where it is fp32 for a bf16 model): transformers' cache takes them."""
        return [(self.k[i, :, :, :slots].to(dtype), self.v[i, :, :, :slots].to(dtype)) for i in range(self.k.shape[0])]

    def row(self, b: int) -> "StaticKV":
        """Row b alone, as a cache of batch 1 that shares this one's storage (a forward on it writes row b's slots
        here); it cannot grow: ``reserve`` this cache first."""
        view = StaticKV.__new__(StaticKV)
        view.batch, view.k, view.v, view.parent = 1, self.k[:, b:b + 1], self.v[:, b:b + 1], self
        view.prompt = None if self.prompt is None else self.prompt[b:b + 1]
        return view

    def select(self, rows: torch.Tensor) -> None:
        """Keep the rows ``rows`` (finished rows of a batch leave)."""
        self.k, self.v = self.k[:, rows].contiguous(), self.v[:, rows].contiguous()
        self.prompt = None if self.prompt is None else self.prompt[rows.to(self.prompt.device)]
        self.batch = int(rows.numel())


def _canonical(t: torch.Tensor) -> torch.Tensor:
    """t with the strides of a fresh contiguous tensor (a view of a larger one keeps odd strides on its size-1 dims,
    which the compiled graphs' guards would treat as a new signature)."""
    strides, step = [], 1
    for size in reversed(t.shape):
        strides.append(step)
        step *= size
    return t if tuple(reversed(strides)) == t.stride() else t.clone(memory_format=torch.contiguous_format)


def _round(n: int) -> int:
    return max(SLOT_BLOCK, -(-n // SLOT_BLOCK) * SLOT_BLOCK)


@dataclass
class Engine:
    """A Llama-family model's compiled forward. Build it with ``Engine.build(model)`` (None when unsupported)."""

    model: torch.nn.Module  # the transformers model it was built from (its embeddings, head and config)
    stack: LlamaStack
    head_weight: torch.Tensor  # [V', H] the LM head (V' = the reduced vocabulary of a reduced draft)
    device: torch.device
    dtype: torch.dtype
    compiled: bool
    four_bit: bool = True  # hold weights that lie on a 4-bit grid as 4-bit integers (eager, bf16, CPU; ``q4_pack``)
    seen: set = field(default_factory=set)  # the (stack | head, shapes) signatures called so far
    token_map: torch.Tensor | None = None  # [V] input id -> row of the embeddings (a reduced-vocabulary draft)
    kept_ids: torch.Tensor | None = None  # [V'] full-vocabulary id of each head row (a reduced-vocabulary draft)
    out_vocab: int | None = None  # V, when the head covers only kept_ids (the other logits are -inf)

    @classmethod
    def build(cls, model: torch.nn.Module, head_weight: torch.Tensor | None = None,
              compiled: bool | None = None, four_bit: bool = True) -> "Engine | None":
        if unsupported(model) is not None:
            return None
        stack = LlamaStack.from_hf(model)
        if head_weight is None:
            head_weight = model.get_output_embeddings().weight
        param = next(model.parameters())
        engine = cls(model=model, stack=stack, head_weight=head_weight.detach(), device=param.device,
                     dtype=param.dtype, compiled=compile_enabled() if compiled is None else compiled,
                     four_bit=four_bit)
        engine._stack_fn = engine._make(stack)
        engine._head_fn = engine._make(_Head(engine.head_weight))
        return engine

    def _make(self, module: torch.nn.Module):
        if not self.compiled:
            module.prepack(self.four_bit)
            return module
        from .disk import inductor_cache
        inductor_cache()
        # One code object serves every (B, Q, S) bucket, each a graph of its own (dynamic=False): far more than
        # dynamo's default limit of 8 recompiles per code object, after which it would fall back to eager.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit,
                                                               4 * RECOMPILE_LIMIT)
        if self.device.type == "cuda":
            return torch.compile(module, mode="reduce-overhead", dynamic=False, fullgraph=True)
        import torch._inductor.config as inductor_config
        inductor_config.freezing = True  # weights as constants: prepacked once (process-wide; eager is unchanged)
        inductor_config.cpp_wrapper = True
        return torch.compile(module, dynamic=False, fullgraph=True)

    def __deepcopy__(self, memo) -> "Rebuild":
        # A deep copy of the model (a test's perturbed draft, say) must not share this engine's fused tensors, and
        # torch's deepcopy does not keep views of one storage shared: the copy builds its own engine on first use.
        return Rebuild(self.compiled, self.four_bit)

    @property
    def name(self) -> str:
        share = self.stack.four_bit_share
        weights = "" if share == 0 else ", 4-bit weights" if share == 1 else f", {share:.0%} of weights 4-bit"
        weights += f" ({self.stack.four_bit_kernel}'s kernel)" if share else ""
        return f"specrepro engine ({'compiled' if self.compiled else 'eager'}{weights})"

    @property
    def held_bytes(self) -> int:
        """Bytes of the weights a decode step reads as this engine holds them (the stack's and the head's; 4-bit and
        8-bit where packed so): the bytes its bandwidth floor is about."""
        head = self._head_fn if isinstance(self._head_fn, _Head) else None
        return self.stack.held_bytes + tensor_bytes(head.packed if head is not None and head.packed is not None
                                                    else self.head_weight)

    def columns(self, n: int) -> int:
        """Columns a forward of n runs: its bucket when compiled (a handful of graphs), n itself when eager (a
        padded column costs a GEMM row, and the 4-bit kernel's cost grows with rows)."""
        return bucket(n) if self.compiled else n

    def attended(self, slots: int) -> int:
        """Slots a forward attends over (S): a multiple of ``SLOT_BLOCK`` when compiled, of ``EAGER_SLOTS`` when eager
        (attention reads every attended slot: 257 slots cost half of 512's)."""
        return _round(slots) if self.compiled else -(-slots // EAGER_SLOTS) * EAGER_SLOTS

    def new_cache(self, batch: int, capacity: int) -> StaticKV:
        return StaticKV(self.stack, batch, capacity, self.kv_dtype, self.device)

    @property
    def kv_dtype(self) -> torch.dtype:
        """The cache's dtype: fp32 for a bf16 model on the CPU, whose attention products are then ~3x cheaper
        (oneDNN's bf16 batched products of these shapes are call-bound), else the model's."""
        return torch.float32 if self.device.type == "cpu" and self.dtype == torch.bfloat16 else self.dtype

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, Q] -> input embeddings [B, Q, H]."""
        if self.token_map is not None:
            ids = self.token_map[ids]
        return self.model.get_input_embeddings()(ids)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor,
                kv: StaticKV) -> torch.Tensor:
        """x [B, Q, H] (Q a bucket), positions [B, Q], slots [Q], mask [B, 1, Q, S] (S ≤ kv.capacity, a multiple of
        SLOT_BLOCK) -> hidden [L+1, B, Q, H]; see ``LlamaStack``."""
        self._count(("stack", *x.shape[:2], mask.shape[-1], kv.capacity))
        # (canonical strides: one graph per shape, whatever view the input came from)
        with torch.inference_mode(), timing.forward():
            args = (_canonical(x), _canonical(positions), slots, _canonical(mask), kv.k, kv.v)
            bulk = self._bulk(positions, kv)
            return self._stack_fn(*args) if bulk is None else self._stack_fn(*args, bulk=bulk)

    def _bulk(self, positions: torch.Tensor, kv: StaticKV) -> torch.Tensor | None:
        """[B, Q] bool: the columns that are a prompt's (``StaticKV.prompt``), which the 4-bit kernel runs in bulk
        (``LlamaStack.bulk_kernel``, eager only); None where none is (every step after the prefill)."""
        if kv.prompt is None or self.compiled or not self.stack.bulk_kernel:
            return None
        bulk = positions < kv.prompt[:, None]
        return bulk if bool(bulk.any()) else None

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, R, H] final-norm rows -> logits [B, R, V'] (R padded to a bucket inside when compiled)."""
        b, r, _ = hidden.shape
        size = self.columns(r)
        if size != r:
            hidden = torch.cat([hidden, hidden.new_zeros(b, size - r, hidden.shape[-1])], dim=1)
        self._count(("head", b, size))
        with torch.inference_mode(), timing.forward():
            logits = self._head_fn(_canonical(hidden))[:, :r]  # [B, R, V']
            if self.kept_ids is None:
                return logits
            full = logits.new_full((b, r, self.out_vocab), float("-inf"))  # [B, R, V]
            return full.index_copy_(-1, self.kept_ids, logits)

    @property
    def compiles(self) -> int:
        """Graphs compiled so far: one per signature called, when compiled."""
        return len(self.seen) if self.compiled else 0

    def _count(self, key: tuple) -> None:
        self.seen.add(key)


class EngineHead(torch.nn.Module):
    """An engine's LM head as a module, for the drafters that read the target's head (Medusa's heads, PPD's prompt
    tokens): ``weight`` is the model's (its dtype), the product the engine's packed one (8-bit integers where the
    kernel runs: a third of the time of a prepacked bf16 product at a few rows)."""

    def __init__(self, engine: Engine):
        super().__init__()
        self.__dict__["engine"] = engine  # (not a submodule: the engine is the model's)
        self.weight, self.bias = engine.head_weight, None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [..., H] -> logits [..., V]."""
        rows = hidden.reshape(1, -1, hidden.shape[-1])
        return self.engine.logits(rows.to(self.weight.dtype)).reshape(*hidden.shape[:-1], -1)


@dataclass(frozen=True)
class Rebuild:
    """What a deep copy of a model holds in place of its engine (``engine_of`` builds the copy's own)."""

    compiled: bool
    four_bit: bool = True


class _Head(torch.nn.Module):
    """The LM head [V', H] as a module of its own (compiled, or prepacked like the stack's weights)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.packed = None
        self.four_bit = False

    def prepack(self, four_bit: bool = False) -> bool:
        """Reorder the head once for oneDNN (``LlamaStack.prepack``); with ``four_bit`` (the engine that holds weights
        as the GGUF's integers), a head on a Q8_0 grid (the offline model's) is held as 8-bit integers where the
        engine's kernel runs (``q8_pack``: half the bytes of bf16). Returns whether it packed."""
        if not prepackable(self.weight):
            return False
        self.four_bit = four_bit
        self.packed = (four_bit and q8_pack(self.weight)) or prepack(self.weight)
        self._packed_version = self.weight._version
        return True

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            return torch.nn.functional.linear(hidden, self.weight)
        if self.weight._version != self._packed_version:  # (it shares the LM head's counter: an online draft's
            self.prepack(self.four_bit)  # update is seen here)
        return packed_linear(hidden, self.packed)


def warm(engine: Engine, batches: tuple[int, ...] = (1,), columns: tuple[int, ...] = BUCKETS,
         slots: tuple[int, ...] = (SLOT_BLOCK, 2 * SLOT_BLOCK), stream=sys.stderr) -> float:
    """Compile every (B, Q, S) graph a run will meet, with progress and an ETA; returns the seconds spent."""
    todo = [(b, q, s) for b in batches for s in slots for q in columns]
    start = time.perf_counter()
    for i, (b, q, s) in enumerate(todo):
        kv = engine.new_cache(b, s)
        x = torch.zeros(b, q, engine.stack.shape.hidden, dtype=engine.dtype, device=engine.device)
        positions = torch.arange(q, device=engine.device).repeat(b, 1)  # [B, Q]
        mask = torch.zeros(b, 1, q, s, dtype=engine.dtype, device=engine.device)
        hidden = engine.forward(x, positions, torch.arange(q, device=engine.device), mask, kv)
        engine.logits(hidden[-1, :, :q])
        done, spent = i + 1, time.perf_counter() - start
        print(f"\rspecrepro engine: compiled {done}/{len(todo)} shapes (B={b}, Q={q}, S={s}) in {spent:.0f} s, "
              f"ETA {spent / done * (len(todo) - done):.0f} s", end="", file=stream, flush=True)
    print(file=stream)
    return time.perf_counter() - start
