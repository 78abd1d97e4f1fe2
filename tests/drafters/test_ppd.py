"""PPD: prompt tokens scored in the verification forward, the dynamic sparse tree, and their training pieces."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from specrepro.core import tree
from specrepro.acceptance import TREE_RULES
from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.training.data import Example
from specrepro.drafters.base import StepFeedback
from specrepro.drafters.ppd import (PPDConfig, PPDDrafter, PromptTokens, choose_tree_size, dynamic_tree,
                                    ept_block_mask, hardware_tree_size, input_lengths, layout, load_prompt_tokens,
                                    save_prompt_tokens, tree_speed)
from specrepro.core.kvcache import CachedModel
from specrepro.methods import REGISTRY
from specrepro.engine.models import tiny_model
from specrepro.decode.speculative import speculative_generate
from specrepro.training.ppd import (PPDTrainConfig, Student, loss_for, run_prefix, student_logits, topk_accuracy)
from tests.helpers import PROMPT, V, check_cache, v8_model
from tests.stats import FALSE_ALARM, chi2_pvalue, exact_first_two

pytestmark = pytest.mark.usefixtures("one_thread")
RANKS = ((0.5, 0.2, 0.1, 0.05), (0.3, 0.15, 0.1, 0.05), (0.2, 0.1, 0.05, 0.05))
H = 32


def ppd_drafter(model, size=8, e=1, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    hidden = model.config.hidden_size
    config = PPDConfig(hidden_size=hidden, prompt_tokens=3, epts=e, target="tiny", rank_probs=RANKS)
    tokens = PromptTokens(hidden, 3, e, init=scale * torch.randn(3 * e, hidden, generator=g))
    return PPDDrafter(tokens, config, model.get_output_embeddings(), tree_size=size)


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def target(request):
    model = tiny_model(vocab_size=64, n_layers=2, hidden=H, seed=4)
    model.set_attn_implementation(request.param)
    return model


def plain_forward(model, embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.inference_mode():
        out = model(inputs_embeds=embeds[None], output_hidden_states=True)
    return out.logits[0, -1], out.hidden_states[-1][0, -1]


def test_prompt_nodes_score_like_plain_forwards_and_are_dropped(target):
    """Every row (root, candidates, prompt nodes) equals a plain forward over the node's root path, prompt nodes
    entering as embeddings; keeping a path drops every prompt node and leaves the cache a fresh forward's."""
    ids = [1, 5, 3, 7, 2, 9]
    tokens, parents = torch.tensor([4, 8, 9, 11]), torch.tensor([-1, 0, -1, 1])
    embeds = torch.randn(5, H, generator=torch.Generator().manual_seed(1))
    prompt_parents = torch.tensor([-1, 4, 1, 6, 3])  # on the root, its child, on node 1, its child, on node 3
    cm = CachedModel(target)
    cm.logits_for(ids[:4])  # part of the prefix already cached
    logits, hidden = cm.logits_for_tree(ids, tokens, parents, output_hidden=True, prompt_embeds=embeds,
                                        prompt_parents=prompt_parents)
    assert logits.shape == (5, 64) and hidden.shape == (10, H)
    cm.check()
    emb = target.get_input_embeddings()
    every = torch.cat([parents, prompt_parents])
    for node in range(-1, 9):
        rows = [emb(torch.tensor(ids))]
        for i in tree.root_path(every, node):
            rows.append(emb(tokens[i:i + 1]) if i < 4 else embeds[i - 4:i - 3])
        ref_logits, ref_hidden = plain_forward(target, torch.cat(rows))
        torch.testing.assert_close(hidden[node + 1], ref_hidden, atol=1e-5, rtol=1e-5)
        if node < 4:
            torch.testing.assert_close(logits[node + 1], ref_logits, atol=1e-5, rtol=1e-5)
    cm.keep_path([0, 1, 3])
    cm.check()
    assert cm.ids == ids + [4, 8, 11] and cm.cache_len == len(ids) + 3
    after = cm.logits_for(ids + [4, 8, 11, 5])[-1]
    fresh = plain_forward(target, emb(torch.tensor(ids + [4, 8, 11, 5])))[0]
    torch.testing.assert_close(after, fresh, atol=1e-5, rtol=1e-5)


