"""Batched speculative decoding (issue 24, item 1) on tiny random fp32 models: every row of mixed-length prompts is the
unbatched AR output at T = 0; at T = 1 the rows are distributed as p (χ², with its power check); a row's tokens do not
depend on its batch-mates; finished rows leave; bad inputs and drafters that cannot batch get one clear error."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.decode.batched import batched_autoregressive, batched_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.engine.draft_model import draft_from_target
from specrepro.drafters import LMDrafter, PromptLookupDrafter
from specrepro.drafters.lm_tree import MultiDraftDrafter
from specrepro.drafters.medusa import MedusaConfig, MedusaDrafter, MedusaHeads
from specrepro.drafters.ngram import NGramDrafter, fit_ngram
from specrepro.decode.speculative import speculative_generate
from specrepro.core.warping import sample
from tests.helpers import PROMPT, V, v8_model
from tests.stats import FALSE_ALARM, RUNS, chi2_pvalue, exact_first_two

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPTS = [[1, 2, 3], [9, 40, 41, 12, 5, 5, 60], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]]  # lengths 3, 7, 12
METHODS = ("speculative", "prompt-lookup", "bigram", "medusa")
RANKS = ((0.5, 0.2, 0.1, 0.05), (0.3, 0.15, 0.1, 0.05), (0.2, 0.1, 0.05, 0.05))


def medusa(model, tree_size=8, seed=0):
    """Medusa heads with random blocks (the drafter of tests/drafters/test_medusa, built here: no test imports another)."""
    torch.manual_seed(seed)
    heads = MedusaHeads(model.config.hidden_size, 3)
    with torch.no_grad():
        for block in heads.blocks:
            block.weight.normal_(0, 0.5)
    config = MedusaConfig(hidden_size=model.config.hidden_size, num_heads=3, target="tiny", rank_probs=RANKS)
    return MedusaDrafter(heads.eval().requires_grad_(False), config, model.get_output_embeddings(), tree_size=tree_size)


def factory(method, target, draft):
    """row -> a fresh drafter of ``method`` (the bigram table is fitted on the prompts: a q that samples at T > 0)."""
    table = fit_ngram(PROMPTS, target.config.vocab_size, order=2, add_k=0.1)
    return {"speculative": lambda b: LMDrafter(draft), "prompt-lookup": lambda b: PromptLookupDrafter(),
            "bigram": lambda b: NGramDrafter(table), "medusa": lambda b: medusa(target)}[method]


def check_rows(cache, ids):
    """The loop's invariant after every step: each row caches every committed token but the newest, and the cache is
    as long as the longest row."""
    cache.check()
    assert cache.rows == [row[:-1] for row in ids]


def eos_for_one_row(target, prompts, config):
    """A token that row 1's AR output reaches early and some other row's never does: rows stop at EOS and at the budget."""
    outs = [autoregressive_generate(target, p, config).token_ids for p in prompts]
    for token in outs[1][2:]:
        if any(token not in out for out in outs):
            return {token}
    raise AssertionError("no token splits the rows")


# ------------------------------------------------------------------------------------------- exactness, T = 0


@pytest.mark.parametrize("method", METHODS)
def test_greedy_rows_equal_unbatched_autoregressive(tiny_pair_64, method):
    target, draft = tiny_pair_64
    config = DecodeConfig(max_new_tokens=24, gamma=3)
    eos = eos_for_one_row(target, PROMPTS, DecodeConfig(method="ar", max_new_tokens=24, stop_at_eos=False))
    recs = batched_generate(target, factory(method, target, draft), PROMPTS, config, eos=eos, method=method,
                            on_step=check_rows)
    for prompt, rec in zip(PROMPTS, recs):
        assert rec.token_ids == autoregressive_generate(target, prompt, config, eos=eos).token_ids
    assert {rec.stop_reason for rec in recs} == {"eos", "max_new_tokens"}
    assert [rec.provenance["batch"]["size"] for rec in recs] == [3, 3, 3]
    assert recs[0].provenance["batch"]["draft"] == ("batched" if method == "speculative" else "per-row")


def test_greedy_self_draft_accepts_ragged_lengths(tiny_pair_64):
    """q = p: every row accepts all γ drafts at every step, with the batch-1 loop's accept lengths and calls."""
    target, _ = tiny_pair_64
    config = DecodeConfig(max_new_tokens=15, gamma=4)
    recs = batched_generate(target, lambda b: LMDrafter(target), PROMPTS, config, on_step=check_rows)
    for prompt, rec in zip(PROMPTS, recs):
        one = speculative_generate(target, LMDrafter(target), prompt, config)
        assert rec.token_ids == one.token_ids and rec.accept_lengths == one.accept_lengths == [4, 4, 4]
        assert rec.target_calls == one.target_calls and rec.draft_calls == one.draft_calls


