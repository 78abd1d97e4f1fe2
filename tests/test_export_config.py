"""export-config (issue 24, item 4): our methods as vLLM's speculative_config and SGLang's --speculative-* flags.

Every export is checked against the engine's own config class where the engine is importable, and against the keys
documented in ``export_config.DOCUMENTED`` (read from the engines' source, file and commit cited there) otherwise.
No model loads: targets and drafts are zoo names or hub ids as strings; the EAGLE and Medusa tree settings are
read from the zoo's JSON configs.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import typing
from pathlib import Path

import pytest

from specrepro.run import export_config as ec
from specrepro.run.commands import main
from specrepro.drafters import eagle, medusa
from specrepro.drafters.prompt_lookup import PromptLookupDrafter
from specrepro.methods import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "figures" / "bench" / "eagle-t0"  # a committed bench run (eagle, medusa, prompt lookup, ...)
HUB_DRAFT = "HuggingFaceTB/SmolLM2-135M-Instruct"  # any hub id: nothing is downloaded
ENGINE_DRAFT = {"speculative": None, "prompt-lookup": None, "medusa": "some/medusa-heads", "eagle": "some/eagle-draft"}


def zoo_eagle() -> eagle.EagleConfig:
    d = json.loads((ROOT / "specrepro/zoo/smollm2-135m-eagle" / eagle.EAGLE_CONFIG).read_text())
    return eagle.EagleConfig(**{**d, "feature_layers": tuple(d["feature_layers"]),
                                "rank_probs": tuple(map(tuple, d["rank_probs"]))})


def engine_eagle(engine: str) -> str:
    """The engine's name for the zoo's EAGLE draft: EAGLE-3's where it reads fused layers (the shipped one does)."""
    fused = len(zoo_eagle().feature_layers) > 1
    return {"vllm": "eagle3" if fused else "eagle", "sglang": "EAGLE3" if fused else "EAGLE"}[engine]


def exported(engine: str, label: str, **kw) -> ec.EngineConfig:
    base = label.split(":")[0]
    draft = kw.pop("draft", HUB_DRAFT if base == "speculative" else None)
    engine_draft = kw.pop("engine_draft", ENGINE_DRAFT.get(base))
    eagle3 = kw.pop("eagle3", False)
    run = ec.run_from_label(label, draft=draft, engine=engine, **kw)
    return ec.export(engine, run, engine_draft=engine_draft, eagle3=eagle3)


# ---------------------------------------------------------------------------------- the engines' own classes


def literal_values(tp) -> set:
    """Every value of a (nested) typing.Literal."""
    out = set()
    for arg in typing.get_args(tp):
        out |= literal_values(arg) if typing.get_args(arg) else {arg}
    return out


def check_with_engine(engine: str, settings: dict) -> None:
    """Against the engine's own config class when it is importable (vLLM's SpeculativeConfig fields and methods;
    SGLang's ServerArgs fields and its argument parser); against DOCUMENTED always."""
    ec.validate(engine, settings)
    if engine == "vllm":
        try:
            from vllm.config import speculative
        except ImportError:
            return
        fields = set(getattr(speculative.SpeculativeConfig, "__dataclass_fields__", {}))
        assert set(settings) <= fields, set(settings) - fields
        assert settings["method"] in literal_values(speculative.SpeculativeMethod)
        if settings["method"] == "ngram":  # needs no target or draft config: the class itself takes it
            built = speculative.SpeculativeConfig(**settings)
            assert (built.prompt_lookup_min, built.prompt_lookup_max) == (settings["prompt_lookup_min"],
                                                                         settings["prompt_lookup_max"])
        return
    try:
        from sglang.srt.server_args import ServerArgs
    except ImportError:
        return
    names = {f.name for f in dataclasses.fields(ServerArgs)}
    assert {flag[2:].replace("-", "_") for flag in settings} <= names
    import argparse
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    flags = [str(x) for kv in settings.items() for x in kv]
    _, unknown = parser.parse_known_args(["--model-path", "m", *flags])
    assert not unknown


@pytest.mark.parametrize("engine", ec.ENGINES)
def test_engine_classes_when_importable(engine):
    """The branch that checks against the engine itself: run only where vLLM / SGLang is installed."""
    pytest.importorskip("vllm.config" if engine == "vllm" else "sglang.srt.server_args")
    for label in ec.SUPPORTED[engine]:
        check_with_engine(engine, exported(engine, label).settings)