def test_bad_prompt_nodes_get_one_clear_error(target):
    cm = CachedModel(target)
    with pytest.raises(ValueError, match="parent index must be"):
        cm.logits_for_tree([1, 2], torch.tensor([3]), torch.tensor([-1]), prompt_embeds=torch.randn(2, H),
                           prompt_parents=torch.tensor([-1, 2]))  # node 2 is itself
    with pytest.raises(ValueError, match="prompt_parents"):
        cm.logits_for_tree([1, 2], torch.tensor([3]), torch.tensor([-1]), prompt_embeds=torch.randn(2, H))
    with pytest.raises(ValueError, match="tree size"):
        ppd_drafter(target, size=1)


@pytest.mark.parametrize("e", [1, 3])
@pytest.mark.parametrize("size", [2, 8, 20])
def test_greedy_ppd_equals_autoregressive(size, e):
    target = tiny_model(vocab_size=64, n_layers=2, hidden=H, seed=2)
    for prompt in ([1, 2, 3], [9, 40, 41, 12, 5, 5, 60]):
        ar = autoregressive_generate(target, prompt, DecodeConfig(method="ar", max_new_tokens=30))
        rec = speculative_generate(target, ppd_drafter(target, size, e), prompt, DecodeConfig(max_new_tokens=30, gamma=3),
                                   method="ppd", on_step=check_cache)
        assert rec.token_ids == ar.token_ids and rec.draft_calls == 0
        # the first step scores the root's m·e prompt tokens only; later ones a state's candidates and prompts
        assert rec.input_lengths[0] == 1 + 3 * e
        assert len(rec.tree_sizes) >= rec.target_calls - 2


def test_the_ept_mask_is_the_tree_of_ept_chains():
    """Inference builds the ensemble mask from tree parents: EPT j of distance d hangs under EPT j of d−1."""
    m, e = 3, 2
    lay = layout([], [], root_prompts=m, e=e)
    assert lay.anchor_rows[-1].tolist() == [[0, 1], [2, 3], [4, 5]]
    assert torch.equal(tree.ancestor_mask(lay.prompt_parents), ept_block_mask(m, e, "ensemble"))
    assert torch.equal(ept_block_mask(m, e, "decoder"), torch.ones(6, 6, dtype=torch.bool).tril())
    enc = ept_block_mask(m, e, "encoder")
    assert bool(enc[0, 1]) and not bool(enc[0, 2]) and bool(enc[5, 0])  # own distance both ways, no look-ahead
    with pytest.raises(ValueError, match="EPT attention mask"):
        ept_block_mask(m, e, "diagonal")


def test_proposal_follows_the_accepted_nodes_prompt_tokens():
    """After a step the candidates are the guesses of the prompt tokens on the last accepted node, on the state
    given by how many prompt tokens it carried; the EPTs' logits are averaged."""
    target = tiny_model(vocab_size=64, n_layers=2, hidden=H, seed=2)
    d = ppd_drafter(target, size=12, e=2)
    first = d.propose([1, 2], 3, SamplingConfig(), torch.Generator())
    assert first.tokens.numel() == 0 and len(d.prompt_nodes) == 3 * 2  # the scorer's, not the proposal's
    hidden = torch.randn(1 + 6, H)
    d.feedback(StepFeedback(ids=[1, 2, 3], path=[], p=torch.zeros(1, 64), hidden=hidden))
    guesses = target.lm_head(hidden[1:].reshape(3, 2, H)).mean(1).topk(4, dim=-1).indices  # [3, 4]
    prop = d.propose([1, 2, 3], 3, SamplingConfig(), torch.Generator())
    state = d.tree.states[2]  # the root carries m = 3 prompt tokens: state T_3
    assert prop.tokens.tolist() == [int(guesses[len(p) - 1, p[-1]]) for p in state.paths]
    n = len(state.paths)
    assert len(d.prompt_nodes) == 2 * (3 + sum(state.prompts))
    # accept candidate 0: the next state is its prompt count, its guesses its prompt rows
    hidden = torch.randn(1 + n + len(d.prompt_nodes), H)
    d.feedback(StepFeedback(ids=[1, 2, 3, 4, 5], path=[0], p=torch.zeros(n + 1, 64), hidden=hidden))
    k = state.prompts[0]
    rows = d.state_layout(3, 3).anchor_rows[0]
    assert d.anchor_hidden.shape == (k, 2, H)
    assert torch.equal(d.anchor_hidden, hidden[1 + n + rows])
    shallow = d.propose([1, 2, 3, 4, 5], 1, SamplingConfig(), torch.Generator())
    assert all(int(p) == -1 for p in shallow.parents)  # γ = 1 caps the depth


