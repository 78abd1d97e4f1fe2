"""Methods as data: one registry that generate, the command line and the bench all read.

A method is a frozen ``Method``: which loop runs it, what it needs, how its drafter is built, how it spends time
(for the device profile's choices), its token-tree sizing, and, for transformers' baselines, which of our methods
it must reproduce at T = 0. Adding a method is one entry here (plus its drafter or rule in its own file).

    loop          "ar"            one target forward per token (``autoregressive.py``)
                  "mjgd"          K tokens per step by beam search with the target (``mjgd.py``, MJSD paper §3.1)
                  "speculative"   the one verification loop (``speculative.py``) with the method's drafter
                  "transformers"  ``model.generate`` (``hf_baselines.py``), a baseline measured beside ours
    rule          the acceptance rule a speculative method verifies with when it has its own (SpecTr, MJSD, BiLD);
                  None: the config's ``acceptance`` (exact by default)
    kind          "plain" | "draft model" (c > 0) | "model-free" (c = 0) | "self-drafting" (the target's own
                  forward drafts a token tree whose size the device decides: Medusa heads, PPD prompt tokens)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .config import DecodeConfig
from .drafters import Drafter, LMDrafter, NGramDrafter, NGramTable, PromptLookupDrafter

LOOPS = ("ar", "mjgd", "speculative", "transformers")
KINDS = ("plain", "draft model", "model-free", "self-drafting")

# (draft, target LoadedModel | None, DecodeConfig | None) -> Drafter
Builder = Callable[[Any, Any, "DecodeConfig | None"], Drafter]


@dataclass(frozen=True)
class Method:
    """A decoding method as data; ``describe()`` is what every record's provenance stores about it."""

    loop: str  # one of LOOPS
    kind: str  # one of KINDS: how it spends time, for the device profile's dtype and γ choices
    needs: str | None = None  # what ``draft`` must be: "draft model", "n-gram table", a key of models.SELF_DRAFTS
    build: Builder | None = None  # the drafter of a "speculative" loop method
    # (weights config, device profile, γ) -> tree.TreeSize: the hardware-aware tree size of token-tree drafters
    choose_tree_size: Callable[[Any, Any, int | str], Any] | None = None
    # (draft name or folder | None, target name) -> the self-drafting weights' config (rank probabilities), read
    # without building a drafter: what --dtype auto weighs a tree method's speed with
    tree_config: Callable[[Any, str], Any] | None = None
    counterpart: str | None = None  # a transformers baseline: our method it must reproduce token for token at T = 0
    rule: str | None = None  # the method's own acceptance rule (acceptance.TREE_RULES); None: config.acceptance
    # (γ, MethodParams) -> draft nodes one step scores at most, when not γ (m chains of γ for multi-draft methods)
    nodes: Callable[[int, Any], int] | None = None

    def __post_init__(self):
        if self.loop not in LOOPS or self.kind not in KINDS:
            raise ValueError(f"a method's loop must be one of {LOOPS} and its kind one of {KINDS}, got "
                             f"{self.loop!r}, {self.kind!r}")

    @property
    def token_tree(self) -> bool:
        return self.choose_tree_size is not None

    def describe(self) -> dict:
        """The method as data, for every record's provenance (the config beside it has γ, tree size and rule)."""
        return {"loop": self.loop, "kind": self.kind, "needs": self.needs, "token_tree": self.token_tree,
                "counterpart": self.counterpart, "rule": self.rule}

    def resolve(self, config: DecodeConfig) -> DecodeConfig:
        """The config this method runs with: a method with its own rule takes it (the config's default "exact"
        is replaced, so the record names the rule really used); asking such a method for another rule is an
        error."""
        if self.rule is None or config.acceptance == self.rule:
            return config
        if config.acceptance != "exact":
            raise ValueError(f"method {config.method!r} verifies with its own rule {self.rule!r}, not "
                             f"{config.acceptance!r}")
        return dataclasses.replace(config, acceptance=self.rule)


def _ngram(order: int) -> Builder:
    def build(draft: NGramTable | str | Path, target=None, config=None) -> Drafter:
        table = draft if isinstance(draft, NGramTable) else NGramTable.load(draft)
        if table.order < order:
            raise ValueError(f"a {'bigram' if order == 2 else 'unigram'} draft needs an order-{order} table, "
                             f"got a {table.name} table")
        # A bigram table carries its unigram counts, so one fitted file serves both methods.
        return NGramDrafter(dataclasses.replace(table, order=order))
    return build


def _self_draft_module(kind: str):
    """(drafter module, weights loader, drafter class) of a self-drafting kind ("medusa heads" or "ppd prompt
    tokens")."""
    from .drafters import medusa, ppd
    if kind == "medusa heads":
        return medusa, medusa.load_heads, medusa.MedusaDrafter
    return ppd, ppd.load_prompt_tokens, ppd.PPDDrafter


