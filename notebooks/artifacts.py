"""What the figure notebooks share: saving figures and tables, provenance, and the index.

A notebook makes one :class:`Artifacts` for its stem and saves through it; every saved file is
listed in ``figures/<stem>/index.json`` as {artifact, document, item, notebook, description}.
``notebooks/run_notebooks.py`` then gathers those lists into ``figures/INDEX.md`` and
``figures/index.json`` with :func:`write_index`. The index format lives only in this file.

Under ``run_notebooks.py`` a notebook writes into a staging folder (``$SPECREPRO_ARTIFACTS_STAGING``), and its
folders are swapped in whole only when it succeeds (:func:`swap_in`): a failed notebook leaves the previous artifacts
in place, marked stale (:func:`mark`, ``STALE.json`` in the folder). Artifacts made from a tree with uncommitted
changes are marked draft (``DRAFT.json``). ``write_index`` shows both marks beside every artifact they cover.
A notebook run by hand (no staging folder, no ``out_root``) writes under ``build/scratch/`` instead, never over the
committed ``figures/``. In a Jupyter kernel every saved figure and table is also shown inline (:func:`show`), so an
executed notebook reads on its own.
"""

from __future__ import annotations

import csv
import datetime as _dt
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from specrepro.run import plots
from specrepro.core.provenance import LoadWatch, environment, git_revision

INDEX_NAME = "index.json"
VERDICTS_STEM = "verdicts"  # figures/<notebook>/verdicts.csv: the claims that notebook decides
STAGING_ENV = "SPECREPRO_ARTIFACTS_STAGING"  # set by run_notebooks.py: write here, swapped in on success
MARKS = {"STALE.json": "STALE", "DRAFT.json": "DRAFT"}  # a folder's marks, as INDEX.md shows them
SCRATCH = Path("build") / "scratch"  # under the checkout: where a notebook run by hand writes (never figures/)
DISPLAY_DPI = 100  # figures shown inline in a notebook (the saved PNG is 150 dpi)
TABLE_ROWS = 40  # rows of a saved table shown inline (the whole table is in its .csv and .md)


def find_root(start: Path | None = None) -> Path:
    """The repository root: the first directory up from ``start`` holding ``simulations/``."""
    start = (start or Path.cwd()).resolve()
    for path in (start, *start.parents):
        if (path / "simulations").is_dir() and (path / "notebooks").is_dir():
            return path
    raise FileNotFoundError(f"no specrepro checkout above {start}")


def provenance(root: Path, **parameters) -> dict:
    """Date, git revision (``specrepro.core.provenance.git_revision``, the package's one home of it), interpreter and
    library versions with the lock file's digest and any package not at its locked version
    (``specrepro.core.provenance.environment``), and the notebook's parameters."""
    versions = {}
    for name in ("numpy", "scipy", "matplotlib"):
        module = sys.modules.get(name)
        versions[name] = getattr(module, "__version__", "not imported")
    # What the notebooks write (figures/, notebooks/executed/) is not a change to the code: with two notebooks running
    # at once, the other one's outputs would otherwise mark every run as made from an uncommitted tree.
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_revision": git_revision(ignore=("figures", "notebooks/executed"), root=root),
        "executable": sys.executable,
        **environment(),
        **versions,
        **parameters,
    }


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _md(text) -> str:
    """Text safe inside a Markdown table cell."""
    return _cell(text).replace("|", "\\|").replace("\n", " ")


