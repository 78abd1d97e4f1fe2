"""Every decoding method, one object each (``base.Method``), declared in its own file; this is the registry.

Adding a method: write ``specrepro/methods/<name>.py`` declaring its ``Method`` (and its ``Params`` when it has
parameters), and add it to ``REGISTRY`` below. The command line's flags and help, the bench's variant labels, the rule
table and the README's methods table (``python -m specrepro methods``) all derive from the objects.
"""
from __future__ import annotations

import dataclasses

from .ar import AR
from .base import Cost, Loop, Method, Needs, NoParams, TreeSizing
from .bild import BILD
from .eagle import EAGLE
from .fused import FUSED
from .greedy_draft import GREEDY_DRAFT
from .llamacpp import LLAMACPP_AR, LLAMACPP_PROMPT_LOOKUP
from .medusa import MEDUSA
from .mentored import MENTORED
from .mjgd import MJGD
from .mjsd import MJSD
from .multi_draft import MULTI_DRAFT
from .ngram import BIGRAM, UNIGRAM
from .openvino import OPENVINO_AR, OPENVINO_PROMPT_LOOKUP
from .online import ONLINE
from .ppd import PPD
from .prompt_lookup import PROMPT_LOOKUP
from .spectr import SPECTR
from .speculative import SPECULATIVE
from .staged import STAGED
from .transformers import HF_AR, HF_ASSISTED, HF_PROMPT_LOOKUP

REGISTRY: dict[str, Method] = {m.name: m for m in (
    AR, SPECULATIVE, GREEDY_DRAFT, PROMPT_LOOKUP, UNIGRAM, BIGRAM, STAGED, FUSED, ONLINE, MEDUSA, PPD, EAGLE,
    MULTI_DRAFT, SPECTR, MENTORED, MJGD, MJSD, BILD, HF_AR, HF_ASSISTED, HF_PROMPT_LOOKUP,
    LLAMACPP_AR, LLAMACPP_PROMPT_LOOKUP, OPENVINO_AR, OPENVINO_PROMPT_LOOKUP)}

METHODS = tuple(REGISTRY)
OUR_METHODS = tuple(m for m, spec in REGISTRY.items() if not spec.loop.baseline)
HF_METHODS = tuple(m for m, spec in REGISTRY.items() if spec.loop is Loop.TRANSFORMERS)
PEER_METHODS = tuple(m for m, spec in REGISTRY.items() if spec.loop in (Loop.LLAMA_CPP, Loop.OPENVINO))  # [peers]
BATCHING = tuple(m for m, spec in REGISTRY.items() if spec.batches)  # those that run B prompts at once


def method(name: str | Method) -> Method:
    """The registered method ``name`` (a Method is returned as it is), or one clear error listing them."""
    if isinstance(name, Method):
        return name
    if name not in REGISTRY:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}")
    return REGISTRY[name]


def drafter_for(draft, name: str | Method, target=None, config=None):
    """The drafter of a speculative method (``Method.build_drafter``): ``draft`` itself if it is one, else built."""
    return method(name).build_drafter(draft, target, config)


def parameter_fields() -> dict[str, tuple[dataclasses.Field, tuple[str, ...]]]:
    """Every method parameter by name: (its field, the methods that take it). The command line has one flag per
    name; methods that share a name (mjgd's and mjsd's ``num_beams``) declare it alike (a test checks)."""
    out: dict[str, tuple[dataclasses.Field, tuple[str, ...]]] = {}
    for m in REGISTRY.values():
        for f in m.param_fields():
            field, names = out.get(f.name, (f, ()))
            out[f.name] = (field, names + (m.name,))
    return out


RUN_FLAGS = ("gamma", "tree_size", "acceptance", "draft", "ngram_table")  # what Method.run_flags may name


def check_parameters_taken(values: dict, methods: list[Method] | tuple[Method, ...]) -> None:
    """One clear error for a setting that none of ``methods`` reads: a method parameter (``--tau`` with ``--method
    ar``) or a run-wide flag of ``RUN_FLAGS`` (``--acceptance typical`` with ``--method ar``)."""
    fields = parameter_fields()
    for name, value in values.items():
        if name in RUN_FLAGS:
            if any(name in m.run_flags() for m in methods):
                continue
            takers = [m.name for m in REGISTRY.values() if name in m.run_flags()]
            others = [m.name for m in REGISTRY.values() if name not in m.run_flags()]
            taken_by = ", ".join(takers) if len(takers) <= 6 else f"every method but {', '.join(others)}"
        elif name in fields:
            if any(name in {f.name for f in m.param_fields()} for m in methods):
                continue
            taken_by = ", ".join(fields[name][1])
        else:
            raise ValueError(f"unknown method parameter {name!r}")
        flag = "--" + name.replace("_", "-")
        raise ValueError(f"{flag} {value}: {', '.join(m.name for m in methods)} {'does' if len(methods) == 1 else 'do'} "
                         f"not read it (it is for {taken_by})")


def methods_table() -> str:
    """The README's methods table, from the objects (``python -m specrepro methods`` prints it; a test holds the
    README to it)."""
    rows = ["| method | document | what | output | parameters (bench label) | `--batch-size` > 1 |",
            "|---|---|---|---|---|---|"]
    for m in REGISTRY.values():
        params = ", ".join(f"`--{f.name.replace('_', '-')}`" + (f" (`{f.metadata['label']}`)" if f.metadata.get("label")
                                                                 else "") for f in m.param_fields()) or "—"
        rows.append(f"| `{m.name}` | {m.document} | {m.summary} | {m.output} | {params} | "
                    f"{'yes' if m.batches else '—'} |")
    return "\n".join(rows)


__all__ = ["REGISTRY", "METHODS", "OUR_METHODS", "HF_METHODS", "PEER_METHODS", "BATCHING", "Method", "Loop", "Cost", "Needs", "NoParams",
           "TreeSizing", "method", "drafter_for", "parameter_fields", "check_parameters_taken", "methods_table"]
