"""Builders shared by several test files (no test file imports another): the tiny V = 8 models and the prompt of
the χ² loop tests, a LoadedModel around a tiny model, fake device profiles, random chains for the rule tests, and
the generic optimiser that is the reference for mentored decoding, and the token ids a tiny target's trainers frame
their data with. The statistics live in tests/stats.py."""
from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import minimize

from specrepro.metrics.profile import Latency, Profile, ProfileKey
from specrepro.engine.models import LoadedModel, tiny_model
from specrepro.core.warping import sample
from specrepro.training.data import ChatFormat, TaskOpenings
from specrepro.training.stems import TASK_KINDS

# --- the χ² loop tests' tiny world

V = 8
PROMPT = [1, 4, 6, 3, 1, 4]  # ends in "1 4", seen before, so prompt lookup has something to copy


def v8_model(seed: int = 3):
    """A one-layer random model over V = 8: seed 3 is the loop tests' target p; other seeds give drafts far from it,
    so rejections and residual draws are frequent."""
    return tiny_model(vocab_size=V, n_layers=1, hidden=16, seed=seed)


def loaded(model, name="tiny"):
    return LoadedModel(name=name, model=model, tokenizer=None)


# --- device profiles without measuring

def profile_key(**changes) -> ProfileKey:
    base = dict(device="cpu:test:avx512f", target="t", draft="d", dtype="fp32", threads=1, torch="2", transformers="5")
    return ProfileKey(**{**base, **changes})


def fake_profile(dtype: str, decode_ms: float, betas: dict[int, float], draft_ms: float | None = None) -> Profile:
    """A profile with given L_fp(1) and β(n) (n = 1 and the keys of ``betas``)."""
    forward = [(1, 1.0)] + sorted(betas.items())
    return Profile(key=profile_key(dtype=dtype), context_tokens=64, repeats=1,
                   forward=tuple((n, Latency(b * decode_ms / 1e3, b * decode_ms / 1e3, b * decode_ms / 1e3))
                                 for n, b in forward),
                   draft_decode=None if draft_ms is None else Latency(draft_ms / 1e3, draft_ms / 1e3, draft_ms / 1e3),
                   machine={})


# --- chains for the rule tests

def random_chain(gen, gamma, vocab):
    """Rows with some zeros; a q row sometimes equal to its p row (the degenerate residual), tokens from q."""
    def rows(n):
        x = torch.rand(n, vocab, generator=gen) * (torch.rand(n, vocab, generator=gen) > 0.3)
        x[:, 0] += 1e-3  # never an all-zero row
        return x / x.sum(-1, keepdim=True)
    p, q = rows(gamma + 1), rows(gamma)
    same = torch.rand(gamma, generator=gen) < 0.2
    q[same] = p[:gamma][same]
    u = torch.rand(2 * gamma + 1, generator=gen, dtype=torch.float64)
    tokens = torch.tensor([sample(q[i], u[gamma + 1 + i]) for i in range(gamma)])
    return p, q, tokens, u[: gamma + 1]


# --- mentored decoding's reference: a generic constrained optimiser (mentored blog 001)

def reference_kl(p, pi):
    """KL(p ‖ π) in numpy, 0 log 0 = 0."""
    pi = np.maximum(pi, 1e-300)
    return float(np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0) / pi), 0.0)))


def optimise_pi(p, q, bound):
    """A convex formulation: variables (π, a), maximise Σ a with a ≤ q, a ≤ π, π ∈ simplex, KL ≤ D.

    For a fixed π the best acceptance is Σ min(q, π) (r = min(1, π/q)), so this has the same optimum.
    Returns (acceptance, KL(p ‖ π), whether SLSQP converged).
    """
    v = p.size
    x0 = np.concatenate([p, np.minimum(p, q)])
    cons = [
        {"type": "ineq", "fun": lambda x: bound - reference_kl(p, np.maximum(x[:v], 1e-12)),
         "jac": lambda x: np.concatenate([np.where(p > 0, p / np.maximum(x[:v], 1e-12), 0.0), np.zeros(v)])},
        {"type": "eq", "fun": lambda x: x[:v].sum() - 1.0,
         "jac": lambda x: np.concatenate([np.ones(v), np.zeros(v)])},
        {"type": "ineq", "fun": lambda x: x[:v] - x[v:],
         "jac": lambda x: np.hstack([np.eye(v), -np.eye(v)])},
    ]
    out = minimize(lambda x: -x[v:].sum(), x0, jac=lambda x: np.concatenate([np.zeros(v), -np.ones(v)]),
                   bounds=[(0, 1)] * v + [(0, qi) for qi in q], constraints=cons, method="SLSQP",
                   options={"maxiter": 500, "ftol": 1e-13})
    pi = np.clip(out.x[:v], 0, None)
    pi = pi / pi.sum()
    return float(np.minimum(q, pi).sum()), reference_kl(p, pi), out.success


def check_cache(p_model, drafter, ids) -> None:
    """The loop's invariant after every step (``speculative_generate(..., on_step=check_cache)``): the target's cache
    is consistent, holds every committed token but the newest (not yet run through it), and no tree is left on it."""
    p_model.check()
    assert p_model.ids == ids[:-1] and p_model.tree is None


# --- benches on conftest's bench_pair and bench_table_path

def tiny_bench_config(table_path: str, **changes):
    """A bench (give ``methods``) on the tiny pair: 8 tokens, γ = 3, one repeat, two cost rounds, a 2-token warm-up."""
    from specrepro.run.variants import BenchConfig
    base = dict(target="tiny", draft="layers:1", prompts="test", max_new_tokens=8, gamma=3,
                repeats=1, ngram_table=table_path, warmup_tokens=2, cost_repeats=2)
    return BenchConfig(**{**base, **changes})


def run_tiny_bench(config, out, pair, prompts, **kw):
    """``run_bench`` of ``config`` into ``out`` on the tiny ``pair`` (target, draft) and ``prompts``, quietly."""
    from specrepro.run.bench import run_bench
    target, draft = pair
    return run_bench(config, out, target=target, draft=draft, prompts=prompts, progress=False, **kw)


# --- a tiny target's trainers: a tiny model has no tokenizer, so the chat template's and the task openings' token ids
# are given (what chat_format and task_openings read off a real tokenizer)

TINY_CHAT = ChatFormat((1, 5, 6), 2, (7, 8), (9, 6))
TINY_OPENINGS = TaskOpenings({k: ((20, 21), (22,)) for k in TASK_KINDS}, ((30, 31, 32),), ((40,), (41, 42)))


def tiny_framing(patch, trainer) -> None:
    """Make the ``trainer`` module (training.eagle, training.ppd, ...) frame its data with the ids above."""
    patch.setattr(trainer, "chat_format", lambda model: TINY_CHAT)
    patch.setattr(trainer, "task_openings", lambda tokenizer: TINY_OPENINGS)
