"""The DistillSpec study (specrepro.training.distillspec) on tiny models: the grid's data, budget, resumability and
score, and that distillation moves the draft towards the target."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from specrepro.engine.draft_model import draft_from_target
from specrepro.engine.models import tiny_model
from specrepro.training import distillspec as ds
from specrepro.training.distillspec import StudyConfig, StudyData

pytestmark = pytest.mark.usefixtures("one_thread")
V, STOP = 32, 31


@pytest.fixture(scope="module")
def pair():
    target = tiny_model(vocab_size=V, n_layers=1, hidden=32, seed=5)
    draft = draft_from_target(tiny_model(vocab_size=V, n_layers=1, hidden=32, seed=9), torch.arange(V), n_layers=1)
    return target, draft.eval().requires_grad_(False)


def engine_draft():
    """The pair's draft, a fresh copy with the engine attached (as ``load_draft`` attaches it)."""
    from specrepro.engine import attach
    draft = draft_from_target(tiny_model(vocab_size=V, n_layers=1, hidden=32, seed=9), torch.arange(V), n_layers=1)
    assert attach(draft.eval().requires_grad_(False)) is not None
    return draft


def study_data(n_train: int = 6) -> StudyData:
    train = tuple((tuple(range(i, i + 4)), tuple(range(10 + i, 14 + i)) + (STOP,)) for i in range(n_train))
    held = (("a", (1, 2, 3)), ("a", (4, 5)), ("b", (7, 8, 9, 10)))
    return StudyData(train, held, STOP, frozenset({STOP}))


SMALL = StudyConfig(steps=3, batch_size=2, max_new=6, eval_max_new=8, held_out_samples=1, top_k=8, bootstrap=200,
                    lr=1e-2)


def state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("changes, match", [
    (dict(divergences=("kl",)), "divergences"), (dict(divergences=()), "divergences"), (dict(sources=("web",)), "sources"),
    (dict(steps=0), "steps"), (dict(batch_size=0), "batch_size"), (dict(batch_size=1), "mix"), (dict(lr=0.0), "lr"),
    (dict(lr=float("nan")), "lr"), (dict(eval_temperature=-1.0), "eval_temperature"), (dict(top_k=0), "top_k")])
def test_bad_configs_get_one_clear_error(changes, match):
    with pytest.raises(ValueError, match=match):
        StudyConfig(**changes)


def test_empty_data_is_refused():
    with pytest.raises(ValueError, match="train pair"):
        StudyData((), (("a", (1,)),), STOP, frozenset())
    with pytest.raises(ValueError, match="held-out"):
        StudyData((((1,), (2,)),), (), STOP, frozenset())


def test_every_cell_sees_the_same_prompts_and_each_epoch_covers_the_train_split():
    cfg = StudyConfig(steps=6, batch_size=4)
    steps = ds.schedule(6, cfg)
    assert steps == ds.schedule(6, cfg) and len(steps) == 6 and all(len(b) == 4 for b in steps)
    flat = [i for b in steps for i in b]
    assert sorted(flat[:6]) == list(range(6)) and sorted(flat[6:12]) == list(range(6))  # epochs without repeats
    assert ds.schedule(6, StudyConfig(steps=6, batch_size=4, seed=1)) != steps


def test_teacher_rows_are_the_targets_distribution_at_each_output_position(pair):
    target, _ = pair
    x, y = [1, 2, 3, 4], [20, 21, STOP]
    (ex,) = ds.teacher_examples(target, [(x, y), ([5, 6], [7])], top_k=V)[:1]
    with torch.no_grad():
        probs = target(input_ids=torch.tensor([x + y])).logits[0].softmax(-1)  # [L, V]
    assert ex.has_row.tolist() == [False] * len(x) + [True] * len(y)
    for j in range(len(y)):  # the row stored at token x+j is the target's law of that token
        row = torch.zeros(V).scatter_(0, ex.top_ids[len(x) + j], ex.top_probs[len(x) + j])
        torch.testing.assert_close(row, probs[len(x) + j - 1], atol=1e-5, rtol=1e-4)
    assert float(ex.tail[len(x):].abs().max()) < 1e-5  # top_k = V keeps all the mass


def test_the_prefix_teacher_gives_the_full_forwards_rows_and_keeps_its_prompts_unchanged(pair):
    """``PrefixTeacher`` runs each prompt once and only the output's columns after it: the rows of
    ``teacher_examples`` (one forward over x + y), for a prompt seen again with another output, for a one-token
    prompt, and after the least recently used prompt left its capacity."""
    target, _ = pair
    pairs = [([1, 2, 3, 4], [20, 21, STOP]), ([5, 6], [7]), ([1, 2, 3, 4], [9, 8, 7, 6]), ([3], [4, 5]),
             ([5, 6], [8, 9])]
    teacher = ds.PrefixTeacher(target, top_k=V, capacity=2)
    got = teacher.examples(pairs[:2]) + teacher.examples(pairs[2:])
    want = ds.teacher_examples(target, pairs, top_k=V)
    for a, b in zip(got, want):
        assert a.tokens.tolist() == b.tokens.tolist() and a.has_row.tolist() == b.has_row.tolist()
        for pos in a.has_row.nonzero().flatten().tolist():  # the same law at every output position
            row_a = torch.zeros(V).scatter_(0, a.top_ids[pos], a.top_probs[pos])
            row_b = torch.zeros(V).scatter_(0, b.top_ids[pos], b.top_probs[pos])
            torch.testing.assert_close(row_a, row_b, atol=1e-5, rtol=1e-4)
    assert len(teacher._prefixes) == 2 and (1, 2, 3, 4) not in teacher._prefixes  # capacity 2: the oldest left
    assert [c.get_seq_length() for c in teacher._prefixes.values()] == [0, 1]  # each back to its prompt
    with pytest.raises(ValueError, match="at least one"):
        teacher.examples([([], [1])])
    with pytest.raises(ValueError, match="capacity"):
        ds.PrefixTeacher(target, top_k=4, capacity=0)


