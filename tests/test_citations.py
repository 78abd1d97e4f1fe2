"""What the package's docstrings cite is in the repository: every ``docs/``, ``figures/`` or other repository path
ending in ``.md`` names a committed file, nothing cites a document kept outside the repository (a style guide, a
machine's absolute path), and the notation guide defines every letter the docstrings lean on."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for folder in ("specrepro", "simulations") for p in (ROOT / folder).rglob("*.py"))
CITED = re.compile(r"\b(?:docs|figures|notebooks|specrepro|simulations|tests|scripts)/[\w./-]+\.md\b")


def test_every_cited_markdown_file_is_in_the_repository():
    cited = {(path.relative_to(ROOT), m) for path in SOURCES for m in CITED.findall(path.read_text())}
    assert any(m == "docs/notation.md" for _, m in cited)  # the pattern finds what it is for
    missing = sorted(f"{path}: {m}" for path, m in cited if not (ROOT / m).is_file())
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)


def test_nothing_cites_a_document_outside_the_repository():
    outside = re.compile(r"STYLE\.md|/work/|/home/|/Users/")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in SOURCES for i, line in enumerate(p.read_text().splitlines(), 1)
             if outside.search(line)]
    assert not found, "cites a file that is not in the repository: " + ", ".join(found)


def test_the_notation_guide_defines_the_letters():
    guide = (ROOT / "docs" / "notation.md").read_text()
    letters = ("p", "q", "γ", "α", "c", "β", "τ", "B", "D", "Q", "S", "L", "H", "V", "N")
    for letter in (f"| {x} |" for x in letters):
        assert letter in guide, f"docs/notation.md defines no {letter.strip('| ')}"
    for word in ("**accepted**", "**bonus**", "**recovered**"):
        assert word in guide
