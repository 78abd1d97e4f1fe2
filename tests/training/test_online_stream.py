"""The online speculative decoding study (``specrepro.training.online_stream``) on tiny models.

What is checked: the stream is served in task blocks and never shares a prompt with the held-out part; bad specs
and suites too small for the split get one clear error; a study serves the same prompts with the same seeds to the
frozen and the online draft, records every sequence, updates every L sequences, leaves the caller's draft and the
target untouched, and on a pair that starts far apart the online draft's held-out α beats the frozen one; the
summaries (α per task, rolling α, the held-out table, the update cost) compute what they say on hand-made rows.
"""
from __future__ import annotations

import math

import pytest
import torch

from specrepro.engine.models import tiny_model
from specrepro.core.prompts import Prompt, load_suite
from specrepro.training.online import OnlineConfig
from specrepro.training.online_stream import (DRAFTERS, StreamSpec, alpha_by_task, build_stream, held_out_table,
                                              paired_difference, rolling_alpha, run_stream_study, trainable_copy,
                                              update_cost)

pytestmark = pytest.mark.usefixtures("one_thread")
V = 8
TASKS = ("chat", "code", "math")


def fake_suites(n: int = 5) -> dict[str, list[Prompt]]:
    """n prompts per task; prompt k of task t is encoded as a few ids < V that differ between tasks."""
    return {t: [Prompt(id=f"{t}-{k}", prompt=f"{t} {k}", messages=(("user", f"{t} {k}"),), suite=t)
                for k in range(n)] for t in TASKS}


def encode(prompt: Prompt) -> list[int]:
    task, k = prompt.id.rsplit("-", 1)
    base = TASKS.index(task)
    return [base, (base + int(k)) % V, (2 * base + 1) % V, int(k) % V]


def state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ------------------------------------------------------------------------------------------- the stream


def test_stream_is_served_in_task_blocks_and_never_meets_the_held_out_prompts():
    spec = StreamSpec(tasks=TASKS, per_task=2, held_out_per_task=2)
    s = build_stream(spec, encode, fake_suites(5))
    assert [p.task for p in s.stream] == ["chat", "chat", "code", "code", "math", "math"]
    assert [p.id for p in s.stream[:2]] == ["chat-0", "chat-1"]  # the first prompts of each suite
    assert [p.id for p in s.held_out if p.task == "chat"] == ["chat-3", "chat-4"]  # the last k
    assert not {p.id for p in s.stream} & {p.id for p in s.held_out}
    assert s.stream[2].ids == tuple(encode(fake_suites()["code"][0]))
    assert s.to_dict()["held_out"][0] == {"task": "chat", "id": "chat-3", "prompt_tokens": 4}


def test_the_packages_suites_split_as_the_study_uses_them():
    spec = StreamSpec(per_task=8, held_out_per_task=3)
    s = build_stream(spec, lambda p: [len(p.prompt) % 50])
    for task in spec.tasks:
        ids = [p.id for p in load_suite(task)]
        assert [p.id for p in s.stream if p.task == task] == ids[:8]
        assert [p.id for p in s.held_out if p.task == task] == ids[-3:]
    assert [p.task for p in s.stream] == [t for t in spec.tasks for _ in range(8)]


@pytest.mark.parametrize("field, value, message", [
    ("tasks", (), "tasks is empty"), ("tasks", ["chat"], "tuple of suite names"),
    ("tasks", ("chat", "chat"), "must not repeat"), ("per_task", 0, "per_task"),
    ("held_out_per_task", 0, "held_out_per_task"), ("max_new_tokens", 0, "max_new_tokens"), ("gamma", 0, "gamma"),
    ("gamma", 1.5, "gamma"), ("temperature", -0.5, "temperature"), ("temperature", float("nan"), "temperature"),
    ("seed", "0", "seed")])
def test_bad_specs_get_one_clear_error(field, value, message):
    with pytest.raises(ValueError, match=message):
        StreamSpec(**{field: value})


def test_a_suite_too_small_for_the_split_is_refused():
    with pytest.raises(ValueError, match="would overlap"):
        build_stream(StreamSpec(tasks=TASKS, per_task=3, held_out_per_task=3), encode, fake_suites(5))
    with pytest.raises(ValueError, match="unknown suite"):
        build_stream(StreamSpec(tasks=("no-such-suite",)), encode)


# ------------------------------------------------------------------------------------------- the study


@pytest.fixture(scope="module")
def pair():
    """Target and draft over V = 8, far apart (the draft is another random model)."""
    return (tiny_model(vocab_size=V, n_layers=1, hidden=16, seed=3),
            tiny_model(vocab_size=V, n_layers=1, hidden=16, seed=11))


