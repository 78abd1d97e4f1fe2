"""The methods as objects (``specrepro/methods/``): one file each, one registry, and everything the command line, the
bench, the rule table and the README say about a method derived from its object. Also the method added to show that a
new method with a parameter touches its own file and the registry line: ``greedy-draft``, the survey blog's greedy q
generalised to the draft's top-k, lossless at any temperature."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from specrepro.run.commands import build_parser, main
from specrepro.acceptance import TREE_RULES
from specrepro.run.variants import DTYPE_FIELDS, BenchConfig, Variant, check_config
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.run.generate import generate_ids
from specrepro.methods import (HF_METHODS, METHODS, REGISTRY, Cost, Loop, Method, Needs, method, methods_table,
                               parameter_fields)
from specrepro.methods.greedy_draft import TopKDrafter
from specrepro.engine.models import LoadedModel
from tests.helpers import PROMPT, v8_model
from tests.stats import FALSE_ALARM, RUNS, chi2_pvalue, exact_first_two, first_two_counts

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------------------------------ the registry


def test_every_method_is_declared_in_its_own_file_and_describes_itself():
    for name, spec in REGISTRY.items():
        assert spec.name == name and isinstance(spec.loop, Loop) and isinstance(spec.cost, Cost)
        json.dumps(spec.describe())
        Variant.parse(name, None, 2)  # the bench knows every name
        if spec.loop is Loop.TRANSFORMERS:
            counterpart = REGISTRY[spec.counterpart]
            assert counterpart.loop is not Loop.TRANSFORMERS and counterpart.cost is spec.cost
    files = {Path(m.drafter.__code__.co_filename).name for m in REGISTRY.values() if m.drafter is not None
             and hasattr(m.drafter, "__code__")}
    assert files <= {p.name for p in (ROOT / "specrepro" / "methods").glob("*.py")}
    assert set(HF_METHODS) == {"hf-ar", "hf-assisted", "hf-prompt-lookup"}
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        method("nope")
    with pytest.raises(ValueError, match="Loop, Cost and Needs members"):
        Method("beam", "beam", Cost.PLAIN, summary="")  # type: ignore[arg-type]


def test_methods_that_share_a_parameter_declare_it_alike():
    """One flag per parameter name: mjgd's and mjsd's num_beams, spectr's and multi-draft's num_drafts agree."""
    for name, (field, takers) in parameter_fields().items():
        for taker in takers:
            other = next(f for f in REGISTRY[taker].param_fields() if f.name == name)
            assert (other.default, other.metadata["label"], other.metadata["help"]) == (
                field.default, field.metadata["label"], field.metadata["help"]), (name, taker)


def test_label_prefixes_never_collide_with_the_generic_fields():
    for spec in REGISTRY.values():
        for prefix, field in spec.label_fields().items():
            value = f"{prefix}{field.default}"
            assert value not in DTYPE_FIELDS and value not in TREE_RULES
            assert not re.fullmatch(r"[gt]\d+|gauto", value), (spec.name, prefix)
            parsed = Variant.parse(f"{spec.name}:{value}", None, 2)
            assert dict(parsed.params) == {field.name: field.default}


def test_the_command_line_derives_its_flags_and_lists_from_the_registry(capsys):
    parser = build_parser()
    text = parser.format_help() + "".join(a.format_help() for a in parser._subparsers._group_actions[0].choices.values())
    for name in parameter_fields():
        assert f"--{name.replace('_', '-')}" in text
    bench_help = parser._subparsers._group_actions[0].choices["bench"].format_help()
    for name in METHODS:  # (argparse may wrap a name at its hyphen)
        assert name in re.sub(r"\s+", "", bench_help)
    assert main(["methods"]) == 0
    listed = capsys.readouterr().out
    assert all(f"| `{name}` |" in listed for name in METHODS)


def test_a_parameter_no_method_of_the_run_takes_is_one_clear_error(capsys):
    assert main(["generate", "--prompt", "x", "--method", "ar", "--tau", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tau 0.5: ar does not read it (it is for mjsd)" in err
    with pytest.raises(ValueError, match=r"--kl-bound 0.2: ar, speculative do not read it \(it is for mentored\)"):
        BenchConfig(methods=("ar", "speculative"), target="t", params=(("kl_bound", 0.2),))


@pytest.mark.parametrize("argv, message", [
    (["--method", "ar", "--acceptance", "typical"], "--acceptance typical: ar does not read it"),
    (["--method", "ar", "--gamma", "3"], "--gamma 3: ar does not read it"),
    (["--method", "speculative", "--tree-size", "8"], "--tree-size 8: speculative does not read it (it is for medusa, ppd, eagle)"),
    (["--method", "mentored", "--acceptance", "greedy"], "--acceptance greedy: mentored does not read it"),
    (["--method", "prompt-lookup", "--draft", "x"], "--draft x: prompt-lookup does not read it"),
    (["--method", "ar", "--ngram-table", "README.md"], "--ngram-table README.md: ar does not read it (it is for unigram, bigram)"),
])
def test_a_run_wide_setting_the_method_ignores_is_one_clear_error(capsys, argv, message):
    """--acceptance, --gamma, --tree-size, --draft and --ngram-table are errors where the method would ignore them
    (Method.run_flags), not silent records."""
    assert main(["generate", "--prompt", "x", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_every_method_reads_what_its_declaration_says():
    """run_flags follows the declarations: γ for every method that drafts (and MJGD's K), the tree size for token
    trees, the generic rule for our loop's methods without a rule of their own."""
    flags = {name: m.run_flags() for name, m in REGISTRY.items()}
    assert flags["ar"] == frozenset() and flags["hf-ar"] == frozenset()
    assert flags["mjgd"] == {"gamma"} and flags["speculative"] == {"gamma", "acceptance", "draft"}
    assert flags["medusa"] == {"gamma", "tree_size", "acceptance", "draft"}
    assert flags["bigram"] == {"gamma", "acceptance", "ngram_table"} and "acceptance" not in flags["mentored"]


def test_the_readme_lists_every_method():
    readme = (ROOT / "README.md").read_text()
    missing = [name for name in METHODS if f"| `{name}` |" not in readme]
    assert not missing, f"README.md does not list {missing} (python -m specrepro methods prints the table)"
    assert methods_table() in readme, "README.md's methods table is stale: paste `python -m specrepro methods`"
    assert methods_table().count("\n") == len(METHODS) + 1


def test_a_config_of_another_method_or_rule_is_refused():
    with pytest.raises(ValueError, match="method 'mjsd' takes Params"):
        REGISTRY["mjsd"].resolve(DecodeConfig(method="mjsd", params=REGISTRY["bild"].params()))
    with pytest.raises(ValueError, match="acceptance must be one of"):
        REGISTRY["speculative"].resolve(DecodeConfig(method="speculative", acceptance="nope"))
    assert REGISTRY["mjsd"].config().params == REGISTRY["mjsd"].params()  # defaults filled in, recorded


def test_an_old_bench_folder_with_every_parameter_as_a_field_still_resumes(tmp_path):
    """Runs written before the parameters were the methods' own stored num_beams, tau, ... as fields: a config whose
    values agree (defaults, or the same flags) resumes; one that disagrees is refused."""
    config = BenchConfig(methods=("ar", "mjsd:b4"), target="t", draft="d", params=(("tau", 0.5),))
    old = {k: v for k, v in config.to_dict().items() if k != "params"}
    old.update(num_beams=8, tau=0.5, fallback_threshold=0.9, rollback_threshold=2.0, num_drafts=4, kl_bound=0.1,
               online_buffer=128, online_every=8, online_steps=1, online_lr=1e-4, online_divergence="fkl",
               online_examples="steps")
    (tmp_path / "config.json").write_text(json.dumps(old))
    check_config(tmp_path, config)
    with pytest.raises(ValueError, match="params"):
        check_config(tmp_path, dataclasses.replace(config, params=()))


# ------------------------------------------------------------------------ the added method: greedy-draft


@pytest.fixture(scope="module")
def pair():
    target = LoadedModel("tiny", v8_model(), None)
    return target, LoadedModel("tiny-draft", v8_model(4), None)


def test_greedy_draft_at_t0_is_token_identical_to_ar_in_fp32(pair):
    target, draft = pair
    ar = generate_ids(target, PROMPT, DecodeConfig(method="ar", max_new_tokens=12, stop_at_eos=False))
    for k in (1, 3):
        config = REGISTRY["greedy-draft"].config(gamma=3, max_new_tokens=12, stop_at_eos=False,
                                                  params=REGISTRY["greedy-draft"].params(draft_top_k=k))
        rec = generate_ids(target, PROMPT, config, draft=draft)
        assert rec.token_ids == ar.token_ids and rec.config["params"] == {"draft_top_k": k}


def test_greedy_draft_proposes_the_drafts_argmax_with_a_one_hot_q(pair):
    _, draft = pair
    proposal = TopKDrafter(draft.model, 1).propose(PROMPT, 3, SamplingConfig(temperature=1.0), torch.Generator())
    assert torch.equal(proposal.probs.max(-1).values, torch.ones(3))  # q = 1 on the draft token: accept w.p. p(x)
    top3 = TopKDrafter(draft.model, 3).propose(PROMPT, 3, SamplingConfig(temperature=1.0),
                                               torch.Generator().manual_seed(0))
    assert ((top3.probs > 0).sum(-1) <= 3).all()


@pytest.mark.parametrize("k", [1, 3])
def test_greedy_draft_is_exact_at_t1_chi2(pair, k):
    """The first two emitted tokens over RUNS seeds against the exact p(x1) p(x2 | x1): lossless whatever k. The power
    of this χ² on this target is shown in drafters/test_ngram (the wrong-residual sampler fails it)."""
    target, draft = pair
    sampling = SamplingConfig(temperature=1.0)
    counts = first_two_counts(target.model, TopKDrafter(draft.model, k), sampling)
    assert counts.sum() == RUNS
    assert chi2_pvalue(counts, exact_first_two(target.model, PROMPT, sampling)) > FALSE_ALARM


def test_greedy_draft_accepts_less_than_the_sampled_draft_at_t1_because_q_is_not_p(pair):
    """Not a test of exactness: the deterministic q costs acceptance (α = E p(x) instead of Σ min(p, q)), the trade
    the survey names; measured, not assumed, on the same prompts and seeds."""
    target, draft = pair
    alphas = {}
    for name, params in (("speculative", None), ("greedy-draft", REGISTRY["greedy-draft"].params(draft_top_k=1))):
        recs = [generate_ids(target, PROMPT, REGISTRY[name].config(
            gamma=3, max_new_tokens=16, stop_at_eos=False, seed=s, sampling=SamplingConfig(temperature=1.0),
            params=params), draft=draft) for s in range(20)]
        alphas[name] = np.mean([r.alpha for r in recs if r.alpha is not None])
    assert 0 < alphas["greedy-draft"] < 1 and 0 < alphas["speculative"] < 1
    assert Needs.DRAFT_MODEL is REGISTRY["greedy-draft"].needs
