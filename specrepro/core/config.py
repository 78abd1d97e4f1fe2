"""Typed configuration: frozen dataclasses, validated on construction and serialised with every result.

Notation (fixed across the package): p = target model, q = draft model, γ (``gamma``) = draft tokens
per step, α = acceptance rate, c = draft/target cost ratio, β = cost of verifying γ+1 tokens relative
to decoding one.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable


# the names of specrepro.training.losses.DIVERGENCES (DistillSpec's losses), for the online draft's updates
ONLINE_DIVERGENCES = ("fkl", "rkl", "jsd", "tvd")
# what an online update trains on (training.online.OnlineConfig.examples)
ONLINE_EXAMPLES = ("steps", "sequences")


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become a distribution; applied identically to p and q (slides §2.2)."""

    temperature: float = 0.0  # 0 means exact argmax (a one-hot distribution), never a division by 0
    top_k: int = 0  # keep the k most likely tokens; 0 disables
    top_p: float = 1.0  # nucleus: keep the smallest set with mass >= top_p; 1 disables

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 disables it), got {self.top_k!r}")
        if not (isinstance(self.top_p, (int, float)) and 0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


# Named warpings. "mjsd": the MJSD paper's Appendix D, applied to p and q alike: keep the top 20 tokens, then the
# smallest set with mass >= 0.9, at temperature 1. Its "greedy decoding" baseline is AR *sampling* from this.
PRESETS: dict[str, SamplingConfig] = {}


def param(default, help: str, *, label: str | None = None, check: Callable[[str, Any], None] | None = None,
          choices: tuple[str, ...] | None = None):
    """A method parameter: a dataclass field with its help text (the command-line flag's, derived), its bench label
    prefix (``mjsd:b4:tau0.5``: "b", "tau"), a ``check(name, value)`` that raises one clear ValueError, and the
    choices of a string parameter."""
    if choices is not None and check is None:
        check = one_of(choices)
    return dataclasses.field(default=default, metadata={"help": help, "label": label, "check": check,
                                                         "choices": choices})


def whole(low: int = 1) -> Callable[[str, Any], None]:
    def check(name: str, value) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return check


def number(low: float = -math.inf, high: float = math.inf, *, above: bool = False) -> Callable[[str, Any], None]:
    """A finite number in [low, high] (in (low, high] when ``above``)."""
    def check(name: str, value) -> None:
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
              and (value > low if above else value >= low) and value <= high)
        if not ok:
            where = f"{'(' if above else '['}{low:g}, {high:g}]" if math.isfinite(high) else (
                f"{'>' if above else '>='} {low:g}")
            raise ValueError(f"{name} must be a finite number {'in ' if math.isfinite(high) else ''}{where}, "
                             f"got {value!r}")
    return check


def one_of(choices: tuple[str, ...]) -> Callable[[str, Any], None]:
    def check(name: str, value) -> None:
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return check


@dataclass(frozen=True)
class MethodParams:
    """The base of every method's own parameters (``specrepro/methods/<method>.py`` declares its subclass, each field
    with ``param``): frozen, validated on construction, serialised with every record. A method without parameters
    uses this empty class."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.metadata.get("check") is not None:
                f.metadata["check"](f.name, getattr(self, f.name))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DecodeConfig:
    """One generation: which method, how many tokens, the sampling rule and the seed."""

    method: str = "speculative"  # a registered method's name (``specrepro.methods``): the record keeps the name
    max_new_tokens: int = 64  # hard cap; a step that accepts several tokens never overshoots it
    gamma: int | str = 4  # γ, draft tokens per target call (ignored by "ar"); "auto": chosen each step (adaptive.py)
    sampling: SamplingConfig = SamplingConfig()
    tree_size: int | None = None  # nodes of a drafter's token tree (Medusa, PPD); None: the drafter's default
    # acceptance rule of the verification loop (a name of ``acceptance.TREE_RULES``): "exact" (lossless at any T), "greedy"
    # (T = 0 only) or "typical" (Medusa's typical acceptance: LOSSY, never a default)
    acceptance: str = "exact"
    seed: int = 0  # seeds the torch.Generator that supplies every uniform the decoder draws
    stop_at_eos: bool = True
    # the method's own parameters (an instance of its ``Method.params`` class); None: its defaults, filled in by
    # ``Method.resolve`` before a run, so every record names the values used
    params: MethodParams | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if self.gamma != "auto" and (not isinstance(self.gamma, int) or isinstance(self.gamma, bool) or self.gamma < 1):
            raise ValueError(f"gamma (draft tokens per step) must be an integer >= 1 or 'auto', got {self.gamma!r}")
        if self.tree_size is not None and (not isinstance(self.tree_size, int) or self.tree_size < 1):
            raise ValueError(f"tree_size must be an integer >= 1 (nodes of the draft tree), got {self.tree_size!r}")
        if not isinstance(self.acceptance, str):  # the name is checked against the rule table by Method.resolve
            raise ValueError(f"acceptance must be a rule's name, got {self.acceptance!r}")
        if self.params is not None and not isinstance(self.params, MethodParams):
            raise ValueError(f"params must be a method's parameters (Method.params(...)), got {self.params!r}")
        if self.acceptance == "greedy" and not self.sampling.greedy:
            raise ValueError(f"acceptance 'greedy' keeps the target's argmax, exact only at temperature 0 (got "
                             f"{self.sampling.temperature}); use 'exact' to sample")
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


PRESETS["mjsd"] = SamplingConfig(temperature=1.0, top_k=20, top_p=0.9)
