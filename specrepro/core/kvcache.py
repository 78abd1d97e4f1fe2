"""A causal LM with its KV cache and the token ids that cache holds.

This is the one place a cache is rolled back. Callers say which sequence they want scored; the wrapper
keeps the longest common prefix of what it holds and that sequence (``drop_last``, the one crop of the package)
and runs the model on the rest. Rejected draft entries therefore
disappear at the next call, or at once when the decoding loop calls ``rollback``.

A token tree (``specrepro.core.tree``: tokens [N], parents [N]) is scored in one forward by ``logits_for_tree``,
which leaves the N node entries in the cache after the committed ones, in tree order, as a pending tree;
``keep_path`` then keeps one root path of it, compacted, and drops the rest (a suffix crop is its prefix
case). Any other call drops a pending tree first.

Invariant, checked by ``check()``: cache length == len(self.ids) + the pending tree's node count.

Beam search and beam sampling (``specrepro.core.beam``) continue the committed tokens with B beams at once in a
``BeamCache``: a batch-B copy made from the batch-1 cache, grown one token per beam per forward and reordered as
beams are kept. The batch-1 cache is read, never written, so dropping the beams is dropping that object.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from . import tree
from ..engine import SLOT_BLOCK, engine_of, timing
from ..engine.session import run as engine_run

# Attention implementations that take a custom 4D additive float mask as-is (transformers >= 5: a 4D
# ``attention_mask`` skips mask creation in ``masking_utils._preprocess_mask_arguments`` and reaches the
# attention function unchanged; eager adds it to the scores, SDPA passes it as ``attn_mask``).
TREE_ATTENTION = ("sdpa", "eager")


def drop_last(cache: DynamicCache, n: int) -> None:
    """Drop the newest ``n`` positions of every layer of ``cache`` (n = 0: nothing).

    The package's one suffix crop: ``CachedModel`` rolls back through it, and code that runs forwards on a prefix
    cache of its own (the batching sweep, PPD training) calls it to leave that cache as it found it.
    ``DynamicCache.crop`` takes the negative count of positions to drop; ``crop(0)`` would empty the cache, hence
    the guard.
    """
    if n < 0:
        raise ValueError(f"can only drop n >= 0 positions, got {n}")
    if n:
        cache.crop(-n)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass(frozen=True)
class PendingTree:
    """The last tree scored: its nodes sit in the cache right after the ``n_committed`` committed entries."""

    n_committed: int
    tokens: list[int]  # [N] candidates
    parents: torch.Tensor  # [N] long, on the CPU
    n_prompt: int = 0  # prompt nodes cached after the candidates (PPD), always dropped

    @property
    def n_nodes(self) -> int:
        return len(self.tokens) + self.n_prompt


class CachedModel:
    """Batch size 1: ``ids`` is one sequence (``specrepro.core.batch_cache`` holds B of them).

    Two backends hold the keys and values: the engine's static cache (``specrepro.engine``: preallocated, written
    by slot, a drop is a shorter length) when the model carries an engine (``engine.attach``), else transformers'
    ``DynamicCache`` (cropped). ``backend`` says which ran.
    """

    def __init__(self, model: torch.nn.Module, prompt_len: int = 0):
        """``prompt_len``: the prompt's length, where the caller knows it (a decoding run: ``decoding.start_run``):
        the engine may compute positions below it in bulk (``StaticKV.prompt``: on AMX where the CPU has it)."""
        self.model = model
        self.device = next(model.parameters()).device
        self.engine = engine_of(model)
        self.prompt_len = prompt_len
        self.reset()

    @property
    def backend(self) -> str:
        return "transformers" if self.engine is None else self.engine.name

    def reset(self) -> None:
        if self.engine is None:
            self.cache = DynamicCache(config=self.model.config)
        else:
            self.kv = self.engine.new_cache(1, SLOT_BLOCK)
            self.kv.set_prompt([self.prompt_len])
            self._slots = 0  # slots [0, _slots) hold ids then a pending tree's nodes
        self.ids: list[int] = []  # committed tokens whose keys/values are in the cache, at positions 0..len-1
        self.tree: PendingTree | None = None  # nodes cached after self.ids by logits_for_tree, not yet kept

    @property
    def cache_len(self) -> int:
        return self.cache.get_seq_length() if self.engine is None else self._slots

    def _drop(self, n: int) -> None:
        """Drop the newest n cached positions: a crop of transformers' cache, a shorter length of the engine's."""
        if self.engine is None:
            drop_last(self.cache, n)
        elif not 0 <= n <= self._slots:
            raise ValueError(f"can only drop 0..{self._slots} positions, got {n}")
        else:
            self._slots -= n

    @property
    def tracked_len(self) -> int:
        return len(self.ids) + (self.tree.n_nodes if self.tree is not None else 0)

    def _drop_tree(self) -> None:
        if self.tree is not None:
            self._drop(self.tree.n_nodes)
            self.tree = None

    def rollback(self, keep: int) -> None:
        """Drop every cached position from ``keep`` on (and a pending tree)."""
        self._drop_tree()
        drop = len(self.ids) - keep
        if drop > 0:
            self._drop(drop)
            del self.ids[keep:]

    def logits_for(self, ids: list[int], n_last: int = 1) -> torch.Tensor:
        """Score ``ids``: returns logits [n_last, V] for its last ``n_last`` positions.

        Row i is the next-token distribution after ids[: len(ids) - n_last + i + 1], so the final row is the
        next-token logits after all of ``ids``. The positions not already cached are run (at least n_last of them);
        only the last n_last rows go through the LM head (a prefill pays one row of it, not one per prompt token).
        """
        if not 1 <= n_last <= len(ids):
            raise ValueError(f"n_last must be in [1, {len(ids)}], got {n_last}")
        keep = min(common_prefix(self.ids, ids), len(ids) - n_last)
        self.rollback(keep)
        new = ids[keep:]
        if self.engine is not None:
            n = len(new)
            allowed = torch.ones(n, keep + n, dtype=torch.bool)
            allowed[:, keep:] = torch.ones(n, n, dtype=torch.bool).tril()  # [n, kv]: the cache, then causal
            hidden = self._engine_run(torch.tensor([new]), torch.arange(keep, keep + n)[None], allowed)
            logits = self.engine.logits(hidden[-1][:, -n_last:])[0]  # [n_last, V]
        else:
            tokens = torch.tensor([new], dtype=torch.long, device=self.device)  # [1, n_new]
            with torch.inference_mode(), timing.forward():
                logits = self.model(input_ids=tokens, cache=self.cache, use_cache=True,
                                    logits_to_keep=n_last).logits[0]  # [n_last, V]
        self.ids.extend(new)
        return logits

    def _engine_run(self, tokens: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor,
                    prompt_embeds: torch.Tensor | None = None) -> torch.Tensor:
        """The engine's forward over tokens [1, Q'] (host; then any prompt_embeds [P, H]) at positions [1, Q],
        written at slots cache_len.. and seeing ``allowed [Q, cache_len + Q]``: hidden [L+1, 1, Q, H]."""
        extra = None if prompt_embeds is None else prompt_embeds[None]  # [1, P, H]
        hidden = engine_run(self.engine, self.kv, tokens, positions, allowed[None], self._slots, extra)
        self._slots += positions.shape[1]
        return hidden

    def logits_for_tree(self, ids: list[int], tokens: torch.Tensor | list[int], parents: torch.Tensor | list[int],
                        output_hidden: bool = False, prompt_embeds: torch.Tensor | None = None,
                        prompt_parents: torch.Tensor | None = None, all_hidden: bool = False,
                        hidden_layers: tuple[int, ...] = (-1,)) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Score a token tree after the committed ``ids`` in one forward: (logits [N+1, V], hidden [N+1+P, H] | None).

        Row 0 is the next-token distribution after ``ids``, row i+1 the one after node i's root path (the row
        convention of ``specrepro.core.tree``). ``hidden`` (with ``output_hidden``) is the final hidden state that
        feeds the LM head, after the final norm. The cache first keeps its common prefix with ids[:-1]; the
        forward runs on the uncached committed tokens (M >= 1, usually just ids[-1]) then the N nodes, with
        position ids len(ids)−1 + depth and a tree attention mask; a chain takes the plain causal path. After
        it the cache holds ids and then the N nodes as a pending tree, until ``keep_path`` or any other call.

        Prompt nodes (PPD): ``prompt_embeds [P, H]`` with ``prompt_parents [P]`` (−1 the root, 0..N−1 a
        candidate, N.. an earlier prompt node) join the same tree after the candidates, with input embeddings
        instead of token ids. They get no logits (only hidden rows N+1.., with ``output_hidden``), and
        ``keep_path`` drops them with the unaccepted candidates.

        EAGLE's scorer asks for more of the hidden states: ``all_hidden`` returns the rows of the M−1 uncached
        committed tokens before the root too (hidden [M+N+P, F]), and ``hidden_layers`` concatenates several
        ``hidden_states`` entries (F = H × their number; −1, the default, is the final-norm output).
        """
        ids = list(ids)
        tokens = torch.as_tensor(tokens, dtype=torch.long).cpu()
        parents = torch.as_tensor(parents, dtype=torch.long).cpu()
        n_prompt = 0 if prompt_embeds is None else prompt_embeds.shape[0]
        tree.check_parents(parents, tokens.numel())
        if prompt_embeds is not None:
            if prompt_parents is None:
                raise ValueError("prompt_embeds need prompt_parents [P]")
            parents = torch.cat([parents, torch.as_tensor(prompt_parents, dtype=torch.long).cpu()])
        self._check_tree(ids, tokens, parents)
        chain = n_prompt == 0 and tree.is_chain(parents)
        if not chain:
            self._check_tree_attention()

        keep = min(common_prefix(self.ids, ids), len(ids) - 1)
        self.rollback(keep)  # (drops a pending tree too)
        m, n = len(ids) - keep, tokens.numel()  # uncached committed tokens, candidate nodes
        new = torch.tensor([ids[keep:] + tokens.tolist()], dtype=torch.long)  # [1, M+N]
        if self.engine is not None:
            positions, allowed = self._tree_allowed(keep, m, parents)
            hidden = self._engine_run(new, positions[None], allowed, prompt_embeds)  # [L+1, 1, M+N+P, H]
            logits = self.engine.logits(hidden[-1][:, m - 1:m + n])[0]  # [N+1, V]
            states = hidden[list(hidden_layers), 0] if output_hidden else None  # [k, M+N+P, H]
        else:
            logits, states = self._hf_tree(new.to(self.device), keep, m, n, parents, chain, prompt_embeds,
                                           output_hidden, hidden_layers)
        self.ids.extend(ids[keep:])
        self.tree = PendingTree(n_committed=len(ids), tokens=tokens.tolist(), parents=parents[:n], n_prompt=n_prompt)
        hidden = None
        if output_hidden:
            states = torch.cat(list(states), dim=-1)  # [M+N+P, F]
            hidden = states if all_hidden else states[m - 1:]  # [M+N+P, F] or [N+1+P, F]
        return logits, hidden

    def _hf_tree(self, new: torch.Tensor, keep: int, m: int, n: int, parents: torch.Tensor, chain: bool,
                 prompt_embeds: torch.Tensor | None, output_hidden: bool,
                 hidden_layers: tuple[int, ...]) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """The transformers forward of ``logits_for_tree``: (logits [N+1, V], the asked hidden states [M+N+P, H])."""
        # A chain's tree mask and positions are the causal ones: let the model build them (cheaper, same result).
        position_ids, mask = (None, None) if chain else self._tree_inputs(keep, m, parents)
        if prompt_embeds is not None:
            embed = self.model.get_input_embeddings()
            # [1, M+N+P, H]: the tokens' embeddings, then the prompt nodes' own
            inputs = {"inputs_embeds": torch.cat([embed(new), prompt_embeds.to(embed.weight)[None]], dim=1)}
            keep_rows = torch.arange(m - 1, m + n, device=self.device)  # logits for the root and the N candidates
        else:
            inputs, keep_rows = {"input_ids": new}, n + 1
        with torch.inference_mode(), timing.forward():
            out = self.model(**inputs, attention_mask=mask, position_ids=position_ids, cache=self.cache,
                             use_cache=True, logits_to_keep=keep_rows, output_hidden_states=output_hidden)
        # transformers 5 ties hidden_states[-1] to last_hidden_state, the final-norm output the LM head reads.
        states = [out.hidden_states[i][0] for i in hidden_layers] if output_hidden else None
        return out.logits[0, -(n + 1):], states

    @staticmethod
    def _tree_allowed(n_cached: int, m: int, parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """position ids [M+N+P] and which slots each column may see, allowed [M+N+P, n_cached+M+N+P] (bool).

        The M committed columns see the cache and each other causally; node i sees the cache, all M committed
        columns (the last is the tree's root) and its own root path (itself and its ancestors), nothing else.
        """
        n = parents.numel()
        newest = n_cached + m - 1  # position of the newest committed token, the root
        positions = torch.cat([torch.arange(n_cached, newest + 1), newest + tree.depths(parents)])  # [M+N]
        allowed = torch.zeros(m + n, n_cached + m + n, dtype=torch.bool)  # [M+N, kv]
        allowed[:, :n_cached] = True
        allowed[:m, n_cached:n_cached + m] = torch.ones(m, m, dtype=torch.bool).tril()
        allowed[m:, n_cached:n_cached + m] = True
        allowed[m:, n_cached + m:] = tree.ancestor_mask(parents)
        return positions, allowed

    def _tree_inputs(self, n_cached: int, m: int, parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """position ids [1, M+N] and the additive tree mask [1, 1, M+N, n_cached+M+N] for transformers' forward."""
        positions, allowed = self._tree_allowed(n_cached, m, parents)
        # Additive float, 0 = attend: eager adds the mask to the scores (a bool mask would be added as 0/1),
        # SDPA takes a float mask in the query dtype, so one form serves both.
        dtype = self.model.get_input_embeddings().weight.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
        return positions[None].to(self.device), mask[None, None].to(self.device)

    def keep_path(self, path: list[int]) -> None:
        """Keep the committed entries and the pending tree's nodes on ``path`` (a root path, root child first;
        may be empty) at consecutive positions; drop every other node. Then ids == committed + path tokens."""
        if self.tree is None:
            raise ValueError("keep_path needs a tree scored by logits_for_tree (none is pending)")
        pending, path = self.tree, [int(i) for i in path]
        n, k, n_nodes = pending.n_committed, len(path), pending.n_nodes
        if path and not (0 <= path[-1] < len(pending.tokens) and path == tree.root_path(pending.parents, path[-1])):
            raise ValueError(f"path {path} is not a root path of the last scored tree "
                             f"(parents {pending.parents.tolist()})")
        if path != list(range(k)):
            # Move the kept nodes' entries to n, n+1, …, n+k−1 in every layer (keys/values [B, H, S, D]); the
            # crop below drops the rest. RoPE was applied before caching, at position n−1 + depth; on a root
            # path the depths are 1, 2, …, k, so each kept key already carries its new position exactly.
            src = torch.tensor(path, dtype=torch.long) + n  # [k] cache indices of the kept nodes
            if self.engine is not None:  # (row, from, to) of each kept entry, in one copy to the device
                moves = torch.stack([torch.zeros_like(src), src, torch.arange(n, n + k)]).to(self.device)  # [3, k]
                with torch.inference_mode():
                    self.kv.move(*moves)
            with torch.inference_mode():
                for layer in self.cache.layers if self.engine is None else ():
                    if layer.is_initialized:  # (a layer sharing another's KV may hold none)
                        at = src.to(layer.keys.device)
                        layer.keys[..., n:n + k, :] = layer.keys[..., at, :]
                        layer.values[..., n:n + k, :] = layer.values[..., at, :]
        self._drop(n_nodes - k)
        self.ids.extend(pending.tokens[i] for i in path)
        self.tree = None

    def _check_tree(self, ids: list[int], tokens: torch.Tensor, parents: torch.Tensor) -> None:
        """One clear ValueError per malformed call of logits_for_tree (``parents`` covers any prompt nodes too)."""
        if not ids:
            raise ValueError("logits_for_tree needs at least one committed token (ids is empty)")
        if tokens.dim() != 1:
            raise ValueError(f"tokens must be a 1-D tensor [N], got shape {tuple(tokens.shape)}")
        tree.check_parents(parents)
        context = getattr(self.model.config, "max_position_embeddings", None)
        deepest = len(ids) - 1 + (int(tree.depths(parents).max()) if parents.numel() else 0)
        if context is not None and deepest >= context:
            raise ValueError(f"the tree reaches position {deepest} but the model's context is {context} positions "
                             f"({len(ids)} committed tokens)")

    def _check_tree_attention(self) -> None:
        if self.engine is not None:
            return  # the engine's mask is always an input
        impl = self.model.config._attn_implementation
        if impl not in TREE_ATTENTION:
            raise ValueError(f"tree attention needs a custom 4D mask, which attn_implementation {impl!r} does not "
                             f"take; use one of {TREE_ATTENTION} (or score a chain)")
        # A sliding-window or indexed layer holds more than plain keys/values, which keep_path would not move.
        odd = {type(layer).__name__ for layer in self.cache.layers if type(layer) is not DynamicLayer}
        if odd:
            raise ValueError(f"tree attention needs plain full-attention cache layers, this cache has {sorted(odd)}")

    def layer_entries(self) -> list[tuple[torch.Tensor | None, torch.Tensor | None]]:
        """Each layer's committed keys and values [1, Hkv, len(ids), D] in the model's dtype (None for a layer that
        holds none), for beams, which run on transformers' cache (``BeamCache``)."""
        if self.engine is not None:
            return self.kv.entries(len(self.ids), self.engine.dtype)
        return [(layer.keys, layer.values) if layer.is_initialized else (None, None) for layer in self.cache.layers]

    def check(self) -> None:
        if self.engine is not None and self.kv.capacity < self._slots:
            raise AssertionError(f"the static cache holds {self.kv.capacity} slots but {self._slots} are in use")
        if self.cache_len != self.tracked_len:
            raise AssertionError(f"cache holds {self.cache_len} positions but {len(self.ids)} token ids"
                                 + (f" and {len(self.tree.tokens)} tree nodes" if self.tree is not None else ""))


class BeamCache:
    """B beams continuing a CachedModel's committed tokens, scored together: one forward of B rows per step.

    It starts with one beam, the committed sequence itself, whose entries are the CachedModel's (shared, batch 1).
    ``step(parents, tokens)`` makes beam b of the new step continue beam ``parents[b]`` of the last one with
    ``tokens[b]``: the entries are gathered by ``parents`` (``index_select``, a new [B, H, S, D] tensor per layer)
    and the forward appends one position per beam (``DynamicLayer`` concatenates, again a new tensor). Neither
    writes into the batch-1 cache, so it stays equal to what a fresh forward over the committed tokens gives, and
    the beams go when this object does. Positions follow from the cache length: every beam is as long as the others.
    """

    def __init__(self, lm: CachedModel):
        lm._drop_tree()  # as any other call does: a pending tree is not part of the committed sequence
        if not lm.ids or lm.cache_len != len(lm.ids):
            raise ValueError(f"beams start from a cache that holds the committed tokens; it holds {lm.cache_len} "
                             f"positions for {len(lm.ids)} token ids (score the prefix with logits_for first)")
        odd = {type(layer).__name__ for layer in lm.cache.layers if type(layer) is not DynamicLayer} \
            if lm.engine is None else set()
        if odd:
            raise ValueError(f"beams need plain full-attention cache layers, this cache has {sorted(odd)}")
        self.lm = lm
        self.n_prefix = len(lm.ids)  # committed positions every beam starts from
        self.num_beams = 1  # beams after the last step (the committed sequence alone before the first)
        self.steps = 0  # positions each beam has added
        self.cache = DynamicCache(config=lm.model.config)
        for mine, (keys, values) in zip(self.cache.layers, lm.layer_entries()):
            if keys is not None:
                mine.lazy_initialization(keys, values)
                mine.keys, mine.values = keys, values  # [1, H, S, D], shared until the first step

    def step(self, parents: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """parents [B] (beams of the last step), tokens [B] -> logits [B, V]: row b is the next-token logits after
        beam parents[b] extended by tokens[b]."""
        parents, tokens = torch.as_tensor(parents, dtype=torch.long), torch.as_tensor(tokens, dtype=torch.long)
        if parents.dim() != 1 or tokens.shape != parents.shape or parents.numel() == 0:
            raise ValueError(f"expected parents [B] and tokens [B], B >= 1; got {tuple(parents.shape)} and "
                             f"{tuple(tokens.shape)}")
        if int(parents.min()) < 0 or int(parents.max()) >= self.num_beams:
            raise ValueError(f"parents must index the {self.num_beams} beams of the last step, got {parents.tolist()}")
        device = self.lm.device
        with torch.inference_mode():
            self.cache.reorder_cache(parents.to(device))  # [1 or B', H, S, D] -> [B, H, S, D]
            out = self.lm.model(input_ids=tokens.to(device)[:, None], cache=self.cache, use_cache=True,
                                logits_to_keep=1)  # input [B, 1]
        self.num_beams, self.steps = parents.numel(), self.steps + 1
        return out.logits[:, -1]  # [B, V]

    def check(self) -> None:
        """Every beam holds the committed positions and its own ``steps`` new ones; the batch-1 cache is unchanged."""
        expected = (self.num_beams, self.n_prefix + self.steps)
        for layer in self.cache.layers:
            if layer.is_initialized and (layer.keys.shape[0], layer.keys.shape[-2]) != expected:
                raise AssertionError(f"a beam cache layer holds {tuple(layer.keys.shape)}, expected "
                                     f"{expected[0]} beams of {expected[1]} positions")
        if len(self.lm.ids) != self.n_prefix:
            raise AssertionError(f"the committed sequence changed under the beams ({self.n_prefix} -> "
                                 f"{len(self.lm.ids)} tokens)")
        self.lm.check()