def test_documented_table_cites_the_source_read():
    for engine, doc in ec.DOCUMENTED.items():
        assert "at " in doc.source and ".py" in doc.source  # file and commit
        assert set(ec.SUPPORTED[engine].values()) <= set(doc.methods)
    assert {"method", "model", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
            "speculative_token_tree"} == set(ec.VLLM.keys)
    assert {"--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
            "--speculative-num-draft-tokens"} <= set(ec.SGLANG.keys)


# ------------------------------------------------------------------------------------- every supported method


@pytest.mark.parametrize("engine,label", [(e, m) for e in ec.ENGINES for m in ec.SUPPORTED[e]])
def test_every_supported_method_exports_valid_settings(engine, label):
    out = exported(engine, label)
    check_with_engine(engine, out.settings)
    name = out.settings["method" if engine == "vllm" else "--speculative-algorithm"]
    assert name == (engine_eagle(engine) if label == "eagle" else ec.SUPPORTED[engine][label])
    d = out.to_dict()
    assert d["engine"] == engine and d["base_method"] == label and d["checked_against"] == ec.DOCUMENTED[engine].source
    assert d["target"] == "HuggingFaceTB/SmolLM2-135M-Instruct"  # the zoo target's hub id
    if engine == "vllm":
        assert out.command.startswith("vllm serve HuggingFaceTB/SmolLM2-135M-Instruct --speculative-config '")
        assert json.loads(out.command.split("--speculative-config ")[1].strip("'")) == out.settings
    else:
        assert out.command.startswith("python -m sglang.launch_server --model-path HuggingFaceTB/SmolLM2-135M-Instruct")
        for flag, value in out.settings.items():
            assert f"{flag} {value}" in out.command


