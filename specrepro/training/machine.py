"""The machine a training run ran on, for its record (``training_record.json``): CPU model, logical cores and the
flags that change the engine's kernels, the torch threads, and the GPU where there is one. Data and weights written
on one CPU may differ in their last bits from another's (bf16 kernels round by CPU), so a record that names its
machine says which one made them."""
from __future__ import annotations

import torch

from ..metrics.profile import cpu_info


def machine() -> dict:
    """{"cpu": {name, logical_cores, kernel_flags}, "threads": torch's threads, "gpu": its name or None}."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu_info(), "threads": torch.get_num_threads(), "gpu": gpu}
