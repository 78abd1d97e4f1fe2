"""EAGLE: a one-layer draft on the target's own features (Li et al. 2024), with EAGLE-2's dynamic tree.

The draft reads, at position j, the pair (f_{j-1}, x_j): the target's feature f_{j-1} (its final hidden state at
position j−1, after the final norm, what the LM head reads; or several layers' states concatenated, EAGLE-3's
fused features) and the embedding of the token x_j that was drawn from it. One linear map fuses the pair into the
hidden size, one decoder layer of the target's own shape (initialised from the target's last layer) runs over
the pairs with causal attention and its own KV cache, and a final norm gives f̂_j, its prediction of the target's
next feature f_j. The target's LM head on f̂_j, restricted to the draft vocabulary (EAGLE-3's reduced head, or
all V), gives q(x_{j+1}).

In the loop no extra target forward is needed: the verification forward of step s already computed the features
of the root and of every accepted node, and the loop hands them over in ``feedback`` (``needs_hidden``), as it
does for Medusa heads. The draft's cache keeps the committed pairs (1..L−1 for L committed tokens); each step
adds the accepted path's pairs and the bonus token's. The first step's scorer also keeps the prompt's features
(``score`` asks the target's forward for every row it runs), so the draft attends the whole context.

Drafting a tree from the committed pairs, depth by depth (a node's input pair is (f̂ of its parent, its token)):

- ``dynamic`` (EAGLE-2): the top-k children of each of the k most probable nodes of the last depth, so k draft
  rows per depth; every candidate is scored by the product of the draft's probabilities along its path, and the
  ``tree_size`` best are kept (a child never outranks its parent, so the kept set is a tree);
- ``static``: a fixed tree of rank paths, the ``tree_size`` most probable under the held-out rank probabilities
  (Medusa's sparse tree, ``medusa.sparse_tree``); ``chain``: the top-1 chain of γ tokens.

The candidates are deterministic (q one-hot), so the loop's exact rule keeps the output distributed as p at any
temperature; a reduced vocabulary only limits what can be proposed.

A trained draft is a folder: ``eagle.safetensors`` (fc, the layer, the norm, the draft vocabulary),
``eagle_config.json`` (``EagleConfig``, with the held-out rank probabilities by depth) and, when trained by
``specrepro.training.eagle``, its ``training_record.json``. The embedding and the LM head are the target's.
"""
from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..core.config import SamplingConfig
from ..core.proposal import Scores
from ..core.tree import TreeSize
from ..engine import timing
from ..engine.llama import linear, module_linear
from . import medusa
from .base import Proposal, StepFeedback, TreeDrafter, warm_median
from .weights import read_folder, save_folder

EAGLE_CONFIG = "eagle_config.json"
WEIGHTS = "eagle.safetensors"
DEFAULT_TREE_SIZE = 8  # nodes, when neither --tree-size nor a device profile chooses
SHAPES = ("dynamic", "static", "chain")


@dataclass(frozen=True)
class EagleConfig:
    hidden_size: int  # H of the target
    feature_layers: tuple[int, ...] = (-1,)  # hidden_states indices fused into f (-1: the final-norm output)
    draft_vocab: int = 0  # rows of the reduced head (0: the full vocabulary)
    depth: int = 5  # deepest tree the rank probabilities below cover
    top_k: int = 4  # children per expanded node (dynamic) and ranks per depth (static)
    target: str = "smollm2-135m-instruct"
    # rank_probs[d][i]: P(the truth at depth d+1 is the draft's (i+1)-th guess | the path above it is right), held out
    rank_probs: tuple[tuple[float, ...], ...] = ()

    @property
    def feature_size(self) -> int:
        return self.hidden_size * len(self.feature_layers)


