"""Medusa heads (Cai et al. 2024; survey blog *Medusa*; PPD paper §2): the target drafts for itself.

K small heads read the target's last hidden state h_t (after the final norm, what the LM head reads). Head k
(k = 1..K) is one residual block, h + SiLU(W_k h + b_k) (Medusa-1), followed by the target's own LM head
(shared, frozen), and predicts the token k+1 positions after position t: the base LM head gives token t+1,
head 1 token t+2, and so on. With W_k = 0 a head starts as the base LM head.

No separate draft model runs: the verification forward of step s already produced h at the accepted
position, so the loop hands it over in ``feedback`` (``needs_hidden``) and the heads' top-k guesses become the
tree of step s+1. The tree is sparse: its nodes are rank paths (i_1, …, i_d) — "the (i_1+1)-th guess of head
1, then the (i_2+1)-th guess of head 2, …" — chosen from the heads' measured top-k accuracies as the n most
probable paths (the Medusa/Sequoia construction, ``simulations.ppd.optimal_candidate_tree``). The candidates
are deterministic (q one-hot), so the loop's exact rule keeps the output distributed as p at any temperature.

A saved set of heads is a folder: ``heads.safetensors`` (the blocks), ``medusa_config.json`` (hidden size,
number of heads, target, the rank probabilities of every head measured on held-out data) and, when trained by
``specrepro.training.medusa``, its ``training_record.json``.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..core import cost
from ..core.config import SamplingConfig
from ..core.tree import TreeSize
from ..engine import timing
from ..engine.llama import module_linear
from .base import Proposal, StepFeedback, TreeDrafter, warm_median
from .weights import read_folder, save_folder

MEDUSA_CONFIG = "medusa_config.json"
DEFAULT_TREE_SIZE = 16  # nodes, when neither --tree-size nor a device profile chooses
WEIGHTS = "heads.safetensors"


@dataclass(frozen=True)
class MedusaConfig:
    hidden_size: int  # H of the target
    num_heads: int = 3  # K
    target: str = "smollm2-135m-instruct"
    # rank_probs[k][i]: P(the truth k+2 positions ahead is exactly head k's (i+1)-th guess), on held-out data
    rank_probs: tuple[tuple[float, ...], ...] = ()


class MedusaHeads(torch.nn.Module):
    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        if num_heads < 1:
            raise ValueError(f"num_heads must be >= 1, got {num_heads}")
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(hidden_size, hidden_size) for _ in range(num_heads))
        for block in self.blocks:  # a head starts as the base LM head (SiLU(0) = 0)
            torch.nn.init.zeros_(block.weight)
            torch.nn.init.zeros_(block.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [..., H] -> each head's transformed state [K, ..., H] (the LM head then gives logits)."""
        return torch.stack([hidden + torch.nn.functional.silu(module_linear(block, hidden))
                            for block in self.blocks])


