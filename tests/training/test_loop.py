"""The one trainer loop (``specrepro.training.loop``): its schedule against the formulas the trainers wrote before,
one optimiser step against AdamW by hand, accumulation, the best weights kept, a resumed run equal to an
uninterrupted one, and the run folder and record."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from specrepro.core.provenance import git_revision, git_state
from specrepro.training.loop import Checkpoint, PhaseTimer, Trainer, begin_run, train_loop, warmup_cosine


@pytest.mark.parametrize("steps, warmup", [(30, 3), (1200, 20), (7, 0)])
def test_the_schedule_is_the_trainers_former_formulas(steps, warmup):
    for s in range(steps + 3):
        cos = np.cos(np.pi * min(s, steps) / steps)
        medusa = min(1.0, (s + 1) / max(1, warmup)) * 0.5 * (1 + cos)  # warm-up, cosine to 0
        ppd = 0.5 * (1 + cos)  # the PPD paper's: cosine from lr, no warm-up
        draft = min(1.0, (s + 1) / max(1, warmup)) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
        assert warmup_cosine(s, steps, warmup) == medusa
        assert warmup_cosine(s, steps) == ppd
        assert warmup_cosine(s, steps, warmup, floor=0.1) == pytest.approx(draft, rel=1e-15, abs=1e-15)
    assert warmup_cosine(steps, steps, warmup, floor=0.1) == pytest.approx(0.1)  # decays to the floor


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


X = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
Y = torch.randn(16, 1, generator=torch.Generator().manual_seed(2))


def mse(model, rows=slice(None)) -> torch.Tensor:
    return ((model(X[rows]) - Y[rows]) ** 2).mean()


def test_one_step_is_adamw_with_clipping_and_the_schedule():
    a, b = _model(), _model()
    trainer = Trainer(a, 0.1, betas=(0.9, 0.95), max_grad_norm=0.5, schedule=lambda s: warmup_cosine(s, 10, 2))
    opt = torch.optim.AdamW(b.parameters(), lr=0.1, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, 10, 2))
    for _ in range(3):
        got = trainer.step(mse(a))
        loss = mse(b)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(b.parameters(), 0.5)
        opt.step()
        sched.step()
        assert got == float(loss)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_pieces_accumulate_and_no_piece_takes_no_step():
    a, b = _model(), _model()
    ta, tb = Trainer(a, 0.05), Trainer(b, 0.05)
    got = ta.step((mse(a, slice(i, i + 4)) for i in range(0, 16, 4)), accumulate=4)  # 4 pieces, each weighted 1/4
    want = tb.step(sum(mse(b, slice(i, i + 4)) for i in range(0, 16, 4)) / 4)
    assert got == pytest.approx(want, rel=1e-6)
    assert all(torch.allclose(p, q, atol=1e-7) for p, q in zip(a.parameters(), b.parameters()))
    before = [p.detach().clone() for p in a.parameters()]
    assert ta.step(iter(())) is None and all(torch.equal(p, q) for p, q in zip(before, a.parameters()))


def test_the_best_validated_weights_are_kept():
    model = _model()
    trainer = Trainer(model, 0.5)  # a large rate: the validation loss goes up and down
    log = train_loop(trainer, 12, lambda s: mse(model, slice(0, 8)), validate=lambda: float(mse(model, slice(8, 16))),
                     val_every=3, keep_best=True, progress=False)
    assert [s for s, _ in log.vals] == [3, 6, 9, 12] and len(log.losses) == 12
    assert float(mse(model, slice(8, 16))) == pytest.approx(min(v for _, v in log.vals))


class Stop(Exception):
    pass


def _run(folder, cfg: dict, stop_at: int | None = None) -> tuple[torch.nn.Module, object]:
    """8 steps on random minibatches, validated and checkpointed every 2; ``stop_at``: the process dies there."""
    folder.mkdir(exist_ok=True)
    model, g = _model(), torch.Generator().manual_seed(3)
    trainer = Trainer(model, 0.05, schedule=lambda s: warmup_cosine(s, 8, 2))

    def loss(step):
        if step == stop_at:
            raise Stop
        return mse(model, torch.randint(0, 16, (4,), generator=g))
    return model, train_loop(trainer, 8, loss, validate=lambda: float(mse(model)), val_every=2,
                             checkpoint=Checkpoint(folder / "checkpoint.pt", cfg), generator=g, progress=False)


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    whole, log = _run(tmp_path / "whole", {"run": 1})
    with pytest.raises(Stop):  # dies during step 6: the checkpoint after step 4 is the last one
        _run(tmp_path / "parts", {"run": 1}, stop_at=5)
    resumed, again = _run(tmp_path / "parts", {"run": 1})
    assert again.losses == log.losses and again.vals == log.vals and len(log.losses) == 8
    assert all(torch.equal(p, q) for p, q in zip(whole.parameters(), resumed.parameters()))
    _, other = _run(tmp_path / "parts", {"run": 2})  # another config: its checkpoint is ignored, a fresh run
    assert other.losses == log.losses


def test_the_run_folder_and_record(tmp_path):
    class Cfg:
        threads = 1

        def to_dict(self):
            return {"threads": 1, "lr": 0.1}

    run = begin_run(tmp_path / "run", Cfg(), "specrepro.training.example", command=["python", "-m", "x"])
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"command": ["python", "-m", "x"],
                                                                           "threads": 1, "lr": 0.1}
    with run.timer.phase("data"):
        pass
    run.timer.add("train", 2.0)
    record = run.record(train={"losses": [1.0]})
    assert list(record) == ["command", "config", "git_revision", "train", "times_s", "versions"]
    assert record["git_revision"] == git_revision() and record["train"] == {"losses": [1.0]}
    assert list(record["times_s"]) == ["data_s", "train_s", "total_s"] and record["times_s"]["train_s"] == 2.0
    run.write(record, tmp_path / "weights")
    for folder in (tmp_path / "run", tmp_path / "weights"):
        assert json.loads((folder / "training_record.json").read_text())["command"] == ["python", "-m", "x"]
    assert isinstance(PhaseTimer().seconds()["total_s"], float)


def test_git_state_is_the_revision_as_data():
    state = git_state()
    assert set(state) == {"revision", "dirty_files"} and isinstance(state["dirty_files"], list)
    if state["revision"] is not None:
        assert git_revision().startswith(state["revision"])


def test_a_records_tokens_digest_tells_the_same_conversations_from_others():
    from types import SimpleNamespace
    from specrepro.training.provenance import machine, tokens_digest
    convs = [SimpleNamespace(tokens=torch.tensor([1, 2, 3])), SimpleNamespace(tokens=torch.tensor([4, 5]))]
    same = [SimpleNamespace(tokens=torch.tensor([1, 2, 3], dtype=torch.int32)),
            SimpleNamespace(tokens=torch.tensor([4, 5]))]
    assert tokens_digest(convs) == tokens_digest(same)  # the ids, not the dtype that held them
    assert tokens_digest(convs) != tokens_digest(convs[::-1])  # the order counts
    split = [SimpleNamespace(tokens=torch.tensor([1, 2])), SimpleNamespace(tokens=torch.tensor([3, 4, 5]))]
    assert tokens_digest(convs) != tokens_digest(split)  # where one conversation ends counts
    assert machine()["cpu"]["logical_cores"] >= 1
