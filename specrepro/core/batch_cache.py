"""A causal LM with one KV cache for B ragged rows: the batched counterpart of ``kvcache.CachedModel``.

The rows share one ``DynamicCache`` of batch B and one slot axis, but each row is its own sequence:

    slots [0, L_b)      row b's committed tokens (``rows[b]``), left-aligned, in order
    slots [L_b, S)      holes: entries of other rows' longer histories, or this row's rejected or truncated ones

S (the cache length) is max_b L_b between calls. A hole is never read: every forward passes explicit per-row
position ids and a 4D additive mask [B, 1, Q, S+Q] that hides each row's holes and padding and applies each row's
tree ancestry (the per-row form of ``CachedModel._tree_inputs``). The RoPE of a key is applied before it is
cached, at the row's own position, so an entry keeps its meaning whatever slot it moves to.

One call scores every row's newest committed token and its draft tree (``score``); the Q = M + N query columns are

    [0, M − M_b)         padding (a row with fewer uncached committed tokens than the longest)
    [M − M_b, M)         row b's M_b uncached committed tokens, right-aligned, so column M − 1 is every row's root
    [M, M + N_b)         row b's N_b tree nodes
    [M + N_b, M + N)     dummy nodes (rows with smaller trees)

so logits row 0 of every row is its root and row i+1 its node i (the row convention of ``specrepro.core.tree``). A
padding column attends to itself only (its output is discarded, its entry never kept). ``keep(paths)`` then
moves each row's committed columns and its accepted root path into the row's slots L_b, L_b+1, … (a gather within
the row, one indexed copy per layer) and crops the common suffix, so S tracks max_b L_b. A row that finished
leaves with ``select`` (``index_select`` on the batch axis) without stalling the others.

Invariant, checked by ``check()``: every layer holds B rows of S = max_b L_b slots, L_b = len(rows[b]); what a row's
valid entries hold is tested against a fresh batch-1 forward (tests/test_batch_cache.py).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from . import tree
from ..engine import SLOT_BLOCK, engine_of, timing
from ..engine.session import run as engine_run
from ..engine.session import run_rows
from .kvcache import TREE_ATTENTION, common_prefix, drop_last


# A forward whose rows are mostly padding (ragged prompts prefilled together) runs row by row: at least this many
# columns, and real columns at most this share of B x Q.
ROW_BY_ROW_COLUMNS = 16
ROW_BY_ROW_SHARE = 0.75


@dataclass(frozen=True)
class PendingStep:
    """The last ``score``: its columns sit in slots [n_slots, n_slots + Q) until ``keep``."""

    n_slots: int  # S before the forward
    m: int  # M, the widest row's uncached committed tokens (column M − 1 is every row's root)
    new: tuple[tuple[int, ...] | None, ...]  # [B] each row's uncached committed tokens (None: the row sat out)
    tokens: tuple[tuple[int, ...], ...]  # [B][N_b] each row's tree nodes
    parents: tuple[torch.Tensor, ...]  # [B] each row's parents [N_b]


class BatchCache:
    """B ragged rows of one model, scored together; see the module docstring."""

    def __init__(self, model: torch.nn.Module, batch_size: int, prompt_lens: list[int] | None = None):
        """``prompt_lens``: each row's prompt length, where the caller knows them (``kvcache.CachedModel``'s
        ``prompt_len``)."""
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if prompt_lens is not None and len(prompt_lens) != batch_size:
            raise ValueError(f"prompt_lens gives {len(prompt_lens)} lengths for {batch_size} rows")
        check_batchable(model)
        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = model.get_input_embeddings().weight.dtype
        self.engine = engine_of(model)
        if self.engine is not None:  # the engine's static cache: S is a length, the buffer is preallocated
            self.kv = self.engine.new_cache(batch_size, SLOT_BLOCK)
            self.kv.set_prompt(list(prompt_lens or [0] * batch_size))
            self._slots = 0
        self.cache = DynamicCache(config=model.config)
        odd = {type(layer).__name__ for layer in self.cache.layers if type(layer) is not DynamicLayer}
        if odd:
            raise ValueError(f"batched decoding needs plain full-attention cache layers, this model's cache has "
                             f"{sorted(odd)}")
        self.rows: list[list[int]] = [[] for _ in range(batch_size)]  # committed tokens cached per row, slots 0..L_b−1
        self.pending: PendingStep | None = None

    @property
    def batch_size(self) -> int:
        return len(self.rows)

    @property
    def n_slots(self) -> int:
        """S, the shared slot axis' length."""
        return self.cache.get_seq_length() if self.engine is None else self._slots

    # ------------------------------------------------------------------------------------------------- scoring

    def score(self, ids: list[list[int] | None], trees: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
              output_hidden: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Score every row's tree after its committed ``ids[b]`` in one forward: (logits [B, N+1, V],
        hidden [B, N+1, H] | None), N = max_b N_b; row b's rows past N_b + 1 are its dummy nodes' (ignore them).

        ``trees[b] = (tokens [N_b], parents [N_b])`` (None: no trees, N = 0). ``ids[b] = None`` leaves row b out of
        this step (its columns are padding, its slots untouched; its logits are meaningless). As in
        ``CachedModel.logits_for_tree``, each row first keeps its common prefix with ids[b][:-1] (a truncation:
        its length L_b drops, the slots beyond become holes) and runs the rest. The nodes stay pending until
        ``keep``; a new ``score`` first keeps no node of a pending step.
        """
        b_size = self.batch_size
        trees = [(torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long))] * b_size \
            if trees is None else trees
        if len(ids) != b_size or len(trees) != b_size:
            raise ValueError(f"expected ids and trees for the {b_size} rows, got {len(ids)} and {len(trees)}")
        if all(row is None for row in ids):
            raise ValueError("score needs at least one row that takes part (every ids[b] is None)")
        if self.pending is not None:
            self.keep([[] for _ in range(b_size)])
        tokens = [torch.as_tensor(t, dtype=torch.long).cpu() for t, _ in trees]
        parents = [torch.as_tensor(p, dtype=torch.long).cpu() for _, p in trees]
        keeps = self._check_rows(ids, tokens, parents)  # every check before the first change
        new: list[tuple[int, ...] | None] = []
        for b, row in enumerate(ids):
            if row is None:
                new.append(None)
                tokens[b], parents[b] = tokens[b][:0], parents[b][:0]
                continue
            del self.rows[b][keeps[b]:]  # the row's slots from its common prefix on become holes
            new.append(tuple(row[keeps[b]:]))
        self._crop()
        m = max(len(row) for row in new if row is not None)
        n = max(t.numel() for t in tokens)
        input_ids, positions, allowed = self._inputs(new, tokens, parents, m, n)
        if self.engine is not None:
            spans = [None if row is None else (m - len(row), m + tokens[b].numel()) for b, row in enumerate(new)]
            states = self._engine_states(input_ids, positions, allowed, spans)  # [B, Q, H] the final-norm output
            self._slots += m + n
            logits = self.engine.logits(states[:, -(n + 1):])  # [B, N+1, V]
        else:
            # Additive float, 0 = attend (eager adds it to the scores, SDPA takes it as attn_mask), as CachedModel's.
            mask = torch.zeros(allowed.shape, dtype=self.dtype).masked_fill_(~allowed, torch.finfo(self.dtype).min)
            with torch.inference_mode(), timing.forward():
                out = self.model(input_ids=input_ids.to(self.device), attention_mask=mask[:, None].to(self.device),
                                 position_ids=positions.to(self.device), cache=self.cache, use_cache=True,
                                 logits_to_keep=n + 1, output_hidden_states=output_hidden)
            logits = out.logits[:, -(n + 1):]  # [B, N+1, V] (a model that ignores logits_to_keep returns all Q rows)
            # transformers 5 ties hidden_states[-1] to the final-norm output the LM head reads (as CachedModel does)
            states = out.hidden_states[-1] if output_hidden else None
        self.pending = PendingStep(n_slots=self.n_slots - (m + n), m=m, new=tuple(new),
                                   tokens=tuple(tuple(t.tolist()) for t in tokens), parents=tuple(parents))
        hidden = states[:, m - 1:] if output_hidden else None  # [B, N+1, H]
        return logits, hidden

    def _engine_states(self, input_ids: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor,
                       spans: list[tuple[int, int] | None]) -> torch.Tensor:
        """The engine's final-norm output [B, Q, H] for ``_inputs``' columns; ``spans[b]`` = (first, end): row b's
        real columns (None: the row sits out). One forward of B x Q columns, or, where padding would be most of
        them (ragged prompts prefilled together), one forward per row over its real columns alone
        (``engine.session.run_rows``): the same numbers either way."""
        b_size, q = input_ids.shape
        real = sum(end - first for first, end in filter(None, spans))
        if b_size == 1 or q < ROW_BY_ROW_COLUMNS or real > ROW_BY_ROW_SHARE * b_size * q:
            return engine_run(self.engine, self.kv, input_ids, positions, allowed, self._slots)[-1]
        return run_rows(self.engine, self.kv, input_ids, positions, allowed, self._slots, spans)

    def _inputs(self, new: list[tuple[int, ...] | None], tokens: list[torch.Tensor], parents: list[torch.Tensor],
                m: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """input ids [B, Q], position ids [B, Q] and which slots each column sees, allowed [B, Q, S+Q] (Q = M + N),
        on the CPU."""
        s, q = self.n_slots, m + n
        input_ids = torch.zeros(self.batch_size, q, dtype=torch.long)  # padding: token 0, position 0, masked
        positions = torch.zeros(self.batch_size, q, dtype=torch.long)
        allowed = torch.zeros(self.batch_size, q, s + q, dtype=torch.bool)  # [B, Q, kv]
        allowed[:, torch.arange(q), s + torch.arange(q)] = True  # every column sees itself (padding: only itself)
        for b, row in enumerate(new):
            if row is None:
                continue
            length, m_b, n_b = len(self.rows[b]), len(row), tokens[b].numel()
            first = m - m_b  # the row's first committed column
            depth = tree.depths(parents[b])  # [N_b]
            input_ids[b, first:m] = torch.tensor(row)
            input_ids[b, m:m + n_b] = tokens[b]
            positions[b, first:m] = torch.arange(length, length + m_b)
            positions[b, m:m + n_b] = length + m_b - 1 + depth
            real = slice(first, m + n_b)
            allowed[b, real, :length] = True  # the row's own cached entries, never its holes
            allowed[b, first:m, s + first:s + m] = torch.ones(m_b, m_b, dtype=torch.bool).tril()
            allowed[b, m:m + n_b, s + first:s + m] = True  # nodes see every committed token (the last is the root)
            allowed[b, m:m + n_b, s + m:s + m + n_b] = tree.ancestor_mask(parents[b])
        return input_ids, positions, allowed

    def _check_rows(self, ids: list[list[int] | None], tokens: list[torch.Tensor],
                    parents: list[torch.Tensor]) -> list[int]:
        """One clear ValueError per malformed row of a ``score`` call; else each row's kept prefix length."""
        context = getattr(self.model.config, "max_position_embeddings", None)
        keeps = []
        for b, row in enumerate(ids):
            if row is None:
                keeps.append(len(self.rows[b]))
                continue
            if len(row) == 0:
                raise ValueError(f"row {b}: scoring needs at least one committed token (ids is empty)")
            if tokens[b].dim() != 1:
                raise ValueError(f"row {b}: tokens must be a 1-D tensor [N], got shape {tuple(tokens[b].shape)}")
            tree.check_parents(parents[b], tokens[b].numel())
            deepest = len(row) - 1 + (int(tree.depths(parents[b]).max()) if tokens[b].numel() else 0)
            if context is not None and deepest >= context:
                raise ValueError(f"row {b} reaches position {deepest} but the model's context is {context} positions")
            keeps.append(min(common_prefix(self.rows[b], row), len(row) - 1))
        return keeps

    # ----------------------------------------------------------------------------------- keeping, leaving, checks

    def keep(self, paths: list[list[int]]) -> None:
        """Keep each row's scored committed tokens and the nodes on ``paths[b]`` (a root path of its tree, root child
        first; may be empty) in its slots L_b, L_b+1, …; drop every other column, then crop the common suffix."""
        if self.pending is None:
            raise ValueError("keep needs a step scored by score (none is pending)")
        if len(paths) != self.batch_size:
            raise ValueError(f"expected one path per row ({self.batch_size}), got {len(paths)}")
        step = self.pending
        paths = [[int(i) for i in path] for path in paths]
        for b, (row, path) in enumerate(zip(step.new, paths)):  # every check before the first change
            if row is None and path:
                raise ValueError(f"row {b} sat out the last step: it has no path to keep, got {path}")
            if path and not (0 <= path[-1] < len(step.tokens[b])
                             and path == tree.root_path(step.parents[b], path[-1])):
                raise ValueError(f"row {b}: path {path} is not a root path of its last scored tree "
                                 f"(parents {step.parents[b].tolist()})")
        batch_idx, src, dst = [], [], []  # one (row, from slot, to slot) triple per kept entry
        for b, (row, path) in enumerate(zip(step.new, paths)):
            if row is None:
                continue
            first = step.m - len(row)
            cols = list(range(first, step.m)) + [step.m + i for i in path]  # query columns to keep, in order
            length = len(self.rows[b])
            batch_idx += [b] * len(cols)
            src += [step.n_slots + c for c in cols]
            dst += list(range(length, length + len(cols)))
            self.rows[b].extend(row)
            self.rows[b].extend(step.tokens[b][i] for i in path)
        if src != dst and self.engine is not None:
            with torch.inference_mode():
                self.kv.move(*(torch.tensor(i, device=self.device) for i in (batch_idx, src, dst)))
        elif src != dst:
            with torch.inference_mode():
                for layer in self.cache.layers:
                    if layer.is_initialized:  # keys/values [B, H, S, D]: gather within each row
                        bi = torch.tensor(batch_idx, device=layer.keys.device)
                        s_at = torch.tensor(src, device=layer.keys.device)
                        d_at = torch.tensor(dst, device=layer.keys.device)
                        layer.keys[bi, :, d_at] = layer.keys[bi, :, s_at]  # [K, H, D] (the right side is a copy)
                        layer.values[bi, :, d_at] = layer.values[bi, :, s_at]
        self.pending = None
        self._crop()

    def truncate(self, row: int, length: int) -> None:
        """Keep row ``row``'s first ``length`` committed entries (its later slots become holes)."""
        if self.pending is not None:
            raise ValueError("truncate a row after keep, not while a step is pending")
        del self.rows[row][length:]
        self._crop()

    def select(self, keep: list[int]) -> None:
        """Keep only the rows ``keep`` (in that order): finished rows leave the batch (``index_select`` per layer)."""
        if self.pending is not None:
            raise ValueError("rows leave after keep, not while a step is pending")
        if not keep or len(set(keep)) != len(keep) or not all(0 <= b < self.batch_size for b in keep):
            raise ValueError(f"keep must name distinct rows of the {self.batch_size}, at least one; got {keep}")
        rows = torch.tensor(keep, dtype=torch.long, device=self.device)
        if self.engine is not None:
            self.kv.select(rows)
        else:
            self.cache.batch_select_indices(rows)
        self.rows = [self.rows[b] for b in keep]
        self._crop()

    def _crop(self) -> None:
        """Drop the slots past the longest row (the common suffix of holes)."""
        longest = max(len(row) for row in self.rows)
        if self.n_slots > longest and self.engine is not None:
            self._slots = longest  # the static cache: the slots past it are simply written again later
        elif self.n_slots > longest:
            drop_last(self.cache, self.n_slots - longest)

    def layer_entries(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's keys and values over the S slots, [B, Hkv, S, D] in the model's dtype, whichever cache holds
        them."""
        if self.engine is not None:
            return self.kv.entries(self._slots, self.engine.dtype)
        return [(layer.keys, layer.values) for layer in self.cache.layers if layer.is_initialized]

    def check(self) -> None:
        """Every layer holds B rows of S = max_b L_b slots; no step is pending."""
        if self.pending is not None:
            raise AssertionError("a scored step is pending (call keep)")
        expected = (self.batch_size, max(len(row) for row in self.rows))
        if self.engine is not None:
            if (self.kv.batch, self._slots) != expected or self.kv.capacity < self._slots:
                raise AssertionError(f"the static cache holds {self.kv.batch} rows of {self._slots} slots (capacity "
                                     f"{self.kv.capacity}), expected {expected[0]} rows of {expected[1]} slots")
            return
        for layer in self.cache.layers:
            if layer.is_initialized and layer.keys.numel() and (layer.keys.shape[0], layer.keys.shape[-2]) != expected:
                raise AssertionError(f"a cache layer holds {tuple(layer.keys.shape)}, expected {expected[0]} rows of "
                                     f"{expected[1]} slots (row lengths {[len(row) for row in self.rows]})")


def check_batchable(model: torch.nn.Module) -> None:
    """One clear error for a model the batch cache cannot drive: it needs a custom 4D mask and per-row position ids."""
    if engine_of(model) is not None:
        return  # the engine always takes both
    impl = getattr(model.config, "_attn_implementation", None)
    if impl not in TREE_ATTENTION:
        raise ValueError(f"batched decoding passes a custom 4D attention mask, which attn_implementation {impl!r} "
                         f"does not take; use one of {TREE_ATTENTION}")
    taken = inspect.signature(model.forward).parameters
    if "position_ids" not in taken or "attention_mask" not in taken:
        raise ValueError(f"batched decoding passes per-row position_ids and an attention_mask, which "
                         f"{type(model).__name__}.forward does not take")
