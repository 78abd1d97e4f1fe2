"""The contract of a tree acceptance rule, and the input checks every rule shares.

A tree rule is a pure function of tensors, with its randomness passed in:

    rule(p, q, tokens, parents, uniforms) -> TreeVerdict(path, next_token)

    p        [N+1, V]  target distributions (already warped): row 0 after the committed context, row i+1 after
                       node i (the row convention of ``specrepro.core.tree``)
    q        [N, V]    row i: the distribution node i's token was drawn from, given its ancestors and its earlier
                       siblings (one-hot for a deterministic candidate)
    tokens   [N]       the token at each node
    parents  [N]       parent of each node, −1 for a child of the root; parents[i] < i (``specrepro.core.tree``)
    uniforms [N+1]     U(0, 1): uniforms[i] tests node i, uniforms[N] draws the next token

A chain of γ drafts is the tree ``parents = [−1, 0, …, γ−2]``; there the verdict's ``len(path)`` is the chain
rules' ``n_accepted``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, NamedTuple

import torch

from ..core.tree import check_parents, is_chain


class TreeVerdict(NamedTuple):
    path: list[int]  # accepted root path as node indices, root child first; [] when no draft was accepted
    next_token: int  # drawn after the path: recovered (its children were all rejected) or bonus (a leaf)

    def emitted(self, tokens: torch.Tensor) -> list[int]:  # tokens [N]
        """The tokens this step commits: the accepted drafts, then ``next_token``."""
        return [int(tokens[i]) for i in self.path] + [self.next_token]


@dataclass(frozen=True)
class TreeRule:
    """A tree rule as the loop and the result records see it: a name, a lossless flag, frozen parameters."""

    name: str  # its key in TREE_RULES and in result records
    lossless: bool  # True when the committed tokens are distributed exactly as the target's p
    fn: Callable[..., TreeVerdict]  # the pure function, called as fn(p, q, tokens, parents, uniforms[, params])
    params: Any = None  # a frozen dataclass of the rule's parameters; None when it has none

    def __call__(
        self,
        p: torch.Tensor,  # [N+1, V]
        q: torch.Tensor,  # [N, V]
        tokens: torch.Tensor,  # [N]
        parents: torch.Tensor,  # [N]
        uniforms: torch.Tensor,  # [N+1]
    ) -> TreeVerdict:
        if self.params is None:
            return self.fn(p, q, tokens, parents, uniforms)
        return self.fn(p, q, tokens, parents, uniforms, self.params)

    def with_params(self, **changes) -> "TreeRule":
        """The same rule with some parameters changed, e.g. ``TREE_RULES["typical"].with_params(epsilon=0.05)``."""
        return replace(self, params=replace(self.params, **changes))

    def describe(self) -> dict:
        """What a result record stores about the rule."""
        params = asdict(self.params) if self.params is not None else None
        return {"name": self.name, "lossless": self.lossless, "params": params}


def check_tree_inputs(
    p: torch.Tensor,  # [N+1, V]
    q: torch.Tensor,  # [N, V]
    tokens: torch.Tensor,  # [N]
    parents: torch.Tensor,  # [N]
    uniforms: torch.Tensor,  # [N+1]
) -> int:
    """Return N after one clear ValueError for each way the inputs can disagree."""
    if tokens.dim() != 1:
        raise ValueError(f"tokens must be a 1-D tensor [N], got shape {tuple(tokens.shape)}")
    n = tokens.shape[0]
    if p.dim() != 2 or q.dim() != 2 or p.shape[0] != n + 1 or q.shape[0] != n or p.shape[1] != q.shape[1]:
        raise ValueError(f"expected p [N+1, V] and q [N, V] for a tree of N = {n} tokens; "
                         f"got p {tuple(p.shape)}, q {tuple(q.shape)}")
    if uniforms.dim() != 1 or uniforms.shape[0] != n + 1:
        raise ValueError(f"expected N+1 = {n + 1} uniforms (one per node, one for the next token), "
                         f"got shape {tuple(uniforms.shape)}")
    if n and (int(tokens.min()) < 0 or int(tokens.max()) >= p.shape[1]):
        raise ValueError(f"token ids must lie in [0, V = {p.shape[1]}), got {tokens.tolist()}")
    check_parents(parents, n)
    return n


def check_chain_inputs(
    p: torch.Tensor,  # [N+1, V]
    q: torch.Tensor,  # [N, V]
    tokens: torch.Tensor,  # [N]
    parents: torch.Tensor,  # [N]
    uniforms: torch.Tensor,  # [N+1]
    rule: str,  # the rule's name, for the error
) -> int:
    """``check_tree_inputs`` for a rule that verifies one draft chain (MJSD, BiLD, mentored): N, or one clear error."""
    n = check_tree_inputs(p, q, tokens, parents, uniforms)
    if not is_chain(parents):
        raise ValueError(f"{rule} verifies one draft chain (parents [-1, 0, ..., N-2]), got parents "
                         f"{parents.tolist()}")
    return n
