"""Parallel Prompt Decoding (PPD paper 002): trained prompt tokens let the target guess several tokens ahead.

m prompt tokens (``prompt_tokens``), each with e ensemble prompt tokens (EPTs, §3.2), are embeddings [m, e, H]
trained with the target frozen (``specrepro.training.ppd``). Appended after a node of the token tree, prompt
token d (1-based) sits at the node's position + d and its hidden state, read out through the target's own LM
head, guesses the token d+1 positions after the node: the target's row at the node gives the next token, prompt
token 1 the one after it, and so on. The e EPTs of a prompt token are e parallel chains: EPT j of prompt token d
sees the committed prefix, the node's root path and EPT j of prompt tokens 1..d−1 only (the ensemble attention
mask of §3.2 / Fig. 12(a)); their logits are averaged into the prompt token's guess.

One step (§3, Fig. 2): the target scores the newest committed token (the root), the candidate tree guessed by
the previous step's prompt tokens, and the prompt tokens appended to the root and to every candidate, in one
forward (this drafter's scorer, ``PPDDrafter.score``: ``CachedModel.logits_for_tree`` with prompt nodes; the loop
never sees them). The loop's tree rule picks the accepted path; the prompt tokens of the path's last node (the
root when nothing was accepted) give the next step's guesses, so no draft model ever runs. Candidates are the
guesses' top-k tokens, deterministic, so the loop's exact rule keeps the output distributed as p at any
temperature (at T = 0 it is greedy AR's output).

The tree is the dynamic sparse tree of §4 (``simulations.ppd``): it has m states T_1..T_m; state k is used when
the previous accepted node carried k prompt tokens (so k distances are guessed), and within a state each
candidate carries between 1 and m prompt tokens, allocated by the greedy removal of Prop. 4.3 from the rank
probabilities measured on held-out data. The tree size n = candidates + their prompt tokens (the root's m are
not counted, as in the paper's Table 1).

A saved set of prompt tokens is a folder: ``prompt_tokens.safetensors`` and ``ppd_config.json`` (hidden size, m,
e, target, the measured rank probabilities per distance) and, when trained here, ``training_record.json``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from ..core import cost
from ..core.config import SamplingConfig
from ..core.tree import TreeSize
from .base import Proposal, Scores, StepFeedback, TreeDrafter
from .medusa import paths_to_parents
from .weights import read_folder, save_folder

PPD_CONFIG = "ppd_config.json"
WEIGHTS = "prompt_tokens.safetensors"
DEFAULT_TREE_SIZE = 20  # n = candidates + prompt tokens, when neither --tree-size nor a device profile chooses
EPT_MASKS = ("ensemble", "decoder", "encoder")  # Appendix B.5; inference builds the ensemble one from tree parents


@dataclass(frozen=True)
class PPDConfig:
    hidden_size: int  # H of the target
    prompt_tokens: int = 3  # m
    epts: int = 1  # e, ensemble prompt tokens per prompt token
    target: str = "smollm2-135m-instruct"
    # rank_probs[d][i]: P(the truth d+2 positions after the anchor is exactly prompt token d+1's (i+1)-th guess),
    # measured on held-out data
    rank_probs: tuple[tuple[float, ...], ...] = ()


class PromptTokens(torch.nn.Module):
    """The trainable embeddings [m, e, H]; everything else is the frozen target's."""

    def __init__(self, hidden_size: int, prompt_tokens: int = 3, epts: int = 1, init: torch.Tensor | None = None):
        super().__init__()
        if prompt_tokens < 1 or epts < 1:
            raise ValueError(f"need at least one prompt token and one EPT, got m = {prompt_tokens}, e = {epts}")
        # Initialised from ordinary token embeddings (§5 "Training"): init [m·e, H] rows of the embedding table.
        start = torch.zeros(prompt_tokens, epts, hidden_size) if init is None else init.reshape(prompt_tokens, epts, hidden_size)
        self.embeds = torch.nn.Parameter(start.clone().float())  # [m, e, H]


def ept_block_mask(m: int, e: int, kind: str = "ensemble") -> torch.Tensor:
    """Which prompt nodes of one anchor see which: bool [m·e, m·e], rows and columns in distance-major order
    (prompt token 1's e EPTs, then prompt token 2's, …); True = attend (Appendix B.5, Fig. 12).

    ensemble: EPT j of distance d sees EPT j of distances ≤ d; decoder: every node at or before it in that order;
    encoder: every EPT of a smaller distance and every EPT of its own distance."""
    if kind not in EPT_MASKS:
        raise ValueError(f"unknown EPT attention mask {kind!r}; choose one of {EPT_MASKS}")
    d = torch.arange(m).repeat_interleave(e)  # [m·e] distance index of each node
    j = torch.arange(e).repeat(m)  # [m·e] EPT index
    if kind == "ensemble":
        return (j[:, None] == j[None, :]) & (d[None, :] <= d[:, None])
    if kind == "decoder":
        return torch.ones(m * e, m * e, dtype=torch.bool).tril()
    return d[None, :] <= d[:, None]