def head_logits(heads: MedusaHeads, lm_head: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Logits of every head: hidden [..., H] -> [K, ..., V] (a draft forward: ``engine.timing``)."""
    with timing.forward():
        return lm_head(heads(hidden.to(lm_head.weight.dtype)))


def save_heads(heads: MedusaHeads, config: MedusaConfig, folder: str | Path) -> Path:
    return save_folder(folder, heads.state_dict(), WEIGHTS, MEDUSA_CONFIG, asdict(config))


def load_heads(folder: str | Path, dtype: torch.dtype = torch.float32,
               device: str | torch.device = "cpu") -> tuple[MedusaHeads, MedusaConfig]:
    d, tensors = read_folder(folder, WEIGHTS, MEDUSA_CONFIG, "Medusa heads")
    config = MedusaConfig(**d)
    heads = MedusaHeads(config.hidden_size, config.num_heads)
    heads.load_state_dict(tensors)
    return heads.to(device=device, dtype=dtype).eval().requires_grad_(False), config


def max_nodes(k_max: int, depth: int) -> int:
    """How many rank paths of depth <= ``depth`` exist with ``k_max`` ranks per head."""
    return sum(k_max ** d for d in range(1, depth + 1))


def sparse_tree(rank_probs, size: int, depth: int) -> tuple[tuple[int, ...], ...]:
    """The ``size`` most probable rank paths of depth <= ``depth`` (prefix-closed, parents first); all of them
    when fewer exist."""
    from simulations.ppd import optimal_candidate_tree
    probs = np.asarray(rank_probs, dtype=np.float64)[:depth]
    return optimal_candidate_tree(probs, min(size, max_nodes(probs.shape[1], depth)), depth)


def random_paths(k_max: int, depth: int, size: int, rng: np.random.Generator) -> tuple[tuple[int, ...], ...]:
    """A random prefix-closed tree of ``size`` rank paths (PPD Fig. 8(a)'s "random tree" baseline): each new
    node is a child, at a random unused rank, of a random node that still has room (or of the root)."""
    if not 0 <= size <= max_nodes(k_max, depth):
        raise ValueError(f"a tree of depth {depth} with {k_max} ranks has at most {max_nodes(k_max, depth)} nodes, "
                         f"asked for {size}")
    paths: list[tuple[int, ...]] = []
    while len(paths) < size:
        parents = [()] + [p for p in paths if len(p) < depth]
        parent = parents[rng.integers(len(parents))]
        free = [r for r in range(k_max) if parent + (r,) not in paths]
        if free:
            paths.append(parent + (int(rng.choice(free)),))
    return tuple(paths)


def paths_to_parents(paths: tuple[tuple[int, ...], ...]) -> torch.Tensor:
    """parents [N] of a prefix-closed list of rank paths (each path's prefix comes before it)."""
    index = {p: i for i, p in enumerate(paths)}
    try:
        return torch.tensor([index[p[:-1]] if len(p) > 1 else -1 for p in paths], dtype=torch.long)
    except KeyError as err:
        raise ValueError(f"the rank paths are not prefix-closed: {err.args[0]} is missing") from None


def tree_point(rank_probs, size: int, depth: int, l_fp, draft_s=None) -> tuple[float, float, float]:
    """(τ(n), seconds of a step, predicted speedup) of the sparse tree of n nodes: τ(n) = 1 + f(tree) the expected
    tokens per step (PPD Prop. 4.1); the step's seconds L_fp(n+1), the target forward over the root and the n nodes,
    plus ``draft_s(n)``, the drafting of that tree, where a drafter pays one (an EAGLE draft's forwards)."""
    from simulations.ppd import expected_tokens
    tau = 1.0 + expected_tokens(sparse_tree(rank_probs, size, depth), np.asarray(rank_probs)[:depth])
    latency = l_fp(size + 1) + (draft_s(size) if draft_s is not None else 0.0)
    return tau, latency, cost.tree_speedup(tau, latency, l_fp(1))


def hardware_tree_size(rank_probs, depth: int, l_fp, n_max: int = 63, draft_s=None) -> tuple[int, dict]:
    """The hardware-aware tree size (PPD paper §4.2, also Medusa's choice of tree): the n = 1..n_max maximising
    τ(n) / (L_fp(n+1) + draft_s(n)) (``cost.best_tree_size`` over ``tree_point``).

    Returns (n, {n: (τ(n), the step's seconds, predicted speedup τ/seconds × L_fp(1))}) for every n considered."""
    return cost.best_tree_size(lambda n: tree_point(rank_probs, n, depth, l_fp, draft_s), range(1, n_max + 1))


def choose_tree_size(config: MedusaConfig, profile, gamma: int | str = "auto",
                     draft_step_s: float = 0.0) -> TreeSize:
    """The hardware-aware tree size for heads drafting min(γ, K) tokens deep (K with γ "auto") on a device profile
    (``metrics.profile.Profile``), with its τ, L_fp and why in one sentence for the records. ``draft_step_s``: the
    heads' drafting of one step on this machine (``MedusaDrafter.forward_seconds``: K rows through the blocks and
    the LM head, whatever the tree's size), added to every step's L_fp(n+1)."""
    depth = min(config.num_heads, gamma) if isinstance(gamma, int) else config.num_heads
    size, curve = hardware_tree_size(config.rank_probs, depth, profile.l_fp, profile.n_max - 1,
                                     (lambda n: draft_step_s) if draft_step_s else None)
    drafting = f"the heads' drafting {1e3 * draft_step_s:.2f} ms" if draft_step_s else None
    return sized_tree(size, curve[size], profile, drafting)


def sized_tree(size: int, point: tuple[float, float, float], profile, drafting: str | None) -> TreeSize:
    """The hardware-aware ``TreeSize`` of ``size`` nodes at its ``tree_point`` (τ, seconds of a step, predicted
    speedup), with the sentence that says why; ``drafting``: what the step's seconds include for the drafting
    (None where the drafter pays none)."""
    tau, latency, speedup = point
    rule = "τ(n)/(L_fp(n+1) + drafting)" if drafting else "τ(n)/L_fp(n+1)"
    within = f", {drafting} in it" if drafting else ""
    return TreeSize(size, tau, latency, f"hardware-aware: tree size {size} maximises {rule} on the "
                    f"{profile.key.dtype} profile (τ {tau:.2f}, {1e3 * latency:.1f} ms a step{within}, "
                    f"predicted {speedup:.2f}x)")


class MedusaDrafter(TreeDrafter):
    """Proposes a sparse tree of the heads' top-k guesses from the hidden state the last verification left.

    The first step of a generation has no hidden state yet and proposes nothing (one plain step, which also
    prefills the prompt). ``tree_size`` nodes at most; γ caps the depth (at most K)."""

    name = "medusa"
    batching = "Medusa heads: a tree per row from the target's hidden states, scored with tree attention"
    needs_hidden = True

    def __init__(self, heads: MedusaHeads, config: MedusaConfig, lm_head: torch.nn.Module, tree_size: int = 16,
                 paths: tuple[tuple[int, ...], ...] | None = None):
        if tree_size < 1:
            raise ValueError(f"tree size must be >= 1, got {tree_size}")
        if not config.rank_probs:
            raise ValueError("these Medusa heads carry no measured accuracies (rank_probs) to build a tree from")
        super().__init__(config, tree_size)
        self.heads, self.lm_head = heads, lm_head
        self.paths = paths  # a fixed tree of rank paths (e.g. random_paths); None: the sparse tree of tree_size
        self.k_max = len(config.rank_probs[0])
        self._trees: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.reset()

    def resized(self, tree_size: int) -> "MedusaDrafter":
        """The same heads drafting a tree of ``tree_size`` nodes."""
        if self.paths is not None:
            raise ValueError("this Medusa drafter runs a tree given to it (paths): it cannot be resized")
        return MedusaDrafter(self.heads, self.config, self.lm_head, tree_size=tree_size)

    def forward_seconds(self, repeats: int = 5) -> float:
        """Seconds of one step's drafting on this machine, measured in place: the heads and the LM head over a
        hidden state, and the top-k (``propose``'s work; the median of ``repeats`` after one untimed).
        ``choose_tree_size`` adds it to every step."""
        hidden = torch.zeros(self.config.hidden_size, dtype=self.lm_head.weight.dtype,
                             device=self.lm_head.weight.device)

        def once() -> float:
            start = time.perf_counter()
            self._guesses(hidden).cpu()
            return time.perf_counter() - start
        return warm_median(once, repeats)

    def _guesses(self, hidden: torch.Tensor) -> torch.Tensor:
        """[K, k_max] each head's top-k token ids from a hidden state [H] (the heads, then the LM head)."""
        with torch.inference_mode():
            return head_logits(self.heads, self.lm_head, hidden).topk(self.k_max, dim=-1).indices

    def reset(self) -> None:
        self.hidden: torch.Tensor | None = None  # [H] the target's state that drew the newest committed token

    def tree(self, depth: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(head index [N], rank [N], parents [N]) of the sparse tree of depth <= ``depth`` (cached)."""
        key = (depth, self.tree_size)
        if key not in self._trees:
            paths = (sparse_tree(self.config.rank_probs, self.tree_size, depth) if self.paths is None
                     else tuple(p for p in self.paths if len(p) <= depth))
            self._trees[key] = (torch.tensor([len(p) - 1 for p in paths]), torch.tensor([p[-1] for p in paths]),
                                paths_to_parents(paths))
        return self._trees[key]

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        if self.hidden is None:
            return Proposal.empty()
        guesses = self._guesses(self.hidden)  # (here, so the loop times the heads as drafting)
        head, rank, parents = self.tree(min(gamma, self.config.num_heads))
        tokens = guesses[head, rank]  # [N]
        return Proposal(tokens=tokens.cpu(), probs=None, calls=0, parents=parents)

    def feedback(self, step: StepFeedback) -> None:
        row = step.path[-1] + 1 if step.path else 0  # the hidden state that drew the committed next token
        self.hidden = step.hidden[row]  # [H]
