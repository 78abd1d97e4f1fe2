"""Batch cost (MJSD paper Table 1; issue 15's β against batch size): the batched forward, the timing, bad input."""
from __future__ import annotations

import json

import pytest
import torch

from specrepro.metrics.batching import BatchingResult, measure_batching
from specrepro.metrics.prefix import BatchedPrefix, batch_contexts
from specrepro.metrics.energy import EnergyMeter, UnavailableMeter
from specrepro.engine.models import tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

CONTEXT = [(7 * i + 3) % 32 for i in range(24)]  # L = 24 tokens of a 32-token vocabulary


@pytest.fixture(scope="module")
def model():
    return tiny_model(vocab_size=32, n_layers=2, hidden=16, seed=4)


class TickingMeter(EnergyMeter):
    """A fake counter that advances 2 J at every read: each measured block spends exactly 2 J."""

    source, scope = "test", "a fake counter"

    def __init__(self):
        super().__init__(torch.device("cpu"))
        self.reads = 0

    def read_j(self) -> float:
        self.reads += 1
        return 2.0 * self.reads


def test_batch_contexts_are_different_sequences_of_one_length():
    rows = batch_contexts(CONTEXT, 4)
    assert rows.shape == (4, len(CONTEXT))
    assert rows[0].tolist() == CONTEXT
    assert len({tuple(r) for r in rows.tolist()}) == 4
    assert all(sorted(r) == sorted(CONTEXT) for r in rows.tolist())  # rotations of the same tokens


def test_batched_forward_equals_one_forward_per_sequence(model):
    contexts = batch_contexts(CONTEXT, 3)  # [3, L]
    new = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])  # [3, n = 4]
    prefix = BatchedPrefix(model, contexts)
    logits = prefix.forward(new)
    assert logits.shape == (3, 4, 32)
    assert [len(row) for row in prefix.cache.rows] == [len(CONTEXT)] * 3  # the new tokens are not kept
    with torch.inference_mode():
        for b in range(3):
            full = model(input_ids=torch.cat([contexts[b], new[b]])[None]).logits[0, -4:]  # [n, V]
            torch.testing.assert_close(logits[b], full, atol=1e-5, rtol=1e-5)
    # A second call follows the same prefix: the same new tokens give the same logits.
    torch.testing.assert_close(prefix.forward(new), logits)


def test_measure_fills_every_cell_and_table1(model):
    meter = TickingMeter()
    result = measure_batching(model, CONTEXT, batches=(4, 1, 2), new_tokens=(3, 1), rounds=2, forwards=3,
                              warmup=1, meter=meter, label="tiny")
    assert [(c.batch, c.new_tokens) for c in result.cells] == [(1, 1), (1, 3), (2, 1), (2, 3), (4, 1), (4, 3)]
    assert result.batches == (1, 2, 4) and result.new_tokens == (1, 3)
    assert meter.reads == 2 * 6 * 3  # two reads per sample: (warm-up + timed rounds) × cells
    for c in result.cells:
        assert c.runs == 6
        assert 0 < c.latency.p25_s <= c.latency.median_s <= c.latency.p75_s
        assert c.energy_j == pytest.approx(2.0 / 3) and c.total_j == pytest.approx(4.0)
        assert c.total_s > 0
    assert result.beta(2, 1) == 1.0
    assert result.beta(4, 3) == pytest.approx(result.cell(4, 3).latency.median_s / result.cell(4, 1).latency.median_s)
    rows = result.table1()
    assert [r["batch_size"] for r in rows] == [1, 2, 4]
    for r in rows:
        assert r["time_per_input_s"] == pytest.approx(r["time_per_run_s"] / r["batch_size"])
        assert r["energy_per_input_j"] == pytest.approx(2.0 / 3 / r["batch_size"])
    assert (result.dtype, result.context_tokens, result.energy_source, result.model) == ("fp32", 24, "test", "tiny")
    back = BatchingResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert back == result


def test_without_a_counter_energy_is_empty_with_the_reason(model):
    result = measure_batching(model, CONTEXT, batches=(1, 2), rounds=1, forwards=1, warmup=0,
                              meter=UnavailableMeter("no counter in this test"))
    assert result.energy_source == "none" and result.energy_reason == "no counter in this test"
    assert all(c.energy_j is None and c.total_j is None for c in result.cells)
    assert all(r["energy_per_input_j"] is None for r in result.table1())


class FrozenCounter(TickingMeter):
    """A counter that does not move within a sample, as NVML's within its update period."""

    def read_j(self) -> float:
        return 5.0


def test_samples_shorter_than_the_counters_update_read_no_energy_and_say_why(model):
    result = measure_batching(model, CONTEXT, batches=(1, 2), rounds=1, forwards=1, warmup=0, meter=FrozenCounter())
    assert all(c.energy_j is None and c.total_j is None for c in result.cells)  # None, not 0 J
    assert "below test resolution" in result.energy_reason


@pytest.mark.parametrize("kwargs, message", [
    (dict(batches=(0, 2)), "batch sizes B must be >= 1"),
    (dict(new_tokens=(0,)), "new tokens per sequence n must be >= 1"),
    (dict(rounds=0), "rounds must be an integer >= 1"),
    (dict(forwards=0), "forwards must be an integer >= 1"),
    (dict(new_tokens=(600,)), "must fit the model's context"),
])
def test_bad_input_gets_one_clear_error(model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        measure_batching(model, CONTEXT, meter=UnavailableMeter("test"), **kwargs)


def test_bad_shapes_get_one_clear_error(model):
    with pytest.raises(ValueError, match="batch size B must be >= 1"):
        batch_contexts(CONTEXT, 0)
    prefix = BatchedPrefix(model, batch_contexts(CONTEXT, 2))
    with pytest.raises(ValueError, match=r"new tokens must be \[2, n\] with n >= 1"):
        prefix.forward(torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match=r"new tokens must be \[2, n\] with n >= 1"):
        prefix.forward(torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="contexts must be"):
        BatchedPrefix(model, torch.tensor([1, 2, 3]))