def save_prompt_tokens(tokens: PromptTokens, config: PPDConfig, folder: str | Path) -> Path:
    return save_folder(folder, {"embeds": tokens.embeds}, WEIGHTS, PPD_CONFIG, asdict(config))


def load_prompt_tokens(folder: str | Path, dtype: torch.dtype = torch.float32,
                       device: str | torch.device = "cpu") -> tuple[PromptTokens, PPDConfig]:
    d, tensors = read_folder(folder, WEIGHTS, PPD_CONFIG, "PPD prompt tokens")
    config = PPDConfig(**d)
    embeds = tensors["embeds"]  # [m, e, H]
    if tuple(embeds.shape) != (config.prompt_tokens, config.epts, config.hidden_size):
        raise ValueError(f"{folder}: prompt-token embeddings of shape {tuple(embeds.shape)} do not match the config "
                         f"(m = {config.prompt_tokens}, e = {config.epts}, H = {config.hidden_size})")
    tokens = PromptTokens(config.hidden_size, config.prompt_tokens, config.epts, init=embeds)
    return tokens.to(device=device, dtype=dtype).eval().requires_grad_(False), config


# ------------------------------------------------------------------------------------------ the tree

def dynamic_tree(rank_probs, size: int, m: int):
    """The dynamic sparse tree of size n (§4.2: optimal candidate trees, greedy prompt removal, the candidate
    counts per state searched for the largest R(T)); cached, as the search takes a while for large n."""
    probs = np.asarray(rank_probs, dtype=np.float64)[:m]
    return _dynamic_tree(probs.tobytes(), probs.shape, size, m)


@lru_cache(maxsize=256)
def _dynamic_tree(key: bytes, shape: tuple[int, int], size: int, m: int):
    from simulations.ppd import optimal_tree
    return optimal_tree(np.frombuffer(key, dtype=np.float64).reshape(shape), size, m=m)


def input_lengths(tree, e: int) -> np.ndarray:
    """New positions per target call in each state [m]: the root, its m·e prompt nodes, the candidates and their
    prompt tokens times e."""
    return np.array([1 + tree.root_prompts * e + s.n_candidates + s.n_prompts * e for s in tree.states])


def tree_speed(rank_probs, size: int, m: int, e: int, l_fp) -> tuple[float, float, float]:
    """(τ(n), expected L_fp per call, predicted speedup τ·L_fp(1)/E[L_fp]) of the dynamic tree of size n: the
    latency is weighted by how often each state is used (the steady state of Prop. 4.4)."""
    from simulations.ppd import accept_length, steady_state, transition_matrix
    probs = np.asarray(rank_probs, dtype=np.float64)[:m]
    tree = dynamic_tree(probs, size, m)
    pi = steady_state(transition_matrix(tree, probs), start=tree.root_prompts)
    latency = float(sum(w * l_fp(int(n)) for w, n in zip(pi, input_lengths(tree, e))))
    tau = accept_length(tree, probs)
    return tau, latency, cost.tree_speedup(tau, latency, l_fp(1))


def hardware_tree_size(rank_probs, m: int, e: int, l_fp, max_input: int, n_max: int = 64,
                       patience: int = 8) -> tuple[int, dict]:
    """The hardware-aware tree size (§4.2): the n maximising τ(n)/L_fp on this device's measured latencies, over
    n = 2..n_max whose every state's input fits ``max_input`` positions (the profile's measured range). τ(n) rises
    ever more slowly while L_fp(n) keeps growing, so the scan stops ``patience`` sizes after the best so far
    (``cost.best_tree_size`` over ``tree_speed``).
    Returns (n, {n: (τ, mean L_fp, predicted speedup)}) for every n considered."""
    def speed(n: int) -> tuple[float, float, float] | None:
        fits = int(input_lengths(dynamic_tree(rank_probs, n, m), e).max()) <= max_input
        return tree_speed(rank_probs, n, m, e, l_fp) if fits else None
    if speed(2) is None:
        raise ValueError(f"no PPD tree fits {max_input} input positions")
    return cost.best_tree_size(speed, range(2, n_max + 1), patience=patience)


