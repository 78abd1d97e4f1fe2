"""Online speculative decoding: distil the draft q on the target's rows while serving a stream (survey blog,
*Variants: Online Speculative Decoding*; Liu et al. 2023).

The blog's recipe: "we maintain a fixed-length buffer of sequences along with the target model's token-wise
likelihoods for training later on ... one update step on the buffer ... every L sequences". Drawing samples from
the draft and scoring them with the target is what a verification step already does, so the training data is
free: after each step the loop hands the drafter the target's rows over the proposal (``StepFeedback.p``).

The drafter (``drafters.online.OnlineDrafter``) turns those rows into samples (``OnlineSample``, one verification
step; ``SequenceSample``, one served sequence) and hands them to its learner, which lives here:

- ``OnlineConfig``: how the draft learns while it serves;
- ``OnlineBuffer``: the last ``buffer_size`` samples, first in first out;
- ``OnlineLearner``: counts served sequences and, after every L-th, takes ``steps_per_update`` optimiser steps on
  the buffer (``training.losses.batch_loss``: DistillSpec's divergences FKL/RKL/JSD/TVD on the draft's reduced
  vocabulary, one ``training.loop.Trainer.step`` each), then the draft serves with the new weights;
- ``online_drafter``: a draft model and its learner, as one drafter;
- ``serve_stream``: speculative decoding over a list of prompts, with per-sequence α, updates and their cost.

Which distribution the draft is distilled towards. The loop gives the target's *warped* rows p̃ (those the
acceptance rule used), not its logits. The draft learns its raw q (T = 1, the distribution ``training.draft``
trains) towards the target's raw row recovered from p̃: p ∝ p̃^T at temperature T > 0, exact when temperature
alone warps, and with top-k/top-p the raw p restricted to the kept support, the only part acceptance tests. A
raw q close to the raw p makes the warped q close to the warped p at every temperature, which is what α =
Σ min(p̃, q̃) rewards. At T = 0 the row is the target's one-hot argmax, so the step is cross-entropy on the token
greedy acceptance compares with. The full raw rows (outside a top-k/top-p support) would need the loop to pass
logits in ``StepFeedback``; it does not, and the restricted rows are what serving at that setting needs.

Two kinds of example (``OnlineConfig.examples``). "steps", the blog's buffer: each verification step is trained
over its own context, so an update re-runs the prompt once per buffered step. "sequences": the steps of one served
sequence become one example, the committed text with the target's rows at every draft position that lies on it
(``SequenceSample``: row i of a step conditions on its context + x_<i, which is committed text up to the step's
first rejection; the rows after a rejection condition on rejected tokens and are left out), so each context runs
once per update, about as many times cheaper as a sequence has steps.

Exactness: the weights change only between sequences (never inside a proposal, so every q row is the law its
token was drawn from), and the drafter drops its cache after an update, since its keys came from the old weights.
"""
from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass, field

import torch

from ..acceptance import TREE_RULES, TreeRule
from ..core.config import ONLINE_EXAMPLES, DecodeConfig
from ..core.decoding import Clock, model_device
from ..engine.draft_model import ReducedVocabDraft
from ..drafters.base import Drafter
from ..drafters.online import OnlineDrafter, OnlineSample, SequenceSample
from ..core.record import GenerationRecord, alpha_of
from ..decode.speculative import speculative_generate
from .data import Example, collate
from .loop import Trainer
from .losses import DIVERGENCES, batch_loss


