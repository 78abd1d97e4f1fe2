"""What a method is: one frozen ``Method`` object, declared in its own file under ``specrepro/methods/``.

A method carries everything the package needs to run it and to say what it ran:

    name      its name on the command line, in bench labels and in every record
    loop      ``Loop``: which decoding loop runs it
    cost      ``Cost``: how it spends time, what the device profile chooses the dtype and γ by
    needs     ``Needs``: what ``--draft`` (or ``--ngram-table``) must give it
    params    its frozen parameters dataclass (a ``config.MethodParams``, fields declared with ``config.param``):
              the command line's flags, the bench labels (``mjsd:b4:tau0.5``) and the validation derive from it
    drafter   (source, target, config) -> Drafter, for the speculative loop
    drafter_type  the Drafter class ``drafter`` builds (checked at every build): what says whether it batches
    rule      params -> TreeRule, when it verifies with a rule of its own (SpecTr, MJSD, BiLD, mentored)
    tree      its token-tree sizing (Medusa heads, PPD prompt tokens): the hardware-aware size on a device profile
    nodes     (γ, params) -> draft nodes one step scores, when not γ (m chains of γ)
    counterpart  for transformers' baselines: our method it must reproduce token for token at T = 0 (llama.cpp's
              decode another file of the model in other types: none)
    batches   (derived) whether it runs B prompts at once (``specrepro.decode.batched``): AR, and every speculative method
              whose drafter class declares how its rows batch (``Drafter.batching``, the one declaration);
              ``generate`` and ``bench`` refuse ``--batch-size`` > 1 for the others, before a model loads
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Callable

from ..acceptance import TREE_RULES, TreeRule
from ..core.config import DecodeConfig, MethodParams


class Loop(enum.Enum):
    AR = "ar"  # one target forward per token (autoregressive.py)
    MJGD = "mjgd"  # K tokens per step by beam search with the target (mjgd.py, MJSD paper §3.1)
    SPECULATIVE = "speculative"  # the one verification loop (speculative.py) with the method's drafter
    TRANSFORMERS = "transformers"  # transformers' ``model.generate`` (hf_baselines.py), a baseline beside ours
    LLAMA_CPP = "llama.cpp"  # llama.cpp on the GGUF the zoo model comes from (peers.py), a baseline beside ours
    OPENVINO = "openvino"  # OpenVINO GenAI on the zoo model exported to its IR (openvino_peer.py), a baseline beside ours

    @property
    def baseline(self) -> bool:
        """Another engine's decoder measured beside ours (transformers', llama.cpp's), not a loop of this package."""
        return self in (Loop.TRANSFORMERS, Loop.LLAMA_CPP, Loop.OPENVINO)

    @property
    def own_weights(self) -> bool:
        """Whether it decodes the torch model the run loaded (ours and transformers'). llama.cpp and OpenVINO decode
        their own files of the target (the GGUF, the exported IR, in their quantised types): no dtype of ours, no device
        profile of ours, and their tokens are not token for token comparable with ours."""
        return self not in (Loop.LLAMA_CPP, Loop.OPENVINO)


class Cost(enum.Enum):
    """How a method spends time: what the device profile's dtype and γ choices weigh (metrics.profile)."""

    PLAIN = "plain"  # one target forward per step
    DRAFT_MODEL = "draft model"  # a draft model's forwards, c > 0
    MODEL_FREE = "model-free"  # drafting costs nothing measurable, c = 0 (tables, prompt lookup)
    SELF_DRAFTING = "self-drafting"  # the target's own forward drafts a token tree whose size the device decides

    @property
    def draft_cost(self) -> bool:
        """True when drafting spends a draft model's forwards (c > 0): the one place "c = 0 for a model-free
        draft" is decided."""
        return self is Cost.DRAFT_MODEL


class Needs(enum.Enum):
    NOTHING = "nothing"
    DRAFT_MODEL = "draft model"  # --draft NAME: a model on the target's tokenizer (or layers:K)
    NGRAM_TABLE = "n-gram table"  # --ngram-table FILE: an .npz written by NGramTable.save
    MEDUSA_HEADS = "medusa heads"  # --draft FOLDER of trained heads; none: the target's own in the zoo
    PPD_PROMPT_TOKENS = "ppd prompt tokens"  # --draft FOLDER of trained prompt tokens; none: the zoo's
    EAGLE_DRAFT = "eagle draft"  # --draft FOLDER of a trained EAGLE draft; none: the zoo's

    @property
    def flag(self) -> str | None:
        return {Needs.DRAFT_MODEL: "--draft NAME", Needs.NGRAM_TABLE: "--ngram-table FILE"}.get(self)

    def source(self, draft_model=None, ngram_table=None, weights=None):
        """What the drafter is built from, of what a run has: the draft model, the n-gram table, or the self-drafting
        weights' folder or zoo name (None: the target's own in the zoo). The one place this is decided."""
        return {Needs.DRAFT_MODEL: draft_model, Needs.NGRAM_TABLE: ngram_table, Needs.MEDUSA_HEADS: weights,
                Needs.PPD_PROMPT_TOKENS: weights, Needs.EAGLE_DRAFT: weights}.get(self)


