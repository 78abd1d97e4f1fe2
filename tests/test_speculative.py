"""The verification loop on tiny random models: exactness, caches, seeds, stopping, bad input."""
import numpy as np
import pytest
import torch
from scipy import stats

from specrepro import DecodeConfig, SamplingConfig, check_pair, generate_ids
from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.drafters import LMDrafter
from specrepro.engine.models import load_draft, tiny_model
from specrepro.decode.speculative import speculative_generate
from specrepro.core.warping import warp
from tests.helpers import loaded
from tests.stats import FALSE_ALARM

PROMPT = [1, 5, 3, 7, 2]


def spec(target, draft, config, eos=frozenset(), on_step=None, prompt=PROMPT):
    return speculative_generate(target, LMDrafter(draft), prompt, config, set(eos), on_step=on_step)


@pytest.mark.parametrize("gamma", [1, 2, 3, 5, 8])
def test_greedy_speculative_equals_autoregressive(tiny_pair_64, gamma):
    target, draft = tiny_pair_64
    for prompt in ([1, 2, 3], [9, 40, 41, 12, 5, 5, 60]):
        ar = autoregressive_generate(target, prompt, DecodeConfig(method="ar", max_new_tokens=40))
        sp = spec(target, draft, DecodeConfig(max_new_tokens=40, gamma=gamma), prompt=prompt)
        assert sp.token_ids == ar.token_ids


def test_greedy_with_self_draft_accepts_everything(tiny_pair_64):
    """q = p: every draft token is the target's argmax, so α = 1 and each call yields γ+1 tokens."""
    target, _ = tiny_pair_64
    sp = spec(target, target, DecodeConfig(max_new_tokens=25, gamma=4))
    assert sp.alpha == 1.0
    assert sp.target_calls == 5 and sp.accept_lengths == [4, 4, 4, 4, 4]


def test_autoregressive_greedy_matches_transformers_generate(tiny_pair_64):
    target, _ = tiny_pair_64
    ours = autoregressive_generate(target, PROMPT, DecodeConfig(method="ar", max_new_tokens=30))
    ref = target.generate(torch.tensor([PROMPT]), max_new_tokens=30, do_sample=False, min_new_tokens=30,
                          pad_token_id=0, eos_token_id=None)
    assert ours.token_ids == ref[0, len(PROMPT):].tolist()


def test_cache_length_tracks_committed_tokens_and_rollback_is_exact(tiny_pair_64):
    """After every step: the target caches every committed token but the newest; the draft caches a
    prefix of the committed tokens; and logits from the rolled-back cache equal a fresh full forward."""
    target, draft = tiny_pair_64
    steps = []

    def check(p_model, drafter, ids):
        p_model.check()
        drafter.lm.check()
        assert p_model.ids == ids[:-1] and p_model.cache_len == len(ids) - 1
        assert drafter.lm.ids == ids[: len(drafter.lm.ids)]
        cached = p_model.logits_for(ids)[-1]
        fresh = target(torch.tensor([ids])).logits[0, -1]
        torch.testing.assert_close(cached, fresh, atol=1e-4, rtol=1e-4)
        p_model.rollback(len(ids) - 1)
        steps.append(len(ids))

    for temperature in (0.0, 1.0):
        config = DecodeConfig(max_new_tokens=30, gamma=4, sampling=SamplingConfig(temperature=temperature))
        spec(target, draft, config, on_step=check)
    assert len(steps) > 10


def test_all_accepted_step_keeps_draft_cache_consistent(tiny_pair_64):
    """When all γ drafts are accepted the draft never ran x_γ; the next step must feed it and the bonus."""
    target, _ = tiny_pair_64
    seen = []
    spec(target, target, DecodeConfig(max_new_tokens=20, gamma=3),
         on_step=lambda p_model, drafter, ids: seen.append((len(drafter.lm.ids), len(ids))))
    assert all(cached == committed - 2 for cached, committed in seen)  # x_γ and the bonus still pending


