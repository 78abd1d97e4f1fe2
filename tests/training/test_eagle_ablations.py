"""The EAGLE ablation file (``training.eagle_ablations``) gathers what ``training.eagle`` really writes: two variants
trained on a tiny target (the final-norm features, and the same with one training-time-test pass) on one shared data
folder, gathered into one file whose every entry is its run's record; a missing record or an unknown shipped variant
is one clear error."""
from __future__ import annotations

import json

import pytest

from specrepro.engine.models import LoadedModel, tiny_model
from specrepro.training import eagle, eagle_ablations
from tests.helpers import tiny_framing

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = dict(target="tiny", draft_vocab=16, shards=1, task_shards=1, gen_batch=4, max_len=48, window=16, steps=12,
             batch=2, lr=3e-3, warmup=2, depth=3, k_max=4, top_k=2, threads=1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run folders of two variants, "last" and "ttt", trained by ``train_eagle`` itself."""
    root = tmp_path_factory.mktemp("eagle")
    target = LoadedModel("tiny", tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=1), None)
    with pytest.MonkeyPatch.context() as patch:
        tiny_framing(patch, eagle)
        for name, ttt in (("last", 0), ("ttt", 1)):
            eagle.train_eagle(eagle.EagleTrainConfig(**SMALL, ttt=ttt), root / name, target=target,
                              command=["test", name], data=root / "data")
    return [root / "last", root / "ttt"]


def test_each_variant_is_its_runs_record(runs):
    gathered = eagle_ablations.gather(runs, shipped="ttt")
    assert gathered["shipped"] == "ttt" and [v["name"] for v in gathered["variants"]] == ["last", "ttt"]
    for run, entry in zip(runs, gathered["variants"]):
        record = json.loads((run / "training_record.json").read_text())
        assert entry["ttt"] == record["config"]["ttt"] == (1 if run.name == "ttt" else 0)
        assert entry["features"] == "last" and entry["steps"] == SMALL["steps"]
        assert entry["command"] == record["command"] == ["test", run.name]
        assert entry["draft_vocab"] == record["draft"]["draft_vocab"] > 0
        assert entry["accept_by_position"] == record["held_out"]["accept_by_position"]
        assert entry["accept_by_position_full_head"] == record["held_out"]["accept_by_position_full_head"]
        assert len(entry["accept_by_position"]) == SMALL["depth"]
        assert all(0.0 <= a <= 1.0 for a in entry["accept_by_position"])
        assert set(entry["topk_accuracy"]) == {f"depth_{d}" for d in range(1, SMALL["depth"] + 1)}
        assert entry["train_seconds"] == record["train"]["seconds"] and entry["git_revision"] == record["git_revision"]


def test_the_command_line_writes_the_gathered_file(runs, tmp_path):
    out = tmp_path / "ablations.json"
    eagle_ablations.main(["--runs", *map(str, runs), "--shipped", "last", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(eagle_ablations.gather(runs, shipped="last")))


def test_a_missing_record_or_an_unknown_shipped_variant_is_refused(runs, tmp_path):
    with pytest.raises(ValueError, match="holds no training_record.json"):
        eagle_ablations.gather([runs[0], tmp_path], shipped="last")
    with pytest.raises(ValueError, match=r"--shipped 'fused' is not one of the variants \(last, ttt\)"):
        eagle_ablations.gather(runs, shipped="fused")


def test_merge_adds_a_later_variant_and_keeps_the_rest_of_the_file(runs, tmp_path):
    out = tmp_path / "ablations.json"
    first = {**eagle_ablations.gather(runs[:1], shipped="last"), "same_split": {"held_out": "kept"}}
    out.write_text(json.dumps(first))
    eagle_ablations.main(["--merge", "--runs", str(runs[1]), "--shipped", "last", "--out", str(out)])
    merged = json.loads(out.read_text())
    assert [v["name"] for v in merged["variants"]] == ["last", "ttt"] and merged["shipped"] == "last"
    assert merged["same_split"] == {"held_out": "kept"} and merged["variants"][0] == first["variants"][0]
    eagle_ablations.main(["--merge", "--runs", str(runs[1]), "--shipped", "ttt", "--out", str(out)])
    assert [v["name"] for v in json.loads(out.read_text())["variants"]] == ["last", "ttt"]  # replaced, not doubled
    with pytest.raises(ValueError, match="--merge adds to an existing ablation file"):
        eagle_ablations.main(["--merge", "--runs", str(runs[1]), "--shipped", "ttt", "--out", str(tmp_path / "no")])
    with pytest.raises(ValueError, match=r"--shipped 'x' is not one of the variants \(last, ttt\)"):
        eagle_ablations.merge(first, [runs[1]], "x")
