"""The drafter interface: drafters propose, the speculative loop verifies.

A drafter sees the committed token ids and returns up to γ tokens with, when it has one, the
distribution q each was sampled from. A deterministic drafter returns ``probs=None``; the loop then uses
a one-hot q, so speculative sampling stays exact (the survey blog: "a process which produces
deterministic tokens could take the place of q, and the samples will still be from p").
"""
from __future__ import annotations

import abc
from dataclasses import dataclass

import torch

from ..config import SamplingConfig


@dataclass
class Proposal:
    tokens: torch.Tensor  # [γ'] long, γ' <= γ (0 means "nothing to propose": the loop takes one plain step)
    probs: torch.Tensor | None  # [γ', V] the q each token was drawn from; None for a deterministic drafter
    calls: int = 0  # draft-model forward passes spent on this proposal


class Drafter(abc.ABC):
    """Every drafter takes the same arguments; state (caches, tables) lives inside it."""

    name: str = "drafter"

    @abc.abstractmethod
    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        """Propose up to ``gamma`` tokens to follow ``ids`` (the committed sequence, prompt included)."""

    def update(self, ids: list[int]) -> None:
        """Told the committed sequence after each verification (roll back caches, learn online, ...)."""

    def reset(self) -> None:
        """Forget per-sequence state before a new prompt."""