class Artifacts:
    """Writes one notebook's figures and tables under ``figures/<stem>/`` and indexes them.

    Files listed in the previous run's index are removed first, so a renamed figure leaves no
    stale copy behind; files the notebook did not write are left alone.
    """

    def __init__(self, stem: str, root: Path | str | None = None):
        self.stem = stem
        self.load = LoadWatch()  # what other processes kept busy while this notebook timed anything
        revision = git_revision(ignore=("figures", "notebooks/executed"))  # the checkout the package runs from
        self.commit = revision[:10] + revision[40:]  # "abcdef1234", or with " (with uncommitted changes)"
        self.dir = artifact_dir(stem, root)
        if os.environ.get(STAGING_ENV):  # a fresh folder, swapped in whole when the notebook succeeds
            shutil.rmtree(self.dir, ignore_errors=True)
        elif root is None:
            print(f"artifacts go to {self.dir} (a hand run: make figures writes figures/; out_root=<checkout> writes "
                  "there by hand)")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.entries: list[dict] = []
        old_index = self.dir / INDEX_NAME
        if old_index.exists():
            for entry in json.loads(old_index.read_text()):
                (self.dir.parent / entry["artifact"]).unlink(missing_ok=True)
            old_index.unlink()

    def _add(self, path: Path, document: str, item: str, description: str, **facts) -> None:
        self.entries.append({
            "artifact": path.relative_to(self.dir.parent).as_posix(),
            "document": document,
            "item": item,
            "notebook": f"notebooks/{self.stem}.ipynb",
            "description": description,
            # the cores other processes kept busy from the notebook's start to this artifact (mean, max): the
            # report calls a speed row timed under load noisy, not decided
            "machine_load": self.load.summary(),
            **facts,  # a figure's "document_number": whether it draws the document's own number
        })
        self._write_index()

    def _write_index(self) -> None:
        entries = sorted(self.entries, key=lambda e: e["artifact"])
        (self.dir / INDEX_NAME).write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")

    def figure(self, fig, name: str, *, footer: plots.Footer, document: str, item: str,
               description: str) -> list[Path]:
        """Draw ``footer`` (with the commit filled in) under ``fig``, check it (``plots.check``: no raw markup,
        a footer, a title saying theory or measured), and save it as ``<name>.png`` (150 dpi) and ``<name>.pdf``
        (no timestamp)."""
        plots.draw_footer(fig, footer.with_commit(footer.commit or self.commit))
        plots.check(fig)
        paths = [self.dir / f"{name}.png", self.dir / f"{name}.pdf"]
        fig.savefig(paths[0], dpi=150, bbox_inches="tight")
        fig.savefig(paths[1], bbox_inches="tight", metadata={"CreationDate": None})
        for path in paths:
            self._add(path, document, item, description, document_number=plots.shows_document_number(fig))
        show_figure(fig)
        return paths

    def table(self, rows: list[dict], name: str, *, document: str, item: str,
              description: str) -> list[Path]:
        """Save a list of same-keyed dicts as ``<name>.csv`` and ``<name>.md`` (floats to 6 digits)."""
        if not rows:
            raise ValueError(f"table {name!r} has no rows")
        columns = list(rows[0])
        csv_path, md_path = self.dir / f"{name}.csv", self.dir / f"{name}.md"
        with csv_path.open("w", newline="") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(columns)
            writer.writerows([[_cell(row[c]) for c in columns] for row in rows])
        lines = [f"| {' | '.join(columns)} |", "|" + "---|" * len(columns)]
        lines += [f"| {' | '.join(_md(row[c]) for c in columns)} |" for row in rows]
        md_path.write_text(f"**{item}** ({document}): {description}\n\n" + "\n".join(lines) + "\n")
        for path in (csv_path, md_path):
            self._add(path, document, item, description)
        show(Table(columns, rows, title=f"{item} ({document}): {description}", saved=csv_path.name))
        return [csv_path, md_path]


    def verdicts(self, verdicts: list, *, document: str, item: str, description: str) -> list[Path]:
        """Save the claims this notebook decides (``specrepro.metrics.verdict.Verdict``s) as ``verdicts.csv`` and
        ``verdicts.md``; ``reproduction.write_verdicts`` gathers every notebook's into ``figures/VERDICTS.md``.
        A timed claim is noisy, not decided, when other processes kept the CPU busy while this notebook ran
        (``specrepro.metrics.verdict.under_load``); each row says how busy (``others_busy_cores``)."""
        from specrepro.metrics.verdict import under_load

        load = self.load.summary()
        busy = load["mean"] if load else None
        verdicts = [under_load(v, busy) if busy is not None else v for v in verdicts]
        rows = [{**v.row(), "others_busy_cores": busy if v.timed else None, "notebook": f"notebooks/{self.stem}.ipynb"}
                for v in verdicts]
        ids = [row["claim"] for row in rows]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{self.stem} decides a claim twice: {sorted(i for i in ids if ids.count(i) > 1)}")
        return self.table(rows, VERDICTS_STEM, document=document, item=item, description=description)