def test_ppd_sampling_is_exact_chi2_and_typical_is_caught():
    """At T = 1 the first two tokens follow p exactly (the second is verified on a PPD tree); the same test
    rejects Medusa's typical acceptance, which is lossy: the power check."""
    target = v8_model()
    sampling = SamplingConfig(temperature=1.0)
    expected = exact_first_two(target, PROMPT, sampling)
    for rule, lossless in ((TREE_RULES["exact"], True), (TREE_RULES["typical"], False)):
        counts = np.zeros((V, V), dtype=np.int64)
        d = ppd_drafter(target, size=10, seed=1, scale=0.3)
        accepted = 0
        for seed in range(500 if lossless else 300):
            # (4 tokens: the second step may draft 2 deep; its tree decides tokens 2-4)
            cfg = DecodeConfig(max_new_tokens=4, gamma=2, sampling=sampling, seed=seed, stop_at_eos=False)
            rec = speculative_generate(target, d, PROMPT, cfg, rule=rule)
            counts[rec.token_ids[0], rec.token_ids[1]] += 1
            accepted += sum(rec.accept_lengths)
        assert accepted > (50 if lossless else 10)  # the trees were really tested, not just skipped
        p = chi2_pvalue(counts, expected)
        assert (p > FALSE_ALARM) if lossless else (p < FALSE_ALARM)


def test_dynamic_tree_and_hardware_size():
    t = dynamic_tree(RANKS, 12, 3)
    assert all(s.size <= 12 and s.depth <= k for k, s in enumerate(t.states, start=1))
    assert input_lengths(t, 1).tolist() == [1 + 3 + s.n_candidates + s.n_prompts for s in t.states]
    flat, steep = (lambda n: 1.0), (lambda n: float(n))
    assert hardware_tree_size(RANKS, 3, 1, flat, max_input=40, n_max=20)[0] == 20  # free nodes: the biggest
    assert hardware_tree_size(RANKS, 3, 1, steep, max_input=40, n_max=20)[0] == 2  # costly nodes: the smallest
    size, curve = hardware_tree_size(RANKS, 3, 1, lambda n: 1.0 + 0.02 * n, max_input=64, n_max=30)
    assert curve[size][2] == max(v[2] for v in curve.values()) and all(v[0] >= 1 for v in curve.values())

    class FakeProfile:
        n_max = 24
        l_fp = staticmethod(lambda n: 1.0 + 0.05 * n)
        key = type("K", (), {"dtype": "fp32"})()
    config = PPDConfig(hidden_size=H, rank_probs=RANKS)
    choice = choose_tree_size(config, FakeProfile())
    assert int(input_lengths(dynamic_tree(RANKS, choice.size, 3), 1).max()) <= 24 and "hardware-aware" in choice.reason
    assert (choice.tau, choice.latency_s) == tree_speed(RANKS, choice.size, 3, 1, FakeProfile.l_fp)[:2]


def test_dtype_auto_weighs_a_tree_method_by_its_tree_forward(tmp_path, monkeypatch):
    """--dtype auto for PPD compares dtypes by L_fp(tree input)/τ at each dtype's hardware-aware size, not as a
    c = 0 chain: a dtype whose forward is flat in n wins although its one-token step is slower."""
    from specrepro.metrics.profile import choose_dtype
    from specrepro.run.plan import tree_cost

    folder = save_prompt_tokens(PromptTokens(H, 3, 1, init=torch.randn(3, H)),
                                PPDConfig(hidden_size=H, rank_probs=RANKS), tmp_path / "p")

    def profile(dtype, l_fp):
        return type("P", (), {"n_max": 24, "l_fp": staticmethod(l_fp), "key": type("K", (), {"dtype": dtype})(),
                              "host": None, "host_s": staticmethod(lambda gamma: 0.0)})()
    flat, steep = profile("bf16", lambda n: 1.0), profile("fp32", lambda n: 0.8 + 0.2 * (n - 1))
    cost = tree_cost(REGISTRY["ppd"], folder, "tiny", gamma=3)
    for prof in (flat, steep):
        size = choose_tree_size(PPDConfig(hidden_size=H, rank_probs=RANKS), prof)
        assert cost(prof)[0] == pytest.approx(size.latency_s / size.tau)
    choice = choose_dtype({"bf16": flat, "fp32": steep}, "self-drafting", 3, tree_cost=cost)
    assert choice.dtype == "bf16" and "tree" in choice.reason
    assert tree_cost(REGISTRY["speculative"], None, "tiny", 3) is None


