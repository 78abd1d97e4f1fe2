"""Unigram and bigram drafts: the zero-cost n-gram models of the slides' Table 3 (§3.6, §4.2).

The tables are fitted on token ids the *target* generated, so q imitates p's own output statistics
(Leviathan et al. fit theirs the same way). Two ways to draft from a table:

- ``sample=True`` (the default, and what the methods "unigram" and "bigram" use): q is the n-gram
  distribution itself, warped by the same sampling rule as p (slides §2.2), and each draft token is
  drawn from it; the proposal carries q, so at T = 1 the measured α is the slides' α = E[Σ_x min(p, q)].
  At T = 0 the warp is one-hot on the table's argmax, i.e. the deterministic draft below.
- ``sample=False``: always the argmax chain, ``probs=None``; the loop then uses a one-hot q. Exact at
  any temperature (a deterministic draft is a valid q), usually a lower α at T > 0.

Smoothing, so that q is a proper distribution after any context:

    unigram  u(x)       = (c(x) + δ) / (N + δV)                      δ = ``add_k`` (0: maximum likelihood)
    bigram   q(x | a)   = (c(a, x) + λ·u(x)) / (c(a) + λ)           λ = ``backoff``; an unseen a gives u

(the bigram is interpolated with the unigram, a Dirichlet prior centred on u). Tokens with q = 0 are
never drafted, which costs nothing in exactness.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Protocol, Sequence

import numpy as np
import torch

from ..core.config import SamplingConfig
from ..core.decoding import eos_ids, model_device
from ..core.warping import sample, warp
from .base import Drafter, Proposal

if TYPE_CHECKING:
    from ..engine.models import LoadedModel


@dataclass(frozen=True)
class NGramTable:
    """Counts of a unigram (order 1) or bigram (order 2) model over a vocabulary of ``vocab_size`` ids.

    The bigram counts are stored sparsely (CSR by previous token): a dense V×V table would be 2.4e9
    cells for SmolLM2's 49 152 tokens.
    """

    order: int  # 1 = unigram, 2 = bigram
    vocab_size: int  # V
    unigram: np.ndarray  # [V] int64 counts c(x)
    indptr: np.ndarray  # [V+1] int64; row a of the bigram is indices/counts[indptr[a]:indptr[a+1]]
    indices: np.ndarray  # [nnz] int64 next tokens x with c(a, x) > 0, sorted within a row
    counts: np.ndarray  # [nnz] int64 c(a, x)
    add_k: float = 0.0  # δ, additive smoothing of the unigram
    backoff: float = 1.0  # λ, weight of the unigram prior in the bigram
    meta: str = "{}"  # JSON: what the table was fitted on (free-form, kept with the file)

    def __post_init__(self) -> None:
        if self.order not in (1, 2):
            raise ValueError(f"order must be 1 (unigram) or 2 (bigram), got {self.order!r}")
        if self.unigram.shape != (self.vocab_size,) or self.indptr.shape != (self.vocab_size + 1,):
            raise ValueError(f"table arrays do not match vocab_size {self.vocab_size}")
        if self.unigram.sum() + self.add_k * self.vocab_size <= 0:
            raise ValueError("the unigram has no mass: fit on at least one token or use add_k > 0")
        if self.backoff <= 0:
            raise ValueError(f"backoff λ must be > 0 so that every context has a distribution, got {self.backoff}")

    @property
    def name(self) -> str:
        return "unigram" if self.order == 1 else "bigram"

    # ------------------------------------------------------------------------------ distributions

    def unigram_probs(self) -> np.ndarray:
        """u [V] float64."""
        c = self.unigram.astype(np.float64) + self.add_k
        return c / c.sum()

    def probs(self, prev: int | None, u: np.ndarray | None = None) -> np.ndarray:
        """q(· | prev) [V] float64 (the unigram for order 1, or when ``prev`` is None); ``u`` if precomputed."""
        u = self.unigram_probs() if u is None else u
        if self.order == 1 or prev is None:
            return u
        lo, hi = self.indptr[prev], self.indptr[prev + 1]
        q = self.backoff * u
        q[self.indices[lo:hi]] += self.counts[lo:hi]
        return q / (self.counts[lo:hi].sum() + self.backoff)

    def argmax(self, prev: int | None) -> int:
        return int(np.argmax(self.probs(prev)))

    # -------------------------------------------------------------------------------- persistence

    def save(self, path: str | Path) -> Path:
        """Write an ``.npz`` that ``NGramTable.load`` reads back exactly."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:  # a file handle keeps numpy from appending ".npz" to the name
            np.savez_compressed(handle, order=self.order, vocab_size=self.vocab_size, unigram=self.unigram,
                                indptr=self.indptr, indices=self.indices, counts=self.counts,
                                add_k=self.add_k, backoff=self.backoff, meta=np.array(self.meta))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "NGramTable":
        with np.load(Path(path), allow_pickle=False) as z:
            return cls(order=int(z["order"]), vocab_size=int(z["vocab_size"]), unigram=z["unigram"],
                       indptr=z["indptr"], indices=z["indices"], counts=z["counts"],
                       add_k=float(z["add_k"]), backoff=float(z["backoff"]), meta=str(z["meta"]))