@pytest.mark.parametrize("engine", [False, True], ids=["one-by-one", "batched"])
def test_draft_samples_are_the_batch1_ar_runs(pair, engine):
    """The draft's outputs, sampled for every prompt together (a draft on the engine) or one after the other, are
    the batch-1 AR loop's for each prompt and seed."""
    from specrepro.core.config import DecodeConfig, SamplingConfig
    from specrepro.decode.autoregressive import autoregressive_generate
    draft = engine_draft() if engine else pair[1]
    prompts = [[1, 2, 3], [4, 5], [7, 8, 9, 10, 11]]
    got = ds.draft_samples(draft, prompts, SMALL, {STOP}, seed=40)
    config = DecodeConfig(method="ar", max_new_tokens=SMALL.max_new,
                          sampling=SamplingConfig(temperature=SMALL.sample_temperature))
    want = [autoregressive_generate(draft, x, dataclasses.replace(config, seed=40 + b), {STOP}).token_ids
            for b, x in enumerate(prompts)]
    assert got == want


def test_tau_batched_is_tau_one_prompt_at_a_time(pair):
    """The held-out prompts decoded several rows at once (``eval_batch``) give each prompt the new tokens, target
    calls, accepted and tested draft tokens of its batch-1 run, at T = 1 (each row seeded as its own run)."""
    import dataclasses

    target, draft = pair
    data = study_data()
    one = ds.measure_tau(target, draft, data, dataclasses.replace(SMALL, eval_batch=1))
    for batch in (2, 3):
        assert ds.measure_tau(target, draft, data, dataclasses.replace(SMALL, eval_batch=batch)) == one


def test_relative_gain_is_paired_by_prompt():
    base = [{"new_tokens": 10, "target_calls": 5}, {"new_tokens": 12, "target_calls": 4}]
    same = ds.relative_gain(base, base, 100, 0)
    assert same == {"gain": 0.0, "lo90": 0.0, "hi90": 0.0}
    half = ds.relative_gain([{**b, "target_calls": 2 * b["target_calls"]} for b in base], base, 100, 0)
    assert half["gain"] == pytest.approx(-0.5) and half["lo90"] == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="same"):
        ds.relative_gain(base[:1], base, 100, 0)


def test_a_fixed_data_cell_moves_the_draft_towards_the_target(pair):
    """A real effect: many steps of FKL on the target's rows raise Σ min(p, q) on the same kind of data."""
    target, draft = pair
    data, cfg = study_data(), StudyConfig(steps=30, batch_size=3, lr=3e-2, max_new=6, top_k=V)
    fixed = ds.teacher_examples(target, [(list(x), list(y)) for x, y in data.train], cfg.top_k)
    before = ds.data_agreement(draft, fixed, cfg.max_len)["overlap"]
    student, log = ds.train_cell(target, draft, data, "fixed", "fkl", cfg, fixed, [])
    after = ds.data_agreement(student, fixed, cfg.max_len)["overlap"]
    assert after > before + 0.1, (before, after)
    assert log["losses"][-1] < log["losses"][0]


def test_the_grid_runs_resumes_and_leaves_both_models_unchanged(pair, tmp_path, monkeypatch):
    target, draft = pair
    t0, d0 = state(target), state(draft)
    data = study_data()
    result = ds.run_study(target, draft, data, SMALL, tmp_path / "out", cache=tmp_path / "cache", progress=False)
    assert {c["cell"] for c in result["cells"]} == {f"{s}-{d}" for s, d in SMALL.cells()}
    assert len(result["cells"]) == 16 and len(result["baseline"]["prompts"]) == len(data.held_out)
    for c in result["cells"]:
        assert len(c["losses"]) == SMALL.steps and c["lo90"] <= c["gain"] <= c["hi90"]
        on_policy = {"draft": SMALL.batch_size, "mix": SMALL.batch_size // 2}.get(c["source"], 0)
        assert c["draft_outputs"] == SMALL.steps * on_policy  # on-policy outputs are drawn afresh at every step
    assert all(torch.equal(v, state(target)[k]) for k, v in t0.items())
    assert all(torch.equal(v, state(draft)[k]) for k, v in d0.items())
    sources, divs, grid = ds.gain_grid(result)
    assert grid.shape == (4, 4) and not torch.isnan(torch.tensor(grid)).any()

    def no_training(*args, **kwargs):
        raise AssertionError("a finished cell was trained again")
    monkeypatch.setattr(ds, "train_cell", no_training)
    again = ds.run_study(target, draft, data, SMALL, tmp_path / "out", cache=tmp_path / "cache", progress=False)
    assert json.dumps(again["cells"]) == json.dumps(result["cells"])
    with pytest.raises(ValueError, match="another configuration"):
        ds.run_study(target, draft, data, StudyConfig(steps=4, batch_size=2), tmp_path / "out", progress=False)


def test_the_command_line_refuses_a_bad_grid_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        ds.main(["--out", "unused", "--divergences", "fkl,kl"])
    assert stop.value.code == 2 and "divergences must be" in capsys.readouterr().err