class NoParams(MethodParams):
    """The parameters of a method that has none."""


# (draft source, target LoadedModel | None, resolved DecodeConfig) -> Drafter
DrafterFactory = Callable[[Any, Any, DecodeConfig], Any]


@dataclass(frozen=True)
class TreeSizing:
    """A token-tree method's sizing: its weights' config read without building a drafter (the rank probabilities),
    and the hardware-aware size on a device profile (``choose(config, profile, γ) -> tree.TreeSize``)."""

    read_config: Callable[[Any, str], Any]  # (draft folder or zoo name | None, target name) -> weights config
    # (weights config, Profile, γ) -> TreeSize; EAGLE's also takes draft_step_s, its draft's measured forward
    choose: Callable[..., Any]


@dataclass(frozen=True, repr=False)
class Method:
    """A decoding method as one object; ``describe()`` is what every record's provenance stores about it."""

    name: str
    loop: Loop
    cost: Cost
    summary: str  # one line: what it is (the README's methods table and ``python -m specrepro methods``)
    document: str = ""  # the founding document (and section) that defines it
    output: str = "lossless"  # how its output relates to the target's p: "lossless", or "lossy: ..." and its bound
    needs: Needs = Needs.NOTHING
    params: type[MethodParams] = NoParams
    drafter: DrafterFactory | None = None
    drafter_type: type | None = None  # the Drafter class ``drafter`` builds
    rule: Callable[[Any], TreeRule] | None = None  # (params) -> its own acceptance rule; None: config.acceptance
    tree: TreeSizing | None = None
    nodes: Callable[[int, Any], int] | None = None
    counterpart: str | None = None

    def __post_init__(self):
        if not isinstance(self.loop, Loop) or not isinstance(self.cost, Cost) or not isinstance(self.needs, Needs):
            raise ValueError(f"method {self.name!r}: loop, cost and needs must be Loop, Cost and Needs members, got "
                             f"{self.loop!r}, {self.cost!r}, {self.needs!r}")
        if (self.loop is Loop.SPECULATIVE) != (self.drafter is not None):
            raise ValueError(f"method {self.name!r}: a drafter exactly when the loop is speculative")
        if (self.drafter is not None) != (self.drafter_type is not None):
            raise ValueError(f"method {self.name!r}: a drafter names the Drafter class it builds (drafter_type)")
        if not (isinstance(self.params, type) and issubclass(self.params, MethodParams)):
            raise ValueError(f"method {self.name!r}: params must be a MethodParams subclass")

    def __repr__(self) -> str:
        return f"Method({self.name!r})"

    # ------------------------------------------------------------------ derived from the declaration

    @property
    def token_tree(self) -> bool:
        return self.tree is not None

    @property
    def batches(self) -> bool:
        """Whether it runs B prompts at once: the AR baseline, and a speculative method whose drafter class declares
        how its rows batch (``Drafter.batching``); any rule verifies at every batch size (``verify.decide``)."""
        if self.loop is Loop.AR:
            return True
        return self.drafter_type is not None and self.drafter_type.batching is not None

    @property
    def rule_name(self) -> str | None:
        """The name of its own rule (a key of acceptance.TREE_RULES), or None."""
        return None if self.rule is None else self.rule(self.params()).name

    def param_fields(self) -> tuple[dataclasses.Field, ...]:
        return dataclasses.fields(self.params)

    def params_from(self, values: dict[str, Any]) -> MethodParams:
        """Its parameters from run-wide ``values`` (a command line's, a bench's): the fields it has; others are
        for other methods and ignored here (the caller checks that each is taken by some method)."""
        names = {f.name for f in self.param_fields()}
        return self.params(**{k: v for k, v in values.items() if k in names})

    def label_fields(self) -> dict[str, dataclasses.Field]:
        """Bench label prefix -> parameter field (``b`` -> num_beams for ``mjsd:b4``)."""
        return {f.metadata["label"]: f for f in self.param_fields() if f.metadata.get("label")}

    def run_flags(self) -> frozenset[str]:
        """The run-wide settings, besides the sampling knobs, seed, dtype and its own parameters, that it reads:
        gamma, tree_size, acceptance, draft, ngram_table. A setting that no method of a run reads is an error, not a
        silent record (``methods.check_parameters_taken``)."""
        reads = {"gamma": self.cost is not Cost.PLAIN or self.loop is Loop.MJGD,  # MJGD: K = γ tokens per step
                 "tree_size": self.token_tree,
                 "acceptance": self.loop is Loop.SPECULATIVE and self.rule is None,  # else its own rule
                 "draft": self.needs in (Needs.DRAFT_MODEL, Needs.MEDUSA_HEADS, Needs.PPD_PROMPT_TOKENS,
                                         Needs.EAGLE_DRAFT),
                 "ngram_table": self.needs is Needs.NGRAM_TABLE}
        return frozenset(name for name, read in reads.items() if read)

    def check_batch(self, batch_size: int, gamma: int | str) -> None:
        """One clear error when a run of ``batch_size`` rows at once cannot be this method's: it does not batch, or
        γ is auto (its cost model is β at batch 1). The error says which methods batch by the rule of ``batches``,
        not by name: the list (``methods.BATCHING``) is the registry's, which imports this module."""
        if batch_size <= 1:
            return
        if not self.batches:
            raise ValueError(f"method {self.name!r} cannot batch (batch size {batch_size}): batched decoding runs ar "
                             f"and the speculative methods whose drafter declares how its rows batch (the "
                             f"`--batch-size` > 1 column of `python -m specrepro methods`); run it at batch size 1")
        if gamma == "auto":
            raise ValueError(f"{self.name} at batch size {batch_size}: gamma auto runs at batch size 1 (its cost "
                             f"model is β at batch 1); give an integer gamma")

    def describe(self) -> dict:
        """The method as data, for every record's provenance (the config beside it has γ, tree size and rule)."""
        return {"loop": self.loop.value, "kind": self.cost.value, "needs": None if self.needs is Needs.NOTHING
                else self.needs.value, "token_tree": self.token_tree, "counterpart": self.counterpart,
                "rule": self.rule_name}

    # ------------------------------------------------------------------ what a run uses

    def resolve(self, config: DecodeConfig) -> DecodeConfig:
        """The config this method runs with: its own parameters (its defaults when none were given; another
        method's are an error), and its own rule when it has one (the config's default "exact" is replaced, so the
        record names the rule really used; asking such a method for another rule is an error)."""
        if config.method != self.name:
            raise ValueError(f"a config for {config.method!r} given to method {self.name!r}")
        params = config.params if config.params is not None else self.params()
        if type(params) is not self.params:
            raise ValueError(f"method {self.name!r} takes {self.params.__name__} "
                             f"({', '.join(f.name for f in self.param_fields()) or 'no parameters'}), "
                             f"got {type(params).__name__}")
        acceptance = config.acceptance
        if acceptance not in TREE_RULES:
            raise ValueError(f"acceptance must be one of {', '.join(TREE_RULES)}, got {acceptance!r}")
        if self.rule_name is not None and acceptance != self.rule_name:
            if acceptance != "exact":
                raise ValueError(f"method {self.name!r} verifies with its own rule {self.rule_name!r}, not "
                                 f"{acceptance!r}")
            acceptance = self.rule_name
        return dataclasses.replace(config, params=params, acceptance=acceptance)

    def config(self, **fields) -> DecodeConfig:
        """A resolved DecodeConfig of this method: ``Method.config(gamma=3, params=...)``."""
        return self.resolve(DecodeConfig(method=self.name, **fields))

    def verification_rule(self, config: DecodeConfig) -> TreeRule:
        """The rule a resolved ``config`` verifies with: the method's own, built from its parameters, or the
        config's generic one (exact, greedy, typical)."""
        if self.rule is not None:
            return self.rule(config.params)
        return TREE_RULES[config.acceptance]

    def build_drafter(self, source, target=None, config: DecodeConfig | None = None):
        """Its drafter: ``source`` itself when it already is one, else built from it (a draft model, a table, a
        folder of self-drafting weights; self-drafting methods also read the ``target``)."""
        from ..drafters import Drafter
        if self.drafter is None:
            raise ValueError(f"{self.name!r} is not a method of our speculative loop")
        if isinstance(source, Drafter):
            return source
        if self.needs.flag is not None and source is None:
            raise ValueError(f"method {self.name!r} needs a {self.needs.value} ({self.needs.flag})")
        built = self.drafter(source, target, self.resolve(config or DecodeConfig(method=self.name)))
        if type(built) is not self.drafter_type:  # the declaration batching is derived from must not drift
            raise TypeError(f"method {self.name!r} declares drafter_type {self.drafter_type.__name__} but built a "
                            f"{type(built).__name__}")
        return built

    def draft_nodes(self, gamma: int, params: MethodParams | None = None) -> int:
        """Draft nodes one verification scores at γ (m chains of γ for multi-draft methods)."""
        return gamma if self.nodes is None else self.nodes(gamma, params or self.params())