def artifact_dir(stem: str, root: Path | str | None) -> Path:
    """Where a notebook's artifacts go: the staging folder under ``run_notebooks.py`` (swapped into figures/ on
    success); ``<root>/figures/<stem>`` when the caller names a root; else, on a hand run, the scratch folder
    ``build/scratch/figures/<stem>`` of this checkout, so that exploring never writes over the committed figures."""
    staging = os.environ.get(STAGING_ENV)
    if staging:
        return Path(staging) / stem
    if root is not None:
        return Path(root) / "figures" / stem
    return find_root() / SCRATCH / "figures" / stem


def show(obj) -> None:
    """Display ``obj`` in the notebook when running in a Jupyter kernel (papermill's included); nothing elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython comes with the notebooks' dependencies
        return
    shell = get_ipython()
    if shell is not None and getattr(shell, "kernel", None) is not None:
        display(obj)


def show_figure(fig) -> None:
    """Show ``fig`` inline as a PNG at ``DISPLAY_DPI`` (so that an executed notebook reads on its own, at a moderate
    size) and close it, so the inline backend does not show it a second time at the end of the cell."""
    import io

    import matplotlib.pyplot as plt
    from IPython.display import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DISPLAY_DPI, bbox_inches="tight")
    show(Image(data=buffer.getvalue(), format="png"))
    plt.close(fig)


class Table:
    """A saved table as a notebook shows it: rendered HTML (the first ``TABLE_ROWS`` rows) and Markdown text."""

    def __init__(self, columns: list[str], rows: list[dict], title: str, saved: str):
        self.columns, self.rows, self.title, self.saved = columns, rows, title, saved

    def _more(self) -> str:
        hidden = len(self.rows) - TABLE_ROWS
        return f"{hidden} more rows in {self.saved}" if hidden > 0 else ""

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(row[c]))}</td>" for c in self.columns) + "</tr>"
                       for row in self.rows[:TABLE_ROWS])
        more = f"<p><i>{html.escape(self._more())}</i></p>" if self._more() else ""
        return (f"<p><b>{html.escape(self.title)}</b></p><table><thead><tr>{head}</tr></thead>"
                f"<tbody>{body}</tbody></table>{more}")

    def __repr__(self) -> str:
        lines = [f"| {' | '.join(self.columns)} |", "|" + "---|" * len(self.columns)]
        lines += [f"| {' | '.join(_md(row[c]) for c in self.columns)} |" for row in self.rows[:TABLE_ROWS]]
        return "\n".join([self.title, "", *lines, self._more()]).rstrip()


def swap_in(staging: Path, figures: Path) -> list[str]:
    """Move every folder a successful notebook wrote under ``staging`` over its namesake in ``figures`` (the old one
    renamed aside first, then removed); returns the folders' names."""
    names = []
    for new in sorted(p for p in Path(staging).iterdir() if p.is_dir()):
        final, old = Path(figures) / new.name, Path(figures) / f".old-{new.name}-{os.getpid()}"
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            os.replace(final, old)
        os.replace(new, final)
        shutil.rmtree(old, ignore_errors=True)
        names.append(new.name)
    return names


def mark(folder: Path, kind: str, **facts) -> None:
    """Mark ``folder``'s artifacts (``kind``: a key of MARKS, "STALE.json" or "DRAFT.json") with ``facts``: why, and
    when; INDEX.md shows the mark beside each of them."""
    if Path(folder).is_dir():
        stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        (Path(folder) / kind).write_text(json.dumps({"since_utc": stamp, **facts}, indent=1) + "\n")


def marks_of(folder: Path) -> dict[str, dict]:
    """{"STALE": facts, "DRAFT": facts} for the marks ``folder`` carries."""
    return {label: json.loads((Path(folder) / name).read_text())
            for name, label in MARKS.items() if (Path(folder) / name).is_file()}


# What a notebook's artifacts depend on besides the notebook itself: a change here after the commit a notebook ran at
# makes its artifacts stale.
CODE = ("notebooks/artifacts.py", "specrepro", "simulations")
NOT_CODE = ":(exclude)*.md"  # (a git pathspec) the READMEs beside the code: prose, not what a notebook calls
_REVISION = re.compile(r"git_revision: ([0-9a-f]{7,40})")


