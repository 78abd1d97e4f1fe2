"""The sizes a reader can hold: no file over 600 lines in the package, the simulators or the notebooks' modules, no
function over 100 lines, and no notebook over 250 code lines (notebooks orchestrate; the computing lives in
``specrepro/studies``). Code lines of a notebook: its code cells' lines that are neither blank nor comments."""
import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*sorted((ROOT / "specrepro").rglob("*.py")), *sorted((ROOT / "simulations").rglob("*.py")),
           *sorted((ROOT / "notebooks").glob("*.py")), *sorted((ROOT / "notebooks" / "claims").glob("*.py"))]
MAX_FILE, MAX_FUNCTION, MAX_NOTEBOOK = 600, 100, 250


def test_no_file_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in SOURCES if (n := len(p.read_text().splitlines())) > MAX_FILE}
    assert not long, f"files over {MAX_FILE} lines: {long}"


def test_no_function_over_100_lines():
    long = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_FUNCTION:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = size
    assert not long, f"functions over {MAX_FUNCTION} lines: {long}"


def code_lines(notebook: Path) -> int:
    cells = json.loads(notebook.read_text())["cells"]
    lines = [line for c in cells if c["cell_type"] == "code" for line in "".join(c["source"]).splitlines()]
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def test_no_notebook_over_250_code_lines():
    long = {p.name: n for p in sorted((ROOT / "notebooks").glob("*.ipynb")) if (n := code_lines(p)) > MAX_NOTEBOOK}
    assert not long, f"notebooks over {MAX_NOTEBOOK} code lines: {long}"


def test_the_counter_counts_code_not_blanks_or_comments(tmp_path):
    cell = {"cell_type": "code", "source": ["x = 1\n", "\n", "# why\n", "y = 2  # inline\n"], "metadata": {},
            "outputs": [], "execution_count": None}
    markdown = {"cell_type": "markdown", "source": ["a\n", "b\n"], "metadata": {}}
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps({"cells": [cell, markdown]}))
    assert code_lines(path) == 2