class KV:
    """The draft layer's keys and values (each [B, H_kv, S, D]); ``keep(n)`` drops every position from n on."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values

    @property
    def length(self) -> int:
        return self.keys.shape[-2]

    def keep(self, n: int) -> None:
        self.keys, self.values = self.keys[..., :n, :], self.values[..., :n, :]


class EagleDraft(torch.nn.Module):
    """fc (the pair -> H), one decoder layer of the target's shape, a final norm: pairs -> predicted features."""

    def __init__(self, target: torch.nn.Module, config: EagleConfig):
        super().__init__()
        backbone = target.model
        if config.feature_layers[-1] != -1:
            raise ValueError(f"feature_layers must end with -1 (the final-norm state the draft predicts), got "
                             f"{config.feature_layers}")
        # EAGLE-3: several layers' states [F] are first fused to H; the draft's own f̂ replaces that fused g in the tree.
        self.fuse = torch.nn.Linear(config.feature_size, config.hidden_size) if len(config.feature_layers) > 1 else None
        self.fc = torch.nn.Linear(2 * config.hidden_size, config.hidden_size)
        self.layer = copy.deepcopy(backbone.layers[-1])  # the target's last layer: its shape and a warm start
        self.norm = copy.deepcopy(backbone.norm)
        attn = self.layer.self_attn
        self.n_heads, self.n_kv = attn.config.num_attention_heads, attn.config.num_key_value_heads
        self.head_dim, self.scaling = attn.head_dim, attn.scaling
        vocab = torch.arange(0) if not config.draft_vocab else torch.zeros(config.draft_vocab, dtype=torch.long)
        self.register_buffer("vocab", vocab)  # [V_d] ids of the reduced head (empty: the full vocabulary)
        # Shared with the target, not part of the draft's weights.
        self.__dict__["_rotary"], self.__dict__["_embed"] = backbone.rotary_emb, target.get_input_embeddings()
        self.__dict__["_lm_head"] = target.get_output_embeddings()
        with torch.no_grad():  # fc starts as "take the feature" (+ nothing of the token): f̂ ≈ the layer on f
            self.fc.weight.zero_()
            self.fc.bias.zero_()
            self.fc.weight[:, :config.hidden_size].copy_(torch.eye(config.hidden_size))
            if self.fuse is not None:  # and fusing starts as "take the last layer's part"
                self.fuse.weight.zero_()
                self.fuse.bias.zero_()
                self.fuse.weight[:, -config.hidden_size:].copy_(torch.eye(config.hidden_size))

    def reduce(self, features: torch.Tensor) -> torch.Tensor:
        """The target's features [..., F] -> the draft's input state g [..., H] (fused when F > H)."""
        features = features.to(self.fc.weight.dtype)
        return features if self.fuse is None else module_linear(self.fuse, features)

    def forward(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor,
                past: KV | None = None) -> tuple[torch.Tensor, KV]:
        """features [B, S, H] (``reduce``d target features, or the draft's own f̂ inside a tree), tokens [B, S],
        positions [B, S], allowed [S, K+S] bool (query i may see key j; the K past keys first), past: K cached
        keys/values -> (f̂ [B, S, H], the keys/values of K+S positions)."""
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
        embeds = self._embed(tokens).to(self.fc.weight.dtype)  # [B, S, H]
        x = module_linear(self.fc, torch.cat([features.to(embeds.dtype), embeds], dim=-1))  # [B, S, H]
        layer, attn = self.layer, self.layer.self_attn
        b, s, _ = x.shape
        h = layer.input_layernorm(x)
        q = module_linear(attn.q_proj, h).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)  # [B, nh, S, D]
        k = module_linear(attn.k_proj, h).view(b, s, self.n_kv, self.head_dim).transpose(1, 2)  # [B, H_kv, S, D]
        v = module_linear(attn.v_proj, h).view(b, s, self.n_kv, self.head_dim).transpose(1, 2)
        cos, sin = self._rotary(x, positions)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if past is not None:
            k, v = torch.cat([past.keys, k], dim=-2), torch.cat([past.values, v], dim=-2)  # [B, H_kv, K+S, D]
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed.to(q.device),
                                                               scale=self.scaling, enable_gqa=True)  # [B, nh, S, D]
        x = x + module_linear(attn.o_proj, out.transpose(1, 2).reshape(b, s, -1))
        h, mlp = layer.post_attention_layernorm(x), layer.mlp
        gated = mlp.act_fn(module_linear(mlp.gate_proj, h)) * module_linear(mlp.up_proj, h)
        x = x + module_linear(mlp.down_proj, gated)
        return self.norm(x), KV(k, v)

    def head_weight(self) -> torch.Tensor:
        """[V_d, H]: the LM head's rows of the draft vocabulary (all of it without one). Gathered once and kept
        (a gather of V_d rows every draft step would read as many bytes as the product itself)."""
        weight = self._lm_head.weight
        if not self.vocab.numel():
            return weight
        key = (weight.data_ptr(), weight.dtype, self.vocab.data_ptr(), self.vocab._version)
        if self.__dict__.get("_head_key") != key:
            self.__dict__["_head"], self.__dict__["_head_key"] = weight[self.vocab].detach(), key
        return self.__dict__["_head"]

    def logits(self, feature: torch.Tensor) -> torch.Tensor:
        """The draft head on predicted features [..., H] -> [..., V_d] (V_d = V without a reduced vocabulary)."""
        with timing.forward():  # a draft forward (engine.timing: a step's split)
            weight = self.head_weight()
            return linear(feature.to(weight.dtype), weight)

    def token_ids(self, rows: torch.Tensor) -> torch.Tensor:
        """Head rows -> token ids."""
        return rows if not self.vocab.numel() else self.vocab[rows]


