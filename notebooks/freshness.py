"""Whether each notebook run's committed outputs still follow from the code: by the files the run used, not by commit.

Each run of ``run_notebooks.py`` leaves, beside its executed notebook, ``executed/<run>.deps.json``: the files of the
checkout it used, each with its SHA-256, measured while it ran (``specrepro.core.deps.Trace``), plus the notebook
itself and ``requirements.lock``. A run is **fresh** while every one of those files is as it was, whatever else
changed and at whatever commit; **stale** once one of them differs (the record names which); **untraced** when it has
no record (made before records existed); **missing** when it never ran. The machine it ran on is recorded beside the
digests and never stales it: its numbers belong to that machine, as the report says.

    python notebooks/run_notebooks.py --status      # (make status) each run, fresh or stale, and why
    python notebooks/run_notebooks.py --stale       # (make figures STALE=1) rerun only the runs not fresh
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import subprocess
from pathlib import Path

from specrepro.core.provenance import atomic_write_text
from specrepro.core.deps import ROOT, changed, digest_of

SUFFIX = ".deps.json"
REVISION = re.compile(r"git_revision: ([0-9a-f]{7,40})")  # in an executed notebook's provenance cell (as artifacts')


def record_path(executed: Path, run: str) -> Path:
    return Path(executed) / f"{run}{SUFFIX}"


def write_record(executed: Path, run: str, files: dict[str, str], **facts) -> Path:
    """Write ``run``'s record: ``files`` ({file: SHA-256}) and ``facts`` (notebook, commit, profile, machine, how
    the files were traced)."""
    record = {"run": run, "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **facts,
              "files": dict(sorted(files.items()))}
    return atomic_write_text(record_path(executed, run), json.dumps(record, indent=1) + "\n")


def read_record(executed: Path, run: str) -> dict | None:
    path = record_path(executed, run)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as error:
        raise SystemExit(f"{path}: not a dependency record ({error}); delete it and rerun the notebook") from None


def status(executed: Path, runs: list[str], root: Path = ROOT) -> list[dict]:
    """Per run: {"run", "state": fresh | stale | untraced | missing, "changed": [files], "made_at", "traced",
    "files": n}."""
    rows = []
    for run in runs:
        record = read_record(executed, run)
        has_output = (Path(executed) / f"{run}.ipynb").is_file()
        if not has_output:
            state, diff = "missing", []
        elif record is None:
            state, diff = "untraced", []
        else:
            diff = changed(record["files"], root)
            state = "stale" if diff else "fresh"
        rows.append({"run": run, "state": state, "changed": diff,
                     "made_at": (record or {}).get("made_at"), "traced": (record or {}).get("traced"),
                     "files": len((record or {}).get("files", {}))})
    return rows


def status_lines(rows: list[dict]) -> list[str]:
    """What ``--status`` prints: one line a run, then the files that stale it."""
    lines = []
    for row in rows:
        made = f"made at {row['made_at'][:10]}" if row["made_at"] else ""
        if row["state"] == "fresh":
            lines.append(f"fresh     {row['run']}: {made}; none of its {row['files']} files changed")
        elif row["state"] == "stale":
            lines.append(f"stale     {row['run']}: {made}; {len(row['changed'])} of its {row['files']} files "
                         "changed since:")
            lines += [f"            {path}" for path in row["changed"]]
        elif row["state"] == "untraced":
            lines.append(f"untraced  {row['run']}: no dependency record (made before records were kept): counted "
                         "stale")
        else:
            lines.append(f"missing   {row['run']}: never run here")
    counts = {s: sum(r["state"] == s for r in rows) for s in ("fresh", "stale", "untraced", "missing")}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" of {len(rows)} run(s)")
    return lines


def not_fresh(rows: list[dict]) -> list[str]:
    """The runs ``--stale`` reruns."""
    return [row["run"] for row in rows if row["state"] != "fresh"]


# ------------------------------------------------------------------ runs this machine made


def _made_here_file() -> Path:
    from specrepro.run.cache import cache_root

    return cache_root() / "notebook_runs_made_here.json"


def remember(executed: Path, run: str, made: bool = True) -> None:
    """Note in this machine's run cache that it made ``run`` (in ``executed``) from the files its record lists, or
    (``made`` False: the run failed, its figures are marked STALE) forget it. A DRAFT run is never noted: a later
    ``make figures`` from a clean tree makes it again."""
    record = read_record(executed, run) if made else None
    path = _made_here_file()
    try:
        done = json.loads(path.read_text())
    except (OSError, ValueError):
        done = {}
    key = f"{Path(executed).resolve()}::{run}"
    done.pop(key, None)
    if record is not None and not record.get("draft"):
        done[key] = {"files": digest_of(record["files"]), "profile": record["profile"], "seed": record.get("seed")}
    atomic_write_text(path, json.dumps(done, indent=1, sort_keys=True) + "\n")


def made_here(executed: Path, runs: list[str], profile: str, seed: int | None = None) -> list[str]:
    """The ``runs`` that this machine made itself (its run cache says so), with this profile and ``seed``, from files
    that are all unchanged since: a second ``make figures`` keeps them instead of running them again. A fresh
    machine has made none, so it computes everything."""
    try:
        made = json.loads(_made_here_file().read_text())
    except (OSError, ValueError):
        return []
    kept = []
    for row in status(executed, runs):
        mine = made.get(f"{Path(executed).resolve()}::{row['run']}")
        record = read_record(executed, row["run"]) if mine is not None and row["state"] == "fresh" else None
        if record is not None and mine == {"files": digest_of(record["files"]), "profile": profile, "seed": seed}:
            kept.append(row["run"])
    return kept


# ------------------------------------------------------------------ what the index and the report say of each run


def staleness(figures: Path, executed: Path, root: Path = ROOT) -> list[dict]:
    """``artifacts.staleness`` (per artifact folder: marks, the commit its run names, the files of the notebook and
    of the code that git says changed since), with the changed files taken from the run's record where it has one:
    then only the files it used whose bytes differ count ("by": "digest", else "commit")."""
    from artifacts import staleness as by_commit

    rows = by_commit(figures, executed, root)
    for row in rows:
        record = read_record(executed, Path(row["executed"]).stem) if row["executed"] else None
        row["by"] = "digest" if record is not None else "commit"
        if record is not None:
            row["changed"] = changed(record["files"], root)
    return rows


def report_lines(rows: list[dict]) -> list[str]:
    """The reproduction report's sections on which run made each folder, and on stale artifacts
    (``artifacts.staleness_lines``), from :func:`staleness`."""
    from artifacts import staleness_lines

    lines = ["## Which run made each folder", "",
             "Each folder's numbers come from the run of its notebook at the commit named here. A run with a "
             "dependency record (`notebooks/executed/<run>.deps.json`: the files it used, measured while it ran) is "
             "judged by those files' bytes now; one without, by every file of its notebook and the package that git "
             "says changed after its commit.", "",
             "| artifacts | made at | state |", "|---|---|---|"]
    for r in rows:
        if r["changed"] or r["revision"] is None:
            state = f"stale: {len(r['changed'])} file(s) it used changed since" if r["changed"] else "stale"
        elif r["by"] == "digest":
            state = "made at an earlier commit; the code it ran is unchanged"
        else:
            state = "no file it could call changed since"
        lines.append(f"| `{r['folder']}/` | {(r['revision'] or 'not recorded')[:10]} | {state} |")
    return lines + [""] + staleness_lines(rows)


def made_by(rows: list[dict]) -> dict[str, str]:
    """Artifact folder -> the report's words for the run that made it, from :func:`staleness`: its commit, and
    whether the code it ran is unchanged since."""
    def state(r: dict) -> str:
        if r["changed"] or r["revision"] is None:
            return "stale"
        return "unchanged code" if r["by"] == "digest" else "no change since"
    return {r["folder"]: f"{(r['revision'] or 'no commit recorded')[:10]} ({state(r)})" for r in rows}


def index_lines(executed: Path) -> list[str]:
    """INDEX.md's section on each notebook run: its commit, and whether it is fresh by its record."""
    runs = sorted(p.stem for p in Path(executed).glob("*.ipynb") if not p.name.startswith("."))
    lines = ["", "## Notebook runs", "",
             "Each run's commit, and whether the files it used (its `executed/<run>.deps.json`) are unchanged now "
             "(`make status` names the ones that changed).", "",
             "| notebook run | made at | freshness | files it used | how they were traced |", "|---|---|---|---|---|"]
    for row in status(Path(executed), runs):
        state = row["state"] + (f" ({len(row['changed'])} changed)" if row["changed"] else "")
        traced = (row["traced"] or "no record").replace("|", "\\|")
        lines.append(f"| `{row['run']}` | {(row['made_at'] or 'not recorded')[:10]} | {state} | {row['files']} | "
                     f"{traced} |")
    return lines