def _self_draft(kind: str, method: str) -> Builder:
    """Builder of a self-drafting method: the weights from a folder or zoo name, or the target's own in the zoo
    when none is named, on the target's LM head."""
    def build(draft: str | Path | None, target, config: DecodeConfig | None) -> Drafter:
        from .models import self_draft_folder
        if target is None:
            raise ValueError(f"{method} drafts from the target's own forward: it needs the target")
        module, load, drafter = _self_draft_module(kind)
        param = next(target.model.parameters())
        weights, wcfg = load(self_draft_folder(kind, draft, target.name), dtype=param.dtype, device=param.device)
        if wcfg.hidden_size != target.model.config.hidden_size:
            raise ValueError(f"these {kind} were trained for hidden size {wcfg.hidden_size}, the target has "
                             f"{target.model.config.hidden_size}")
        size = config.tree_size if config is not None and config.tree_size else module.DEFAULT_TREE_SIZE
        return drafter(weights, wcfg, target.model.get_output_embeddings(), tree_size=size)
    return build


def _self_draft_config(kind: str) -> Callable[[Any, str], Any]:
    def read(draft: str | Path | None, target: str):
        from .models import self_draft_folder
        _, load, _ = _self_draft_module(kind)
        return load(self_draft_folder(kind, draft, target))[1]
    return read


def _medusa_size(config, profile, gamma):
    from .drafters.medusa import choose_tree_size
    return choose_tree_size(config, profile, gamma)


def _ppd_size(config, profile, gamma):
    from .drafters.ppd import choose_tree_size
    return choose_tree_size(config, profile)


def _draft_model(make: Callable[[Any, DecodeConfig | None], Drafter]) -> Builder:
    """Builder of a drafter around a draft model; ``make(model, config)`` reads the method's parameters."""
    def build(draft, target=None, config: DecodeConfig | None = None) -> Drafter:
        return make(draft.model, config if config is not None else DecodeConfig())
    return build


def _chain(model, config: DecodeConfig) -> Drafter:
    return LMDrafter(model)  # γ tokens sampled from the draft model's warped q


def _m_chains(gamma: int, params) -> int:
    return params.num_drafts * gamma  # m draft chains of γ tokens


def _beam(model, config: DecodeConfig) -> Drafter:
    from .drafters.beam import BeamDrafter
    return BeamDrafter(model, num_beams=config.params.num_beams)


def _bild(model, config: DecodeConfig) -> Drafter:
    from .drafters.bild import BiLDDrafter
    return BiLDDrafter(model, fallback_threshold=config.params.fallback_threshold)


def _staged(model, config: DecodeConfig) -> Drafter:
    from .drafters.staged import StagedDrafter
    return StagedDrafter(model, PromptLookupDrafter())  # the draft model's chain sped up by prompt lookup


def _fused(model, config: DecodeConfig) -> Drafter:
    from .drafters.staged import FusedDrafter
    return FusedDrafter(model, PromptLookupDrafter())


def _online(model, config: DecodeConfig) -> Drafter:
    """A copy of the draft in fp32 that learns while serving: the draft other variants of a run use stays frozen."""
    import copy

    from .drafters.online import OnlineDrafter
    from .training.online import OnlineConfig
    p = config.params
    online = OnlineConfig(buffer_size=p.online_buffer, update_every=p.online_every, steps_per_update=p.online_steps,
                          lr=p.online_lr, divergence=p.online_divergence, examples=p.online_examples,
                          seed=config.seed)
    return OnlineDrafter(copy.deepcopy(model).float(), online)


def _multi_draft(model, config: DecodeConfig) -> Drafter:
    from .drafters.lm_tree import MultiDraftDrafter
    return MultiDraftDrafter(model, num_drafts=config.params.num_drafts)


