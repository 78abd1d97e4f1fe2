"""The CUDA paths that a CPU can hold (issue 38, item 6): torch.cuda's calls are replaced by recorders, so these
tests say which GPU is synchronised, how often, and which dtype a GPU of each generation gets."""
from __future__ import annotations

import pytest
import torch

from specrepro import models
from specrepro.decoding import Clock
from specrepro.metrics import profile


@pytest.fixture
def synced(monkeypatch) -> list:
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    return calls


def test_the_clock_synchronises_the_runs_gpu_not_the_current_one(synced):
    Clock(torch.device("cuda:1")).now()
    Clock("cuda").now()
    assert synced == [torch.device("cuda:1"), torch.device("cuda")]


def test_the_clock_never_synchronises_on_the_cpu(synced):
    clock = Clock(torch.device("cpu"))
    clock.now()
    with clock.interval() as span:
        pass
    assert synced == [] and span.seconds >= 0


class FakeEvent:
    """A CUDA event: record() stamps the 'device time' of the stream it is given."""

    log: list = []

    def __init__(self, enable_timing: bool = False):
        assert enable_timing
        self.t = None

    def record(self, stream):
        self.t = stream.time
        FakeEvent.log.append(("record", stream.device))

    def synchronize(self):
        FakeEvent.log.append(("sync",))

    def elapsed_time(self, other) -> float:
        return other.t - self.t  # milliseconds


def test_an_interval_is_timed_by_two_events_on_the_runs_stream_with_one_sync(synced, monkeypatch):
    stream = type("Stream", (), {"time": 10.0, "device": None})()
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: setattr(stream, "device", device) or stream)
    FakeEvent.log = []
    with Clock("cuda:1").interval() as span:
        stream.time = 35.0  # the block's kernels take 25 ms of device time
    assert span.seconds == pytest.approx(0.025)
    assert FakeEvent.log == [("record", torch.device("cuda:1")), ("record", torch.device("cuda:1")), ("sync",)]
    assert synced == []  # no device-wide sync: the one wait is the end event's


@pytest.mark.parametrize("capability, dtype", [((7, 0), torch.float16), ((7, 5), torch.float16),
                                               ((8, 0), torch.bfloat16), ((9, 0), torch.bfloat16)])
def test_a_gpu_without_native_bf16_gets_fp16_read_off_the_runs_gpu(monkeypatch, capability, dtype):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device) or capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # emulation counted: not asked
    assert models.default_dtype(torch.device("cuda:1")) is dtype
    assert asked == [torch.device("cuda:1")]
    auto = profile.candidate_dtypes(torch.device("cuda:1"))
    assert ("bf16" in auto) is (dtype is torch.bfloat16) and "fp16" in auto


def test_a_cpu_computes_bf16():
    assert models.default_dtype(torch.device("cpu")) is torch.bfloat16
    assert profile.candidate_dtypes(torch.device("cpu")) == ("bf16", "fp32")
