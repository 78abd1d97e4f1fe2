"""llama.cpp beside ours (``specrepro/run/peers.py``, issue 38): the bench's ``llamacpp-ar`` and ``llamacpp-prompt-lookup``
and calibrate's llama.cpp step, on the GGUF the offline SmolLM2 target is dequantised from. The tests that run
llama.cpp need the ``[peers]`` extra and are skipped without it, saying so; the one-line error of a run that asks for
llama.cpp without it is tested everywhere (the import made to fail)."""
from __future__ import annotations

import json
import sys

import pytest
import torch

from specrepro import DecodeConfig, encode_prompt, generate_ids, load_model
from specrepro.run.commands import calibration_peer, main
from specrepro.run.bench import run_bench
from specrepro.run.bench_summary import read_summary
from specrepro.run.variants import BenchConfig
from specrepro.core.config import SamplingConfig
from specrepro.core.decoding import eos_ids
from specrepro.methods import method
from specrepro.engine.models import LoadedModel, load_tokenizer, zoo_path
from specrepro.run.peers import INSTALL, LlamaCppPeer, gguf_for, installed

TARGET = "smollm2-135m-instruct"
PROMPTS = ["Name three primary colours.", "Write one sentence about the moon."]
needs_llama = pytest.mark.skipif(not installed(), reason="llama-cpp-python is not installed: pip install -e '.[peers]' "
                                                         "(or make test PEERS=1) runs these tests")


# ------------------------------------------------------------------------------------- without llama-cpp-python


