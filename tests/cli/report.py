"""Issue 28's table: every case of tests/cli/cases.py and each scenario of tests/cli/harness.py (interruption, two
processes at once, damage), run against a checkout, one markdown row each.

    python -m tests.cli.report --root PATH [--out FILE] [--jobs N] [--timeout S]

``python -m specrepro`` runs with its working directory PATH, so PATH's package is the one judged (the tiny model
folders are built by it too); a command that hangs is killed after --timeout seconds and reported so. Columns: the
exit status, the first stderr line that specrepro wrote (else the first line; the last one for scenarios;
``Traceback: <last line>`` when there is a traceback), the non-empty lines on stderr, whether the run left files
half-written (for scenarios: records lost, doubled or not kept), and the contract's verdict (ok, or what breaks it).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.cli import harness
from tests.cli.cases import CASES

DEFAULT_PYTHON = "/work/main/.venv/bin/python"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def row(name: str, exit_: str, shown: str, lines: int | str, half: str, problems: list[str]) -> str:
    verdict = "ok" if not problems else "FAIL: " + "; ".join(problems)
    if len(verdict) > 160:
        verdict = verdict[:159] + "…"
    return "| " + " | ".join(cell(str(x)) for x in (name, exit_, shown, lines, half, verdict)) + " |"


def half_written(changed: list[str]) -> str:
    return "no" if not changed else "yes: " + ", ".join(changed[:3]) + (" …" if len(changed) > 3 else "")


def record_damage(problems: list[str]) -> str:
    """The scenario's data verdict: "yes" when a problem is about records lost, doubled or not kept."""
    bad = [p for p in problems if re.search(r"more than once|distinct keys|not kept|changed or dropped|stray files|"
                                            r"missing from|left its --out|holds the damaged|counts a duplicate|"
                                            r"first record of each key|records, not", p)]
    return "no" if not bad else "yes: " + "; ".join(bad)[:100]


def run_cases(world: harness.World, base: Path, jobs: int, timeout: float) -> list[str]:
    rows, pool = [], ThreadPoolExecutor(max_workers=jobs)
    futures = {}
    for i, case in enumerate(CASES):
        if world.unmet(case) is None:
            tmp = base / f"case-{i:02d}"
            futures[case.name] = (pool.submit(harness.run_case, case, world, tmp, timeout), tmp)
    for case in CASES:
        if case.name not in futures:
            rows.append(row(case.name, "skipped", world.unmet(case), "", "", []))
            continue
        future, tmp = futures[case.name]
        try:
            o = future.result()
        except Exception as err:  # the harness itself failed: say so in the row
            rows.append(row(case.name, "harness error", f"{type(err).__name__}: {err}", "", "", ["harness error"]))
            continue
        rows.append(row(case.name, o.exit, o.shown(), len(o.lines), half_written(o.changed),
                        harness.bad_input_problems(case, o, world, tmp)))
        print(f"{case.name}: {o.exit}", file=sys.stderr, flush=True)
    pool.shutdown()
    return rows


