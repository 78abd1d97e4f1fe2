"""The committed executed notebooks read on their own: each shows inline as many figures as its notebook saved (one
PNG per figure, none twice) and its tables rendered, and stays under 3 MB. Reads the committed artifacts only."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXECUTED = sorted(p for p in (ROOT / "notebooks" / "executed").glob("*.ipynb") if not p.name.startswith("."))  # not a run in progress
MAX_BYTES = 3_000_000


def outputs(notebook: Path, mime: str) -> int:
    cells = json.loads(notebook.read_text())["cells"]
    return sum(mime in o.get("data", {}) for c in cells if c["cell_type"] == "code" for o in c.get("outputs", []))


def saved_figures(notebook: Path) -> int:
    """PNG figures the run saved, per the index of its figures folder (figures/<stem>/index.json)."""
    index = ROOT / "figures" / notebook.stem.replace("-", "_") / "index.json"
    if not index.is_file():
        return 0
    return sum(entry["artifact"].endswith(".png") for entry in json.loads(index.read_text()))


def test_there_are_executed_notebooks():
    assert len(EXECUTED) >= 14


@pytest.mark.parametrize("notebook", EXECUTED, ids=[p.stem for p in EXECUTED])
def test_an_executed_notebook_shows_its_figures_and_tables_and_stays_small(notebook):
    size = notebook.stat().st_size
    assert size < MAX_BYTES, f"{notebook.name} is {size / 1e6:.1f} MB"
    figures = saved_figures(notebook)
    if figures:  # a variant run (<stem>-<variant>) writes its own folder; its index counts its figures
        assert outputs(notebook, "image/png") == figures, notebook.name
    assert outputs(notebook, "image/png") + outputs(notebook, "text/html") > 0, f"{notebook.name} shows nothing"