def test_batched_autoregressive_rows_equal_unbatched(tiny_pair_64):
    target, _ = tiny_pair_64
    for sampling in (SamplingConfig(), SamplingConfig(temperature=1.0)):
        config = DecodeConfig(method="ar", max_new_tokens=20, sampling=sampling, seed=4)
        recs = batched_autoregressive(target, PROMPTS, config, seeds=[4, 5, 6])
        for prompt, seed, rec in zip(PROMPTS, (4, 5, 6), recs):
            one = autoregressive_generate(target, prompt, DecodeConfig(method="ar", max_new_tokens=20,
                                                                      sampling=sampling, seed=seed))
            assert rec.token_ids == one.token_ids and rec.target_calls == one.target_calls == 20
            assert rec.config["seed"] == seed


def test_a_draft_without_position_ids_drafts_per_row(tiny_pair_64):
    """The reduced-vocabulary draft's forward takes no position ids: its rows draft one by one, still exact."""
    target, _ = tiny_pair_64
    draft = draft_from_target(target, torch.arange(64), n_layers=1)
    config = DecodeConfig(max_new_tokens=12, gamma=3)
    recs = batched_generate(target, lambda b: LMDrafter(draft), PROMPTS, config, on_step=check_rows)
    assert recs[0].provenance["batch"]["draft"] == "per-row"
    for prompt, rec in zip(PROMPTS, recs):
        assert rec.token_ids == autoregressive_generate(target, prompt, config).token_ids


# ------------------------------------------------------------------------------------- rows and their streams


@pytest.mark.parametrize("method", METHODS)
def test_a_row_does_not_depend_on_its_batch_mates(tiny_pair_64, method):
    """At T = 1, seed 7: the row alone, the row among others (other seeds, other lengths) and the batch-1 loop agree."""
    target, draft = tiny_pair_64
    config = DecodeConfig(max_new_tokens=16, gamma=3, sampling=SamplingConfig(temperature=1.0), seed=7)
    make = factory(method, target, draft)
    alone = batched_generate(target, make, [PROMPTS[1]], config)[0].token_ids
    mates = batched_generate(target, make, PROMPTS, config, seeds=[1, 7, 2])
    assert mates[1].token_ids == alone
    assert alone == speculative_generate(target, make(0), PROMPTS[1], config).token_ids
    assert mates[0].token_ids != mates[2].token_ids  # the mates did draw from their own streams


def test_finished_rows_leave_and_the_others_go_on(tiny_pair_64):
    target, draft = tiny_pair_64
    sizes = []
    config = DecodeConfig(max_new_tokens=30, gamma=2)
    eos = eos_for_one_row(target, PROMPTS, DecodeConfig(method="ar", max_new_tokens=30, stop_at_eos=False))
    recs = batched_generate(target, lambda b: LMDrafter(draft), PROMPTS, config, eos=eos,
                            on_step=lambda cache, ids: sizes.append(cache.batch_size))
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 3 > sizes[-1]  # rows left, never came back
    early = min(recs, key=lambda r: r.new_tokens)
    assert early.stop_reason == "eos" and early.new_tokens < 30
    assert early.wall_time_s < early.provenance["batch"]["wall_time_s"]  # its latency, not the whole batch's
    assert max(r.new_tokens for r in recs) == 30


# ------------------------------------------------------------------------------------------ exactness, χ² at T = 1


