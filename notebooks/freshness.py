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
import json
from pathlib import Path

from specrepro.core.provenance import atomic_write_text
from specrepro.core.deps import ROOT, changed

SUFFIX = ".deps.json"


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