def staleness(figures: Path, executed: Path, root: Path) -> list[dict]:
    """Per artifact folder of ``figures``: its marks (STALE, DRAFT), the commit its executed notebook (in
    ``executed``) names, and the files of that notebook and of ``CODE`` that changed between that commit and HEAD
    in the checkout ``root``: {"folder", "executed", "revision", "changed": [...], "marks": {...}}."""
    rows = []
    for folder in sorted(p for p in Path(figures).iterdir() if (p / INDEX_NAME).is_file()):
        run = next((nb for nb in sorted(Path(executed).glob("*.ipynb")) if nb.stem.replace("-", "_") == folder.name),
                   None)
        found = _REVISION.search(run.read_text()) if run is not None else None
        revision, changed = (found.group(1) if found else None), []
        if revision is not None:
            notebook = f"notebooks/{run.stem.split('-')[0]}.ipynb"
            diff = subprocess.run(["git", "diff", "--name-only", revision, "HEAD", "--", notebook, *CODE, NOT_CODE],
                                  cwd=root, capture_output=True, text=True)
            changed = diff.stdout.split() if diff.returncode == 0 else [f"(git cannot compare {revision} with HEAD)"]
        rows.append({"folder": folder.name, "executed": run.name if run else None, "revision": revision,
                     "changed": changed, "marks": marks_of(folder)})
    return rows


def staleness_lines(rows: list[dict]) -> list[str]:
    """The reproduction report's section on stale artifacts, from :func:`staleness`."""
    lines = ["## Stale artifacts", "",
             "An artifact is stale when its notebook's last run failed (STALE), when it was made from a tree with "
             "uncommitted changes (DRAFT), or when the notebook or the code it calls (`" + "`, `".join(CODE) + "`, "
             "their READMEs aside) changed after the commit its executed notebook names: then "
             "`make figures ONLY=<notebook>` remakes it.",
             ""]
    stale = [r for r in rows if r["changed"] or r["marks"] or r["revision"] is None]
    if not stale:
        return lines + ["None: every artifact folder's notebook ran at a commit whose code is unchanged at HEAD.", ""]
    lines += ["| artifacts | executed notebook | commit it names | changed since (files) | marks |",
              "|---|---|---|---|---|"]
    for r in stale:
        changed = (f"{len(r['changed'])}: " + ", ".join(f"`{f}`" for f in r["changed"][:4])
                   + (", ..." if len(r["changed"]) > 4 else "")) if r["changed"] else "none"
        marks = "; ".join(f"**{label}**: {_md(facts.get('reason', ''))}" for label, facts in r["marks"].items())
        lines.append(f"| `{r['folder']}/` | {r['executed'] or 'none'} | {(r['revision'] or 'not recorded')[:12]} | "
                     f"{changed} | {marks or '—'} |")
    return lines + [""]


def collect_index(figures: Path) -> list[dict]:
    """Every entry of every ``figures/*/index.json``, sorted by artifact, each with its folder's marks."""
    entries = []
    for index in sorted(Path(figures).glob(f"*/{INDEX_NAME}")):
        marks = marks_of(index.parent)
        entries.extend({**e, **({"marks": marks} if marks else {})} for e in json.loads(index.read_text()))
    return sorted(entries, key=lambda e: e["artifact"])


def _timing_lines(path: Path) -> list[str]:
    """INDEX.md's section on how long each notebook run took, and where (from ``timings.json``)."""
    try:
        timings = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    last = timings.get("last_run", {})
    box = last.get("machine", {})
    lines = ["", "## Run times", "",
             f"Last `run_notebooks.py` call: profile {last.get('profile')}, {last.get('jobs')} notebook(s) at a time "
             f"with {last.get('threads_per_notebook')} thread(s) each"
             + (", the timed ones alone on every core (`run_notebooks.TIMED`)"
                if any(r.get("alone") for r in timings.get("runs", {}).values()) else "") + ", wall time "
             f"{last.get('wall_s', 0) / 60:.1f} min, started {last.get('started_utc')} on {box.get('cpu')} "
             f"({box.get('cores')} cores{', GPU ' + box['gpu'] if box.get('gpu') else ''}).",
             "", "| notebook run | profile | wall time (min) | threads | notebooks at a time | machine | finished (UTC) |",
             "|---|---|---|---|---|---|---|"]
    for name, run in timings.get("runs", {}).items():
        where = run.get("cpu") + (f", GPU {run['gpu']}" if run.get("gpu") else "")
        at_once = 1 if run.get("alone") else run.get("jobs")  # a timed run had the machine to itself
        lines.append(f"| `{name}` | {run.get('profile')} | {run['wall_s'] / 60:.1f} | {run.get('threads')} | "
                     f"{at_once} | {_md(where)} | {run.get('finished_utc')} |")
    calls = timings.get("calls", [])
    if calls:
        lines += ["", "Every `run_notebooks.py` call recorded here, newest first (a call that found its work in the run "
                      "cache resumes it, so it is faster than one that computed everything):", "",
                  "| started (UTC) | profile | notebook runs | wall time (min) | notebooks at a time | machine |",
                  "|---|---|---|---|---|---|"]
        for call in reversed(calls):
            lines.append(f"| {call.get('started_utc')} | {call.get('profile')} | {len(call.get('runs', {}))} | "
                         f"{call.get('wall_s', 0) / 60:.1f} | {call.get('jobs')} | {_md(call.get('cpu'))} |")
    return lines


