"""notebooks/run_notebooks.py runs some notebooks again with other parameters (VARIANTS): each variant must name a
notebook that exists and parameters its tagged parameters cell declares (papermill would inject an unknown name
silently, and the variant would rerun the default)."""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
import run_notebooks  # noqa: E402


def declared_parameters(notebook: Path) -> set[str]:
    cells = json.loads(notebook.read_text())["cells"]
    (cell,) = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    tree = ast.parse("".join(cell["source"]))
    return {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}


def test_every_variant_sets_parameters_its_notebook_declares():
    assert run_notebooks.VARIANTS
    for stem, variants in run_notebooks.VARIANTS.items():
        notebook = ROOT / "notebooks" / f"{stem}.ipynb"
        assert notebook.exists(), stem
        names = declared_parameters(notebook)
        for variant, parameters in variants.items():
            assert set(parameters) <= names, (stem, variant, set(parameters) - names)
        runs = run_notebooks.runs_of(notebook)
        assert runs[0] == (stem, {}) and [name for name, _ in runs[1:]] == [f"{stem}-{v}" for v in variants]