def save_draft(draft: EagleDraft, config: EagleConfig, folder: str | Path) -> Path:
    return save_folder(folder, draft.state_dict(), WEIGHTS, EAGLE_CONFIG, asdict(config))


def read_config(folder: str | Path) -> EagleConfig:
    d, _ = read_folder(folder, WEIGHTS, EAGLE_CONFIG, "EAGLE draft")
    return EagleConfig(**{**d, "feature_layers": tuple(d["feature_layers"])})


def load_draft(folder: str | Path, target: torch.nn.Module) -> tuple[EagleDraft, EagleConfig]:
    """A saved draft on ``target`` (its embedding, rotary and LM head), in the target's dtype and device."""
    d, tensors = read_folder(folder, WEIGHTS, EAGLE_CONFIG, "EAGLE draft")
    config = EagleConfig(**{**d, "feature_layers": tuple(d["feature_layers"])})
    if config.hidden_size != target.config.hidden_size:
        raise ValueError(f"this EAGLE draft was trained for hidden size {config.hidden_size}, the target has "
                         f"{target.config.hidden_size}")
    draft = EagleDraft(target, config)
    tensors["vocab"] = tensors["vocab"].long()
    draft.load_state_dict(tensors)
    param = next(target.parameters())
    return draft.to(device=param.device, dtype=param.dtype).eval().requires_grad_(False), config


def causal(n_past: int, n: int) -> torch.Tensor:
    """allowed [n, n_past+n]: every new position sees the past and the new ones up to itself."""
    return torch.cat([torch.ones(n, n_past, dtype=torch.bool), torch.ones(n, n, dtype=torch.bool).tril()], dim=1)


def choose_tree_size(config: EagleConfig, profile, gamma: int | str = "auto", draft_step_s: float = 0.0) -> TreeSize:
    """The hardware-aware tree size on a device profile: the n maximising τ(n)/(L_fp(n+1) + d(n)·t), τ predicted
    from the draft's held-out rank probabilities by depth (``medusa.hardware_tree_size``, the PPD paper's §4.2
    rule), t = ``draft_step_s`` the draft's measured forward (``EagleDrafter.forward_seconds``) and d(n) = min(n,
    depth) the forwards a dynamic tree of n nodes runs (the committed pairs' and one per depth below the first)."""
    depth = min(config.depth, gamma) if isinstance(gamma, int) else config.depth
    size, curve = medusa.hardware_tree_size(config.rank_probs, depth, profile.l_fp, profile.n_max - 1,
                                            lambda n: min(n, depth) * draft_step_s)
    forwards = min(size, depth)
    drafting = (f"{forwards} draft forward{'s' if forwards != 1 else ''} of {1e3 * draft_step_s:.2f} ms"
                if draft_step_s else None)
    return medusa.sized_tree(size, curve[size], profile, drafting)