def choose_tree_size(config: PPDConfig, profile, gamma: int | str = "auto") -> TreeSize:
    """The hardware-aware size on a device profile (``metrics.profile.Profile``), with its τ, mean L_fp over the
    tree states and why, for the records. γ is not used: the states' depths are the prompt tokens' (m); it is
    taken so that every tree drafter's module sizes with one signature (``drafters.base.TreeDrafter``)."""
    size, curve = hardware_tree_size(config.rank_probs, config.prompt_tokens, config.epts, profile.l_fp,
                                     max_input=profile.n_max)
    tau, latency, speedup = curve[size]
    return TreeSize(size, tau, latency, f"hardware-aware: tree size {size} maximises τ(n)/L_fp on the "
                    f"{profile.key.dtype} profile (τ {tau:.2f}, mean L_fp {1e3 * latency:.1f} ms, predicted "
                    f"{speedup:.2f}x)")


@dataclass(frozen=True)
class Layout:
    """One state's tree as the forward sees it (fixed per state; only the candidate tokens change)."""

    distance: torch.Tensor  # [N] 0-based guess row (depth − 1) of each candidate
    rank: torch.Tensor  # [N] which of that row's top-k guesses
    parents: torch.Tensor  # [N] candidate parents (−1 = root)
    prompt_parents: torch.Tensor  # [P] −1 root, 0..N−1 a candidate, N.. an earlier prompt node
    prompt_embed: torch.Tensor  # [P] index into the flattened [m·e] embeddings
    anchor_rows: dict[int, torch.Tensor]  # anchor (−1 root or candidate) -> its prompt nodes [k, e] (0-based in P)


def layout(paths, prompts, root_prompts: int, e: int) -> Layout:
    """Candidates from rank paths, then each anchor's prompt nodes: for distance d = 1..k and EPT j, a node whose
    parent is EPT j at distance d−1 (or the anchor itself), so tree attention gives the ensemble mask."""
    n = len(paths)
    parents = paths_to_parents(tuple(paths)) if n else torch.empty(0, dtype=torch.long)
    prompt_parents, prompt_embed, anchor_rows = [], [], {}
    for anchor, k in [(-1, root_prompts)] + list(enumerate(prompts)):
        rows = torch.empty(k, e, dtype=torch.long)
        for d in range(k):
            for j in range(e):
                rows[d, j] = len(prompt_parents)
                prompt_parents.append(anchor if d == 0 else n + int(rows[d - 1, j]))
                prompt_embed.append(d * e + j)
        anchor_rows[anchor] = rows
    return Layout(distance=torch.tensor([len(p) - 1 for p in paths], dtype=torch.long),
                  rank=torch.tensor([p[-1] for p in paths], dtype=torch.long), parents=parents,
                  prompt_parents=torch.tensor(prompt_parents, dtype=torch.long),
                  prompt_embed=torch.tensor(prompt_embed, dtype=torch.long), anchor_rows=anchor_rows)


@dataclass(frozen=True)
class PromptNodes:
    """Embedding-input nodes appended after a proposal's N candidate tokens (PPD's prompt tokens)."""

    embeds: torch.Tensor  # [P, H] the input embedding of each node
    parents: torch.Tensor  # [P] long: −1 the root, 0..N−1 a candidate, N..N+P−1 an earlier prompt node

    def __post_init__(self):
        if self.embeds.dim() != 2 or self.parents.dim() != 1 or self.embeds.shape[0] != self.parents.numel():
            raise ValueError(f"prompt nodes need embeds [P, H] and parents [P], got {tuple(self.embeds.shape)} "
                             f"and {tuple(self.parents.shape)}")

    def __len__(self) -> int:
        return self.parents.numel()


