"""The CUDA paths that a CPU can hold (issue 38, item 6): torch.cuda's calls are replaced by recorders, so these
tests say which GPU is synchronised, how often, and which dtype a GPU of each generation gets."""
from __future__ import annotations

import pytest
import torch

from specrepro.engine import models
from specrepro.core.decoding import Clock
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


# --- tables and footers name the device the run used ----------------------------------------------------------


def test_a_device_is_named_as_it_is(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: f"NVIDIA H100 80GB HBM3 #{index}")
    assert profile.device_name("cuda:1") == "NVIDIA H100 80GB HBM3 #1 (cuda:1)"
    cpu = profile.device_name("cpu", threads=2)
    assert cpu.startswith("CPU ") and cpu.endswith(", 2 thread(s)")


def bench_result(device: str, name: str):
    from types import SimpleNamespace
    rows = [{"method": m, "tokens_per_s": 10.0, "tokens_per_call": 2.0, "dtype": "bf16"} for m in ("ar", "medusa")]
    return SimpleNamespace(summary=rows, records=[], provenance={
        "device": device, "device_name": name, "tree_sizes": {"medusa": {"size": 4}}})


@pytest.mark.parametrize("device, name, said", [("cuda:0", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3 (cuda:0)"),
                                                ("cpu", "AMD EPYC 9R14", "CPU AMD EPYC 9R14")])
def test_medusas_table_1_says_the_benchs_device(device, name, said):
    from types import SimpleNamespace

    from specrepro.studies import medusa
    prof = SimpleNamespace(l_fp=lambda n: 0.01)
    ours = medusa.table1(bench_result(device, name), prof, {"trainable_fraction": 0.01}, "smollm2")[:2]
    assert [r["device"] for r in ours] == [f"{said}, bf16"] * 2
    assert all(said in r["setting"] for r in ours)


# --- PPD's training mask is in the model's dtype -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_ppds_additive_mask_is_in_the_models_dtype_and_never_minus_infinity(dtype):
    from specrepro.training import ppd
    cfg = ppd.PPDTrainConfig(prompt_tokens=2, epts=1)
    positions, mask = ppd.group_inputs(torch.tensor([1, 3]), 5, cfg, dtype=dtype)
    assert mask.dtype is dtype and positions.shape == (1, 4) and mask.shape == (1, 1, 4, 9)
    assert torch.isfinite(mask).all() and float(mask.min()) == torch.finfo(dtype).min
    assert ppd.prefix_mask(mask, 5, cfg).dtype is dtype


def test_ppd_prompt_tokens_train_on_a_half_precision_model():
    from specrepro.training import ppd
    from specrepro.training.data import Example
    model = models.tiny_model(vocab_size=64, n_layers=1, dtype=torch.bfloat16)
    cfg = ppd.PPDTrainConfig(prompt_tokens=2, epts=1, max_len=16)
    ex = Example.with_rows(list(range(1, 13)), slice(0, None), torch.zeros(12, 4).long(), torch.full((12, 4), 0.25))
    prefix = ppd.run_prefix(model, ex, cfg)
    student = ppd.Student(cfg, ppd.init_embeddings(model, cfg).to(torch.bfloat16), model)
    logq = ppd.student_logits(model, student, prefix, prefix.usable[:3], cfg)
    assert logq.shape == (3, 2, 64) and torch.isfinite(logq).all()


# --- trainers put their inputs on the model's device ------------------------------------------------------------


def test_a_bad_device_name_is_one_clear_error():
    with pytest.raises(ValueError, match="--device must be auto, cpu, cuda or cuda:N"):
        models.resolve_device("gpu")
    assert models.resolve_device("auto") == models.default_device()


def test_the_target_features_feed_the_target_on_its_device_and_come_back_to_the_cpu():
    from types import SimpleNamespace

    from specrepro.training.data import Example
    from specrepro.training.features import target_features
    seen = []

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1, device="meta"))

        def forward(self, h):
            return torch.randn(h.shape[0], 5)

    class Spy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = Head()

        def get_output_embeddings(self):
            return self.head

        def model(self, input_ids, output_hidden_states):
            seen.append(input_ids.device)
            return SimpleNamespace(hidden_states=[torch.randn(1, input_ids.shape[1], 8)])

    ex = Example.with_rows([1, 2, 3], slice(1, None), torch.zeros(2, 2).long(), torch.zeros(2, 2))
    (feat,) = target_features(Spy(), [ex], (-1,), max_len=8)
    assert seen == [torch.device("meta")] and feat.f.device.type == "cpu" and feat.lse.device.type == "cpu"
