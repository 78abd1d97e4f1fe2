"""Medusa heads: the target drafts a sparse tree from its own hidden states, verified in the one loop."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.training.data import Example
from specrepro.drafters.medusa import (MedusaConfig, MedusaDrafter, MedusaHeads, hardware_tree_size, head_logits,
                                       random_paths,
                                       load_heads, paths_to_parents, save_heads, sparse_tree)
from specrepro.engine.models import tiny_model
from specrepro.decode.speculative import speculative_generate
from specrepro.training.medusa import batch_loss, one_head_logits, positions, topk_accuracy
from tests.helpers import PROMPT, V, check_cache, loaded, v8_model
from tests.stats import FALSE_ALARM, chi2_pvalue, exact_first_two

pytestmark = pytest.mark.usefixtures("one_thread")
RANKS = ((0.5, 0.2, 0.1, 0.05), (0.3, 0.15, 0.1, 0.05), (0.2, 0.1, 0.05, 0.05))


def random_heads(model, k=3, seed=0, scale=0.5):
    torch.manual_seed(seed)
    heads = MedusaHeads(model.config.hidden_size, k)
    with torch.no_grad():
        for block in heads.blocks:
            block.weight.normal_(0, scale)
    return heads.eval().requires_grad_(False)


def drafter(model, tree_size=8, seed=0):
    config = MedusaConfig(hidden_size=model.config.hidden_size, num_heads=3, target="tiny", rank_probs=RANKS)
    return MedusaDrafter(random_heads(model, seed=seed), config, model.get_output_embeddings(), tree_size=tree_size)


@pytest.mark.parametrize("tree_size", [1, 4, 12])
def test_greedy_medusa_equals_autoregressive(tiny_pair_64, tree_size):
    target, _ = tiny_pair_64
    for prompt in ([1, 2, 3], [9, 40, 41, 12, 5, 5, 60]):
        ar = autoregressive_generate(target, prompt, DecodeConfig(method="ar", max_new_tokens=30))
        rec = speculative_generate(target, drafter(target, tree_size), prompt, DecodeConfig(max_new_tokens=30, gamma=3),
                                   method="medusa", on_step=check_cache)
        assert rec.token_ids == ar.token_ids
        assert rec.draft_calls == 0 and max(rec.tree_sizes) <= tree_size
        # plain steps: the first (no hidden state yet) and at most one at the end of the budget
        assert rec.target_calls - len(rec.tree_sizes) in (1, 2)


def test_proposal_is_the_heads_guesses_on_the_sparse_tree(tiny_pair_64):
    """After a verification the drafter proposes head d's rank-r guess at every depth-d node of rank path (…, r),
    and γ caps the depth; before any hidden state it proposes nothing."""
    from specrepro.drafters.base import StepFeedback
    target, _ = tiny_pair_64
    d = drafter(target, tree_size=8)
    assert d.propose([1, 2], 3, SamplingConfig(), torch.Generator()).tokens.numel() == 0
    hidden = torch.randn(4, target.config.hidden_size)
    d.feedback(StepFeedback(ids=[1, 2, 3], path=[0, 1], p=torch.zeros(4, 64), hidden=hidden))
    guesses = head_logits(d.heads, target.lm_head, hidden[2]).topk(4, dim=-1).indices  # row after node 1
    paths = sparse_tree(RANKS, 8, 3)
    prop = d.propose([1, 2, 3], 3, SamplingConfig(), torch.Generator())
    assert prop.tokens.tolist() == [int(guesses[len(p) - 1, p[-1]]) for p in paths]
    assert prop.parents.tolist() == paths_to_parents(paths).tolist() and prop.probs is None
    shallow = d.propose([1, 2, 3], 1, SamplingConfig(), torch.Generator())
    assert shallow.parents.tolist() == [-1] * 4  # depth 1: the 4 ranks of head 1


def test_medusa_sampling_is_exact_chi2():
    target = v8_model()
    sampling = SamplingConfig(temperature=1.0)
    counts = np.zeros((V, V), dtype=np.int64)
    d = drafter(target, tree_size=6, seed=1)
    for seed in range(500):
        cfg = DecodeConfig(max_new_tokens=3, gamma=2, sampling=sampling, seed=seed, stop_at_eos=False)
        out = speculative_generate(target, d, PROMPT, cfg).token_ids
        counts[out[0], out[1]] += 1
    assert chi2_pvalue(counts, exact_first_two(target, PROMPT, sampling)) > FALSE_ALARM


def test_sparse_tree_is_prefix_closed_and_most_probable_first():
    paths = sparse_tree(RANKS, 6, 3)
    assert paths[0] == (0,) and len(paths) == 6
    parents = paths_to_parents(paths)
    assert all(parents[i] < i for i in range(len(paths)))
    with pytest.raises(ValueError, match="prefix-closed"):
        paths_to_parents(((0, 1),))


def test_hardware_tree_size_trades_tokens_for_latency():
    flat = lambda n: 1.0  # a free tree: the biggest one wins
    steep = lambda n: float(n)  # every node costs a full step: the smallest one wins
    assert hardware_tree_size(RANKS, 3, flat, 20)[0] == 20
    assert hardware_tree_size(RANKS, 3, steep, 20)[0] == 1
    size, curve = hardware_tree_size(RANKS, 3, lambda n: 1.0 + 0.05 * n, 20)
    assert curve[size][2] == max(v[2] for v in curve.values()) and all(v[0] >= 1 for v in curve.values())


def test_heads_round_trip(tmp_path):
    target = tiny_model(vocab_size=32, hidden=16)
    heads = random_heads(target)
    config = MedusaConfig(hidden_size=16, num_heads=3, rank_probs=RANKS)
    back, back_config = load_heads(save_heads(heads, config, tmp_path / "h"))
    assert back_config == config
    h = torch.randn(5, 16)
    assert torch.allclose(head_logits(back, target.lm_head, h), head_logits(heads, target.lm_head, h))
    with pytest.raises(ValueError, match="no Medusa heads"):
        load_heads(tmp_path)


def test_training_pieces_on_a_synthetic_teacher():
    """Each head learns the teacher row k+1 positions ahead; the loss falls and top-k accuracy is computed."""
    target = tiny_model(vocab_size=32, n_layers=1, hidden=16, seed=2)
    g = torch.Generator().manual_seed(0)
    examples = []
    for _ in range(6):
        toks = torch.randint(0, 32, (20,), generator=g)
        ids = torch.stack([torch.roll(toks, -1), toks, torch.roll(toks, 1)], -1)  # top-3: the next token first
        examples.append(Example(toks, torch.ones(20, dtype=torch.bool), ids, torch.tensor([0.8, 0.1, 0.1]).expand(20, 3),
                                torch.zeros(20)))
    with torch.inference_mode():
        hidden = [target(input_ids=e.tokens[None], output_hidden_states=True).hidden_states[-1][0] for e in examples]
    idx = positions(examples, 2, 20)
    assert idx.conv.numel() == 6 * (18 + 17)  # head k (0-based) has 20 − 2 − k positions per conversation
    assert bool((idx.pos[idx.head == 0] <= 17).all()) and bool((idx.pos[idx.head == 1] <= 16).all())
    heads = MedusaHeads(16, 2)
    h = torch.stack([hidden[c][t] for c, t in zip(idx.conv[:7].tolist(), idx.pos[:7].tolist())])
    full = head_logits(heads, target.lm_head, h)  # [K, 7, V]
    mixed = one_head_logits(heads, target.lm_head, h, idx.head[:7])
    assert torch.allclose(mixed, full[idx.head[:7], torch.arange(7)])
    opt = torch.optim.Adam(heads.parameters(), lr=1e-2)
    first = float(batch_loss(heads, target.lm_head, hidden, examples, idx, 2).detach())
    for _ in range(60):
        loss = batch_loss(heads, target.lm_head, hidden, examples, idx, 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < first - 0.5
    acc = topk_accuracy(heads, target.lm_head, hidden, examples, idx, 2, 5)
    assert acc.shape == (2, 5) and np.all(np.diff(acc, axis=1) >= 0) and acc[0, -1] > 0


def test_medusa_in_the_bench_predicts_from_tree_sizes(tmp_path):
    from specrepro.run.bench import run_bench
    from specrepro.run.bench_types import BenchPrompt
    from specrepro.run.variants import BenchConfig
    from specrepro.run.bench_summary import predicted_for_trees
    from specrepro.metrics.profile import Profile
    target = loaded(tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=2))
    prompts = [BenchPrompt("a", [5, 7, 9, 11, 5, 7]), BenchPrompt("b", [3, 4, 3, 4, 3])]
    cfg = BenchConfig(methods=("ar", "medusa"), target="tiny", prompts="test", max_new_tokens=10, gamma=3,
                      warmup_tokens=2, cost_repeats=2, tree_size=6)
    result = run_bench(cfg, tmp_path, target=target, prompts=prompts, progress=False,
                       drafters={"medusa": drafter(target.model, tree_size=6)})
    row = {r["method"]: r for r in result.summary}["medusa"]
    assert row["identical_to_ar"] == 1.0 and row["n"] == 2
    profile = Profile.from_dict(result.provenance["sessions"][0]["profiles"]["fp32"])
    records = [r for r in result.records if r["method"] == "medusa"]
    assert all(max(r["tree_sizes"]) <= 6 for r in records)
    assert row["predicted_speedup"] == pytest.approx(predicted_for_trees(records, profile, profile.l_fp(1)))
    step_s = records[0]["provenance"]["draft_step_s"]  # the heads' drafting, measured when the plan built them
    assert step_s > 0 and row["c"] == pytest.approx(step_s / profile.decode_s)
    free = [{**r, "provenance": {}} for r in records]  # the same steps, drafting not charged
    assert row["predicted_speedup"] < predicted_for_trees(free, profile, profile.l_fp(1))


def test_random_trees_are_prefix_closed_and_usable(tiny_pair_64):
    rng = np.random.default_rng(0)
    for size in (1, 5, 20):
        paths = random_paths(4, 3, size, rng)
        assert len(set(paths)) == size and all(len(p) <= 3 and max(p) < 4 for p in paths)
        paths_to_parents(paths)  # raises unless prefix-closed with parents first
    target, _ = tiny_pair_64
    d = drafter(target)
    d.paths = random_paths(4, 3, 10, rng)
    ar = autoregressive_generate(target, [1, 2, 3], DecodeConfig(method="ar", max_new_tokens=20))
    assert speculative_generate(target, d, [1, 2, 3], DecodeConfig(max_new_tokens=20, gamma=3)).token_ids == ar.token_ids
