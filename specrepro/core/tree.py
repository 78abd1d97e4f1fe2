"""Token trees: the shape of every proposal the verification loop scores.

A proposal of N draft tokens is a tree given by two tensors:

    tokens  [N]  long: the token at each node
    parents [N]  long: the parent of each node, −1 for a child of the newest committed token (the root);
                 parents[i] < i, so a node always comes after its parent (topological order)

A chain of γ tokens (classic speculative decoding) is the tree ``parents = [−1, 0, 1, …, γ−2]``; Medusa, PPD,
SpecTr and staged decoding give several children to a node. Everything the loop needs derives from
``parents``: each node's depth (its position offset after the committed prefix), the ancestor mask of tree
attention, and the root path of any node.

Row convention for the target's distributions over a tree: ``p [N+1, V]``, row 0 after the committed context
(the root), row i+1 after node i. For a chain this is the classic ``[γ+1, V]``.
"""
from __future__ import annotations

from typing import NamedTuple

import torch


class TreeSize(NamedTuple):
    """A hardware-aware tree size and what it was chosen on (PPD paper §4.2): the size maximising τ/L_fp."""

    size: int  # nodes of the candidate tree
    tau: float  # expected tokens per target call at that size (theory, from the measured rank probabilities)
    latency_s: float  # the profile's L_fp of one verification forward at that size (mean over tree states)
    reason: str  # one sentence for the records


def chain_parents(n: int) -> torch.Tensor:
    """parents [n] of a chain: [−1, 0, 1, …, n−2]."""
    return torch.arange(n, dtype=torch.long) - 1


def check_parents(parents: torch.Tensor, n_tokens: int | None = None) -> None:
    """One clear error for a malformed tree: a parent index not earlier in the tree, or a size mismatch."""
    if parents.dim() != 1:
        raise ValueError(f"parents must be a 1-D tensor [N], got shape {tuple(parents.shape)}")
    if n_tokens is not None and parents.numel() != n_tokens:
        raise ValueError(f"a tree of {n_tokens} tokens needs {n_tokens} parent indices, got {parents.numel()}")
    idx = torch.arange(parents.numel(), device=parents.device)
    bad = ((parents < -1) | (parents >= idx)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"node {i} has parent {int(parents[i])}: a parent index must be −1 (the newest committed "
                         f"token) or an earlier node (0..{i - 1})")


def is_chain(parents: torch.Tensor) -> bool:
    return bool(torch.equal(parents.cpu(), chain_parents(parents.numel())))


def depths(parents: torch.Tensor) -> torch.Tensor:
    """depth [N]: 1 for a child of the root, parent's depth + 1 otherwise (the node's position offset)."""
    out = torch.zeros(parents.numel(), dtype=torch.long)
    for i, parent in enumerate(parents.tolist()):
        out[i] = 1 if parent < 0 else out[parent] + 1
    return out


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """mask [N, N] bool: mask[i, j] is True when node j is node i or one of its ancestors (tree attention)."""
    n = parents.numel()
    mask = torch.eye(n, dtype=torch.bool)
    for i, parent in enumerate(parents.tolist()):
        if parent >= 0:
            mask[i] |= mask[parent]
    return mask


def root_path(parents: torch.Tensor, node: int) -> list[int]:
    """Node indices from the root's child down to ``node`` (inclusive); [] for node −1 (the root itself)."""
    path = []
    while node >= 0:
        path.append(node)
        node = int(parents[node])
    return path[::-1]


def children(parents: torch.Tensor, node: int) -> list[int]:
    """Children of ``node`` (−1 for the root), in index order: the order siblings are tried in."""
    return (parents == node).nonzero().flatten().tolist()