class PPDDrafter(TreeDrafter):
    """Proposes state k's candidate tree from the guesses of the prompt tokens the last accepted node carried.

    The first step of a generation has no guesses yet: it proposes the root's prompt tokens only (the prompt's
    prefill is that step's forward). ``tree`` (a ``simulations.ppd.DynamicSparseTree``) overrides the dynamic
    sparse tree of ``tree_size`` (Fig. 8(a)'s static and random trees); γ caps the candidates' depth.

    The prompt nodes never enter the proposal: ``propose`` keeps them (``prompt_nodes``) and this drafter's scorer
    (``score``) appends them to the target's tree forward, so the loop verifies the candidates alone."""

    name = "ppd"
    needs_hidden = True

    def __init__(self, tokens: PromptTokens, config: PPDConfig, lm_head: torch.nn.Module,
                 tree_size: int = DEFAULT_TREE_SIZE, tree=None):
        if tree_size < 2:
            raise ValueError(f"a PPD tree size must be >= 2 (one candidate and its prompt token), got {tree_size}")
        if not config.rank_probs:
            raise ValueError("these prompt tokens carry no measured accuracies (rank_probs) to build a tree from")
        super().__init__(config, tree_size)
        self.tokens, self.lm_head = tokens, lm_head
        self.fixed_tree = tree is not None
        self.tree = tree if tree is not None else dynamic_tree(config.rank_probs, tree_size, config.prompt_tokens)
        self.k_max = len(config.rank_probs[0])
        self._layouts: dict[tuple[int, int], Layout] = {}
        self.reset()

    def resized(self, tree_size: int) -> "PPDDrafter":
        """The same prompt tokens on the dynamic sparse tree of ``tree_size``."""
        if self.fixed_tree:
            raise ValueError("this PPD drafter runs a tree given to it (static or random): it cannot be resized")
        return PPDDrafter(self.tokens, self.config, self.lm_head, tree_size=tree_size)

    def reset(self) -> None:
        self.anchor_hidden: torch.Tensor | None = None  # [k, e, H] the last accepted node's prompt-token states
        self._pending: Layout | None = None  # the layout of the latest proposal, until its feedback
        self.prompt_nodes: PromptNodes | None = None  # that proposal's prompt nodes, until its feedback

    def state_layout(self, k: int, gamma: int) -> Layout:
        """State k's layout for a step of at most ``gamma`` drafts (k = 0: the root's prompt tokens only).

        Candidates go no deeper than min(γ, k), and no prompt node deeper than γ+1 after the root: a guess that
        far is more than the budget can use, and the loop's γ keeps γ+1 inside the context and the budget."""
        depth = min(gamma, k)
        key = (k, depth, min(gamma, self.config.prompt_tokens))
        if key not in self._layouts:
            if k == 0:
                paths, prompts = (), ()
            else:
                state = self.tree.states[k - 1]
                kept = [i for i, p in enumerate(state.paths) if len(p) <= depth]
                paths = [state.paths[i] for i in kept]
                prompts = [min(state.prompts[i], gamma + 1 - len(state.paths[i])) for i in kept]
            root = min(self.tree.root_prompts, gamma + 1)
            self._layouts[key] = layout(paths, prompts, root, self.config.epts)
        return self._layouts[key]

    def guesses(self) -> torch.Tensor:
        """[k, k_max] top guesses at distances 1..k after the last accepted node: its k prompt tokens' rows
        through the LM head, the e EPTs' logits averaged (§3.2). Runs in propose, so it is timed as drafting."""
        with torch.inference_mode():
            h = self.anchor_hidden.to(self.lm_head.weight.dtype)  # [k, e, H]
            logits = self.lm_head(h).float().mean(dim=1)  # [k, V]
        return logits.topk(self.k_max, dim=-1).indices.cpu()

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        k = 0 if self.anchor_hidden is None else self.anchor_hidden.shape[0]
        lay = self.state_layout(k, gamma)
        self._pending = lay
        tokens = self.guesses()[lay.distance, lay.rank] if k else torch.empty(0, dtype=torch.long)  # [N]
        embeds = self.tokens.embeds.reshape(-1, self.tokens.embeds.shape[-1])[lay.prompt_embed]  # [P, H]
        self.prompt_nodes = PromptNodes(embeds=embeds, parents=lay.prompt_parents)  # scored, never proposed
        return Proposal(tokens=tokens, probs=None, calls=0, parents=lay.parents)

    def score(self, model, ids: list[int], tokens: torch.Tensor, parents: torch.Tensor) -> Scores:
        """The target's tree forward over the root, the N candidates and then this step's P prompt nodes (§3,
        Fig. 2), which get hidden states (for ``feedback``) but no logits: logits [N+1, V], hidden [1+N+P, H],
        n_inputs = 1 + N + P (Table 1's S_input). A step that proposed nothing (γ = 0) is the plain forward."""
        if self.prompt_nodes is None:
            return super().score(model, ids, tokens, parents)
        nodes = self.prompt_nodes
        logits, hidden = model.logits_for_tree(ids, tokens, parents, output_hidden=True, prompt_embeds=nodes.embeds,
                                               prompt_parents=nodes.parents)
        return Scores(logits=logits, hidden=hidden, n_inputs=1 + tokens.numel() + len(nodes))

    def feedback(self, step: StepFeedback) -> None:
        lay, self._pending, self.prompt_nodes = self._pending, None, None
        n = 0 if lay is None else lay.parents.numel()
        if lay is None or step.hidden is None or step.hidden.shape[0] != 1 + n + lay.prompt_parents.numel():
            self.anchor_hidden = None  # the step scored no prompt nodes (a plain last step): start over
            return
        rows = lay.anchor_rows[step.path[-1] if step.path else -1]  # [k, e] the accepted node's prompt nodes
        self.anchor_hidden = step.hidden[1 + n + rows.to(step.hidden.device)] if rows.numel() else None  # [k, e, H]
