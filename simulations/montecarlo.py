"""Monte Carlo of the accept/reject process, and replay of recorded acceptance traces.

The closed forms of :mod:`simulations.speculative` assume every draft token is accepted
independently with the same probability α. This module simulates that process, and replays
recorded traces, so that the formulas can be checked and real runs compared with them:

- :func:`simulate_tokens_per_step`: i.i.d. α (or a per-position α_i), tokens per step.
- :func:`replay_outcomes`: a recorded stream of per-draft-token outcomes (1 accepted, 0
  rejected) cut into speculative steps for any γ, so one trace predicts τ(γ) for every γ.
- :func:`simulate_bursty_outcomes`: a correlated trace (easy and hard stretches) to replay.
- :func:`replay_probabilities`: a recorded stream of per-token acceptance probabilities
  min(1, p(x)/q(x)), turned into outcomes with explicit uniforms and replayed.
- :func:`alpha_by_position` / :func:`alpha_from_accept_lengths`: estimates of α from the
  accept lengths a real run records.
- :func:`estimate_speedup`, :func:`speedup_by_gamma`, :func:`empirical_optimal_gamma`.

A step yields (accepted drafts) + 1 tokens: the +1 is the target's residual token after a
rejection, or its bonus token when all γ drafts pass (slides Algorithm 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _checks
from .speculative import verification_cost


@dataclass(frozen=True)
class Estimate:
    """A Monte Carlo mean with its standard error (from the sample variance)."""

    mean: float
    sem: float  # standard error of the mean: sample std (ddof=1) / sqrt(n)
    n: int  # number of samples

    def agrees_with(self, value: float, n_sigma: float = 5.0) -> bool:
        """|mean − value| ≤ n_sigma standard errors (exact equality when the samples are constant)."""
        return abs(self.mean - value) <= n_sigma * self.sem + 1e-12 * max(1.0, abs(value))


def estimate_mean(samples) -> Estimate:
    """Sample mean and its standard error."""
    samples = _checks.as_float("samples", samples).ravel()
    if samples.size < 2:
        raise ValueError(f"samples must hold at least 2 values, got {samples.size}")
    sem = samples.std(ddof=1) / np.sqrt(samples.size)
    return Estimate(float(samples.mean()), float(sem), int(samples.size))


def simulate_tokens_per_step(alpha, gamma, n_steps, rng):
    """Tokens produced by each of ``n_steps`` independent speculative steps.

    Draft token i is accepted when u_i < α_i, u_i ~ U(0, 1), and the step stops at the first
    rejection (slides Algorithm 1, n = min{i − 1 | r_i > p_i/q_i} ∪ {γ}); the step yields n + 1
    tokens. Its mean checks :func:`simulations.expected_tokens` (slides §3.1).

    Args:
        alpha: scalar α in [0, 1] (i.i.d. acceptance), or 1-D array [≥ γ] of per-position
            conditional acceptance probabilities α_1, α_2, ...
        gamma: draft tokens per step, ≥ 0.
        n_steps: number of steps simulated, ≥ 1.
        rng: numpy Generator or int seed.

    Returns:
        int array [n_steps] with values in 1..γ+1.
    """
    alpha = _checks.probability("alpha", alpha)
    gamma = _checks.scalar_int("gamma", gamma, minimum=0)
    n_steps = _checks.scalar_int("n_steps", n_steps, minimum=1)
    rng = _checks.generator(rng)
    if alpha.ndim == 0:
        alpha = np.full(gamma, float(alpha))
    elif alpha.ndim == 1 and alpha.size >= gamma:
        alpha = alpha[:gamma]
    else:
        raise ValueError(f"alpha must be a scalar or a 1-D array of at least gamma = {gamma} "
                         f"per-position rates, got shape {alpha.shape}")
    accepted = rng.random((n_steps, gamma)) < alpha  # [S, γ]
    n_accepted = np.cumprod(accepted, axis=1).sum(axis=1)  # [S]: length of the accepted prefix
    return n_accepted + 1


def simulate_bursty_outcomes(alphas, switch_prob, n_tokens, rng):
    """A correlated outcome trace: acceptance alternates between "easy" and "hard" stretches.

    Not from a document: a two-state Markov chain (state 0 and 1, switching with probability
    ``switch_prob`` per token) whose state sets the acceptance probability, so that accepted
    tokens come in bursts as they do in real text (boilerplate, copied spans). The long-run
    acceptance rate is the mean of ``alphas``; replaying such a trace shows how far τ(γ) falls
    from the i.i.d. formula at that mean.

    Args:
        alphas: (α_easy, α_hard), two acceptance probabilities in [0, 1].
        switch_prob: probability of changing state after each token, in (0, 1].
        n_tokens: length of the trace, ≥ 1.
        rng: numpy Generator or int seed.

    Returns:
        bool array [n_tokens] of outcomes (True = accepted).
    """
    alphas = _checks.probability("alphas", alphas)
    if alphas.shape != (2,):
        raise ValueError(f"alphas must be two probabilities (easy, hard), got shape {alphas.shape}")
    switch_prob = float(_checks.probability("switch_prob", switch_prob))
    if switch_prob == 0.0:
        raise ValueError("switch_prob must be > 0, got 0.0")
    n_tokens = _checks.scalar_int("n_tokens", n_tokens, minimum=1)
    rng = _checks.generator(rng)
    first = rng.integers(2)  # start from the stationary law (uniform over the two states)
    switches = rng.random(n_tokens) < switch_prob  # [N]
    switches[0] = False
    state = (first + np.cumsum(switches)) % 2  # [N]
    return rng.random(n_tokens) < alphas[state]


def replay_outcomes(outcomes, gamma):
    """Cut a recorded stream of per-draft-token outcomes into speculative steps of draft length γ.

    Each step reads outcomes until it has seen γ acceptances (then the target adds its bonus
    token) or one rejection (then the target adds its residual token), and the next step starts
    at the following outcome. Under i.i.d. acceptance the steps are independent with the law of
    :func:`simulate_tokens_per_step`, so a single trace checks τ(γ) for every γ at once. An
    incomplete step at the end of the trace is dropped.

    Args:
        outcomes: 1-D array of 0/1 (or bool), 1 = draft token accepted, in decoding order.
        gamma: draft tokens per step, ≥ 1.

    Returns:
        int array [n_steps] of tokens produced per step, in order.
    """
    outcomes = _checks.as_float("outcomes", outcomes)
    if outcomes.ndim != 1:
        raise ValueError(f"outcomes must be a 1-D array, got shape {outcomes.shape}")
    if not np.isin(outcomes, (0.0, 1.0)).all():
        raise ValueError("outcomes must contain only 0 and 1")
    gamma = _checks.scalar_int("gamma", gamma, minimum=1)
    zeros = np.flatnonzero(outcomes == 0)  # positions of rejections
    runs = np.diff(np.concatenate([[-1], zeros])) - 1  # accepted outcomes before each rejection
    tail = outcomes.size - 1 - (zeros[-1] if zeros.size else -1)  # accepted after the last one
    full = runs // gamma  # steps with all γ drafts accepted, inside each run
    steps_per_run = full + 1  # ... then the step that ends at the rejection
    tokens = np.full(steps_per_run.sum() + tail // gamma, gamma + 1, dtype=np.int64)
    last = np.cumsum(steps_per_run) - 1  # index of the rejecting step of each run
    tokens[last] = runs % gamma + 1
    return tokens


def replay_probabilities(probabilities, gamma, rng):
    """Replay a stream of per-draft-token acceptance probabilities with fresh uniforms.

    A recorded speculative run can store, for each draft token, min(1, p(x)/q(x)) (slides
    Algorithm 1). Drawing u ~ U(0, 1) per token gives outcomes u < probability, which
    :func:`replay_outcomes` cuts into steps. Keeping the recorded order keeps any correlation
    between neighbouring tokens, which the i.i.d. formula ignores.

    Args:
        probabilities: 1-D array of acceptance probabilities in [0, 1], in decoding order.
        gamma: draft tokens per step, ≥ 1.
        rng: numpy Generator or int seed.
    """
    probabilities = _checks.probability("probabilities", probabilities)
    if probabilities.ndim != 1:
        raise ValueError(f"probabilities must be a 1-D array, got shape {probabilities.shape}")
    rng = _checks.generator(rng)
    outcomes = rng.random(probabilities.size) < probabilities
    return replay_outcomes(outcomes, gamma)


def _accept_lengths(accept_lengths, gamma):
    lengths = _checks.integer("accept_lengths", accept_lengths, minimum=0).ravel()
    gamma = _checks.scalar_int("gamma", gamma, minimum=1)
    if np.any(lengths > gamma):
        raise ValueError(f"accept_lengths must be <= gamma = {gamma}, got {lengths.max().item()}")
    return lengths, gamma


def alpha_from_accept_lengths(accept_lengths, gamma):
    """Maximum-likelihood i.i.d. α from the accepted-draft counts of steps run with draft length γ.

    Each step contributes n accepted trials and, when n < γ, one rejected trial, so
    α̂ = Σ n / (Σ n + #{n < γ}). Plug into :func:`simulations.expected_tokens` to compare a run
    with slides §3.1.

    Args:
        accept_lengths: accepted drafts per step (not counting the residual/bonus token), 0..γ.
        gamma: the draft length the run used.
    """
    lengths, gamma = _accept_lengths(accept_lengths, gamma)
    trials = lengths.sum() + np.count_nonzero(lengths < gamma)
    if trials == 0:
        raise ValueError("accept_lengths is empty")
    return float(lengths.sum() / trials)


def alpha_by_position(accept_lengths, gamma):
    """Per-position conditional acceptance rates α_i = P(draft i accepted | drafts 1..i−1 were).

    Estimated as #{n ≥ i} / #{n ≥ i − 1} from the accepted-draft counts n of a run with draft
    length γ; NaN where no step reached position i. Feed to
    :func:`simulations.expected_tokens_by_position` or :func:`simulate_tokens_per_step`.

    Returns:
        float array [γ].
    """
    lengths, gamma = _accept_lengths(accept_lengths, gamma)
    reached = np.array([np.count_nonzero(lengths >= i) for i in range(gamma + 1)])  # [γ+1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return reached[1:] / reached[:-1]


def estimate_speedup(tokens_per_step, gamma, c, beta=1.0) -> Estimate:
    """Monte Carlo speedup: mean tokens per step over the cost of a step, γc + β.

    Checks :func:`simulations.expected_speedup` (survey blog *Batch Size*). The cost of a step is
    fixed, so the standard error is that of the mean tokens divided by the cost.
    """
    gamma = _checks.scalar_int("gamma", gamma, minimum=0)
    c = float(_checks.nonnegative("c", c))
    beta = float(verification_cost(beta, gamma))  # a constant, or a measured BetaCurve read at γ+1
    tokens = estimate_mean(tokens_per_step)
    cost = gamma * c + beta
    return Estimate(tokens.mean / cost, tokens.sem / cost, tokens.n)


def speedup_by_gamma(outcomes, gammas, c, beta=1.0):
    """Replay one outcome trace at each γ in ``gammas``; speedup estimates [len(gammas)].

    Returns:
        (mean, sem): two float arrays [len(gammas)].
    """
    gammas = _checks.integer("gammas", gammas, minimum=1).ravel()
    estimates = [estimate_speedup(replay_outcomes(outcomes, g), g, c, beta) for g in gammas]
    return np.array([e.mean for e in estimates]), np.array([e.sem for e in estimates])


def empirical_optimal_gamma(outcomes, c, gamma_max, beta=1.0) -> int:
    """The γ in 1..gamma_max with the largest replayed speedup on a trace.

    The Monte Carlo counterpart of :func:`simulations.optimal_gamma` (slides §3.5, Fig. 3).
    Near the optimum neighbouring γ differ by little, so compare speedups, not γ, with care.
    """
    gamma_max = _checks.scalar_int("gamma_max", gamma_max, minimum=1)
    gammas = np.arange(1, gamma_max + 1)
    mean, _ = speedup_by_gamma(outcomes, gammas, c, beta)
    return int(gammas[np.argmax(mean)])