class EagleDrafter(TreeDrafter):
    """Drafts a token tree with the one-layer draft from the features the last verification left.

    The first step of a generation has no features yet and proposes nothing (one plain step, which also prefills
    the prompt and hands its features over). γ is the tree's depth; ``tree_size`` its nodes."""

    name = "eagle"
    needs_hidden = True

    def __init__(self, draft: EagleDraft, config: EagleConfig, tree_size: int = DEFAULT_TREE_SIZE,
                 shape: str = "dynamic", top_k: int | None = None, paths: tuple[tuple[int, ...], ...] | None = None):
        if tree_size < 1:
            raise ValueError(f"tree size must be >= 1, got {tree_size}")
        if shape not in SHAPES:
            raise ValueError(f"tree shape must be one of {', '.join(SHAPES)}, got {shape!r}")
        if shape == "static" and paths is None and not config.rank_probs:
            raise ValueError("a static EAGLE tree is built from measured rank probabilities; this draft has none")
        super().__init__(config, tree_size)
        self.draft, self.shape, self.paths = draft, shape, paths
        self.top_k = top_k or config.top_k
        self.reset()

    def resized(self, tree_size: int) -> "EagleDrafter":
        if self.paths is not None:
            raise ValueError("this EAGLE drafter runs a tree given to it (paths): it cannot be resized")
        return EagleDrafter(self.draft, self.config, tree_size, self.shape, self.top_k)

    def forward_seconds(self, repeats: int = 5, context: int = 64) -> float:
        """Seconds per draft forward on this machine, measured in place: a full-depth dynamic tree's proposal (the
        committed pair's forward, then one per depth, ``_dynamic``'s own bookkeeping included) over its forwards,
        the median of ``repeats`` after a context of ``context`` pairs. ``choose_tree_size`` weighs trees by it."""
        probe = EagleDrafter(self.draft, self.config, self.top_k * self.config.depth, "dynamic", self.top_k)
        param = self.draft.fc.weight
        feature = torch.zeros(self.config.feature_size, dtype=param.dtype, device=param.device)
        probe.pending = [(feature, 0, j) for j in range(context)]
        positions = iter(range(context, context + repeats + 1))  # (the first runs the context's pairs too)

        def once() -> float:
            j = next(positions)
            start = time.perf_counter()
            proposal = probe.propose(list(range(j)), self.config.depth, SamplingConfig(), None)
            seconds = (time.perf_counter() - start) / proposal.calls
            probe.pending = [(feature, 0, j)]
            return seconds
        return warm_median(once, repeats)

    def reset(self) -> None:
        self.kv: KV | None = None  # the draft's keys/values of the committed pairs (positions first..first+len−1)
        self.first = 0  # the position of the first cached pair
        self.pending: list[tuple[torch.Tensor, int, int]] = []  # pairs not yet run: (f_{j−1} [F], x_j, j)
        self.context: torch.Tensor | None = None  # [m−1, F] features of the committed tokens the scorer ran before the root
        self.root = -1  # the position of the root of the last scored tree

    # ------------------------------------------------------------------ the target's side

    def score(self, model, ids: list[int], tokens: torch.Tensor, parents: torch.Tensor) -> Scores:
        """The target's tree forward, keeping the features of every committed position it runs (the prompt's at
        the first step, so that the draft sees the whole context)."""
        logits, hidden = model.logits_for_tree(ids, tokens, parents, output_hidden=True, all_hidden=True,
                                               hidden_layers=self.config.feature_layers)
        m = hidden.shape[0] - tokens.numel()  # committed positions run (the root and the uncached before it)
        self.context, self.root = hidden[:m - 1], len(ids) - 1
        return Scores(logits=logits, hidden=hidden[m - 1:], n_inputs=1 + tokens.numel())

    def feedback(self, step: StepFeedback) -> None:
        """Queue the pairs the step committed: (f_{j−1}, x_j) for the context rows, the root and the accepted
        path (its last pair pairs the bonus token with the feature that drew it)."""
        feats = torch.cat([self.context, step.hidden[[0] + [i + 1 for i in step.path]]])  # [r, F]
        first = self.root - self.context.shape[0] + 1  # token position of the first new pair
        for i, f in enumerate(feats):
            j = first + i
            if j < len(step.ids):  # a stop inside the path commits fewer tokens
                self.pending.append((f, step.ids[j], j))
        self.context = None

    # ------------------------------------------------------------------ the draft's side

    def _run(self, feats: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor
             ) -> torch.Tensor:
        """One draft forward over S new pairs (feats [S, F], tokens [S], positions [S]), their keys appended;
        -> f̂ [S, H]."""
        with timing.forward():
            out, self.kv = self.draft(feats[None], tokens[None], positions[None], allowed, self.kv)
        return out[0]

    def _commit_pending(self, ids: list[int]) -> torch.Tensor:
        """Run the queued committed pairs through the draft -> f̂ of the newest one [H] (it predicts the first
        draft token's distribution)."""
        with timing.forward():
            feats = self.draft.reduce(torch.stack([f for f, _, _ in self.pending]))  # [S, F] -> [S, H]
        tokens = torch.tensor([t for _, t, _ in self.pending], device=feats.device)
        positions = torch.tensor([j for _, _, j in self.pending], device=feats.device)
        if self.kv is None:
            self.first = int(positions[0])
        n_past = self.kv.length if self.kv is not None else 0
        if self.first + n_past != int(positions[0]) or int(positions[-1]) != len(ids) - 1:
            raise AssertionError(f"the draft's pairs are out of step: {n_past} cached from position {self.first}, "
                                 f"queued {positions.tolist()}, {len(ids)} committed tokens")
        out = self._run(feats, tokens, positions, causal(n_past, len(self.pending)))
        self.pending = []
        return out[-1]

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        if not self.pending:  # no features yet (the first step)
            return Proposal.empty()
        with torch.inference_mode():
            root = self._commit_pending(ids)
            committed = self.kv.length
            if self.shape == "dynamic":  # (a tree of N nodes is at most N deep: deeper expansions would be dropped)
                tokens, parents, calls = self._dynamic(root, len(ids), min(gamma, self.tree_size))
            else:
                tokens, parents, calls = self._fixed(root, len(ids), gamma)
            self.kv.keep(committed)  # drop the tree's pairs
        return Proposal(tokens=tokens, probs=None, calls=calls, parents=parents)

    def _expand(self, parent_feats: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
                ancestors: torch.Tensor) -> torch.Tensor:
        """Run tree nodes (their parents' f̂ [n, H], their tokens [n], positions [n]) after the committed pairs
        and the tree pairs already run; ``ancestors`` [n, T] bool marks which of those T tree pairs each sees.
        -> the nodes' log q rows [n, V_d] and f̂ [n, H]."""
        committed = self.kv.length - ancestors.shape[1]
        n = tokens.numel()
        allowed = torch.cat([torch.ones(n, committed, dtype=torch.bool), ancestors,
                             torch.eye(n, dtype=torch.bool)], dim=1)  # [n, K+n]
        out = self._run(parent_feats, tokens, positions, allowed)
        return self.draft.logits(out).float().log_softmax(-1), out

    def _dynamic(self, root: torch.Tensor, n_ids: int, gamma: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """EAGLE-2: expand the top-k children of the k best nodes of each depth, rerank every candidate by its
        path probability, keep ``tree_size``. Returns (tokens [N], parents [N], draft forwards)."""
        k, device = self.top_k, root.device
        logq = self.draft.logits(root).float().log_softmax(-1)  # [V_d]
        top = logq.topk(min(k, logq.numel()))
        # Candidates so far: token id, parent candidate (−1 root), path log-probability, depth.
        tok = [self.draft.token_ids(top.indices).cpu()]
        par = [torch.full((top.indices.numel(),), -1, dtype=torch.long)]
        score = [top.values.cpu()]
        depth = [torch.ones(top.indices.numel(), dtype=torch.long)]
        frontier = torch.arange(top.indices.numel())  # candidate indices to expand next
        frontier_feat = root[None].expand(frontier.numel(), -1)  # [n, H] the f̂ their pairs read
        run: list[int] = []  # candidate index of each tree pair run so far (its position in the draft cache)
        calls = 1
        for d in range(2, gamma + 1):
            tokens_all, parents_all = torch.cat(tok), torch.cat(par)
            ancestors = torch.zeros(frontier.numel(), len(run), dtype=torch.bool)
            where = {c: i for i, c in enumerate(run)}
            for r, c in enumerate(frontier.tolist()):
                a = int(parents_all[c])
                while a >= 0:
                    ancestors[r, where[a]] = True
                    a = int(parents_all[a])
            logq, feats = self._expand(frontier_feat, tokens_all[frontier].to(device),
                                       torch.full((frontier.numel(),), n_ids - 1 + d - 1, device=device), ancestors)
            run += frontier.tolist()
            calls += 1
            top = logq.topk(min(k, logq.shape[-1]), dim=-1)  # [n, k]
            base = torch.cat(score)[frontier]  # [n]
            child_score = (base[:, None] + top.values.cpu()).flatten()  # [n·k]
            offset = tokens_all.numel()
            tok.append(self.draft.token_ids(top.indices).flatten().cpu())
            par.append(frontier.repeat_interleave(top.indices.shape[1]))
            score.append(child_score)
            depth.append(torch.full((child_score.numel(),), d, dtype=torch.long))
            best = child_score.topk(min(k, child_score.numel())).indices
            frontier = offset + best
            frontier_feat = feats.repeat_interleave(top.indices.shape[1], dim=0)[best]
        tokens_all, parents_all = torch.cat(tok).cpu(), torch.cat(par)
        scores, depths = torch.cat(score), torch.cat(depth)
        # Keep the best tree_size by path probability (a child never beats its parent; ties go to the shallower).
        order = sorted(range(scores.numel()), key=lambda i: (-float(scores[i]), int(depths[i]), i))
        keep = sorted(order[:self.tree_size], key=lambda i: (int(depths[i]), i))  # parents before children
        index = {c: i for i, c in enumerate(keep)}
        parents = torch.tensor([index[int(parents_all[c])] if parents_all[c] >= 0 else -1 for c in keep],
                               dtype=torch.long)
        return tokens_all[keep], parents, calls

    def fixed_paths(self, depth: int) -> tuple[tuple[int, ...], ...]:
        """The rank paths of a static tree of depth <= ``depth`` (chain: (0,), (0, 0), …)."""
        if self.shape == "chain":
            return tuple((0,) * d for d in range(1, depth + 1))
        paths = self.paths if self.paths is not None else medusa.sparse_tree(self.config.rank_probs, self.tree_size,
                                                                             min(depth, self.config.depth))
        return tuple(p for p in paths if len(p) <= depth)

    def _fixed(self, root: torch.Tensor, n_ids: int, gamma: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """A fixed tree of rank paths: a node (…, r) is the (r+1)-th guess of the draft after its parent.
        Returns (tokens [N], parents [N], draft forwards)."""
        paths = self.fixed_paths(gamma)
        k_max = 1 + max(p[-1] for p in paths)
        device = root.device
        head = self.draft.logits(root)  # [V_d]
        guesses = {(): self.draft.token_ids(head.topk(min(k_max, head.numel())).indices)}  # path -> its top ids
        feats = {(): root}
        run: list[tuple[int, ...]] = []
        token = {}
        calls = 1
        for d in range(1, max(map(len, paths))):
            for p in (p for p in paths if len(p) == d):
                token[p] = guesses[p[:-1]][p[-1]]
            inner = [p for p in paths if len(p) == d and any(len(c) == d + 1 and c[:d] == p for c in paths)]
            if not inner:
                break
            where = {p: i for i, p in enumerate(run)}
            ancestors = torch.zeros(len(inner), len(run), dtype=torch.bool)
            for r, p in enumerate(inner):
                for a in range(1, d):
                    ancestors[r, where[p[:a]]] = True
            logq, out = self._expand(torch.stack([feats[p[:-1]] for p in inner]),
                                     torch.stack([token[p] for p in inner]).to(device),
                                     torch.full((len(inner),), n_ids - 1 + d, device=device), ancestors)
            run += inner
            calls += 1
            ids = self.draft.token_ids(logq.topk(min(k_max, logq.shape[-1]), dim=-1).indices)  # [n, k]
            for r, p in enumerate(inner):
                guesses[p], feats[p] = ids[r], out[r]
        for p in paths:
            token[p] = guesses[p[:-1]][p[-1]]
        return (torch.stack([token[p] for p in paths]).cpu().long(), medusa.paths_to_parents(paths), calls)