# ------------------------------------------------------------------ records for runs made before records were kept


def blob_digest(revision: str, path: str, root: Path = ROOT) -> str:
    """SHA-256 of ``path``'s bytes at ``revision`` (git), or "absent at <revision>" where it did not exist."""
    shown = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=root, capture_output=True)
    if shown.returncode != 0:
        return f"absent at {revision[:10]}"
    return hashlib.sha256(shown.stdout).hexdigest()


def backfill(traces: Path, executed: Path, root: Path = ROOT) -> list[str]:
    """A record for each run in ``executed`` that has none, from the record of the same run in ``traces`` (a smoke
    run's executed folder: every cell's code path, on tiny settings): that run's list of files, each digested as it
    was at the commit the executed notebook names. The record says so (``traced``): the next real run of the
    notebook replaces it with its own trace. Returns the runs given a record."""
    done = []
    for notebook in sorted(Path(executed).glob("*.ipynb")):
        run = notebook.stem
        smoke = read_record(traces, run)
        found = REVISION.search(notebook.read_text())
        if read_record(executed, run) is not None or smoke is None or found is None:
            continue
        revision = full_revision(found.group(1), root)
        if revision is None:
            print(f"{run}: its commit {found.group(1)} is not in this checkout: no record made")
            continue
        files = {path: blob_digest(revision, path, root) for path in smoke["files"]}
        write_record(executed, run, files, notebook=smoke.get("notebook"), made_at=revision, profile=None,
                     machine=None, traced=f"backfilled: the files a smoke run traced at {smoke['made_at'][:10]}, "
                                         f"digested as they were at {revision[:10]}, the commit this run names")
        done.append(run)
    return done


def full_revision(short: str, root: Path = ROOT) -> str | None:
    """The full commit id of ``short``, or None where this checkout has no such commit."""
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{short}^{{commit}}"], cwd=root,
                           capture_output=True, text=True)
    return found.stdout.strip() or None


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="give the executed notebooks made before dependency records were "
                                                 "kept a record, from a smoke run's traces")
    parser.add_argument("traces", type=Path, help="a smoke run's executed folder (build/smoke/executed)")
    parser.add_argument("--executed", type=Path, default=ROOT / "notebooks" / "executed")
    args = parser.parse_args()
    if not args.traces.is_dir():
        parser.error(f"{args.traces} is not a folder")
    print("\n".join(backfill(args.traces, args.executed)) or "no run needed a record")