def test_same_seed_same_output_different_seed_different_output(tiny_pair_64):
    target, draft = tiny_pair_64
    sampling = SamplingConfig(temperature=1.0)
    runs = {seed: spec(target, draft, DecodeConfig(max_new_tokens=30, gamma=3, sampling=sampling, seed=seed)).token_ids
            for seed in (0, 0, 1, 2)}
    again = spec(target, draft, DecodeConfig(max_new_tokens=30, gamma=3, sampling=sampling, seed=0)).token_ids
    assert runs[0] == again
    assert len({tuple(v) for v in runs.values()}) == 3
    ar = [autoregressive_generate(target, PROMPT, DecodeConfig(method="ar", max_new_tokens=30, sampling=sampling,
                                                               seed=s)).token_ids for s in (0, 0, 1)]
    assert ar[0] == ar[1] != ar[2]


@pytest.mark.parametrize("max_new", [1, 2, 3, 7, 10])
def test_never_overshoots_max_new_tokens(tiny_pair_64, max_new):
    target, _ = tiny_pair_64
    rec = spec(target, target, DecodeConfig(max_new_tokens=max_new, gamma=4))
    assert rec.new_tokens == max_new and rec.stop_reason == "max_new_tokens"


def test_stops_at_eos_inside_an_accepted_run(tiny_pair_64):
    target, _ = tiny_pair_64
    full = autoregressive_generate(target, PROMPT, DecodeConfig(method="ar", max_new_tokens=30)).token_ids
    eos = full[6]
    first = full.index(eos)
    rec = spec(target, target, DecodeConfig(max_new_tokens=30, gamma=4), eos={eos})
    assert rec.token_ids == full[: first + 1] and rec.stop_reason == "eos"


def exact_two_token_distribution(target, prompt, sampling):
    V = target.config.vocab_size
    with torch.no_grad():
        p1 = warp(target(torch.tensor([prompt])).logits[0, -1], sampling).double()
        rows = torch.stack([warp(target(torch.tensor([prompt + [a]])).logits[0, -1], sampling).double()
                            for a in range(V)])
    return (p1[:, None] * rows).flatten().numpy()  # [V*V], index a*V + b


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.7, top_k=6, top_p=0.9)])
def test_speculative_sampling_on_models_is_distributed_as_target(tiny_pair, sampling):
    """χ² over the 100 two-token continuations, 1500 runs with γ=2 (seed i for run i); cells expected
    fewer than 5 times are pooled into one, as the χ² approximation needs."""
    target, draft = tiny_pair
    V = target.config.vocab_size
    exact = exact_two_token_distribution(target, PROMPT, sampling)
    counts = np.zeros(V * V)
    for seed in range(1500):
        rec = spec(target, draft, DecodeConfig(max_new_tokens=2, gamma=2, sampling=sampling, seed=seed))
        a, b = rec.token_ids
        counts[a * V + b] += 1
    assert counts[exact == 0].sum() == 0
    support = exact > 0
    expected = exact[support] / exact.sum() * counts.sum()
    counts = counts[support]
    big = expected >= 5
    observed, expected = counts[big], expected[big]
    if (~big).any():
        observed = np.append(observed, counts[~big].sum())
        expected = np.append(expected, exact[support][~big].sum() / exact.sum() * counts.sum())
    assert stats.chisquare(observed, expected).pvalue > FALSE_ALARM