def test_draft_model():
    assert exported("vllm", "speculative:g5").settings == {
        "method": "draft_model", "model": HUB_DRAFT, "num_speculative_tokens": 5}
    assert exported("sglang", "speculative", gamma=3).settings == {
        "--speculative-algorithm": "STANDALONE", "--speculative-draft-model-path": HUB_DRAFT,
        "--speculative-num-steps": 3, "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 4}
    # the engine's draft may be named apart from ours
    out = exported("vllm", "speculative", draft="smollm2-135m-draft", engine_draft="org/draft")
    assert out.settings["model"] == "org/draft"


def test_prompt_lookup_carries_our_ngram_sizes():
    ours = PromptLookupDrafter()
    assert exported("vllm", "prompt-lookup:g6").settings == {
        "method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_min": ours.min_ngram,
        "prompt_lookup_max": ours.max_ngram}
    out = exported("sglang", "prompt-lookup:g6")
    assert out.settings == {"--speculative-algorithm": "NGRAM", "--speculative-num-draft-tokens": 7}
    assert any("not the same drafter" in n for n in out.notes)


def test_medusa_is_a_chain_of_heads_on_vllm():
    heads = json.loads((ROOT / "specrepro/zoo/smollm2-135m-medusa" / medusa.MEDUSA_CONFIG).read_text())["num_heads"]
    out = exported("vllm", "medusa:t16:g5")
    assert out.settings == {"method": "medusa", "model": "some/medusa-heads", "num_speculative_tokens": min(5, heads)}
    assert any("16 nodes" in n for n in out.notes)
    assert exported("vllm", "medusa:g1").settings["num_speculative_tokens"] == 1


def test_eagle_static_tree_is_vllms_speculative_token_tree():
    config = zoo_eagle()
    out = exported("vllm", "eagle:shapestatic:t12:g3")
    paths = medusa.sparse_tree(config.rank_probs, 12, min(3, config.depth))  # what our static drafter verifies
    tree = ast.literal_eval(out.settings["speculative_token_tree"])
    assert sorted(tree) == sorted(paths) and len(tree) == 12 == out.settings["num_speculative_tokens"]
    assert tree == sorted(tree, key=lambda p: (len(p), p))  # breadth-first, as vLLM sorts it
    assert all(len(p) == 1 or p[:-1] in tree for p in tree) and max(map(len, tree)) <= 3
    assert out.settings["method"] == engine_eagle("vllm") and out.settings["model"] == "some/eagle-draft"


def test_eagle_chain_and_dynamic_on_vllm():
    assert exported("vllm", "eagle:shapechain:g5").settings == {
        "method": engine_eagle("vllm"), "model": "some/eagle-draft", "num_speculative_tokens": 5}
    out = exported("vllm", "eagle:t6:g4")  # dynamic: vLLM has none, so the static tree of the same size
    assert out.settings["num_speculative_tokens"] == 6 and "speculative_token_tree" in out.settings
    assert any("static" in n for n in out.notes)
    one = exported("vllm", "eagle:t1")  # one node: a chain, vLLM's default tree
    assert one.settings == {"method": engine_eagle("vllm"), "model": "some/eagle-draft", "num_speculative_tokens": 1}
    assert exported("vllm", "eagle:shapechain", eagle3=True).settings["method"] == "eagle3"


def test_eagle_dynamic_tree_is_sglangs_eagle2():
    k = zoo_eagle().top_k
    assert exported("sglang", "eagle:t12:g5").settings == {
        "--speculative-algorithm": engine_eagle("sglang"), "--speculative-draft-model-path": "some/eagle-draft",
        "--speculative-num-steps": 5, "--speculative-eagle-topk": k, "--speculative-num-draft-tokens": 13}
    # a tree of N nodes is at most N deep; k = 1 is the chain, with steps + 1 tokens
    assert exported("sglang", "eagle:t3:g5").settings["--speculative-num-steps"] == 3
    chain = exported("sglang", "eagle:k1:t8:g4").settings
    assert (chain["--speculative-eagle-topk"], chain["--speculative-num-draft-tokens"]) == (1, 5)
    assert exported("sglang", "eagle:shapechain:g6").settings["--speculative-num-draft-tokens"] == 7
    assert exported("sglang", "eagle:shapechain", eagle3=True).settings["--speculative-algorithm"] == "EAGLE3"
    # more nodes than k + (steps − 1)k² candidates: every candidate, as ours keeps them
    out = exported("sglang", "eagle:k2:t50:g2")
    assert out.settings["--speculative-num-draft-tokens"] == 2 + 1 * 4 + 1
    assert any("candidates" in n for n in out.notes)
    # --eagle-top-k as a flag
    assert exported("sglang", "eagle:t12", params={"eagle_top_k": 3}).settings["--speculative-eagle-topk"] == 3


def test_default_tree_size_is_said():
    out = exported("sglang", "eagle")
    assert out.settings["--speculative-num-draft-tokens"] == eagle.DEFAULT_TREE_SIZE + 1
    assert any("default" in n for n in out.notes)


def test_dtype_of_the_label_goes_to_the_command():
    assert "--dtype bfloat16" in exported("vllm", "prompt-lookup:bf16").command
    assert "--dtype" not in exported("vllm", "prompt-lookup:auto").command


# ------------------------------------------------------------------------------------------------ clear errors


@pytest.mark.parametrize("engine", ec.ENGINES)
def test_methods_an_engine_lacks_are_one_clear_error(engine):
    doc = ec.DOCUMENTED[engine]
    for name in REGISTRY:
        if name in ec.SUPPORTED[engine]:
            continue
        with pytest.raises(ValueError) as err:
            exported(engine, name)
        message = str(err.value)
        assert f"--method {name}" in message and doc.name in message
        assert all(ours in message for ours in ec.SUPPORTED[engine])


@pytest.mark.parametrize("engine,label,kw,says", [
    ("sglang", "eagle:shapestatic", {}, "static tree"),
    ("vllm", "eagle:typical", {}, "typical acceptance"),
    ("vllm", "prompt-lookup:gauto", {}, "γ auto"),
    ("vllm", "prompt-lookup", {"gamma": "auto"}, "γ auto"),
    ("vllm", "eagle:shapefoo", {}, "bad field 'shapefoo'"),
    ("vllm", "eagle", {"params": {"eagle_top_k": -1}}, "eagle_top_k must be an integer >= 0"),
    ("vllm", "eagle", {"params": {"tau": 0.5}}, "--tau 0.5: eagle does not read it"),
    ("vllm", "prompt-lookup", {"tree_size": 3}, "--tree-size 3: prompt-lookup does not read it"),
    ("vllm", "prompt-lookup", {"draft": "smollm2-135m-draft"}, "--draft smollm2-135m-draft: prompt-lookup does not"),
    ("vllm", "speculative", {"draft": None}, "needs a draft model"),
    ("vllm", "speculative", {"draft": "smollm2-135m-draft", "engine_draft": None}, "--engine-draft"),
    ("sglang", "speculative", {"draft": "layers:4", "engine_draft": None}, "first layers"),
    ("vllm", "eagle", {"engine_draft": None}, "specrepro's format"),
    ("vllm", "prompt-lookup", {"eagle3": True}, "--eagle3 is for --method eagle"),
    ("vllm", "nosuch", {}, "unknown method 'nosuch'"),
])
def test_bad_input_is_one_clear_error(engine, label, kw, says):
    with pytest.raises(ValueError) as err:
        exported(engine, label, **kw)
    assert says in str(err.value)


def test_static_tree_needs_our_rank_probabilities():
    run = ec.run_from_label("eagle:shapestatic", target="org/some-large-target", engine="vllm")
    with pytest.raises(ValueError, match="rank probabilities"):
        ec.export("vllm", run, engine_draft="org/eagle")


@pytest.mark.parametrize("engine,settings,says", [
    ("vllm", {"method": "ngram", "num_speculative_tokens": 2, "typical": 1}, "documents no typical"),
    ("vllm", {"method": "lookahead", "num_speculative_tokens": 2}, "no speculative method 'lookahead'"),
    ("vllm", {"method": "ngram", "num_speculative_tokens": 0}, "integer >= 1"),
    ("vllm", {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2},
     "prompt_lookup_min"),
    ("vllm", {"method": "eagle", "model": "m", "num_speculative_tokens": 2, "speculative_token_tree": "[(0, 0), (0,)]"},
     "breadth-first"),
    ("vllm", {"method": "eagle", "model": "m", "num_speculative_tokens": 2, "speculative_token_tree": "[(0,), (1, 0)]"},
     "prefix-closed"),
    ("vllm", {"method": "eagle", "model": "m", "num_speculative_tokens": 3, "speculative_token_tree": "[(0,), (0, 0)]"},
     "must be 2"),
    ("vllm", {"method": "medusa", "model": "m", "num_speculative_tokens": 2, "speculative_token_tree": "[(0,)]"},
     "eagle and eagle3 only"),
    ("vllm", {"method": "draft_model", "num_speculative_tokens": 2}, "needs a model"),
    ("sglang", {"--speculative-algorithm": "EAGLE", "--speculative-draft-model-path": "m",
                "--speculative-num-steps": 3, "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 6},
     "steps + 1 = 4"),
    ("sglang", {"--speculative-algorithm": "EAGLE", "--speculative-draft-model-path": "m",
                "--speculative-num-steps": 1, "--speculative-eagle-topk": 2, "--speculative-num-draft-tokens": 4},
     "at most topk"),
    ("sglang", {"--speculative-algorithm": "STANDALONE", "--speculative-num-steps": 1}, "draft-model-path"),
    ("sglang", {"--speculative-algorithm": "MEDUSA"}, "no speculative method 'MEDUSA'"),
])
def test_validate_rejects_what_the_engines_reject(engine, settings, says):
    with pytest.raises(ValueError) as err:
        ec.validate(engine, settings)
    assert says in str(err.value)


# ------------------------------------------------------------------------------------- a result, exported


def write_records(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def record(label: str, gammas: list[int], gamma="auto", tree_size=None, params=None, draft=None, dtype="bfloat16",
           temperature=1.0) -> dict:
    return {"method": label, "gammas": gammas, "target": "smollm2-135m-instruct", "draft": draft,
            "config": {"method": label.split(":")[0], "gamma": gamma, "tree_size": tree_size, "acceptance": "exact",
                       "params": params or {}, "sampling": {"temperature": temperature, "top_k": 0, "top_p": 1.0}},
            "provenance": {"dtype": dtype}}


def test_from_a_result_takes_the_rows_settings(tmp_path):
    folder = write_records(tmp_path / "run", [
        record("prompt-lookup:gauto", [3, 3, 2, 0]), record("prompt-lookup:gauto", [2, 3, 1]),
        record("eagle:shapechain", [5, 5], gamma=5, tree_size=1, params={"tree_shape": "chain", "eagle_top_k": 0}),
        record("speculative:g2", [2], gamma=2, draft="smollm2-135m-draft", dtype="float32")])
    run = ec.run_from_result(folder, "prompt-lookup:gauto", "vllm")
    assert run.gamma == 3 and "γ = 3 in 3 of 6 steps" in run.notes[0]  # the γ the policy chose most often
    out = ec.export("vllm", run)
    assert out.settings["num_speculative_tokens"] == 3 and "--dtype bfloat16" in out.command
    assert out.to_dict()["sampling"]["temperature"] == 1.0 and any("per request" in n for n in out.notes)
    assert "row prompt-lookup:gauto, 2 records" in out.to_dict()["from"]
    chain = ec.export("sglang", ec.run_from_result(folder / "records.jsonl", "eagle:shapechain", "sglang"),
                      engine_draft="org/eagle")
    assert chain.settings["--speculative-num-steps"] == 5 and chain.settings["--speculative-eagle-topk"] == 1
    spec = ec.run_from_result(folder, "speculative:g2", "vllm")
    assert (spec.gamma, spec.draft, spec.dtype) == (2, "smollm2-135m-draft", "float32")
    with pytest.raises(ValueError, match="--engine-draft"):  # our reduced-vocabulary draft is no engine's format
        ec.export("vllm", spec)
    assert ec.export("vllm", spec, engine_draft="org/draft").settings["model"] == "org/draft"


def test_from_a_result_errors(tmp_path):
    folder = write_records(tmp_path / "run", [record("ar", []), record("mjsd:b4", [4], gamma=4),
                                              record("prompt-lookup:gauto", [0, 0])])
    with pytest.raises(ValueError, match=r"holds 3 methods \(ar, mjsd:b4, prompt-lookup:gauto\).*runs prompt-lookup"):
        ec.run_from_result(folder, None, "vllm")
    with pytest.raises(ValueError, match="no row 'eagle'"):
        ec.run_from_result(folder, "eagle", "vllm")
    with pytest.raises(ValueError, match="no equivalent of --method mjsd"):
        ec.run_from_result(folder, "mjsd:b4", "vllm")
    with pytest.raises(ValueError, match="hold no step"):
        ec.run_from_result(folder, "prompt-lookup:gauto", "vllm")
    (tmp_path / "bad.jsonl").write_text('{"method": "ar", "config": {}}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: invalid JSON"):
        ec.run_from_result(tmp_path / "bad.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no records.jsonl"):
        ec.run_from_result(tmp_path / "empty")
    one = tmp_path / "one.json"
    one.write_text(json.dumps(record("prompt-lookup:g4", [4], gamma=4)))
    assert ec.run_from_result(one, None, "sglang").gamma == 4  # one record: its row without --method


@pytest.mark.skipif(not (BENCH / "records.jsonl").is_file(), reason="the committed bench run is not here")
def test_from_the_committed_bench_run():
    rows = list(dict.fromkeys(json.loads(line)["method"] for line in (BENCH / "records.jsonl").open()))
    for label in rows:
        base = label.split(":")[0]
        for engine in ec.ENGINES:
            if base not in ec.SUPPORTED[engine] or (engine == "sglang" and "shapestatic" in label):
                continue
            out = ec.export(engine, ec.run_from_result(BENCH / "summary.csv", label, engine),
                            engine_draft=ENGINE_DRAFT[base] or "org/draft")
            check_with_engine(engine, out.settings)
            assert out.run.origin.startswith(str(BENCH)) and out.run.gamma >= 1


# ------------------------------------------------------------------------------------------------ command line


def test_cli_prints_json(capsys):
    assert main(["export-config", "--engine", "vllm", "--method", "prompt-lookup", "--gamma", "5"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["speculative_config"]["num_speculative_tokens"] == 5 and d["command"].startswith("vllm serve ")


def test_cli_writes_out_and_prints_the_command(tmp_path, capsys):
    out = tmp_path / "sub" / "sglang.json"
    assert main(["export-config", "--engine", "sglang", "--method", "eagle:t12", "--gamma", "5", "--eagle-top-k", "3",
                 "--engine-draft", "org/eagle", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    d = json.loads(out.read_text())
    assert d["server_args"]["--speculative-eagle-topk"] == 3 and d["server_args"]["--speculative-num-steps"] == 5
    assert d["command"] in printed and printed.startswith(f"wrote {out}")
    assert not list(out.parent.glob(".*.tmp"))  # written atomically, nothing left beside


@pytest.mark.skipif(not (BENCH / "records.jsonl").is_file(), reason="the committed bench run is not here")
def test_cli_from_a_bench_folder(capsys):
    assert main(["export-config", "--engine", "sglang", "--from", str(BENCH), "--method", "eagle:shapechain",
                 "--engine-draft", "org/eagle"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["method"] == "eagle:shapechain" and d["server_args"]["--speculative-eagle-topk"] == 1


@pytest.mark.parametrize("argv,says", [
    (["--engine", "vllm", "--method", "mjsd"], "vLLM has no equivalent of --method mjsd"),
    (["--engine", "sglang", "--method", "medusa"], "SGLang has no equivalent of --method medusa"),
    (["--engine", "vllm"], "name a method (--method LABEL) or a result (--from PATH)"),
    (["--engine", "vllm", "--from", "x", "--gamma", "3"], "drop --gamma"),
    (["--engine", "vllm", "--method", "prompt-lookup", "--gamma", "0"], "gamma must be an integer >= 1 or auto"),
    (["--engine", "tgi", "--method", "eagle"], "invalid choice: 'tgi'"),
])
def test_cli_errors_are_one_line(capsys, argv, says):
    usage = "invalid choice" in says or "gamma must" in says  # argparse's: the parser exits with status 2
    with pytest.raises(SystemExit) if usage else contextlib.nullcontext():
        assert main(["export-config", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
