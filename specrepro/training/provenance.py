"""What a training record says about where its run came from, beside the command, config and commit that
``loop.Run.record`` writes:

- ``machine()``: the CPU model, logical cores and the flags that change the engine's kernels, the torch threads, and
  the GPU where there is one. Data and weights written on one CPU may differ in their last bits from another's (bf16
  kernels round by CPU), so a record that names its machine says which one made them;
- ``tokens_digest(examples)``: a digest of the training conversations' token ids, in order, so that two records say
  whether they trained on the same data, token for token, whoever wrote it and wherever.
"""
from __future__ import annotations

import hashlib

import torch

from ..metrics.profile import cpu_info


def machine() -> dict:
    """{"cpu": {name, logical_cores, kernel_flags}, "threads": torch's threads, "gpu": its name or None}."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu_info(), "threads": torch.get_num_threads(), "gpu": gpu}


def tokens_digest(examples) -> str:
    """sha256 of every example's token ids (int64, in order, each prefixed by its length): equal for the same
    conversations in the same order, whatever file layout or dtype held them."""
    h = hashlib.sha256()
    for e in examples:
        ids = e.tokens.to(torch.int64).contiguous()
        h.update(len(ids).to_bytes(8, "little"))
        h.update(ids.numpy().tobytes())
    return h.hexdigest()