def test_prompt_tokens_round_trip(tmp_path):
    tokens = PromptTokens(H, 3, 2, init=torch.randn(6, H))
    config = PPDConfig(hidden_size=H, prompt_tokens=3, epts=2, rank_probs=RANKS)
    back, back_config = load_prompt_tokens(save_prompt_tokens(tokens, config, tmp_path / "p"))
    assert back_config == config and torch.equal(back.embeds, tokens.embeds)
    with pytest.raises(ValueError, match="no PPD prompt tokens"):
        load_prompt_tokens(tmp_path)
    save_prompt_tokens(tokens, PPDConfig(hidden_size=H, prompt_tokens=3, epts=1, rank_probs=RANKS), tmp_path / "bad")
    with pytest.raises(ValueError, match="do not match"):
        load_prompt_tokens(tmp_path / "bad")


# ------------------------------------------------------------------------------------------- training

def synthetic(n: int, length: int = 24, vocab: int = 32, seed: int = 0) -> list[Example]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        toks = torch.randint(0, vocab, (length,), generator=g)
        out.append(Example(toks, torch.ones(length, dtype=torch.bool), toks[:, None], torch.ones(length, 1),
                           torch.zeros(length)))
    return out


@pytest.mark.parametrize("mask", ["ensemble", "decoder", "encoder"])
def test_training_forward_equals_per_anchor_plain_forwards(mask):
    """All anchors' prompt groups in one forward over the cached conversation give, for each anchor t, what a
    plain forward of x[:t+1] followed by that group (under the chosen EPT mask) gives."""
    model = tiny_model(vocab_size=32, n_layers=2, hidden=16, seed=5).requires_grad_(False)
    cfg = PPDTrainConfig(prompt_tokens=3, epts=2, mask=mask, max_len=24)
    student = Student(cfg, torch.randn(6, 16, generator=torch.Generator().manual_seed(0)))
    ex = synthetic(1, vocab=32)[0]
    prefix = run_prefix(model, ex, cfg)
    anchors = torch.tensor([2, 7, 15])
    with torch.no_grad():
        logq = student_logits(model, student, prefix, anchors, cfg)  # [R, m, V]
        emb = model.get_input_embeddings()
        for r, t in enumerate(anchors.tolist()):
            x = emb(ex.tokens[:t + 1])
            group = student.tokens.embeds.reshape(6, 16)
            allowed = torch.ones(t + 1 + 6, t + 1 + 6, dtype=torch.bool).tril()
            allowed[t + 1:, t + 1:] = ept_block_mask(3, 2, mask)
            add = torch.zeros(allowed.shape).masked_fill_(~allowed, torch.finfo(torch.float32).min)
            pos = torch.cat([torch.arange(t + 1), t + torch.arange(1, 4).repeat_interleave(2)])
            out = model(inputs_embeds=torch.cat([x, group])[None], attention_mask=add[None, None],
                        position_ids=pos[None]).logits[0, t + 1:]  # [6, V]
            ref = out.reshape(3, 2, -1).mean(1).log_softmax(-1)
            torch.testing.assert_close(logq[r], ref, atol=1e-5, rtol=1e-5)
    assert prefix.cache.get_seq_length() == 24  # the prompt nodes left no trace in the cache


@pytest.mark.parametrize("kd", [True, False])
def test_the_loss_falls_and_accuracies_are_measured(kd):
    model = tiny_model(vocab_size=32, n_layers=2, hidden=16, seed=5).requires_grad_(False)
    cfg = PPDTrainConfig(prompt_tokens=2, epts=2, kd=kd, max_len=24, k_max=5, aggregation="learned")
    student = Student(cfg, torch.randn(4, 16, generator=torch.Generator().manual_seed(0)))
    examples = synthetic(3, vocab=32)
    opt = torch.optim.Adam(student.parameters(), lr=5e-2)
    prefixes = [run_prefix(model, ex, cfg) for ex in examples]

    def total():
        return sum(loss_for(student_logits(model, student, p, p.usable, cfg), p, p.usable, cfg) for p in prefixes)
    first = float(total().detach())
    for _ in range(40):
        loss = total()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < first - 0.05
    acc, anchors = topk_accuracy(model, student, examples, cfg)
    assert acc.shape == (2, 5) and np.all(np.diff(acc, axis=1) >= 0) and anchors == 3 * 22


