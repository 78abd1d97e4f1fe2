"""Exactness of the acceptance rules on hand-made distributions (V <= 10), by χ² tests.

Each χ² test uses a fixed seed and rejects at tests/stats.py's false-alarm rate FALSE_ALARM: were the rule
exact, a fresh seed would fail such a test with probability 1e-3. A companion test shows the same
check catches a subtly wrong rule, so the tests can fail.
"""
import numpy as np
import pytest
import torch

from specrepro.acceptance import greedy_match, speculative_sampling
from specrepro.core.warping import sample
from tests.stats import FALSE_ALARM, chi2_pvalue

N = 20_000


def _dist(*xs):
    t = torch.tensor(xs, dtype=torch.float64)
    return (t / t.sum()).float()


V = 6
CASES = {
    "p_equals_q": (_dist(1, 2, 3, 4, 0, 2), _dist(1, 2, 3, 4, 0, 2)),
    "disjoint_supports": (_dist(1, 1, 2, 0, 0, 0), _dist(0, 0, 0, 3, 1, 1)),
    "one_hot_q": (_dist(3, 1, 1, 2, 2, 1), _dist(0, 0, 1, 0, 0, 0)),
    "q_zero_where_p_positive": (_dist(2, 2, 2, 1, 1, 1), _dist(5, 3, 0, 0, 2, 0)),
    "near_uniform_p_peaked_q": (_dist(10, 11, 9, 10, 10, 11), _dist(90, 2, 2, 2, 2, 2)),
}


def conditional(p: torch.Tensor, shift: int) -> torch.Tensor:
    """A second-position distribution that depends on the first token: p rolled by the token id."""
    return torch.roll(p, shifts=shift)


def one_token(rule, p1, q1, p2, gen) -> int:
    """First emitted token of a γ=1 step: draft x ~ q1, target p1 at x's position, p2 after x."""
    u = torch.rand(3, generator=gen, dtype=torch.float64)
    x = sample(q1, u[0])
    n, t = rule(torch.stack([p1, p2]), q1[None], torch.tensor([x]), u[1:])
    return x if n == 1 else t


def two_tokens(rule, p, q, gen) -> tuple[int, int]:
    """A two-step miniature of the verification loop with γ = 2 and context-dependent p and q.

    p(a, b) = p(a) · roll(p, a)(b); the draft is q(a) · roll(q, a)(b). When the first step emits fewer
    than two tokens, a second γ=1 step draws the next one.
    """
    u = torch.rand(5, generator=gen, dtype=torch.float64)
    x1 = sample(q, u[0])
    x2 = sample(conditional(q, x1), u[1])
    p_rows = torch.stack([p, conditional(p, x1), conditional(p, x1 + x2)])  # third row: bonus position
    q_rows = torch.stack([q, conditional(q, x1)])
    n, t = rule(p_rows, q_rows, torch.tensor([x1, x2]), u[2:])
    if n >= 1:
        return x1, (x2 if n == 2 else t)
    return t, one_token(rule, conditional(p, t), conditional(q, t), p, gen)


@pytest.mark.parametrize("case", sorted(CASES))
def test_first_token_is_distributed_as_p(case):
    p, q = CASES[case]
    gen = torch.Generator().manual_seed(1234)
    counts = np.bincount([one_token(speculative_sampling, p, q, p, gen) for _ in range(N)], minlength=V)
    assert counts[p.numpy() == 0].sum() == 0, "a token with p = 0 was emitted"
    assert chi2_pvalue(counts, p.double().numpy(), pool_below=None) > FALSE_ALARM


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_token_sequences_are_distributed_as_p(case):
    p, q = CASES[case]
    gen = torch.Generator().manual_seed(99)
    pairs = [two_tokens(speculative_sampling, p, q, gen) for _ in range(N // 2)]
    counts = np.bincount([a * V + b for a, b in pairs], minlength=V * V)
    exact = np.array([float(p[a]) * float(conditional(p, a)[b]) for a in range(V) for b in range(V)])
    assert counts[exact == 0].sum() == 0
    assert chi2_pvalue(counts, exact, pool_below=None) > FALSE_ALARM


def test_chi2_check_catches_a_wrong_rule():
    """Resampling from p (not the residual) after a rejection is a classic bug: it over-weights tokens
    where q > p. The same test must reject it."""

    def wrong_rule(p, q, draft, u):
        n, _ = speculative_sampling(p, q, draft, u)
        return n, sample(p[n], u[-1])

    p, q = CASES["near_uniform_p_peaked_q"]
    gen = torch.Generator().manual_seed(1234)
    counts = np.bincount([one_token(wrong_rule, p, q, p, gen) for _ in range(N)], minlength=V)
    assert chi2_pvalue(counts, p.double().numpy(), pool_below=None) < FALSE_ALARM


def test_acceptance_probability_is_one_minus_tvd():
    """P(accept) = Σ min(p, q) = 1 − TVD(p, q) (survey blog, Analysis)."""
    p, q = CASES["q_zero_where_p_positive"]
    gen = torch.Generator().manual_seed(5)
    accepted = 0
    for _ in range(N):
        u = torch.rand(3, generator=gen, dtype=torch.float64)
        x = sample(q, u[0])
        n, _ = speculative_sampling(torch.stack([p, p]), q[None], torch.tensor([x]), u[1:])
        accepted += n
    alpha = float(torch.minimum(p, q).sum())
    se = (alpha * (1 - alpha) / N) ** 0.5
    assert abs(accepted / N - alpha) < 5 * se


def test_all_accepted_gives_bonus_from_last_row():
    p = torch.stack([_dist(0, 1, 0), _dist(0, 0, 1), _dist(1, 0, 0)])  # [γ+1=3, V=3]
    q = torch.stack([_dist(0, 1, 0), _dist(0, 0, 1)])
    n, t = speculative_sampling(p, q, torch.tensor([1, 2]), torch.full((3,), 0.5, dtype=torch.float64))
    assert (n, t) == (2, 0)


def test_rejection_never_accepts_zero_probability_token_even_at_u_zero():
    p = torch.stack([_dist(1, 0, 0), _dist(1, 0, 0)])
    q = _dist(0, 1, 0)[None]
    n, t = speculative_sampling(p, q, torch.tensor([1]), torch.zeros(2, dtype=torch.float64))
    assert (n, t) == (0, 0)


def test_greedy_match_equals_speculative_sampling_on_one_hot_p():
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        gamma = int(torch.randint(1, 5, (1,), generator=gen))
        target = torch.randint(0, 4, (gamma + 1,), generator=gen)
        draft = torch.randint(0, 4, (gamma,), generator=gen)
        p = torch.nn.functional.one_hot(target, 4).float()
        q = torch.nn.functional.one_hot(draft, 4).float()
        u = torch.rand(gamma + 1, generator=gen, dtype=torch.float64)
        assert greedy_match(p, q, draft, u) == speculative_sampling(p, q, draft, u)


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="expected p"):
        speculative_sampling(torch.ones(2, 3) / 3, torch.ones(2, 3) / 3, torch.tensor([0, 1]), torch.rand(3))
    with pytest.raises(ValueError, match="uniforms"):
        speculative_sampling(torch.ones(2, 3) / 3, torch.ones(1, 3) / 3, torch.tensor([0]), torch.rand(1))