def collect_verdicts(figures: Path) -> list[dict]:
    """Every notebook's verdicts (``figures/*/verdicts.csv``), in claim order; a claim decided by two notebooks is
    an error naming both, since a reader could not tell which one holds."""
    rows, seen = [], {}
    for path in sorted(Path(figures).glob(f"*/{VERDICTS_STEM}.csv")):
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row["claim"] in seen:
                    raise ValueError(f"claim {row['claim']!r} is decided twice: in {seen[row['claim']]} and in "
                                     f"{path.relative_to(figures)}; one notebook decides it, the other points to it")
                seen[row["claim"]] = path.relative_to(figures).as_posix()
                rows.append({**row, "artifact": seen[row["claim"]]})
    return sorted(rows, key=lambda r: r["claim"])


def write_index(figures: Path) -> tuple[Path, Path]:
    """Write ``figures/INDEX.md`` and ``figures/index.json`` from the notebooks' own indexes.

    Files under figures/ that no notebook lists are named at the end, so nothing goes unexplained.
    """
    figures = Path(figures)
    entries = collect_index(figures)
    listed = {e["artifact"] for e in entries}
    own = {"INDEX.md", INDEX_NAME, "REPRODUCTION.md", "VERDICTS.md", "timings.json", *MARKS}
    unlisted = sorted(
        p.relative_to(figures).as_posix() for p in figures.rglob("*")
        if p.is_file() and p.name not in own and p.relative_to(figures).as_posix() not in listed)
    lines = [
        "# Figures and tables",
        "",
        "Written by `notebooks/run_notebooks.py` from each notebook's `figures/<notebook>/index.json`;",
        "do not edit by hand. Documents are the founding documents in `shared/seeds/`.",
        "",
        "| artifact | document | item | notebook | description |",
        "|---|---|---|---|---|",
    ]
    for e in entries:
        flags = "".join(f"**{label}** " for label in e.get("marks", {}))
        lines.append(f"| {flags}[{e['artifact']}]({e['artifact']}) | {_md(e['document'])} | "
                     f"{_md(e['item'])} | `{e['notebook']}` | {_md(e['description'])} |")
    marked = {e["artifact"].split("/")[0]: e["marks"] for e in entries if e.get("marks")}
    if marked:
        lines[5:5] = ["## Marked artifacts", "",
                      "**STALE**: the notebook's last run failed, so these are from an earlier run; **DRAFT**: made "
                      "from a tree with uncommitted changes, so no commit reproduces them.", ""] + [
            f"- `{folder}/`: " + "; ".join(f"{label} since {facts.get('since_utc')}: {_md(facts.get('reason', ''))}"
                                           for label, facts in marks.items()) for folder, marks in marked.items()] + [""]
    pngs = [e for e in entries if e["artifact"].endswith(".png")]
    marked_pngs = [e for e in pngs if e.get("document_number")]
    lines[5:5] = [f"{len(marked_pngs)} of {len(pngs)} figures draw the document's own number beside ours "
                  "(`plots.document_marker` / `plots.document_line`); tables carry it in a `paper`/`document` "
                  "column.", ""]
    lines += _timing_lines(figures / "timings.json")
    if unlisted:
        lines += ["", "## Files no notebook lists", ""] + [f"- `{p}`" for p in unlisted]
    md, js = figures / "INDEX.md", figures / INDEX_NAME
    md.write_text("\n".join(lines) + "\n")
    js.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")
    return md, js
