"""Mentored decoding as a tree rule (blog 001; ``specrepro.acceptance.mentored``).

The torch solver against the numpy reference ``simulations.mentored.solve`` in all three regimes, and against a
closed form where the reference misses an infinity; D = 0 is speculative sampling (same verdicts, χ²); for D > 0
the one-token law π = q∘r + (1 − A)s meets KL(p ‖ π) ≤ D with the optimal acceptance (a generic optimiser);
the rule samples π (χ², with power checks both ways), and so does the whole loop on tiny models at T = 1; bad input.

χ² tests reject at FALSE_ALARM = 1e-3 with fixed seeds, as in acceptance/test_tree; each has a power check: the
same counts tested against the other law (p for D > 0, π for D = 0) fail it.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from simulations import mentored as reference
from specrepro.acceptance import speculative_sampling
from specrepro.acceptance.mentored import MENTORED_RULE, MentoredParams, mentored, solve_rows
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.drafters.lm import LMDrafter
from specrepro.decode.speculative import speculative_generate
from specrepro.core.tree import chain_parents
from specrepro.core.warping import sample, warp
from tests.helpers import PROMPT, V, optimise_pi, random_chain, v8_model
from tests.stats import FALSE_ALARM, RUNS, chi2_pvalue, exact_first_two

pytestmark = pytest.mark.usefixtures("one_thread")


def random_rows(rng, rows, vocab, zeros=False):
    """[rows, vocab] target and draft rows; with ``zeros``, token 0 has p = 0 (m0 > 0) and token 1 has q = 0."""
    p, q = rng.dirichlet(np.full(vocab, 0.7), size=rows), rng.dirichlet(np.full(vocab, 0.7), size=rows)
    if zeros:
        p[:, 0], q[:, 1 % vocab] = 0.0, 0.0
        p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)
    return p, q


def one_token_law(p: torch.Tensor, q: torch.Tensor, bound: float) -> torch.Tensor:
    """π = q∘r + (1 − A)s [R, V]: the law of the token one verified position emits, exactly."""
    r, s, a = solve_rows(p, q, bound)[:3]
    return q.double() / q.double().sum(-1, keepdim=True) * r + (1 - a)[:, None] * s


def kl(p: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:  # [R, V] each -> [R]
    p = p.double()
    return torch.where(p > 0, p * (p.log() - pi.log()), 0.0).sum(-1)


# --- the solver

def test_solver_matches_the_numpy_reference_in_every_regime():
    rng, regimes, worst = np.random.default_rng(0), set(), 0.0
    for vocab in (2, 5, 17, 300):
        for zeros in (False, True):
            for bound in (0.0, 1e-9, 1e-3, 0.03, 0.3, 3.0):
                p, q = random_rows(rng, 8, vocab, zeros)
                ref = reference.solve(p, q, bound)
                sol = solve_rows(torch.tensor(p), torch.tensor(q), bound)
                r, s, a = (x.numpy() for x in sol[:3])
                assert np.abs(sol.pi.numpy() - ref.pi).max() < 1e-6  # the same π as the twin's
                rest = (1 - ref.accept_prob)[:, None]  # the residual only matters with the probability of a rejection
                errors = (np.abs(a - ref.accept_prob), np.abs(np.where(q > 0, r - ref.accept, 0.0)),
                          np.abs(rest * (s - ref.residual)), np.abs(np.where(rest > 1e-6, s - ref.residual, 0.0)))
                worst = max(worst, *(float(e.max()) for e in errors))
                regimes |= set(ref.regime.tolist())
    assert worst < 1e-6
    assert regimes == {reference.CLIPPED, reference.TARGET_ZERO, reference.ACCEPT_ALL}


def test_a_draft_zero_under_target_mass_keeps_the_bound():
    """q = 0 < p with all of q on p's support: the KL at lo = 0 is infinite (the reference takes it as finite and
    returns π = q). Closed form for p = (½, ½), q = (0, 1): π = (1 − A, A) with A(1 − A) = e^{−2D}/4."""
    for bound in (1e-4, 0.01, 0.1, 0.5, 2.0):
        r, s, a = solve_rows(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.0, 1.0]]), bound)[:3]
        assert float(a) == pytest.approx((1 + math.sqrt(1 - math.exp(-2 * bound))) / 2, abs=1e-9)
    rng = np.random.default_rng(5)
    for seed in range(4):
        p, q = random_rows(rng, 1, 4 + seed)
        q[0, 0] = 0.0
        q /= q.sum()
        for bound in (0.01, 0.1, 0.5):
            pi = one_token_law(torch.tensor(p), torch.tensor(q), bound)
            assert float(kl(torch.tensor(p), pi)) <= bound + 1e-9
            a_opt, kl_opt, ok = optimise_pi(p[0], q[0], bound)
            if ok and kl_opt <= bound + 1e-9:
                assert float(solve_rows(torch.tensor(p), torch.tensor(q), bound).accept_prob) == pytest.approx(
                    a_opt, abs=1e-6)


def test_a_vocabulary_sized_row_keeps_its_bound_at_a_large_d():
    """A 49,152-token row whose draft covers 8,192 tokens (a reduced-vocabulary draft) and puts mass where the target
    has almost none (ρ up to 1e11): the upper clip's level is then ~1e9, and the mass above it must be summed from the
    top, not taken as 1 − a prefix sum (that left π 4e-6 off summing to 1 and over its bound by as much, at D = 3 on
    the offline pair's rows). π keeps the bound to rounding, and the numpy twin agrees."""
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(3 * torch.randn(49152, generator=gen, dtype=torch.float64), 0)
    q = torch.zeros(49152, dtype=torch.float64)
    q[:8192] = torch.softmax(3 * torch.randn(8192, generator=gen, dtype=torch.float64), 0)
    p[:8] = 1e-13  # target-improbable tokens the draft likes
    q[:8] += 0.01
    p, q = p / p.sum(), q / q.sum()
    for bound in (0.5, 1.0, 3.0, 5.0):
        sol = solve_rows(p[None], q[None], bound)
        assert float(kl(p[None], sol.pi)) <= bound + 1e-10
        assert float(sol.pi.sum()) == pytest.approx(1.0, abs=1e-12)
        twin = reference.solve(p[None].numpy(), q[None].numpy(), bound)
        assert float(sol.accept_prob) == pytest.approx(float(twin.accept_prob[0]), abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_one_token_law_meets_the_bound_with_the_optimal_acceptance(seed):
    rng = np.random.default_rng(10 + seed)
    p_np, q_np = random_rows(rng, 1, 3 + seed, zeros=seed % 2 == 1)
    p, q = torch.tensor(p_np), torch.tensor(q_np)
    kl_pq = float(kl(p, q))  # ∞ with zeros: q = 0 < p at token 1
    previous = 0.0
    for bound in (0.0, 0.005, 0.03, 0.1, 0.3) + ((kl_pq * 1.01,) if math.isfinite(kl_pq) else ()):
        r, s, a = solve_rows(p, q, bound)[:3]
        pi = one_token_law(p, q, bound)
        assert bool((pi >= 0).all()) and float(pi.sum()) == pytest.approx(1.0, abs=1e-12)
        assert float(kl(p, pi)) <= bound + 1e-9
        assert float(a) == pytest.approx(float(torch.minimum(q, pi).sum()), abs=1e-12)  # r = min(1, π/q)
        assert float(a) >= previous - 1e-12  # more room, more acceptance
        previous = float(a)
        if bound == 0.0:
            assert float(a) == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-12)
        elif bound >= kl_pq:
            assert float(a) == pytest.approx(1.0, abs=1e-12)
        else:
            a_opt, kl_opt, ok = optimise_pi(p_np[0], q_np[0], bound)
            if ok and kl_opt <= bound + 1e-9:
                assert float(a) == pytest.approx(a_opt, abs=1e-6)


# --- D = 0 is speculative sampling

def test_zero_bound_gives_speculative_samplings_verdicts():
    gen = torch.Generator().manual_seed(0)
    for _ in range(400):
        gamma, vocab = int(torch.randint(1, 6, (1,), generator=gen)), int(torch.randint(2, 7, (1,), generator=gen))
        p, q, tokens, u = random_chain(gen, gamma, vocab)
        n, t = speculative_sampling(p, q, tokens, u)
        assert mentored(p, q, tokens, chain_parents(gamma), u, MentoredParams(kl_bound=0.0)) == (list(range(n)), t)
        r, s, _ = solve_rows(p[:gamma], q, 0.0)[:3]
        p_d, q_d = p[:gamma].double(), q.double()
        drafted = q_d > 0  # r of a token q never drafts is a convention
        torch.testing.assert_close(r[drafted], (p_d / q_d)[drafted].clamp_max(1.0), rtol=0, atol=0)
        leftover = (p_d - q_d).clamp_min(0.0)
        expected = torch.where(leftover.sum(-1, keepdim=True) > 0, leftover, p_d)
        torch.testing.assert_close(s, expected / expected.sum(-1, keepdim=True), rtol=0, atol=1e-15)


# --- the rule

P5 = torch.tensor([0.30, 0.05, 0.35, 0.10, 0.20])
Q5 = torch.tensor([0.10, 0.40, 0.10, 0.30, 0.10])


def test_the_rule_keeps_a_draft_exactly_when_u_is_below_r():
    r, s, _ = solve_rows(P5[None], Q5[None], 0.1)[:3]
    p, q, parents = torch.stack([P5, P5]), Q5[None], chain_parents(1)
    for x in range(5):
        r_x = float(r[0, x])
        below = torch.tensor([r_x * (1 - 1e-9), 0.37], dtype=torch.float64)
        assert mentored(p, q, torch.tensor([x]), parents, below, MentoredParams(0.1)) == ([0], sample(P5, 0.37))
        if r_x < 1:
            above = torch.tensor([r_x * (1 + 1e-9), 0.37], dtype=torch.float64)
            assert mentored(p, q, torch.tensor([x]), parents, above, MentoredParams(0.1)) == ([], sample(s[0], 0.37))
    assert float(r[0, 1]) < 1 and float(r[0, 1]) > float(P5[1] / Q5[1])  # D > 0 keeps token 1 more often


def one_token_counts(bound: float, trials: int, seed: int) -> np.ndarray:
    """First emitted token of one-draft chains through the rule, the draft drawn from Q5."""
    gen, rule = torch.Generator().manual_seed(seed), MENTORED_RULE.with_params(kl_bound=bound)
    p, q, parents, counts = torch.stack([P5, P5]), Q5[None], chain_parents(1), np.zeros(5, dtype=np.int64)
    for _ in range(trials):
        u = torch.rand(3, generator=gen, dtype=torch.float64)
        tokens = torch.tensor([sample(Q5, u[2])])
        counts[rule(p, q, tokens, parents, u[:2]).emitted(tokens)[0]] += 1
    return counts


def test_the_rule_samples_its_one_token_law_chi2():
    pi = one_token_law(P5[None], Q5[None], 0.1)[0].numpy()
    p = P5.double().numpy()
    assert np.abs(pi - p).sum() / 2 > 0.1  # D = 0.1 moves a tenth of the mass: detectable with these trials
    lossy, exact = one_token_counts(0.1, 2000, seed=1), one_token_counts(0.0, 2000, seed=2)
    assert chi2_pvalue(lossy, pi) > FALSE_ALARM and chi2_pvalue(exact, p) > FALSE_ALARM
    assert chi2_pvalue(lossy, p) < FALSE_ALARM and chi2_pvalue(exact, pi) < FALSE_ALARM  # power, both ways


# --- through the loop



@pytest.fixture(scope="module")
def pair():
    """Target and draft over V = 8, far apart (drafters/test_lm_tree's small pair)."""
    return v8_model(), v8_model(11)


def mentored_first_two(target, draft, bound: float, sampling: SamplingConfig) -> np.ndarray:
    """π(x1) π(x2 | x1) [V, V]: each position's one-token law, whether it was kept, recovered or drafted anew."""
    with torch.inference_mode():
        batch = torch.tensor([PROMPT + [x] for x in range(V)])  # [V, T+1]
        rows = {}
        for name, model in (("p", target), ("q", draft)):
            first = warp(model(input_ids=torch.tensor([PROMPT])).logits[0, -1], sampling)  # [V]
            rows[name] = first, warp(model(input_ids=batch).logits[:, -1], sampling)  # [V], [V, V]
    pi1 = one_token_law(rows["p"][0][None], rows["q"][0][None], bound)[0]  # [V]
    pi2 = one_token_law(rows["p"][1], rows["q"][1], bound)  # [V, V]
    joint = (pi1[:, None] * pi2).numpy()
    return joint / joint.sum()


def first_two_through_the_loop(target, draft, bound: float, sampling: SamplingConfig):
    def check_cache(p_model, drafter, ids):
        p_model.check()
        assert p_model.ids == ids[:-1]

    counts, accepted, rule = np.zeros((V, V), dtype=np.int64), 0, MENTORED_RULE.with_params(kl_bound=bound)
    for seed in range(RUNS):
        cfg = DecodeConfig(max_new_tokens=3, gamma=2, sampling=sampling, seed=seed, stop_at_eos=False)
        rec = speculative_generate(target, LMDrafter(draft), PROMPT, cfg, rule=rule, on_step=check_cache)
        counts[rec.token_ids[0], rec.token_ids[1]] += 1
        accepted += sum(rec.accept_lengths)
    assert rec.provenance["acceptance"] == {"name": "mentored", "lossless": False, "params": {"kl_bound": bound}}
    return counts, accepted


def test_mentored_through_the_loop_at_t1_chi2(pair):
    target, draft = pair
    sampling = SamplingConfig(temperature=1.0)
    exact_law, lossy_law = exact_first_two(target, PROMPT, sampling), mentored_first_two(target, draft, 0.3, sampling)
    assert np.abs(exact_law - lossy_law).sum() / 2 > 0.1
    exact, accepted_exact = first_two_through_the_loop(target, draft, 0.0, sampling)
    lossy, accepted_lossy = first_two_through_the_loop(target, draft, 0.3, sampling)
    assert chi2_pvalue(exact, exact_law) > FALSE_ALARM and chi2_pvalue(lossy, lossy_law) > FALSE_ALARM
    assert chi2_pvalue(lossy, exact_law) < FALSE_ALARM and chi2_pvalue(exact, lossy_law) < FALSE_ALARM  # power
    assert accepted_lossy > accepted_exact


# --- labels and bad input

def test_the_rule_is_labelled_lossy():
    assert MENTORED_RULE.name == "mentored" and MENTORED_RULE.lossless is False
    assert MENTORED_RULE.describe() == {"name": "mentored", "lossless": False, "params": {"kl_bound": 0.1}}
    assert "LOSSY" in mentored.__doc__ and "lossless at D = 0" in mentored.__doc__
    with pytest.raises(dataclasses.FrozenInstanceError):
        MentoredParams().kl_bound = 0.2


def test_bad_input_gets_one_clear_error():
    for bad in (-0.1, math.inf, math.nan, "0.1", True):
        with pytest.raises(ValueError, match="kl_bound"):
            MentoredParams(kl_bound=bad)
    p, q = torch.stack([P5, P5, P5]), torch.stack([Q5, Q5])
    u = torch.full((3,), 0.5, dtype=torch.float64)
    with pytest.raises(ValueError, match="one draft chain"):
        mentored(p, q, torch.tensor([1, 3]), torch.tensor([-1, -1]), u)
    with pytest.raises(ValueError, match="expected N\\+1 = 3 uniforms"):
        mentored(p, q, torch.tensor([1, 3]), chain_parents(2), u[:2])
    assert mentored(p[:1], q[:0], torch.tensor([], dtype=torch.long), chain_parents(0), u[:1]) == ([], sample(P5, 0.5))
    with pytest.raises(ValueError, match="expected p \\[R, V\\] and q \\[R, V\\]"):
        solve_rows(P5[None], Q5[None, :4], 0.1)
    with pytest.raises(ValueError, match="non-negative"):
        solve_rows(P5[None], -Q5[None], 0.1)
    for bad in (-1e-3, math.nan):
        with pytest.raises(ValueError, match="bound D"):
            solve_rows(P5[None], Q5[None], bad)
    with pytest.raises(ValueError, match="bound D"):
        solve_rows(P5[None], Q5[None], torch.tensor([0.1, 0.2]))