def first_two_counts_batched(target, make, rule=None, batch=10):
    """Counts [V, V] of the first two tokens of PROMPT over RUNS seeds, run in batches whose other half are longer
    and shorter prompts (their rows pad PROMPT's and accept differently)."""
    sampling = SamplingConfig(temperature=1.0)
    counts = np.zeros((V, V), dtype=np.int64)
    mates = [PROMPT[:2], PROMPT + [2, 5, 7, 0]]
    kwargs = {} if rule is None else {"rule": rule}
    for start in range(0, RUNS, batch // 2):
        seeds = list(range(start, start + batch // 2))
        prompts = [PROMPT] * len(seeds) + [mates[i % 2] for i in range(len(seeds))]
        cfg = DecodeConfig(max_new_tokens=3, gamma=2, sampling=sampling, stop_at_eos=False)
        recs = batched_generate(target, make, prompts, cfg, seeds=seeds + [RUNS + s for s in seeds], **kwargs)
        for rec in recs[:len(seeds)]:
            counts[rec.token_ids[0], rec.token_ids[1]] += 1
    return counts


@pytest.mark.parametrize("method", ("speculative", "medusa"))
def test_batched_sampling_is_exact_chi2(method):
    target, draft = v8_model(), v8_model(seed=5)
    make = (lambda b: LMDrafter(draft)) if method == "speculative" else (lambda b: medusa(target, tree_size=6, seed=1))
    counts = first_two_counts_batched(target, make)
    assert chi2_pvalue(counts, exact_first_two(target, PROMPT, SamplingConfig(temperature=1.0))) > FALSE_ALARM


def test_batched_chi2_detects_a_subtly_wrong_sampler():
    """The power check: drawing from p instead of norm(max(0, p − q)) after a rejection fails the same test."""
    def resample_from_p(p, q, draft_tokens, parents, uniforms):  # a chain rule in the loop's tree signature
        gamma = len(draft_tokens)
        for i in range(gamma):
            if uniforms[i] * q[i, draft_tokens[i]] >= p[i, draft_tokens[i]]:
                return list(range(i)), sample(p[i], uniforms[gamma])
        return list(range(gamma)), sample(p[gamma], uniforms[gamma])
    target, draft = v8_model(), v8_model(seed=5)
    counts = first_two_counts_batched(target, lambda b: LMDrafter(draft), rule=resample_from_p)
    assert chi2_pvalue(counts, exact_first_two(target, PROMPT, SamplingConfig(temperature=1.0))) < FALSE_ALARM


# ------------------------------------------------------------------------------------------------- bad inputs


def test_a_method_that_cannot_batch_says_so(tiny_pair_64):
    target, draft = tiny_pair_64
    with pytest.raises(ValueError, match=r"method 'multi-draft' \(drafter MultiDraftDrafter.*cannot batch.*batch "
                                         r"size 1"):
        batched_generate(target, lambda b: MultiDraftDrafter(draft), PROMPTS, DecodeConfig(), method="multi-draft")


def test_bad_batch_inputs_get_one_clear_error(tiny_pair_64):
    target, draft = tiny_pair_64
    config = DecodeConfig(max_new_tokens=8, gamma=2)
    make = lambda b: PromptLookupDrafter()  # noqa: E731
    cases = [
        (dict(prompts=[]), "prompts is empty"),
        (dict(prompts=[1, 2, 3]), r"wrap a single prompt as \[prompt\]"),
        (dict(seeds=[1, 2]), "one seed per prompt: 3 prompts"),
        (dict(seeds=[1, 2, "x"]), r"seeds\[2\] must be an integer"),
        (dict(prompts=[[1, 2], [], [3]]), "prompt 1: the prompt is empty"),
        (dict(prompts=[[1, 2], [1] * 600]), "prompt 1: prompt of 600 tokens"),
        (dict(drafters=[PromptLookupDrafter()]), "one drafter per prompt: 3 prompts, got 1"),
        (dict(drafters=[PromptLookupDrafter()] * 3), "share one drafter object"),
        (dict(drafters=PromptLookupDrafter()), "one Drafter per row"),
        (dict(config=DecodeConfig(gamma="auto")), "fixed gamma"),
    ]
    for change, message in cases:
        args = {"drafters": make, "prompts": PROMPTS, "config": config, **change}
        with pytest.raises(ValueError, match=message):
            batched_generate(target, args["drafters"], args["prompts"], args["config"], seeds=args.get("seeds"))
    with pytest.raises(ValueError, match="prompts is empty"):
        batched_autoregressive(target, [], config)


@pytest.mark.parametrize("name", ["ar", "prompt-lookup", "speculative", "mentored"])
def test_generate_batch_gives_each_prompt_its_batch_1_record(tiny_pair_64, name):
    """``generate_batch`` (the command line's --batch-size) through the registry: each prompt's tokens are those of
    ``generate_ids`` on it alone, at T = 1 too; its record says the batch it ran in."""
    from specrepro.run.generate import generate_batch, generate_ids
    from tests.helpers import loaded
    target, draft = tiny_pair_64
    config = DecodeConfig(method=name, max_new_tokens=10, gamma=3, sampling=SamplingConfig(temperature=1.0), seed=4)
    source = loaded(draft) if name in ("speculative", "mentored") else None
    records = generate_batch(loaded(target), PROMPTS, config, draft=source)
    for prompt, rec in zip(PROMPTS, records):
        assert rec.token_ids == generate_ids(loaded(target), prompt, config, draft=source).token_ids
        assert rec.provenance["batch"]["size"] == len(PROMPTS) and rec.provenance["method"]["name"] == name


def test_generate_batch_refuses_what_cannot_batch(tiny_pair_64):
    from specrepro.run.generate import generate_batch
    from tests.helpers import loaded
    target, _ = tiny_pair_64
    with pytest.raises(ValueError, match="'mjgd' cannot batch"):
        generate_batch(loaded(target), PROMPTS, DecodeConfig(method="mjgd", max_new_tokens=4, gamma=2))
    with pytest.raises(ValueError, match="gamma auto runs at batch size 1"):
        generate_batch(loaded(target), PROMPTS, DecodeConfig(method="prompt-lookup", max_new_tokens=4, gamma="auto"))


def test_generate_batch_size_flag_refuses_before_any_model_loads(capsys):
    from specrepro.run.commands import main
    assert main(["generate", "--prompt", "x", "--method", "mjgd", "--gamma", "2", "--batch-size", "2"]) == 2
    assert "'mjgd' cannot batch" in capsys.readouterr().err
    assert main(["generate", "--prompt", "x", "--method", "prompt-lookup", "--gamma", "auto", "--batch-size", "4"]) == 2
    assert "gamma auto runs at batch size 1" in capsys.readouterr().err


def test_which_methods_batch_derives_from_the_drafter_classes(tiny_pair_64):
    """``Method.batches`` (what generate and bench check before a model loads) derives from the one declaration,
    ``Drafter.batching``, through the class each method builds (``Method.drafter_type``, checked at every build):
    each batching method of the speculative loop builds a drafter of a class that declares it, the batched loop
    runs it, and every other method is refused by ``generate_batch`` at once. A subclass does not inherit it."""
    from specrepro.run.generate import generate_batch
    from specrepro.methods import BATCHING, REGISTRY, Loop
    from tests.helpers import loaded
    target, draft = tiny_pair_64
    g = torch.Generator().manual_seed(0)
    table = fit_ngram(torch.randint(0, 64, (6, 12), generator=g).tolist(), 64, order=2)
    sources = {"speculative": loaded(draft), "prompt-lookup": None, "unigram": table, "bigram": table,
               "medusa": medusa(target), "mentored": loaded(draft)}
    speculative = {m for m in BATCHING if REGISTRY[m].loop is Loop.SPECULATIVE}
    assert speculative == set(sources) and set(BATCHING) - speculative == {"ar"}
    for name in speculative:
        built = REGISTRY[name].build_drafter(sources[name], loaded(target), REGISTRY[name].config(gamma=2))
        assert type(built) is REGISTRY[name].drafter_type and type(built).batching, name
    for name, spec in REGISTRY.items():
        if not spec.batches:
            with pytest.raises(ValueError, match=f"'{name}' cannot batch"):
                generate_batch(loaded(target), PROMPTS, DecodeConfig(method=name, max_new_tokens=4, gamma=2))
    assert LMDrafter.batching and MultiDraftDrafter.batching is None  # a subclass declares for itself


def test_a_method_whose_factory_builds_another_class_than_it_declares_is_one_clear_error(tiny_pair_64):
    import dataclasses
    from specrepro.methods import REGISTRY
    from tests.helpers import loaded
    target, draft = tiny_pair_64
    wrong = dataclasses.replace(REGISTRY["speculative"], drafter_type=PromptLookupDrafter)
    with pytest.raises(TypeError, match="declares drafter_type PromptLookupDrafter but built a LMDrafter"):
        wrong.build_drafter(loaded(draft), loaded(target), wrong.config(gamma=2))