def test_a_study_serves_both_drafts_the_same_sequences_and_trains_neither_callers_model(pair):
    target, draft = pair
    spec = StreamSpec(tasks=TASKS, per_task=2, held_out_per_task=1, max_new_tokens=8, gamma=3, seed=7)
    online = OnlineConfig(buffer_size=16, update_every=2, steps_per_update=2, lr=1e-2)
    target_before, draft_before = state(target), state(draft)
    result = run_stream_study(target, draft, spec, online, encode, suites=fake_suites(4), progress=False)

    assert all(torch.equal(v, target_before[k]) for k, v in state(target).items())
    assert all(torch.equal(v, draft_before[k]) for k, v in state(draft).items())
    assert not any(p.requires_grad for p in draft.parameters()) and not draft.training
    for part, n, first_seed in (("stream", 6, 7), ("held_out", 3, 7 + 6)):
        frozen, learnt = (result[part][name] for name in DRAFTERS)
        assert len(frozen) == len(learnt) == n
        assert [r["seed"] for r in frozen] == [r["seed"] for r in learnt] == list(range(first_seed, first_seed + n))
        assert [(r["task"], r["prompt_id"]) for r in frozen] == [(r["task"], r["prompt_id"]) for r in learnt]
        for r in frozen + learnt:
            assert r["new_tokens"] == 8 and r["target_calls"] >= 1 and r["wall_time_s"] > 0 and r["tested"] >= 1
            assert math.isclose(r["alpha"], r["accepted"] / r["tested"])
    frozen, learnt = result["stream"]["frozen"], result["stream"]["online"]
    assert frozen[0]["alpha"] == learnt[0]["alpha"]  # equal weights and uniforms before the first update
    assert [r["updates"] for r in learnt] == [0, 1, 1, 2, 2, 3] and all(r["updates"] == 0 for r in frozen)
    assert [r["update_s"] > 0 for r in learnt] == [False, True, False, True, False, True]
    assert [u["after_sequence"] for u in result["updates"]] == [2, 4, 6]
    assert all(r["update_s"] == 0 for r in result["held_out"]["online"])  # the final weights serve, frozen
    assert result["spec"] == spec.to_dict() and result["online"] == online.to_dict()
    assert result["decode"]["seed"] == 7 and result["held_out_decode"]["seed"] == 13
    assert [p["id"] for p in result["prompts"]["held_out"]] == ["chat-3", "code-3", "math-3"]


def test_the_online_draft_beats_the_frozen_one_on_held_out_prompts_of_a_far_pair(pair):
    """The effect itself, where it is large: a random draft learning a random target from 12 sequences."""
    target, draft = pair
    spec = StreamSpec(tasks=TASKS, per_task=4, held_out_per_task=2, max_new_tokens=12, gamma=3, seed=1)
    online = OnlineConfig(buffer_size=64, update_every=1, steps_per_update=4, lr=1e-2)
    result = run_stream_study(target, draft, spec, online, encode, suites=fake_suites(6), progress=False)
    pooled = held_out_table(result)[-1]
    assert pooled["task"] == "pooled" and pooled["prompts"] == 6
    assert pooled["difference"] > 0.3, pooled


def test_the_trainable_copy_is_fp32_and_leaves_the_callers_draft_alone():
    draft = tiny_model(vocab_size=V, n_layers=1, hidden=16, seed=5).to(torch.bfloat16)
    copy = trainable_copy(draft)
    assert next(copy.parameters()).dtype == torch.float32 and not copy.training
    assert next(draft.parameters()).dtype == torch.bfloat16 and copy is not draft


# --------------------------------------------------------------------------------------------- summaries


def row(task, accepted, tested, **extra) -> dict:
    return {"task": task, "accepted": accepted, "tested": tested, **extra}


def test_alpha_is_pooled_per_task_and_over_all_rows():
    rows = [row("a", 1, 4), row("a", 3, 4), row("b", 0, 2), row("b", 0, 0)]
    assert alpha_by_task(rows) == {"a": 0.5, "b": 0.0, "pooled": 0.4}
    assert rolling_alpha(rows, 2) == [0.25, 0.5, 0.5, 0.0]
    assert rolling_alpha([row("a", 0, 0)], 3) == [None]
    with pytest.raises(ValueError, match="window"):
        rolling_alpha(rows, 0)


def test_the_held_out_table_and_the_update_cost():
    result = {"held_out": {"frozen": [row("a", 1, 4), row("b", 2, 4)], "online": [row("a", 3, 4), row("b", 2, 4)]},
              "stream": {"frozen": [{"wall_time_s": 2.0}] * 2, "online": [{"wall_time_s": 3.0}] * 2},
              "updates": [{"seconds": 1.0, "rows": 10}, {"seconds": 2.0, "rows": 30}]}
    table = {r["task"]: r for r in held_out_table(result)}
    assert table["a"]["difference"] == 0.5 and table["b"]["difference"] == 0.0
    assert table["pooled"]["alpha_frozen"] == 3 / 8 and table["pooled"]["alpha_online"] == 5 / 8
    assert table["pooled"]["tested_frozen"] == table["pooled"]["tested_online"] == 8
    paired = paired_difference({"held_out": {"frozen": [{"alpha": 0.25}, {"alpha": 0.5}, {"alpha": None}],
                                             "online": [{"alpha": 0.75}, {"alpha": 0.5}, {"alpha": 1.0}]}})
    assert paired == {"prompts": 2, "mean_difference": 0.25, "standard_error": 0.25, "prompts_online_better": 1,
                      "prompts_online_worse": 0}
    cost = update_cost(result)
    assert cost["updates"] == 2 and cost["seconds_per_update"] == 1.5 and cost["update_s_total"] == 3.0
    assert cost["serving_s_online"] == 6.0 and cost["serving_s_frozen"] == 4.0 and cost["update_over_serving"] == 0.5
    assert cost["rows_per_update"] == 20
