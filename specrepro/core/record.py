"""The record every generation returns, whatever the method."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .stats import median_of_ratios


def tested(accept_lengths: list[int], proposed_lengths: list[int]) -> int:
    """Draft tokens that met an accept test over some steps: every accepted one plus the first rejected one."""
    return sum(a + (a < g) for a, g in zip(accept_lengths, proposed_lengths))


def pooled_alpha(accept_lengths: list[int], proposed_lengths: list[int]) -> float | None:
    """α pooled over steps: accepted / tested (the one home of this formula; records and bench summaries use it)."""
    n = tested(accept_lengths, proposed_lengths)
    return sum(accept_lengths) / n if n else None


# ---------------------------------------------------------------- aggregates over records (the one home of each)
# ``records``: GenerationRecords or their dicts (records.jsonl rows, ``GenerationRecord.to_dict()``).

def _get(record, key: str):
    return record[key] if isinstance(record, dict) else getattr(record, key)


def alpha_of(records) -> float | None:
    """α pooled over every step of ``records``: ``pooled_alpha`` on their concatenated steps."""
    return pooled_alpha([a for r in records for a in _get(r, "accept_lengths")],
                        [g for r in records for g in _get(r, "proposed_lengths")])


def tokens_per_call(records) -> float | None:
    """Generated tokens per target forward, pooled (τ measured; prefill calls included)."""
    calls = [_get(r, "target_calls") for r in records]
    if not records or not all(calls):
        return None
    return sum(_get(r, "new_tokens") if isinstance(r, dict) else r.new_tokens for r in records) / sum(calls)


def _tokens(record) -> int:
    return record["new_tokens"] if isinstance(record, dict) else record.new_tokens


def tokens_per_second(record) -> float | None:
    wall, tokens = _get(record, "wall_time_s"), _tokens(record)
    return tokens / wall if wall > 0 and tokens else None


def paired_runs(records, baseline) -> list[tuple[tuple[int, float], tuple[int, float]]]:
    """Per (prompt, repeat) that both ran, ((tokens, seconds) of ``records``, (tokens, seconds) of ``baseline``):
    runs in the [N, 2, 2] layout of ``core.stats``. Records are paired by their ``prompt_id`` and ``repeat``; an
    unpaired one, or one with no tokens or no time (no tokens/s), is left out."""
    base = {(_get(b, "prompt_id"), _get(b, "repeat")): b for b in baseline}
    out = []
    for r in records:
        b = base.get((_get(r, "prompt_id"), _get(r, "repeat")))
        if b is not None and tokens_per_second(b) and tokens_per_second(r):
            out.append(((_tokens(r), _get(r, "wall_time_s")), (_tokens(b), _get(b, "wall_time_s"))))
    return out


def median_speedup(records, baseline) -> float | None:
    """``stats.median_of_ratios`` (MEDIAN_OF_RATIOS) of the paired runs: the median over (prompt, repeat) of tokens/s
    over the baseline's. Unlike the pooled ratio, one record stalled by another process on a shared CPU cannot move it
    much. None when no run pairs."""
    runs = paired_runs(records, baseline)
    return median_of_ratios(runs) if runs else None


@dataclass
class GenerationRecord:
    method: str
    token_ids: list[int]  # generated tokens only (the prompt excluded)
    text: str = ""
    prompt_tokens: int = 0
    wall_time_s: float = 0.0  # device-synchronised on CUDA
    target_calls: int = 0  # target forward passes, prefill included
    draft_calls: int = 0  # draft model forward passes (0 for model-free drafts)
    accept_lengths: list[int] = field(default_factory=list)  # draft tokens accepted, one per verifying target call
    proposed_lengths: list[int] = field(default_factory=list)  # depth of the proposal (its longest root path)
    gammas: list[int] = field(default_factory=list)  # γ asked of the drafter at each step (varies with --gamma auto)
    tree_sizes: list[int] = field(default_factory=list)  # candidates scored per verifying call (= γ for a chain)
    # tree positions scored per target call: the root + candidates + prompt nodes (PPD's S_input)
    input_lengths: list[int] = field(default_factory=list)
    time_draft_s: float = 0.0
    time_target_s: float = 0.0
    time_other_s: float = 0.0
    # the wall time as the target's forwards, the draft's forwards and the host's work, with the first step's parts
    # apart (``decoding.StepSplit``); None where a loop does not split it (CUDA, the peers, batched rows)
    time_split: dict | None = None
    stop_reason: str = ""  # "eos" or "max_new_tokens"
    # energy of the whole generation from a total-energy counter (NVML on CUDA, RAPL on a CPU), None when there is
    # none (``energy["reason"]`` says why); split into draft and target by their shares of the wall time
    energy_j: float | None = None
    energy: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)  # dtype and why, device, the γ policy: what made this record

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tested(self) -> int:
        """Draft tokens that met an accept test: all accepted ones plus the first rejected one."""
        return tested(self.accept_lengths, self.proposed_lengths)

    @property
    def alpha(self) -> float | None:
        """Empirical acceptance rate α: accepted / tested (the maximum-likelihood α for i.i.d. accepts)."""
        return pooled_alpha(self.accept_lengths, self.proposed_lengths)

    @property
    def joules_per_token(self) -> float | None:
        return self.energy_j / self.new_tokens if self.energy_j is not None and self.new_tokens else None

    def set_energy(self, joules: float | None, source: str, reason: str | None = None) -> None:
        """Record a measured energy and its split by time share: draft, target, and the rest of the loop."""
        self.energy_j = joules
        self.energy = {"source": source, "reason": reason}
        if joules is not None and self.wall_time_s > 0:
            self.energy.update(draft_j=joules * self.time_draft_s / self.wall_time_s,
                               target_j=joules * self.time_target_s / self.wall_time_s)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else float("nan")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(new_tokens=self.new_tokens, alpha=self.alpha, tokens_per_s=self.tokens_per_s,
                 joules_per_token=self.joules_per_token)
        return d
