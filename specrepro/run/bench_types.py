"""The data a bench takes and gives back: its prompts, encoded, and its result.

Kept apart from the orchestration (``bench.py``) so that the studies, which build prompts and read results, import
two dataclasses and no model code. (Not named ``types.py``: a script run from this folder would shadow the standard
library's ``types``.)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    ids: list[int]  # encoded prompt, chat template applied
    reference: str | None = None  # a reference answer (ROUGE-L), where the suite has one
    where: str = ""  # how an error names it: "<file>:<line>", or its suite and id


@dataclass
class BenchResult:
    out: Path
    records: list[dict]
    summary: list[dict]
    provenance: dict
    # variant label -> {"error": exception type, "message", "where"}: the methods that raised in this call
    failed: dict[str, dict] = field(default_factory=dict)