class EncodedPrompt(Protocol):
    """What :func:`target_corpus` reads of a prompt (a bench's ``BenchPrompt`` is one): its token ids."""

    @property
    def ids(self) -> list[int]: ...


def target_corpus(target: LoadedModel, prompts: Sequence[EncodedPrompt], max_new_tokens: int,
                  sampling: SamplingConfig, seed: int = 0, batch_size: int = 16) -> list[list[int]]:
    """What the target itself generates for each prompt: the text the slides' n-gram drafts are fitted on.

    Batched transformers ``generate`` (left-padded, with an attention mask) sampling from the same warped p
    as our loops, seeded once with ``seed``; each continuation is cut before its first EOS. Only the
    generated tokens are returned, so prompt text never enters a table.
    """
    eos = eos_ids(target.model, target.tokenizer)
    pad = min(eos) if eos else 0
    kwargs = dict(max_new_tokens=max_new_tokens, do_sample=not sampling.greedy, eos_token_id=sorted(eos) or None,
                  pad_token_id=pad, repetition_penalty=1.0)
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
    device = model_device(target.model)
    torch.manual_seed(seed)
    corpus = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        width = max(len(p.ids) for p in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)  # [B, T] left-padded
        mask = torch.zeros_like(ids)
        for row, p in enumerate(chunk):
            ids[row, width - len(p.ids):] = torch.tensor(p.ids)
            mask[row, width - len(p.ids):] = 1
        with torch.inference_mode():
            out = target.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
        for row in out[:, width:].tolist():  # [B, n] generated part
            cut = next((i for i, t in enumerate(row) if t in eos), len(row))
            corpus.append(row[:cut])
    return corpus


def fit_ngram(sequences: Iterable[Sequence[int]], vocab_size: int, order: int, add_k: float = 0.0,
              backoff: float = 1.0, meta: dict | None = None) -> NGramTable:
    """Count unigrams and (for order 2) bigrams in token-id sequences; pairs never cross sequences."""
    unigram = np.zeros(vocab_size, dtype=np.int64)
    pairs = []
    for seq in sequences:
        a = np.asarray(list(seq), dtype=np.int64)  # [T]
        if a.size and (a.min() < 0 or a.max() >= vocab_size):
            raise ValueError(f"token ids must lie in [0, {vocab_size}), got {a.min()}..{a.max()}")
        unigram += np.bincount(a, minlength=vocab_size)
        if order == 2 and a.size > 1:
            pairs.append(a[:-1] * vocab_size + a[1:])  # [T-1] flattened (prev, next)
    keys, counts = np.unique(np.concatenate(pairs) if pairs else np.zeros(0, np.int64), return_counts=True)
    prev, nxt = np.divmod(keys, vocab_size)  # sorted by prev, then next
    indptr = np.zeros(vocab_size + 1, dtype=np.int64)
    np.cumsum(np.bincount(prev, minlength=vocab_size), out=indptr[1:])
    return NGramTable(order=order, vocab_size=vocab_size, unigram=unigram, indptr=indptr,
                      indices=nxt.astype(np.int64), counts=counts.astype(np.int64), add_k=add_k,
                      backoff=backoff, meta=json.dumps(meta or {}, sort_keys=True))


class NGramDrafter(Drafter):
    """Drafts γ tokens from an n-gram table; a bigram conditions each token on the previous one."""

    batching = "unigram/bigram tables: a chain drawn per row"

    def __init__(self, table: NGramTable, sample: bool = True):
        self.table = table
        self.sample = sample
        self.name = table.name if sample else f"{table.name}-argmax"
        self._argmax: dict[int | None, int] = {}  # context -> argmax token, the greedy chain's only work
        self._u = table.unigram_probs()  # [V] float64, shared by every context

    def _greedy(self, prev: int | None) -> int:
        key = prev if self.table.order == 2 else None
        if key not in self._argmax:
            self._argmax[key] = int(np.argmax(self.table.probs(key, self._u)))
        return self._argmax[key]

    def propose(self, ids: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        prev = ids[-1] if ids else None
        if not self.sample or sampling.greedy:
            # T = 0: the warp of any q is one-hot on its argmax, so both variants propose the same chain.
            tokens = []
            for _ in range(gamma):
                prev = self._greedy(prev)
                tokens.append(prev)
            return Proposal(tokens=torch.tensor(tokens, dtype=torch.long), probs=None, calls=0)
        uniforms = torch.rand(gamma, generator=generator, dtype=torch.float64)  # [γ]
        tokens, probs = [], []
        for i in range(gamma):
            # log q as logits: warping applies the same temperature / top-k / top-p as p gets.
            with np.errstate(divide="ignore"):
                logq = torch.from_numpy(np.log(self.table.probs(prev, self._u)))  # [V]
            q_i = warp(logq, sampling)  # [V]
            prev = sample(q_i, uniforms[i])
            tokens.append(prev)
            probs.append(q_i)
        return Proposal(tokens=torch.tensor(tokens, dtype=torch.long), probs=torch.stack(probs), calls=0)