def run_scenarios(world: harness.World, base: Path) -> list[str]:
    rows = []

    def scenario(name, go):
        try:
            rows.append(go())
        except Exception as err:
            rows.append(row(name, "harness error", f"{type(err).__name__}: {err}", "", "", ["harness error"]))
        print(f"{name}: done", file=sys.stderr, flush=True)

    def bench_sigint():
        s = harness.interrupt_bench(world, base / "sigint-bench")
        p = harness.interrupt_bench_problems(s)
        return row("SIGINT to bench, then the same command", f"{s.first.exit}, rerun {s.rerun.exit}",
                   s.first.shown(last=True), len(s.first.lines), record_damage(p), p)

    def plain_sigint(name, go):
        def inner():
            s = go(world, base / name.split()[-1])
            p = harness.plain_interrupt_problems(s)
            return row(name, s.first.exit, s.first.shown(last=True), len(s.first.lines), "-", p)
        return inner

    def two():
        s = harness.two_benches(world, base / "two-benches")
        p = harness.two_benches_problems(s)
        loser = s.a if s.a.returncode != 0 else s.b  # the refused one (or the one that failed otherwise)
        return row("two benches on one --out at once", f"{s.a.exit} and {s.b.exit}", loser.shown(),
                   len(loser.lines), record_damage(p), p)

    finished: list[Path] = []

    def finish_first():
        o, out = harness.finished_run(world, base / "finished")
        if o.returncode != 0:
            raise RuntimeError(f"the finished run failed: {o.shown(last=True)}")
        finished.append(out)

    def damaged(name, go, judge):
        def inner():
            if not finished:
                finish_first()
            s = go(world, base / name.split()[0], finished[0])
            p = judge(s)
            marks = [line for line in s.rerun.lines if "records.jsonl" in line or "duplicate" in line.lower()]
            shown = marks[0][:139] if marks else s.rerun.shown(last=True)
            return row(name, s.rerun.exit, shown, len(s.rerun.lines), record_damage(p), p)
        return inner

    def limit():
        o, out = harness.limit_two(world, base / "limit-2")
        p = harness.limit_two_problems(o, out)
        return row("bench --limit 2 (4 prompts)", o.exit, o.shown(last=True), len(o.lines),
                   f"{len(harness.record_lines(out))} records", p)

    def corrected():
        s = harness.corrected_rerun(world, base / "corrected")
        p = harness.corrected_problems(s)
        return row("bench with a too-long 2nd prompt, then corrected", f"{s.failed.exit}, rerun {s.rerun.exit}",
                   s.failed.shown(), len(s.failed.lines), "yes: --out left" if s.left else "no", p)

    scenario("SIGINT to bench", bench_sigint)
    scenario("SIGINT to generate", plain_sigint("SIGINT to generate", harness.interrupt_generate))
    scenario("SIGINT to calibrate", plain_sigint("SIGINT to calibrate", harness.interrupt_calibrate))
    scenario("two benches", two)
    scenario("garbage middle line", damaged("garbage line 2 of records.jsonl, then the same bench",
                                            harness.damaged_middle, harness.damaged_middle_problems))
    scenario("duplicate keys", damaged("duplicate keys in records.jsonl, then the same bench",
                                       harness.duplicated, harness.duplicated_problems))
    scenario("--limit 2", limit)
    scenario("corrected rerun", corrected)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cli.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="the checkout to judge")
    parser.add_argument("--out", default=None, help="write the markdown here (default: stdout)")
    parser.add_argument("--python", default=DEFAULT_PYTHON if Path(DEFAULT_PYTHON).exists() else sys.executable)
    parser.add_argument("--jobs", type=int, default=max(2, len(os.sched_getaffinity(0))),
                        help="bad-input cases run at once")
    parser.add_argument("--timeout", type=float, default=harness.TIMEOUT, help="seconds before a command is killed")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    base = Path(tempfile.mkdtemp(prefix="specrepro-i28-report-"))
    t0 = time.perf_counter()
    try:
        world = harness.build_world(root, base / "world", args.python)
        case_rows = run_cases(world, base, args.jobs, args.timeout)
        scenario_rows = run_scenarios(world, base)
    finally:
        for frozen in base.glob("*/frozen"):
            harness._chattr(frozen, False)
        shutil.rmtree(base, ignore_errors=True)
    head = ["| case | exit status | stderr | lines on stderr | half-written files left | contract |",
            "| --- | --- | --- | --- | --- | --- |"]
    text = "\n".join([
        f"Issue 28 fault-injection table for {root} ({harness_revision(root)}), {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{time.perf_counter() - t0:.0f} s; `python -m tests.cli.report --root {args.root}`.",
        "",
        "Bad input (tests/cli/cases.py): stderr column = the first line specrepro wrote (else the first line).",
        "",
        *head, *case_rows,
        "",
        "Scenarios (tests/cli/harness.py): stderr column = the last line specrepro wrote (the refusal for two benches, "
        "the damage report for records.jsonl); half-written = records lost, doubled or not kept.",
        "",
        *head, *scenario_rows,
    ]) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    return 0


def harness_revision(root: Path) -> str:
    import subprocess
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "no git"
    return f"{rev}{' with uncommitted changes' if dirty else ''}"


if __name__ == "__main__":
    sys.exit(main())
