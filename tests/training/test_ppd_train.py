"""``training.ppd.train_ppd`` end to end on a tiny target: its data, its held-out accuracies, and the learning curve
(held-out top-k accuracy against the conversations seen) that it keeps beside the checkpoint, so that a resumed run
keeps the points before it; a curve step that is not a multiple of the validation step is one clear error."""
from __future__ import annotations

import json

import numpy as np
import pytest

from specrepro.engine.models import LoadedModel, tiny_model
from specrepro.training import ppd
from tests.helpers import tiny_framing

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = dict(target="tiny", shards=1, task_shards=1, gen_batch=4, max_len=48, steps=8, anchors=4, val_every=2,
             curve_every=4, k_max=4, threads=1)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ppd")
    target = LoadedModel("tiny", tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=1), None)
    with pytest.MonkeyPatch.context() as patch:
        tiny_framing(patch, ppd)
        record = ppd.train_ppd(ppd.PPDTrainConfig(**SMALL), root / "run", target=target, command=["test"],
                               progress=False)
    return root / "run", record


def test_the_curve_has_a_point_every_curve_step_and_the_last_is_the_final_evaluation(run):
    folder, record = run
    curve = record["learning_curve"]
    assert [p["step"] for p in curve] == [4, 8] and [p["conversations_seen"] for p in curve] == [4, 8]
    assert curve[-1]["topk_accuracy"] == record["held_out_topk_accuracy"]
    for point in curve:
        rows = np.array(list(point["topk_accuracy"].values()))
        assert rows.shape == (3, 4) and np.all(np.diff(rows, axis=1) >= 0) and np.all((rows >= 0) & (rows <= 1))
    assert json.loads((folder / "learning_curve.json").read_text()) == curve
    assert record["data"]["written_in"] == "fp32" and record["data"]["conversations"] == 8


def test_a_resumed_curve_keeps_its_points_and_measures_each_step_once(tmp_path):
    cfg = ppd.PPDTrainConfig(steps=10, val_every=2, curve_every=4)
    calls = []
    first = ppd.LearningCurve(tmp_path / "curve.json", cfg)
    for step in (2, 4, 6):
        first.maybe_measure(step, lambda: calls.append(step) or np.full((3, 10), 0.5))
    again = ppd.LearningCurve(tmp_path / "curve.json", cfg)  # a restarted run reads the file
    again.maybe_measure(4, lambda: calls.append("again") or np.zeros((3, 10)))
    again.maybe_measure(8, lambda: calls.append(8) or np.zeros((3, 10)))
    again.maybe_measure(10, lambda: calls.append(10) or np.zeros((3, 10)))  # the last step: the final evaluation's
    assert calls == [4, 8] and [p["step"] for p in again.points] == [4, 8]


def test_a_curve_step_off_the_validation_steps_is_one_error():
    with pytest.raises(ValueError, match="curve_every must be 0 or a multiple of val_every"):
        ppd.PPDTrainConfig(val_every=100, curve_every=250)


def test_remeasure_on_another_recipes_split_keeps_the_earlier_numbers(run, monkeypatch):
    folder, record = run
    target = LoadedModel("tiny", tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=1), None)
    monkeypatch.setattr(ppd, "load_model", lambda name, dtype, device: target)
    again = ppd.remeasure(folder, folder / "data", "cpu", task_shards=0)  # the free shard's held-out split only
    assert again["remeasured"]["split"] == {"shards": 1, "task_shards": 0, "val_conversations": 1}
    assert again["held_out_topk_accuracy_before"] == record["held_out_topk_accuracy"]
    assert json.loads((folder / "prompt_tokens" / "training_record.json").read_text()) == again