def test_ppd_in_the_bench_predicts_from_input_lengths(tmp_path):
    from tests.helpers import loaded
    from specrepro.run.bench import run_bench
    from specrepro.run.bench_types import BenchPrompt
    from specrepro.run.variants import BenchConfig
    from specrepro.run.bench_summary import predicted_for_trees
    from specrepro.metrics.profile import Profile
    target = loaded(tiny_model(vocab_size=64, n_layers=2, hidden=H, seed=2))
    prompts = [BenchPrompt("a", [5, 7, 9, 11, 5, 7]), BenchPrompt("b", [3, 4, 3, 4, 3])]
    cfg = BenchConfig(methods=("ar", "ppd"), target="tiny", prompts="test", max_new_tokens=10, gamma=3,
                      warmup_tokens=2, cost_repeats=2, tree_size=8)
    result = run_bench(cfg, tmp_path, target=target, prompts=prompts, progress=False,
                       drafters={"ppd": ppd_drafter(target.model, size=20)})
    row = {r["method"]: r for r in result.summary}["ppd"]
    assert row["identical_to_ar"] == 1.0 and row["n"] == 2 and row["alpha"] is None
    assert result.provenance["tree_sizes"]["ppd"] == {"size": 8, "reason": "named"}
    records = [r for r in result.records if r["method"] == "ppd"]
    assert all(len(r["input_lengths"]) == r["target_calls"] for r in records)
    profile = Profile.from_dict(result.provenance["sessions"][0]["profiles"]["fp32"])
    assert row["predicted_speedup"] == pytest.approx(predicted_for_trees(records, profile, profile.l_fp(1)))


def test_acceptance_is_a_named_rule_and_exact_by_default():
    assert DecodeConfig().acceptance == "exact" and TREE_RULES["exact"].lossless
    assert not TREE_RULES["typical"].lossless
    with pytest.raises(ValueError, match="acceptance must be one of"):  # the rule table checks the name
        REGISTRY["speculative"].resolve(DecodeConfig(acceptance="lenient"))


def test_prefix_tuning_reaches_only_its_own_prompt_token():
    """Table 4: the prefix of distance d changes prompt token d's guess and nothing else."""
    model = tiny_model(vocab_size=32, n_layers=2, hidden=16, seed=5).requires_grad_(False)
    cfg = PPDTrainConfig(prompt_tokens=3, epts=1, prefix=True, max_len=24)
    student = Student(cfg, torch.randn(3, 16, generator=torch.Generator().manual_seed(0)), model)
    prefix = run_prefix(model, synthetic(1, vocab=32)[0], cfg)
    anchors = torch.tensor([3, 9])
    with torch.no_grad():
        before = student_logits(model, student, prefix, anchors, cfg)
        student.prefix_kv[:, :, :, 1] += torch.randn_like(student.prefix_kv[:, :, :, 1])
        after = student_logits(model, student, prefix, anchors, cfg)
    assert torch.allclose(before[:, 0], after[:, 0], atol=1e-6) and not torch.allclose(before[:, 1], after[:, 1])
    assert prefix.cache.get_seq_length() == 24  # prefixes and prompt nodes both gone again


def test_multi_exit_and_custom_head():
    """Table 8 averages norm(layer output) of the last k layers before the LM head; Table 5's head starts as the
    LM head (so its first guesses are the plain ones) and, in 2 stages, waits for the first half."""
    from specrepro.training.ppd import optimizer
    model = tiny_model(vocab_size=32, n_layers=3, hidden=16, seed=5).requires_grad_(False)
    prefix_cfg = PPDTrainConfig(prompt_tokens=2, epts=1, max_len=24)
    init = torch.randn(2, 16, generator=torch.Generator().manual_seed(0))
    ex = synthetic(1, vocab=32)[0]
    anchors = torch.tensor([4])
    plain = student_logits(model, Student(prefix_cfg, init), run_prefix(model, ex, prefix_cfg), anchors, prefix_cfg)
    head_cfg = PPDTrainConfig(prompt_tokens=2, epts=1, max_len=24, head="2-stage", steps=10)
    student = Student(head_cfg, init, model)
    with torch.no_grad():
        torch.testing.assert_close(student_logits(model, student, run_prefix(model, ex, head_cfg), anchors, head_cfg),
                                   plain)
    opt, sched = optimizer(student, head_cfg)
    lrs = []
    for _ in range(10):
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    assert lrs[4][1] == 0.0 and lrs[5][1] > 0 and lrs[5][0] < 0.2 * lrs[0][0]

    cfg = PPDTrainConfig(prompt_tokens=2, epts=1, max_len=24, exits=2)
    outs = []
    hooks = [layer.register_forward_hook(lambda mod, i, o: outs.append(o[0] if isinstance(o, tuple) else o))
             for layer in model.model.layers]
    try:
        with torch.no_grad():
            got = student_logits(model, Student(cfg, init), run_prefix(model, ex, cfg), anchors, cfg)
    finally:
        for h in hooks:
            h.remove()
    last_two = outs[-2:]  # the group forward's layer 2 and layer 3 outputs, [1, 2, H] each
    norm = model.model.norm
    want = model.lm_head((norm(last_two[0][0]) + norm(last_two[1][0])) / 2).log_softmax(-1)  # [2, V]
    torch.testing.assert_close(got[0], want, atol=1e-5, rtol=1e-5)