def test_bad_sampling_and_decode_arguments_are_named():
    for kwargs, word in [({"temperature": -0.1}, "temperature"), ({"top_p": 0.0}, "top_p"),
                         ({"top_p": 1.5}, "top_p"), ({"top_k": -1}, "top_k")]:
        with pytest.raises(ValueError, match=word):
            SamplingConfig(**kwargs)
    with pytest.raises(ValueError, match="gamma"):
        DecodeConfig(gamma=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        DecodeConfig(max_new_tokens=0)


def test_bad_prompts_are_named(tiny_pair_64):
    target, draft = tiny_pair_64
    with pytest.raises(ValueError, match="empty"):
        generate_ids(loaded(target), [], DecodeConfig(method="ar"))
    with pytest.raises(ValueError, match="context"):
        generate_ids(loaded(target), [1] * 500, DecodeConfig(method="ar", max_new_tokens=20))
    with pytest.raises(ValueError, match="batch size 2"):
        generate_ids(loaded(target), [[1, 2], [3, 4]], DecodeConfig(method="ar"))
    with pytest.raises(ValueError, match="unknown method"):
        generate_ids(loaded(target), [1, 2], DecodeConfig(method="nope"), draft=loaded(draft))
    with pytest.raises(ValueError, match="needs a draft"):
        generate_ids(loaded(target), [1, 2], DecodeConfig(method="speculative"))


def test_vocabulary_mismatch_is_one_clear_error():
    target = loaded(tiny_model(vocab_size=64, seed=0), "tiny-64")
    draft = loaded(tiny_model(vocab_size=32, seed=1), "tiny-32")
    with pytest.raises(ValueError, match=r"draft 'tiny-32' and target 'tiny-64' do not share a vocabulary"):
        check_pair(draft, target)


def test_self_draft_shares_weights_and_is_exact(tiny_pair_64):
    target, _ = tiny_pair_64
    t = loaded(target)
    draft = load_draft("layers:1", t)
    assert draft.model.model.layers[0] is target.model.layers[0]
    assert draft.model.lm_head.weight.data_ptr() == target.lm_head.weight.data_ptr()
    assert len(target.model.layers) == 2  # the target is untouched
    ar = autoregressive_generate(target, PROMPT, DecodeConfig(method="ar", max_new_tokens=20))
    sp = speculative_generate(target, LMDrafter(draft.model), PROMPT, DecodeConfig(max_new_tokens=20, gamma=3))
    assert sp.token_ids == ar.token_ids
    for bad in ("layers:0", "layers:2", "layers:x"):
        with pytest.raises(ValueError, match="layers"):
            load_draft(bad, t)


def test_record_fields(tiny_pair_64):
    target, draft = tiny_pair_64
    rec = spec(target, draft, DecodeConfig(max_new_tokens=12, gamma=3, seed=4))
    d = rec.to_dict()
    for key in ("method", "text", "token_ids", "new_tokens", "wall_time_s", "target_calls", "draft_calls",
                "accept_lengths", "time_draft_s", "time_target_s", "time_other_s", "config", "alpha"):
        assert key in d
    assert len(rec.accept_lengths) <= rec.target_calls
    assert sum(a + 1 for a in rec.accept_lengths) + (rec.target_calls - len(rec.accept_lengths)) >= rec.new_tokens
    assert d["config"]["gamma"] == 3 and d["config"]["seed"] == 4
    assert abs(rec.wall_time_s - rec.time_draft_s - rec.time_target_s - rec.time_other_s) < 1e-9


def test_drafter_and_rule_draw_from_separate_streams(tiny_pair_64):
    """Two drafters that consume different amounts of randomness meet the same acceptance uniforms at one seed:
    the rule's stream is the run's own, the drafter's another (decoding.draft_stream)."""
    from specrepro.acceptance import TREE_RULES
    from specrepro.core.decoding import draft_stream
    from specrepro.drafters import PromptLookupDrafter
    target, draft = tiny_pair_64
    seen = {}

    def recording(name):
        def rule(p, q, tokens, parents, uniforms):
            seen.setdefault(name, []).append(uniforms[:1].clone())
            return TREE_RULES["exact"](p, q, tokens, parents, uniforms)
        rule.__name__ = name
        return rule
    config = DecodeConfig(max_new_tokens=2, gamma=2, sampling=SamplingConfig(temperature=1.0), seed=7)
    speculative_generate(target, LMDrafter(draft), PROMPT, config, rule=recording("sampling draft"))
    speculative_generate(target, PromptLookupDrafter(), PROMPT, config, rule=recording("another draft"))  # draws none
    assert torch.equal(seen["sampling draft"][0], seen["another draft"][0])
    assert draft_stream(7) == draft_stream(7) != draft_stream(8) and draft_stream(7) != 7