def test_asking_for_llama_cpp_without_it_is_one_line_before_any_model_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` now fails, as where it is not installed

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the error")
    monkeypatch.setattr("specrepro.run.loaded.load_model", no_model)
    monkeypatch.setattr("specrepro.engine.models.load_model", no_model)
    with pytest.raises(ValueError, match=r"llamacpp-ar needs llama-cpp-python, which is not installed; install the "
                                         r"\[peers\] extra: pip install -e '\.\[peers\]'"):
        BenchConfig(methods=("ar", "llamacpp-ar"), target=TARGET)
    out = tmp_path / "bench"
    code = main(["bench", "--methods", "ar,llamacpp-ar,llamacpp-prompt-lookup", "--suite", "mixed", "--limit", "1",
                 "--out", str(out)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    assert "llamacpp-ar, llamacpp-prompt-lookup needs llama-cpp-python" in err[0] and INSTALL in err[0]
    assert not out.exists() or not any(out.iterdir())
    assert not installed()
    assert calibration_peer(TARGET, torch.device("cpu"), 1) is None  # calibrate times ours and says why not llama.cpp
    assert INSTALL in capsys.readouterr().err


@needs_llama
def test_llama_cpp_needs_a_target_with_a_gguf():
    with pytest.raises(ValueError, match="llama.cpp decodes a GGUF file, and the target 'tiny' has none here"):
        BenchConfig(methods=("ar", "llamacpp-ar"), target="tiny")
    with pytest.raises(ValueError, match="a dtype is for our loops"):
        BenchConfig(methods=("ar", "llamacpp-ar:bf16"), target=TARGET)
    with pytest.raises(ValueError, match="gamma auto is our loop's policy"):
        BenchConfig(methods=("ar", "llamacpp-prompt-lookup:gauto"), target=TARGET)
    assert gguf_for(TARGET).is_file()


# ------------------------------------------------------------------------------------------- with llama.cpp


@pytest.fixture(scope="module")
def peer():
    """One thread: llama.cpp's threads wait for each other by spinning, which a shared 2-core machine punishes."""
    return LlamaCppPeer(gguf_for(TARGET), threads=1)


@pytest.fixture(scope="module")
def smol_fp32():
    return load_model(TARGET, dtype="fp32", device="cpu")


@needs_llama
@pytest.mark.slow
def test_greedy_llama_cpp_gives_our_first_tokens(peer, smol_fp32):
    """The GGUF's Q4_1 weights are exactly the fp32 weights we decode, but llama.cpp multiplies them with activations
    rounded to 8 bits, so greedy decoding follows ours until a near-tie. Measured here (AMD EPYC, 1 and 2 threads): the
    first 12 tokens of the first prompt and the whole 26-token answer of the second are ours (on other short prompts
    the two part after 2 to 19 tokens: "The answer is 4." against our "The answer to this classic math problem is 4.").
    Held: the first 8 tokens of both, and one llama.cpp forward per token, prefill included."""
    eos = eos_ids(smol_fp32.model, smol_fp32.tokenizer)
    for prompt in PROMPTS:
        ids = encode_prompt(smol_fp32, prompt)
        ours = generate_ids(smol_fp32, ids, DecodeConfig(method="ar", max_new_tokens=24))
        theirs = peer.generate(method("llamacpp-ar"), ids, method("llamacpp-ar").config(max_new_tokens=24), eos,
                               smol_fp32.tokenizer)
        same = next((i for i, (a, b) in enumerate(zip(ours.token_ids, theirs.token_ids)) if a != b),
                    min(len(ours.token_ids), len(theirs.token_ids)))
        assert same >= 8, (prompt, same, ours.text, theirs.text)
        assert theirs.target_calls == theirs.new_tokens and theirs.wall_time_s > 0 and theirs.tokens_per_s > 0
        assert theirs.text.startswith(smol_fp32.tokenizer.decode(ours.token_ids[:8], skip_special_tokens=True))
        p = theirs.provenance
        assert p["engine"] == "llama.cpp" and p["version"] == sys.modules["llama_cpp"].__version__
        assert p["threads"] == 1 and p["model_file"] == gguf_for(TARGET).name and p["dtype"] == "q4_1"
        assert p["token_comparable"] is False and p["sampler"] == "greedy"


@needs_llama
@pytest.mark.slow
def test_llama_cpp_prompt_lookup_counts_its_steps_within_the_budget(peer, smol_fp32):
    """Every token is one that a forward sampled: tokens = forwards + accepted drafts; proposals never exceed γ nor
    the budget left, as in our loop."""
    eos = eos_ids(smol_fp32.model, smol_fp32.tokenizer)
    spec = method("llamacpp-prompt-lookup")
    for prompt in PROMPTS:
        rec = peer.generate(spec, encode_prompt(smol_fp32, prompt), spec.config(max_new_tokens=20, gamma=3), eos)
        assert rec.new_tokens == rec.target_calls + sum(rec.accept_lengths)
        assert rec.proposed_lengths and all(0 < g <= 3 for g in rec.proposed_lengths)
        assert all(0 <= a <= g for a, g in zip(rec.accept_lengths, rec.proposed_lengths))
        assert rec.new_tokens <= 20 and rec.gammas == [3] * len(rec.proposed_lengths)


@needs_llama
def test_llama_cpp_samples_with_the_records_seed(peer):
    """T > 0: llama.cpp's own sampler, seeded from the record's seed: the same seed draws the same tokens, another
    seed others; the record says it is not token-comparable with ours."""
    tokenizer, _ = load_tokenizer(TARGET)
    ids = encode_prompt(LoadedModel(TARGET, None, tokenizer), "Tell me a story about a cat.")
    spec = method("llamacpp-ar")

    def run(seed: int):
        config = spec.config(max_new_tokens=24, seed=seed, sampling=SamplingConfig(temperature=1.0))
        return peer.generate(spec, ids, config, {tokenizer.eos_token_id})
    first, again, other = run(0), run(0), run(1)
    assert again.token_ids == first.token_ids and other.token_ids != first.token_ids
    assert other.provenance["token_comparable"] is False and "seeded with 1" in other.provenance["sampler"]


@needs_llama
@pytest.mark.slow
def test_the_bench_runs_llama_cpp_beside_ours(tmp_path):
    """Interleaved with ar on the same prompts: rows in summary.csv with tokens/s and ms/token, the GGUF's type as
    their dtype, none of our cost model's columns, and no T = 0 mismatch claimed against ar; records and the session
    say which engine, version, file and threads."""
    config = BenchConfig(methods=("ar", "llamacpp-ar", "llamacpp-prompt-lookup"), target=TARGET, limit=2,
                         max_new_tokens=12, gamma=3, dtype="fp32", threads=1, quality=False, cost_repeats=1,
                         warmup_tokens=4)
    result = run_bench(config, tmp_path / "bench", progress=False)
    assert not result.failed
    rows = {r["method"]: r for r in read_summary(tmp_path / "bench")}
    for label in ("llamacpp-ar", "llamacpp-prompt-lookup"):
        row = rows[label]
        assert row["n"] == 2 and row["tokens_per_s"] > 0 and row["latency_per_token_s"] > 0 and row["speedup"] > 0
        assert row["dtype"] == "q4_1" and row["lossless"] is None and row["identical_to_ar"] is None
        assert row["beta"] is None and row["predicted_speedup"] is None
    assert rows["llamacpp-prompt-lookup"]["tokens_per_call"] >= 1
    assert not any("llamacpp" in line for line in result.provenance["t0_mismatches"])
    records = [r for r in result.records if r["method"].startswith("llamacpp")]
    assert len(records) == 4 and all(r["provenance"]["engine"] == "llama.cpp" and r["provenance"]["threads"] == 1
                                     for r in records)
    session = result.provenance["sessions"][-1]
    assert session["peer"]["model_file"] == gguf_for(TARGET).name and session["peer"]["threads"] == 1
    assert result.provenance["resolved_dtypes"]["llamacpp-ar"]["dtype"] == "q4_1"


@needs_llama
@pytest.mark.slow
def test_calibrate_times_llama_cpp_beside_ours(tmp_path, monkeypatch, capsys):
    """calibrate prints and saves llama.cpp's one-token step and β(n) for our sizes n, on the same context and threads,
    and each dtype's step against the compute roofline."""
    (tmp_path / TARGET).symlink_to(zoo_path(TARGET))  # the offline model, and a profile cache of this test's own
    monkeypatch.setenv("SPECREPRO_CACHE", str(tmp_path))
    assert main(["calibrate", "--dtype", "fp32", "--threads", "1", "--repeats", "1", "--context-tokens", "32",
                 "--out", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "fp32: llama.cpp 0.3" in out and "fp32: compute roofline" in out and "fp32: host speed on a fixed" in out
    saved = json.loads((tmp_path / "p.json").read_text())
    peer, ours = saved["peer"], [n for n, _ in saved["forward"]]
    assert peer["threads"] == 1 and peer["context_tokens"] == 32 and [n for n, _ in peer["forward"]] == ours
    assert all(lat["median_s"] > 0 for _, lat in peer["forward"])
    from specrepro.metrics.profile import load_profile
    profile = load_profile(tmp_path / "p.json")
    assert profile.peer.beta(1) == 1.0 and profile.peer.beta(9) > 0 and profile.compute_floor_s > 0
    assert profile.machine["gemm_flops_s"] > 1e9
    assert profile.machine["host_speed_start"]["read_gb_s"] > 0 and profile.machine["host_speed_end"]["read_gb_s"] > 0