@dataclass(frozen=True)
class OnlineConfig:
    """How the draft learns while it serves."""

    buffer_size: int = 128  # verification steps kept (FIFO); each holds the target's rows at its γ draft positions
    update_every: int = 8  # L: one update after every L served sequences
    steps_per_update: int = 1  # optimiser steps per update (the blog: "one update step on the buffer")
    lr: float = 1e-4  # AdamW; small, as the draft is already trained and keeps serving between updates
    divergence: str = "fkl"  # a key of training.losses.DIVERGENCES; forward KL as the online-SD paper
    batch_size: int | None = None  # buffer samples per optimiser step, drawn without replacement; None: all
    top_k: int = 32  # target probabilities kept per draft position, plus the tail mass (as training.data)
    flush: bool = False  # empty the buffer after each update (the blog's "flushing it every L sequences")
    max_grad_norm: float = 1.0  # gradient clipping of each update step
    seed: int = 0  # the generator that draws minibatches from the buffer
    # "steps": every verification step is an example of its own, re-run over its whole context (the blog's buffer);
    # "sequences": the steps of one served sequence become one example, the sequence itself with the target's rows
    # at every draft position on it (up to each step's first rejection), so a context is run once per update
    # instead of once per step; the buffer then holds sequences
    examples: str = "steps"

    def __post_init__(self) -> None:
        for name in ("buffer_size", "update_every", "steps_per_update", "top_k"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.batch_size is not None and (not isinstance(self.batch_size, int) or self.batch_size < 1):
            raise ValueError(f"batch_size must be None (the whole buffer) or an integer >= 1, got {self.batch_size!r}")
        for name in ("lr", "max_grad_norm"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if self.divergence not in DIVERGENCES:
            raise ValueError(f"divergence must be one of {sorted(DIVERGENCES)}, got {self.divergence!r}")
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if self.examples not in ONLINE_EXAMPLES:
            raise ValueError(f"examples must be one of {', '.join(ONLINE_EXAMPLES)}, got {self.examples!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ------------------------------------------------------------------------------------------- the data


class OnlineBuffer:
    """The last ``size`` samples, first in first out."""

    def __init__(self, size: int):
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"the buffer size must be an integer >= 1, got {size!r}")
        self.samples: deque[OnlineSample | SequenceSample] = deque(maxlen=size)

    def add(self, sample: OnlineSample | SequenceSample) -> None:
        self.samples.append(sample)  # a full deque drops its oldest item

    def clear(self) -> None:
        self.samples.clear()

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def rows(self) -> int:
        """Target rows held: one per draft position."""
        return sum(s.rows for s in self.samples)


# ---------------------------------------------------------------------------------------- the update


class FullVocabStudent(torch.nn.Module):
    """A causal LM whose head covers the whole vocabulary, seen as a reduced-vocabulary draft that keeps every id
    (``token_map`` the identity), so that ``training.losses.batch_loss`` trains it unchanged."""

    def __init__(self, lm: torch.nn.Module):
        super().__init__()
        self.lm = lm
        vocab = lm.get_output_embeddings().weight.shape[0]
        self.register_buffer("token_map", torch.arange(vocab, device=model_device(lm)), persistent=False)

    def reduced_logits(self, input_ids: torch.Tensor, cache=None, use_cache: bool | None = None,
                       attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
        return self.lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits, None  # [B, T, V]


def as_student(model: torch.nn.Module) -> torch.nn.Module:
    """What ``training.losses.batch_loss`` trains: a ``ReducedVocabDraft`` as it is, any other causal LM wrapped."""
    return model if isinstance(model, ReducedVocabDraft) else FullVocabStudent(model)


def example_of(sample: OnlineSample | SequenceSample) -> Example:
    """A buffered sample as distillation data: its sequence with a teacher row at each of its draft positions."""
    return Example.with_rows(*sample.teacher())


@dataclass(frozen=True)
class UpdateReport:
    after_sequence: int  # served sequences when the update ran (a multiple of L)
    samples: int  # buffer samples (verification steps) it trained on
    rows: int  # target rows (draft positions) in them
    losses: tuple[float, ...]  # the divergence before each optimiser step
    seconds: float  # wall time of the update, device-synchronised

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class OnlineLearner:
    """The draft's training side: the buffer, the trainer (AdamW), and an update after every L-th served sequence.

    The draft ``model`` is trained in place (its parameters are set to require gradients); it is the same module
    the drafter samples from, and it is left in eval mode after each update."""

    def __init__(self, model: torch.nn.Module, config: OnlineConfig = OnlineConfig()):
        self.config = config
        self.model = model
        self.student = as_student(model)
        self.model.requires_grad_(True)
        self.trainer = Trainer(self.student, config.lr, betas=(0.9, 0.95), max_grad_norm=config.max_grad_norm)
        self.buffer = OnlineBuffer(config.buffer_size)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.clock = Clock(model_device(model))
        self.sequences = 0  # served sequences so far
        self.reports: list[UpdateReport] = []

    @property
    def updates(self) -> int:
        """Updates so far; a drafter compares it with the count its cache was built under."""
        return len(self.reports)

    def record(self, sample: OnlineSample | SequenceSample) -> None:
        self.buffer.add(sample)

    def end_sequence(self) -> UpdateReport | None:
        """Count one served sequence; after every L-th, update (nothing to learn from an empty buffer)."""
        self.sequences += 1
        if self.sequences % self.config.update_every or not len(self.buffer):
            return None
        return self.update()

    def update(self) -> UpdateReport:
        """``steps_per_update`` trainer steps on the buffer (or on seeded minibatches of it)."""
        cfg, samples = self.config, list(self.buffer.samples)
        if not samples:
            raise ValueError("the buffer is empty: serve at least one verification step before an update")
        device = model_device(self.model)
        t0 = self.clock.now()
        losses = []
        for _ in range(cfg.steps_per_update):
            picked = samples
            if cfg.batch_size is not None and cfg.batch_size < len(samples):
                order = torch.randperm(len(samples), generator=self.generator)[: cfg.batch_size].tolist()
                picked = [samples[i] for i in order]
            examples = [example_of(s) for s in picked]
            batch = collate(examples, max_len=max(len(e.tokens) for e in examples))  # every row kept
            self.student.train()
            losses.append(self.trainer.step(batch_loss(self.student, batch.to(device), cfg.divergence)))
        self.student.eval()
        report = UpdateReport(after_sequence=self.sequences, samples=len(samples), rows=self.buffer.rows,
                              losses=tuple(losses), seconds=self.clock.now() - t0)
        if cfg.flush:
            self.buffer.clear()
        self.reports.append(report)
        return report


def online_drafter(model: torch.nn.Module, config: OnlineConfig = OnlineConfig()) -> OnlineDrafter:
    """The online drafter: proposes from ``model`` (a ``ReducedVocabDraft`` or any causal LM) and trains it in place
    with an ``OnlineLearner`` of ``config``."""
    return OnlineDrafter(OnlineLearner(model, config))


# ------------------------------------------------------------------------------------------ serving


@dataclass
class SequenceStats:
    """One served sequence of a stream."""

    index: int
    seed: int  # DecodeConfig.seed of this sequence (the stream's seed + index)
    prompt_tokens: int
    new_tokens: int
    accepted: int  # draft tokens accepted
    tested: int  # draft tokens that met an accept test
    alpha: float | None  # accepted / tested
    target_calls: int
    wall_time_s: float  # the generation alone, without the update that may follow it
    updates: int  # updates done after this sequence, cumulative (0 for a frozen drafter)
    update_s: float  # cost of the update that followed this sequence, 0 when none did
    update: dict | None  # its UpdateReport


@dataclass
class StreamRecord:
    sequences: list[SequenceStats]
    records: list[GenerationRecord]  # one per prompt, in stream order
    online: dict | None  # the OnlineConfig of an online drafter; None for a frozen one
    config: dict = field(default_factory=dict)  # the DecodeConfig of the stream (sequence i is seeded seed + i)

    @property
    def alpha(self) -> float | None:
        """α pooled over the whole stream."""
        return alpha_of(self.records)

    @property
    def updates(self) -> int:
        return self.sequences[-1].updates

    @property
    def update_s(self) -> float:
        return sum(s.update_s for s in self.sequences)

    def to_dict(self) -> dict:
        return {"alpha": self.alpha, "updates": self.updates, "update_s": self.update_s, "online": self.online,
                "config": self.config, "sequences": [dataclasses.asdict(s) for s in self.sequences],
                "records": [r.to_dict() for r in self.records]}


def serve_stream(target: torch.nn.Module, drafter: Drafter, prompts: list[list[int]], config: DecodeConfig,
                 eos: set[int] = frozenset(), rule: TreeRule = TREE_RULES["exact"],
                 context_length: int | None = None) -> StreamRecord:
    """Speculative decoding over a stream of prompts, in order, one ``speculative_generate`` each (sequence i
    seeded ``config.seed + i``, so a frozen and an online drafter meet the same uniforms).

    An ``OnlineDrafter`` closes each sequence right after it (``end_sequence``: every L-th one is followed by an
    update, timed apart from the generation); any other drafter serves frozen, the baseline to compare with."""
    if len(prompts) == 0:
        raise ValueError("the stream is empty: give at least one prompt")
    online = drafter if isinstance(drafter, OnlineDrafter) else None
    stats, records = [], []
    for i, prompt in enumerate(prompts):
        seq_config = dataclasses.replace(config, seed=config.seed + i)
        rec = speculative_generate(target, drafter, list(prompt), seq_config, eos, rule=rule,
                                   context_length=context_length, method="online" if online else "speculative")
        report = online.end_sequence() if online is not None else None
        stats.append(SequenceStats(
            index=i, seed=seq_config.seed, prompt_tokens=len(prompt), new_tokens=rec.new_tokens,
            accepted=sum(rec.accept_lengths), tested=rec.tested, alpha=rec.alpha, target_calls=rec.target_calls,
            wall_time_s=rec.wall_time_s, updates=online.learner.updates if online is not None else 0,
            update_s=report.seconds if report is not None else 0.0,
            update=report.to_dict() if report is not None else None))
        records.append(rec)
    return StreamRecord(stats, records, online.learner.config.to_dict() if online is not None else None,
                        config.to_dict())
