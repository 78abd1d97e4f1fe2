"""The models a bench runs: the target and draft at every dtype its variants need, loaded once per run.

One :class:`Models` per ``run_bench`` call (it is the run's cache, not the module's): a dtype is loaded the first
time a variant asks for it, and a compiled copy the first time a ``compiled`` variant does.
"""
from __future__ import annotations

import copy
import hashlib

import torch

from ..core.decoding import model_device
from ..engine.compiled import compile_forward
from ..engine.models import LoadedModel, default_device, load_draft, load_model, parse_dtype
from ..methods import Needs
from ..metrics.profile import dtype_name
from .variants import BenchConfig


class Models:
    """The target and draft at every dtype a run needs. Loaded by name at each dtype (so fp32 is the real fp32
    weights, not a cast of bf16 ones), or, for models passed in, copies cast to the dtype (recorded)."""

    def __init__(self, config: BenchConfig, target: LoadedModel | None, draft: LoadedModel | None,
                 needs_draft: bool):
        self.config, self.needs_draft, self.given = config, needs_draft, target is not None
        # dtype (or (dtype, "compiled")) -> (target, draft)
        self.by_dtype: dict[str | tuple[str, str], tuple[LoadedModel, LoadedModel | None]] = {}
        self.notes: list[str] = []
        if target is not None:
            reference = dtype_name(next(target.model.parameters()).dtype)
            if draft is not None and dtype_name(next(draft.model.parameters()).dtype) != reference:
                raise ValueError("the target and the draft passed in have different dtypes")
        else:
            device = torch.device(config.device) if config.device else None
            concrete = config.dtype if config.dtype not in (None, "auto") else None
            reference = (dtype_name(parse_dtype(concrete, device or default_device())) if config.dtype != "auto"
                         else "fp32")
            target = load_model(config.target, dtype=reference, device=config.device)
            if needs_draft and draft is None:
                draft = self._load_draft(target, reference)
        self.reference = reference  # the dtype of the models every digest and encoding uses
        self.by_dtype[reference] = (target, draft)

    def _load_draft(self, target: LoadedModel, dtype: str) -> LoadedModel:
        if self.config.draft is None:
            users = [v.label for v in self.config.variants() if v.method.needs is Needs.DRAFT_MODEL]
            raise ValueError(f"methods {users} need --draft NAME")
        return load_draft(self.config.draft, target, dtype=dtype)

    def at(self, dtype: str, compiled: bool = False) -> tuple[LoadedModel, LoadedModel | None]:
        """The models at ``dtype``; with ``compiled``, a copy of them whose forwards run through torch.compile (the
        eager ones stay as they are for the variants that run eagerly)."""
        if compiled:
            if (dtype, "compiled") not in self.by_dtype:
                copies = [None if m is None else LoadedModel(m.name, compile_forward(copy.deepcopy(m.model)),
                                                             m.tokenizer) for m in self.at(dtype)]
                self.by_dtype[dtype, "compiled"] = tuple(copies)
            return self.by_dtype[dtype, "compiled"]
        if dtype not in self.by_dtype:
            target, draft = self.by_dtype[self.reference]
            torch_dtype = parse_dtype(dtype, model_device(target.model))
            if self.given:
                self.notes.append(f"{dtype} models are copies of the {self.reference} models passed in, cast")
                cast = lambda m: None if m is None else LoadedModel(m.name, copy.deepcopy(m.model).to(torch_dtype),
                                                                   m.tokenizer)
                self.by_dtype[dtype] = (cast(target), cast(draft))
            else:
                t = load_model(self.config.target, dtype=dtype, device=self.config.device)
                self.by_dtype[dtype] = (t, self._load_draft(t, dtype) if self.needs_draft else None)
        return self.by_dtype[dtype]

    @property
    def target(self) -> LoadedModel:
        return self.by_dtype[self.reference][0]

    @property
    def draft(self) -> LoadedModel | None:
        return self.by_dtype[self.reference][1]


def weights_digest(*models: torch.nn.Module | None) -> str:
    """sha256 over every parameter's name, shape and an evenly strided sample of at most ~4096 of its values:
    a draft retrained under the same name must not resume a run made with the old one. Sampling keeps this
    cheap for billion-parameter models on a GPU (no full copy to the host)."""
    h = hashlib.sha256()
    for model in models:
        for name, param in ([] if model is None else model.named_parameters()):
            flat = param.detach().reshape(-1)
            sample = flat[:: max(1, flat.numel() // 4096)].float().cpu()  # [<= ~4096]
            h.update(f"{name}{tuple(param.shape)}".encode())
            h.update(sample.numpy().tobytes())
    return h.hexdigest()
