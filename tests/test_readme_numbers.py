"""Every number the README states as a result comes from a committed artifact and links to it (issue 27, item 5).

The rule, in full:

- **Blocks.** The README is read as blocks: a table row, a list item (with its continuation lines), a heading or a
  paragraph. Fenced code, inline code spans and HTML comments are not text; a link counts as its text, and its
  target is where the block's numbers must come from.
- **Numbers.** A number is written digits with an optional decimal part (``0.080``, ``44.8``, ``1,728``; a sign
  when written, ``−0.08``); ``1.18x`` and ``1.18×`` are ``1.18``. Digits glued to a letter are names, not numbers
  (SmolLM2, 135M, fp32, Q4_1, a commit hash). Not numbers either: document references (``Figs. 2–3``,
  ``Tables 1–5``, ``Fig. 8(a)``, ``§3.3–3.4``) and bounds, a number right after ≤ ≥ < > (a goal or a
  requirement: ``≤ 30 min``, ``Python ≥ 3.10``).
- **Rule 1, anywhere:** a block that links into ``figures/`` has every one of its numbers in the linked files (a
  linked folder stands for its ``.md``, ``.csv``, ``.json`` and ``.txt`` files; raw ``records.jsonl`` never counts),
  and every such link resolves. README number n matches an artifact number t when t is written with at least as
  many decimals as n and n is t rounded to n's decimals (|t − n| ≤ half a unit of n's last digit, so a tie may
  round either way): ``1.18`` matches ``1.18``, ``1.1834`` and ``1.175``, not ``1.2`` or ``1.1862``. Signs are
  compared only when the README writes one; thousands separators are ignored; units are never converted (``12%``
  does not match ``0.12``).
- **Rule 1, quotations:** small integers (counts) are in almost any file, so a count that must stay exact is
  quoted: a passage in double quotes with a digit in it, in a block that links into ``figures/``, appears verbatim
  (whitespace aside) in a linked file: ``"32 items: 15 reproduced"``.
- **Rule 2, in a results section** (between ``<!-- results`` and ``<!-- end of results -->``): every number sits in
  a block that links into ``figures/``, so rule 1 checks it.
- **Rule 3, everywhere else:** a number with a result's unit after it (×, x, ms, s, min, tok/s, tokens/s, %, J)
  sits in a block that links into ``figures/``.

The figures are regenerated often: when they move, the failure lists each (README line, number, linked files), so
the README's numbers can be brought back to the artifacts by hand in minutes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACT_SUFFIXES = (".md", ".csv", ".json", ".txt")

LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
CODE = re.compile(r"`[^`]*`")
COMMENT = re.compile(r"<!--.*?-->")
_REF_NUM = r"\d+(?:\([a-z/]+\))?"
REFERENCE = re.compile(
    r"§\s*\d+(?:\.\d+)*(?:\s*[–-]\s*\d+(?:\.\d+)*)?"
    rf"|\b(?:Figs?\.|Tables?|Eqs?\.|Props?\.|Algorithm|issue|item)\s*{_REF_NUM}"
    rf"(?:\s*(?:,|–|-|/|and|&)\s*{_REF_NUM}(?!\.?\d))*")
# a sign only when not glued to a word (1.8-2.0 is two numbers); digits glued to a letter are a name
NUMBER = re.compile(r"(?<![\w.])(?P<sign>[−-])?(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<frac>\.\d+)?[×x]?(?![\w])")
BOUND = re.compile(r"[≤≥<>]\s*$")
RESULT_UNIT = re.compile(r"[×x](?!\w)|\s?(?:ms|s|min|tok/s|tokens/s|J)(?![\w/])|\s?%")
# read twice, with and without thousands separators: a CSV's "12,345" may be two cells
ARTIFACT_NUMBERS = (re.compile(r"[−-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"),
                    re.compile(r"[−-]?\d{1,3}(?:,\d{3})+(?![\d,])(?:\.\d+)?"))


@dataclass(frozen=True)
class Num:
    """A README number: where it is, as written, and its value and decimals."""
    line: int
    text: str
    value: Decimal
    decimals: int
    signed: bool
    unit: bool  # a result's unit follows it (rule 3)


@dataclass
class Block:
    lines: list[int] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)  # link targets, as written
    numbers: list[Num] = field(default_factory=list)
    text: str = ""  # the block's text, lines joined by a space (for quotations)
    results: bool = False  # inside a marked results section


def numbers_in(text: str, line: int) -> list[Num]:
    """The numbers of one line of README text (code, comments and link targets already removed)."""
    text = REFERENCE.sub(lambda m: " " * len(m.group()), text)
    out = []
    for m in NUMBER.finditer(text):
        if BOUND.search(text[:m.start()]):
            continue
        digits = m["int"].replace(",", "") + (m["frac"] or "")
        value = Decimal(digits)
        signed = m["sign"] is not None
        unit = bool(RESULT_UNIT.match(text, m.end("frac") if m["frac"] else m.end("int")))
        out.append(Num(line, m.group().rstrip("×x"), -value if signed else value,
                       len(m["frac"]) - 1 if m["frac"] else 0, signed, unit))
    return out


def blocks(readme: str) -> list[Block]:
    """The README cut into table rows, list items, headings and paragraphs (see the module docstring)."""
    out: list[Block] = []
    current: Block | None = None
    fenced = in_comment = in_results = False
    for lineno, raw in enumerate(readme.splitlines(), start=1):
        if "<!-- results" in raw:
            in_results = True
        if "<!-- end of results" in raw:
            in_results = False
        if raw.lstrip().startswith("```"):
            fenced, current = not fenced, None
            continue
        if fenced:
            continue
        line = raw
        if in_comment:  # a comment that began on an earlier line
            if "-->" not in line:
                continue
            line, in_comment = line.split("-->", 1)[1], False
        line = COMMENT.sub(" ", line)
        if "<!--" in line:
            line, in_comment = line.split("<!--", 1)[0], True
        if not line.strip():
            current = None
            continue
        stripped = line.lstrip()
        if re.fullmatch(r"\|[\s|:-]*", stripped):  # a table's separator row
            current = None
            continue
        own_block = stripped.startswith(("|", "#"))  # a table row or a heading stands alone
        if current is None or own_block or re.match(r"([-*+]|\d+\.)\s", stripped):
            current = Block(results=in_results)
            out.append(current)
        current.targets += [m.group(2) for m in LINK.finditer(line)]
        text = CODE.sub(" ", LINK.sub(lambda m: m.group(1), line))
        current.lines.append(lineno)
        current.numbers += numbers_in(text, lineno)
        current.text += " " + text
        if own_block:
            current = None
    return out


def figures_files(target: str, base: Path) -> list[Path] | None:
    """The artifact files a link target stands for, [] if it points outside ``figures/``, None if missing."""
    if re.match(r"[a-z]+:", target) or target.startswith("#"):
        return []
    path = (base / target.split("#", 1)[0]).resolve()
    figures = (base / "figures").resolve()
    if figures not in path.parents and path != figures:
        return []
    if path.is_file():
        return [path] if path.suffix in ARTIFACT_SUFFIXES else []
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in ARTIFACT_SUFFIXES)
    return None


QUOTE = re.compile(r'"([^"]*\d[^"]*)"|“([^”]*\d[^”]*)”')


def squeeze(text: str) -> str:
    return " ".join(text.split())


@lru_cache(maxsize=None)
def artifact_text(path: Path) -> str:
    return squeeze(path.read_text(errors="replace"))


@lru_cache(maxsize=None)
def artifact_numbers(path: Path) -> tuple[tuple[Decimal, int], ...]:
    """Every number written in an artifact file, as (value, decimals written)."""
    found = set()
    text = path.read_text(errors="replace")
    for token in (token for pattern in ARTIFACT_NUMBERS for token in pattern.findall(text)):
        value = Decimal(token.replace("−", "-").replace(",", ""))
        found.add((value, max(0, -value.as_tuple().exponent)))
    return tuple(found)


def matches(n: Num, t: Decimal, t_decimals: int) -> bool:
    """n is t rounded to n's decimals (either way on a tie), and t carries at least n's decimals."""
    if t_decimals < n.decimals or abs(t.adjusted()) > 100:  # (a commit id such as 79e1894993 reads as 79 × 10^1894993)
        return False
    value, t = (n.value, t) if n.signed else (abs(n.value), abs(t))
    return abs(t - value) <= Decimal(5).scaleb(-n.decimals - 1)


def check(readme: str, base: Path, name: str = "README.md") -> list[str]:
    """Every breach of rules 1–3 as one line: where, which number, which files."""
    problems = []
    for block in blocks(readme):
        files: list[Path] = []
        for target in block.targets:
            found = figures_files(target, base)
            if found is None:
                problems.append(f"{name}:{block.lines[0]}: link {target} resolves to no file")
            else:
                files += found
        linked = [t for t in block.targets if figures_files(t, base)]
        names = ", ".join(sorted({str(f.relative_to(base)) for f in files}))
        for m in QUOTE.finditer(block.text) if linked else ():
            quoted = squeeze(m.group(1) or m.group(2))
            if not any(quoted in artifact_text(f) for f in files):
                problems.append(f'{name}:{block.lines[0]}: "{quoted}" is not verbatim in {names}')
        for n in block.numbers:
            if linked:
                if not any(matches(n, t, d) for f in files for t, d in artifact_numbers(f)):
                    problems.append(f"{name}:{n.line}: {n.text} is in none of {names}")
            elif block.results:
                problems.append(f"{name}:{n.line}: {n.text} in a results section links no artifact under figures/")
            elif n.unit:
                problems.append(f"{name}:{n.line}: {n.text} reads as a result but links no artifact under figures/")
    return problems


# ------------------------------------------------------------------------------------------------ the README


def test_every_readme_number_comes_from_the_artifact_it_links():
    problems = check((ROOT / "README.md").read_text(), ROOT)
    assert not problems, ("README numbers that disagree with their artifact or link none (fix the README from the "
                          "file named, or drop the number):\n" + "\n".join(problems))


def test_the_readme_marks_its_results_section_and_states_numbers_there():
    readme = (ROOT / "README.md").read_text()
    results = [b for b in blocks(readme) if b.results]
    assert results, "README.md lost its <!-- results --> ... <!-- end of results --> markers"
    assert any(b.numbers for b in results), "the results section states no number: the check would check nothing"


# --------------------------------------------------------------------------------------- the checker itself


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "figures" / "nb").mkdir(parents=True)
    (tmp_path / "figures" / "nb" / "table.md").write_text(
        "| method | speedup | α | ms/token |\n|---|---|---|---|\n| x | 1.1834 | 0.4625 | 40.2 |\n"
        "| y | 0.66 | -0.080 | 1,728 |\n")
    (tmp_path / "figures" / "nb" / "records.jsonl").write_text('{"speedup": 9.99}\n')
    return tmp_path


def problems_of(snippet: str, tree: Path) -> list[str]:
    return check(snippet, tree, name="snippet")


def test_numbers_rounded_from_the_linked_file_pass(tree):
    assert problems_of("- PPD runs 1.18× ([table](figures/nb/table.md)), α 0.46, 40 ms a token, 1,728 params, "
                       "held-out α moved by −0.08.\n", tree) == []
    assert problems_of("| a | 1.183x | [nb](figures/nb/) |\n", tree) == []  # a folder: its files
    assert problems_of("See Figs. 2–3 and §3.3–3.4 of [t](figures/nb/table.md); goal ≥ 1.5×.\n", tree) == []


def test_a_wrong_number_is_named_with_its_line_and_file(tree):
    snippet = ("Intro line.\n\n"
               "- MJSD efficiency is 0.55–0.6 ([table](figures/nb/table.md)).\n"
               "- PPD runs 1.19× and 1.2 ([table](figures/nb/table.md)).\n")
    problems = problems_of(snippet, tree)
    assert problems == ["snippet:3: 0.55 is in none of figures/nb/table.md",
                        "snippet:3: 0.6 is in none of figures/nb/table.md",
                        "snippet:4: 1.19 is in none of figures/nb/table.md"], problems
    # 1.2 passes: 1.1834 rounds to it. More decimals than the artifact carries do not:
    assert problems_of("1.1834 and 40.20 ([t](figures/nb/table.md))\n", tree) == [
        "snippet:1: 40.20 is in none of figures/nb/table.md"]


def test_a_sign_or_a_unit_conversion_is_not_forgiven(tree):
    assert problems_of("α moved by −0.080, a change of 0.08 ([t](figures/nb/table.md))\n", tree) == []
    assert problems_of("speedup −1.18 ([t](figures/nb/table.md))\n", tree) == [
        "snippet:1: −1.18 is in none of figures/nb/table.md"]
    assert problems_of("0.66 is 66% ([t](figures/nb/table.md))\n", tree) == [
        "snippet:1: 66 is in none of figures/nb/table.md"]


def test_raw_records_and_missing_links_do_not_source_a_number(tree):
    assert problems_of("9.99 tok/s ([r](figures/nb/records.jsonl))\n", tree) == [
        "snippet:1: 9.99 reads as a result but links no artifact under figures/"]
    assert problems_of("1.18× ([t](figures/nb/gone.md))\n", tree) == [
        "snippet:1: link figures/nb/gone.md resolves to no file",
        "snippet:1: 1.18 reads as a result but links no artifact under figures/"]


def test_an_unlinked_result_is_caught_in_and_out_of_a_results_section(tree):
    snippet = ("Runs at 1.18× on this CPU, 40 ms a token.\n\n"
               "Defaults: γ = 4, top-p 0.9, SmolLM2-135M in fp32, `--limit 4`, ≤ 10 min on 2 cores.\n\n"
               "<!-- results -->\n"
               "Of 32 items, 15 reproduced.\n"
               "<!-- end of results -->\n"
               "```\nbench 1.5x 99 ms\n```\n")
    assert problems_of(snippet, tree) == [
        "snippet:1: 1.18 reads as a result but links no artifact under figures/",
        "snippet:1: 40 reads as a result but links no artifact under figures/",
        "snippet:6: 32 in a results section links no artifact under figures/",
        "snippet:6: 15 in a results section links no artifact under figures/"]


def test_a_quoted_count_must_stand_verbatim_in_the_file(tree):
    assert problems_of('Of the rows, "0.66 | -0.080" ([t](figures/nb/table.md)).\n', tree) == []
    assert problems_of('- Counted: "0.66 |\n  -0.081" ([t](figures/nb/table.md)).\n', tree) == [
        'snippet:1: "0.66 | -0.081" is not verbatim in figures/nb/table.md',
        "snippet:2: -0.081 is in none of figures/nb/table.md"]