REGISTRY: dict[str, Method] = {
    "ar": Method(loop="ar", kind="plain"),
    # MJSD paper (seed 000): MJGD, MJSD and its baselines SpecTr and BiLD; SpecInfer-style multi-draft beside SpecTr
    "mjgd": Method(loop="mjgd", kind="plain"),
    "mjsd": Method(loop="speculative", kind="draft model", needs="draft model", build=_draft_model(_beam),
                   rule="mjsd"),
    "bild": Method(loop="speculative", kind="draft model", needs="draft model", build=_draft_model(_bild),
                   rule="bild"),
    "spectr": Method(loop="speculative", kind="draft model", needs="draft model", build=_draft_model(_multi_draft),
                     rule="spectr", nodes=_m_chains),
    # survey blog: online speculative decoding, the draft distilled towards the target's rows while serving
    # (updates between sequences, every L-th; --online-buffer/-every/-steps/-lr/-divergence)
    "online": Method(loop="speculative", kind="draft model", needs="draft model", build=_draft_model(_online)),
    # mentored blog (seed 001): speculative sampling's chain with the KL-bounded optimal acceptance (--kl-bound D)
    "mentored": Method(loop="speculative", kind="draft model", needs="draft model", build=_draft_model(_chain),
                       rule="mentored"),
    "multi-draft": Method(loop="speculative", kind="draft model", needs="draft model",
                          build=_draft_model(_multi_draft), nodes=_m_chains),
    "speculative": Method(loop="speculative", kind="draft model", needs="draft model", build=_draft_model(_chain)),
    # survey blog: staged (the draft model sped up by prompt lookup, two exact levels) and fused (prompt-lookup
    # copies when the context matches, the draft model otherwise)
    "staged": Method(loop="speculative", kind="draft model", needs="draft model", build=_draft_model(_staged)),
    "fused": Method(loop="speculative", kind="draft model", needs="draft model", build=_draft_model(_fused)),
    "prompt-lookup": Method(loop="speculative", kind="model-free",
                            build=lambda draft, target=None, config=None: PromptLookupDrafter()),
    "unigram": Method(loop="speculative", kind="model-free", needs="n-gram table", build=_ngram(1)),
    "bigram": Method(loop="speculative", kind="model-free", needs="n-gram table", build=_ngram(2)),
    "medusa": Method(loop="speculative", kind="self-drafting", needs="medusa heads",
                     build=_self_draft("medusa heads", "medusa"), choose_tree_size=_medusa_size,
                     tree_config=_self_draft_config("medusa heads")),
    "ppd": Method(loop="speculative", kind="self-drafting", needs="ppd prompt tokens",
                  build=_self_draft("ppd prompt tokens", "ppd"), choose_tree_size=_ppd_size,
                  tree_config=_self_draft_config("ppd prompt tokens")),
    # transformers' own decoders on the same model, prompt ids and settings (hf_baselines.py)
    "hf-ar": Method(loop="transformers", kind="plain", counterpart="ar"),
    "hf-assisted": Method(loop="transformers", kind="draft model", needs="draft model", counterpart="speculative"),
    "hf-prompt-lookup": Method(loop="transformers", kind="model-free", counterpart="prompt-lookup"),
}

METHODS = tuple(REGISTRY)
OUR_METHODS = tuple(m for m, spec in REGISTRY.items() if spec.loop != "transformers")
HF_METHODS = tuple(m for m, spec in REGISTRY.items() if spec.loop == "transformers")
SPECULATIVE_METHODS = tuple(m for m, spec in REGISTRY.items() if spec.loop == "speculative")
TREE_METHODS = tuple(m for m, spec in REGISTRY.items() if spec.token_tree)
DRAFT_MODEL_METHODS = tuple(m for m, spec in REGISTRY.items() if spec.needs == "draft model")
COUNTERPART = {m: spec.counterpart for m, spec in REGISTRY.items() if spec.counterpart is not None}


def method(name: str) -> Method:
    """The registered method ``name``, or one clear error listing them."""
    if name not in REGISTRY:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}")
    return REGISTRY[name]


def method_kind(name: str) -> str:
    """How a method spends time, for the device profile's choices (``Method.kind``)."""
    return method(name).kind


def drafter_for(draft, name: str, target=None, config: DecodeConfig | None = None) -> Drafter:
    """The drafter of a speculative method: ``draft`` itself if it is one, else built from it (self-drafting
    methods also need the ``target`` they read, and the ``config``'s tree size)."""
    spec = method(name)
    if spec.build is None:
        raise ValueError(f"{name!r} is not a method of our speculative loop; choose one of "
                         f"{', '.join(SPECULATIVE_METHODS)}")
    if isinstance(draft, Drafter):
        return draft
    if spec.needs in ("draft model", "n-gram table") and draft is None:
        flag = "--draft NAME" if spec.needs == "draft model" else "--ngram-table FILE"
        raise ValueError(f"method {name!r} needs a {spec.needs} ({flag})")
    return spec.build(draft, target, config)


def tree_cost(name: str, draft, target: str, gamma: int | str) -> Callable[[Any], tuple[float, str]] | None:
    """For a token-tree method, profile -> (seconds per token at the hardware-aware tree size, why): what
    ``--dtype auto`` compares dtypes by (the tree forward's measured latency over its expected tokens per call),
    instead of treating the method as a c = 0 chain. None for other methods."""
    spec = method(name)
    if spec.tree_config is None:
        return None
    config = spec.tree_config(draft, target)

    def cost(profile) -> tuple[float, str]:
        size = spec.choose_tree_size(config, profile, gamma)
        return size.latency_s / size.tau, (f"{1e3 * size.latency_s / size.tau:.1f} ms/token with a {size.size}-node "
                                           f"tree (τ {size.tau:.2f}, L_fp {1e3 * size.latency_s:.1f} ms)")
    return cost


def rule_for(config: DecodeConfig):
    """The acceptance rule ``config.acceptance`` names, with the method parameters it reads (MJSD's τ, BiLD's τ2)."""
    from .acceptance import TREE_RULES
    rule = TREE_RULES[config.acceptance]
    if config.acceptance == "mjsd":
        return rule.with_params(tau=config.params.tau)
    if config.acceptance == "bild":
        return rule.with_params(rollback_threshold=config.params.rollback_threshold)
    if config.acceptance == "mentored":  # at D = 0 the rule is speculative sampling: lossless
        return dataclasses.replace(rule.with_params(kl_bound=config.params.kl_bound),
                                   lossless=config.params.kl_bound == 0)
    return rule
