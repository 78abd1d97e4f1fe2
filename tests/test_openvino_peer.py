"""OpenVINO GenAI beside ours (``specrepro/run/openvino_peer.py``, issue 64): the bench's ``openvino-ar`` and
``openvino-prompt-lookup`` on the offline SmolLM2 target exported to OpenVINO IR. The tests that run OpenVINO need the
``[peers]`` extra and the export (``make test PEERS=1`` makes both) and are skipped without them, saying so; the
one-line errors of a run that asks for OpenVINO without them are tested everywhere."""
from __future__ import annotations

import json
import sys

import pytest

from specrepro.core.config import SamplingConfig
from specrepro.core.decoding import eos_ids
from specrepro import DecodeConfig, encode_prompt, generate_ids, load_model
from specrepro.methods import method
from specrepro.run import openvino_peer
from specrepro.run.bench import run_bench
from specrepro.run.bench_summary import read_summary
from specrepro.run.commands import main
from specrepro.run.variants import BenchConfig

TARGET = "smollm2-135m-instruct"
PROMPTS = ["Name three primary colours.", "Repeat after me: the cat sat on the mat, the cat sat on the mat."]


def ready() -> bool:
    try:
        openvino_peer.check_runnable(["openvino-ar"], TARGET)
        return True
    except ValueError:
        return False


needs_openvino = pytest.mark.skipif(not ready(), reason="OpenVINO GenAI or the target's IR is missing: make test PEERS=1 "
                                                        "installs it and exports the target")


def test_asking_for_openvino_without_it_is_one_line_before_any_model_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "openvino_genai", None)  # `import openvino_genai` now fails, as uninstalled
    for where in ("specrepro.run.loaded.load_model", "specrepro.engine.models.load_model"):
        monkeypatch.setattr(where, lambda *args, **kwargs: pytest.fail("a model was loaded before the error"))
    with pytest.raises(ValueError, match=r"openvino-ar needs OpenVINO GenAI, which is not installed; install the "
                                         r"\[peers\] extra"):
        BenchConfig(methods=("ar", "openvino-ar"), target=TARGET)
    out = tmp_path / "bench"
    code = main(["bench", "--methods", "ar,openvino-ar,openvino-prompt-lookup", "--suite", "mixed", "--limit", "1",
                 "--out", str(out)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    assert "openvino-ar, openvino-prompt-lookup needs OpenVINO GenAI" in err[0] and openvino_peer.INSTALL in err[0]
    assert not out.exists() or not any(out.iterdir())
    assert not openvino_peer.installed()


def test_a_target_not_exported_is_one_line_saying_how_to_export_it(tmp_path, monkeypatch):
    monkeypatch.setattr(openvino_peer, "model_dir", lambda target: tmp_path / target)
    monkeypatch.setattr(openvino_peer, "require", lambda what: None)
    with pytest.raises(ValueError, match=r"has not been exported here .* run make models PEERS=1"):
        BenchConfig(methods=("ar", "openvino-prompt-lookup"), target=TARGET)
    with pytest.raises(ValueError, match="needs optimum-intel in its own venv"):
        openvino_peer.export(TARGET, venv=tmp_path / "no-venv")
    assert not (tmp_path / TARGET).exists()  # nothing half-written


def test_openvino_baselines_take_a_fixed_gamma_and_no_dtype():
    if not openvino_peer.installed():
        pytest.skip("OpenVINO GenAI is not installed")
    with pytest.raises(ValueError, match="gamma auto is our loop's policy"):
        BenchConfig(methods=("ar", "openvino-prompt-lookup:gauto"), target=TARGET)
    with pytest.raises(ValueError, match="a dtype is for our loops"):
        BenchConfig(methods=("ar", "openvino-ar:bf16"), target=TARGET)


# ---------------------------------------------------------------------------------------------- with OpenVINO


@pytest.fixture(scope="module")
def peer():
    return openvino_peer.OpenVinoPeer(openvino_peer.exported(TARGET), threads=1)


@pytest.fixture(scope="module")
def smol():
    return load_model(TARGET, dtype="fp32", device="cpu")


@needs_openvino
def test_openvinos_greedy_tokens_follow_ours_and_its_record_counts_its_steps(peer, smol):
    """The IR holds the GGUF's 4-bit grid again (int4, groups of 32), so OpenVINO's greedy tokens follow ours at
    first; its record counts one target call per token for AR, and for prompt lookup the calls and the accepted drafts
    add up to the tokens (each call adds its accepted drafts and one token)."""
    eos = eos_ids(smol.model, smol.tokenizer)
    for prompt in PROMPTS:
        ids = encode_prompt(smol, prompt)
        ours = generate_ids(smol, ids, DecodeConfig(method="ar", max_new_tokens=24, stop_at_eos=False))
        ar_spec, lookup_spec = method("openvino-ar"), method("openvino-prompt-lookup")
        ar = peer.generate(ar_spec, ids, ar_spec.config(max_new_tokens=24, stop_at_eos=False), eos, smol.tokenizer)
        assert ar.token_ids[:4] == ours.token_ids[:4] and ar.new_tokens == 24, (ar.text, ours.text)
        assert ar.target_calls == 24 and ar.accept_lengths == [] and ar.tokens_per_s > 0
        lookup = peer.generate(lookup_spec, ids, lookup_spec.config(max_new_tokens=24, gamma=4, stop_at_eos=False),
                               eos, smol.tokenizer)
        assert lookup.new_tokens == 24 and lookup.token_ids[:4] == ours.token_ids[:4]
        assert lookup.new_tokens == lookup.target_calls + sum(lookup.accept_lengths)
        assert all(0 <= a <= 4 for a in lookup.accept_lengths)
        p = lookup.provenance
        assert p["engine"] == "OpenVINO GenAI" and p["token_comparable"] is False and p["threads"] == 1
        assert p["dtype"] == "int4-g32" and p["sampler"] == "greedy"
    assert sum(lookup.accept_lengths) > 0  # the second prompt repeats itself: lookup finds drafts that hold


@needs_openvino
def test_openvino_samples_with_the_records_seed(peer, smol):
    spec = method("openvino-ar")
    ids = encode_prompt(smol, "Tell me a story about a cat.")

    def run(seed: int):
        config = spec.config(max_new_tokens=16, seed=seed, sampling=SamplingConfig(temperature=1.0))
        return peer.generate(spec, ids, config, {smol.tokenizer.eos_token_id})
    first, again, other = run(0), run(0), run(1)
    assert again.token_ids == first.token_ids and other.token_ids != first.token_ids
    assert "seed 1" in other.provenance["sampler"]


@needs_openvino
def test_a_bench_runs_openvino_beside_ours_and_records_its_engine(tmp_path):
    config = BenchConfig(methods=("ar", "openvino-ar", "openvino-prompt-lookup"), target=TARGET, limit=2,
                         max_new_tokens=12, gamma=3, dtype="fp32", threads=1, quality=False, cost_repeats=1,
                         warmup_tokens=4)
    result = run_bench(config, tmp_path / "bench", progress=False)
    assert not result.failed
    rows = {r["method"]: r for r in read_summary(tmp_path / "bench")}
    for label in ("openvino-ar", "openvino-prompt-lookup"):
        assert rows[label]["n"] == 2 and rows[label]["tokens_per_s"] > 0 and rows[label]["dtype"] == "int4-g32"
    session = json.loads((tmp_path / "bench" / "provenance.json").read_text())["sessions"][-1]
    assert session["openvino"]["engine"] == "OpenVINO GenAI" and session["openvino"]["threads"] == 1
    assert session["openvino"]["export"]["weights"] == "int4-g32"
