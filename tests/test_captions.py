"""Every caption that shows a measured speedup names its estimator (``core.stats``: the three numbers called a
speedup differ whenever the ratio varies with a run's length, issue 39)."""
import ast
import json
import re
from pathlib import Path

import pytest

from specrepro.core import stats

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
ESTIMATORS = (stats.POOLED_RATIO, stats.MEDIAN_OF_RATIOS, stats.MEAN_OF_RATIOS)
NOT_MEASURED = re.compile(r"E\[speedup\]|(theoretical|predicted|expected) (\w+ )?speedups?|speedup_vs_L_fp1")


def captions(path: Path) -> list[str]:
    """The text of every ``description=`` argument in the notebook's code cells (f-string fields left out)."""
    out = []
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse("".join(cell["source"]))
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "description":
                parts = node.value.values if isinstance(node.value, ast.JoinedStr) else [node.value]
                out.append("".join(p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)))
    return out


def needs_estimator(text: str) -> bool:
    return "measured" in text and "speedup" in NOT_MEASURED.sub("", text)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_measured_speedup_names_its_estimator(path):
    missing = [c[:90] for c in captions(path) if needs_estimator(c) and not any(e in c for e in ESTIMATORS)]
    assert not missing, missing


def test_the_check_can_fail():
    assert needs_estimator("measured speedup over plain decoding")
    assert not needs_estimator("measured β and the blog's E[speedup] from it")
    assert sum(len(captions(p)) for p in NOTEBOOKS) > 50