def test_bench_variants_take_a_tree_size_and_a_rule():
    from specrepro.run.variants import Variant
    v = Variant.parse("ppd:t20:typical:bf16", None, 3)
    assert (v.method.name, v.tree_size, v.acceptance, v.dtype) == ("ppd", 20, "typical", "bf16")
    assert Variant.parse("medusa", None, 3).acceptance is None
    with pytest.raises(ValueError, match="tree size"):
        Variant.parse("speculative:t8", None, 3)
    with pytest.raises(ValueError, match="acceptance rule"):
        Variant.parse("ar:typical", None, 3)


def test_training_targets_by_hand():
    """Prompt token d after anchor t learns the teacher's row t+d (KD) or token t+d+1 (no KD); targets past the
    end or on tokens the target did not write drop out."""
    from specrepro.training.ppd import Prefix, targets
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 8, (10,), generator=g)
    generated = torch.ones(10, dtype=torch.bool)
    generated[6] = False  # a template token
    logits = torch.randn(10, 8, generator=g)
    prefix = Prefix(cache=None, logits=logits, tokens=tokens, generated=generated, usable=torch.arange(8))
    anchors = torch.tensor([1, 4, 7])
    assert targets(prefix, anchors, 1).tolist() == [True, False, True]  # token 6 is a template; token 9 exists
    assert targets(prefix, anchors, 2).tolist() == [True, True, False]  # token 10 is past the end
    cfg = PPDTrainConfig(prompt_tokens=2, epts=1, decay=0.5)
    exact = torch.stack([logits[anchors + d].log_softmax(-1) for d in (1, 2)], dim=1)  # [R, m, V] = the teacher
    assert float(loss_for(exact, prefix, anchors, cfg)) == pytest.approx(0.0, abs=1e-6)
    uniform = torch.full((3, 2, 8), -np.log(8.0))
    hard = loss_for(uniform, prefix, anchors, dataclasses.replace(cfg, kd=False))
    assert float(hard) == pytest.approx((1 + 0.5) / 2 * np.log(8.0), rel=1e-6)


def test_ppd_stops_inside_the_context():
    """The last steps of a generation that fills the context cap the prompt nodes' depth (no position past it)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=H, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=40))
    model = model.eval().requires_grad_(False)
    prompt = list(range(1, 11))
    ar = autoregressive_generate(model, prompt, DecodeConfig(method="ar", max_new_tokens=30, stop_at_eos=False))
    rec = speculative_generate(model, ppd_drafter(model, size=12), prompt,
                               DecodeConfig(max_new_tokens=30, gamma=3, stop_at_eos=False), on_step=check_cache)
    assert rec.token_ids == ar.token_ids and len(rec.token_ids) == 30


def test_seeds_and_rules_are_checked():
    target = tiny_model(vocab_size=64, n_layers=2, hidden=H, seed=2)
    rec = speculative_generate(target, ppd_drafter(target), [1, 2, 3], DecodeConfig(max_new_tokens=5, seed=-3))
    assert len(rec.token_ids) == 5  # a negative seed works as before the drafter got its own stream
    with pytest.raises(ValueError, match="temperature 0"):
        DecodeConfig(acceptance="greedy", sampling=SamplingConfig(temperature=1.0))
    with pytest.raises(ValueError, match="cannot be resized"):
        PPDDrafter(ppd_drafter(target).tokens, ppd_drafter(target).config, target.lm_head,
                   tree=dynamic_tree(RANKS, 8, 3)).resized(10)


def test_the_data_dtype_is_checked_before_any_work():
    assert PPDTrainConfig(gen_dtype="bf16").gen_dtype == "bf16"  # the EAGLE draft's data, written as the engine decodes
    with pytest.raises(ValueError, match="gen_dtype must be one of"):
        PPDTrainConfig(gen_dtype="fp16")
