"""Count, on the CPU, the host syncs a piece of decoding would make on a GPU (issue 38, item 6).

A CPU run has no device, so "would sync" is tracked by hand: a ``TorchFunctionMode`` marks every tensor that would
live on the accelerator (the models' parameters and buffers, what ops on marked tensors return, and host data copied
to a ``torch.device``) and counts

    reads    a marked tensor's value read on the host: ``int() float() bool() index``, ``.item() .tolist() .numpy()``,
             ``.nonzero()`` (its output size is data), and downloads ``.cpu()`` / ``.to("cpu")`` or a device value
             written into a host tensor (``host[i] = x``, ``host.copy_(x)``): each makes the host wait for the
             device's queue
    uploads  host data copied onto the device: ``torch.tensor/as_tensor(..., device=<torch.device>)``,
             ``.to(<torch.device>)`` of a host tensor; from pageable memory each one waits as well

Conventions the counter relies on, which the package keeps: a download is written ``.cpu()`` or ``.to("cpu")``; a
move to the run's device is written with a ``torch.device`` (``.to(p.device)``). A factory given a device
(``torch.arange(n, device=d)``) is taken as host-side: on the CPU ``d`` cannot say which it would be, and the
package builds index tensors that way beside host tensors (``tree.check_parents``). Each count keeps the call site
(the innermost frame outside torch and this file) so a test can say where the syncs are.
"""
from __future__ import annotations

import collections
import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

MARK = "_would_be_on_device"
READS = {"__int__", "__float__", "__bool__", "__index__", "item", "tolist", "numpy", "nonzero", "cpu"}
UPLOAD_FACTORIES = {"tensor", "as_tensor"}
_TORCH = str(Path(torch.__file__).parent)


def on_device(t) -> bool:
    return isinstance(t, torch.Tensor) and getattr(t, MARK, False)


def _mark(out) -> None:
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor):
            try:
                setattr(t, MARK, True)
            except (AttributeError, RuntimeError):  # e.g. a tensor that refuses attributes: left unmarked
                pass


def _site() -> str:
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename.startswith(_TORCH) or frame.f_code.co_filename == __file__):
        frame = frame.f_back
    if frame is None:
        return "?"
    path = Path(frame.f_code.co_filename)
    parts = path.parts
    short = "/".join(parts[parts.index("specrepro"):]) if "specrepro" in parts else "/".join(parts[-2:])
    return f"{short}:{frame.f_lineno}"


class SyncCounter(TorchFunctionMode):
    """``with SyncCounter(model, ...) as c: ...`` then ``c.reads``, ``c.uploads`` (Counters of call sites)."""

    def __init__(self, *modules: torch.nn.Module):
        super().__init__()
        self.reads: collections.Counter[str] = collections.Counter()
        self.uploads: collections.Counter[str] = collections.Counter()
        self.watch(*modules)

    def watch(self, *modules: torch.nn.Module) -> None:
        """Take ``modules``' parameters and buffers as living on the device."""
        for module in modules:
            for t in list(module.parameters()) + list(module.buffers()):
                setattr(t, MARK, True)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        src = any(on_device(t) for t in inputs)
        out = func(*args, **kwargs)
        to = _to_device(name, args, kwargs)
        into_host = name in ("__setitem__", "copy_") and not on_device(args[0])  # a device value written to the host
        if src and (name in READS or into_host or (name == "to" and to == "cpu")):
            self.reads[_site()] += 1
            if name == "nonzero":  # its indices stay on the device
                _mark(out)
        elif to == "device" and not src and (inputs or name in UPLOAD_FACTORIES):
            if isinstance(out, torch.Tensor) and out.numel():  # an empty tensor copies nothing (transformers' cache)
                self.uploads[_site()] += 1
            _mark(out)
        elif src:
            _mark(out)
        return out


def _to_device(name: str, args, kwargs) -> str | None:
    """"cpu" for a download written as such, "device" for a move to a ``torch.device``, else None."""
    device = kwargs.get("device")
    if name == "to" and device is None:
        device = next((a for a in args[1:] if isinstance(a, (str, torch.device))), None)
    if device is None:
        return None
    if isinstance(device, str):
        return "cpu" if device == "cpu" else "device"
    return "device"
