"""Every method of the registry runs through the bench on a tiny model, in fp32 and in bf16, greedy and sampled.

One bench per (dtype, temperature) holds every method (mjgd, a search for the argmax, at T = 0 only), a prompt and
three new tokens; each test reads one method's outcome, so a failure names the method, the dtype and T. The
self-drafting methods (medusa, ppd, eagle) read tiny random weights saved to a folder and found as the tiny target's own
(``models.SELF_DRAFTS``), through the same builder, loader and hardware-aware tree size as the zoo's. llama.cpp's
baselines decode a GGUF file, not a torch model: ``tests/test_peers.py`` runs them on the offline model's.
"""
from __future__ import annotations

import functools

import pytest
import torch

from specrepro.run.bench import run_bench
from specrepro.run.bench_types import BenchPrompt
from specrepro.run.variants import BenchConfig
from specrepro.drafters import fit_ngram
from specrepro.drafters.eagle import EagleConfig, EagleDraft, save_draft
from specrepro.drafters.medusa import MedusaConfig, MedusaHeads, save_heads
from specrepro.drafters.ppd import PPDConfig, PromptTokens, save_prompt_tokens
from specrepro.methods import METHODS, REGISTRY, Loop
from specrepro.engine.models import SELF_DRAFTS, LoadedModel, tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

V, H = 32, 16
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
RANKS = ((0.5, 0.2, 0.1, 0.05), (0.3, 0.15, 0.1, 0.05), (0.2, 0.1, 0.05, 0.05))  # rank probabilities of the trees
PROMPT = BenchPrompt("a", [5, 7, 9, 11, 5, 7])
TORCH_METHODS = tuple(m for m in METHODS if REGISTRY[m].loop.own_weights)  # (llama.cpp's read a GGUF)
CASES = [pytest.param(m, d, t, id=f"{m}-{d}-T{t:g}") for m in TORCH_METHODS for d in DTYPES for t in (0.0, 1.0)
         if not (REGISTRY[m].loop is Loop.MJGD and t > 0)]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """(dtype, temperature) -> the BenchResult of every method, run on first use and kept for the module."""
    folder = tmp_path_factory.mktemp("every-method")
    g = torch.Generator().manual_seed(0)
    table = fit_ngram(torch.randint(0, V, (8, 12), generator=g).tolist(), V, order=2).save(folder / "bigram.npz")
    heads = save_heads(MedusaHeads(H, 3), MedusaConfig(hidden_size=H, target="tiny", rank_probs=RANKS),
                       folder / "medusa")
    prompt_tokens = save_prompt_tokens(PromptTokens(H, 3, 1, init=torch.randn(3, H, generator=g)),
                                       PPDConfig(hidden_size=H, target="tiny", rank_probs=RANKS), folder / "ppd")
    eagle = save_draft(EagleDraft(tiny_model(vocab_size=V, n_layers=2, hidden=H, seed=0),
                                  EagleConfig(hidden_size=H, depth=3, target="tiny", rank_probs=RANKS)),
                       EagleConfig(hidden_size=H, depth=3, target="tiny", rank_probs=RANKS), folder / "eagle")

    @functools.cache
    def run(dtype: str, temperature: float):
        methods = tuple(m for m in TORCH_METHODS if not (REGISTRY[m].loop is Loop.MJGD and temperature > 0))
        target = LoadedModel("tiny", tiny_model(vocab_size=V, n_layers=2, hidden=H, seed=0, dtype=DTYPES[dtype]), None)
        draft = LoadedModel("tiny-draft", tiny_model(vocab_size=V, n_layers=1, hidden=H, seed=1, dtype=DTYPES[dtype]),
                            None)
        config = BenchConfig(methods=methods, target="tiny", draft="tiny-draft", prompts="test", max_new_tokens=3,
                             temperature=temperature, gamma=2, ngram_table=str(table), warmup_tokens=1,
                             cost_repeats=1, params=(("num_beams", 2), ("num_drafts", 2)))
        with pytest.MonkeyPatch.context() as patch:  # the tiny target's own self-drafting weights
            patch.setitem(SELF_DRAFTS["medusa heads"], "tiny", str(heads))
            patch.setitem(SELF_DRAFTS["ppd prompt tokens"], "tiny", str(prompt_tokens))
            patch.setitem(SELF_DRAFTS["eagle draft"], "tiny", str(eagle))
            return run_bench(config, folder / f"{dtype}-T{temperature:g}", target=target, draft=draft,
                             prompts=[PROMPT], progress=False)
    return run


@pytest.mark.parametrize("method, dtype, temperature", CASES)
def test_every_method_runs_through_the_bench(bench, method, dtype, temperature):
    result = bench(dtype, temperature)
    assert method not in result.failed, result.failed[method]
    row = {r["method"]: r for r in result.summary}[method]
    assert row["n"] == 1 and row["dtype"] == dtype and row["error"] is None
    record = next(r for r in result.records if r["method"] == method)
    assert 1 <= record["new_tokens"] <= 3 and all(0 <= t < V for t in record["token_ids"])
