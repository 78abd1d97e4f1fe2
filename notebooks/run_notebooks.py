#!/usr/bin/env python
"""Run every figure notebook with papermill, index what they wrote, and write the reproduction report.

    python notebooks/run_notebooks.py [--profile smoke|quick|full] [--jobs N] [--threads T] [--only NAME ...]

1. Each ``notebooks/*.ipynb`` (and each variant in ``VARIANTS``) runs with the parameters ``profile``,
   ``out_root`` and, where it declares them, ``threads`` and ``seed``, in the kernel ``python3``, which
   jupyter_client starts with this interpreter (so ``.venv/bin/python`` runs the notebooks in the venv).
2. ``--jobs`` notebooks run at a time (default 2, or 1 on a 1-core machine), each in its own process with
   ``--threads`` torch/BLAS threads (default: the cores divided among the jobs), except the ``TIMED`` ones, which
   run alone on every core (but in ``smoke``, whose timings decide nothing), and the longest untimed run when
   it is the only one or would outlast the others together (``wide_runs``), which also runs alone on every core
   (unless ``--threads`` is given). The longest expected notebook starts first; a notebook named in ``DEPENDS`` waits for the ones it reads. Each start prints the
   notebook's expected time and ETA (from its last run with this profile, kept in the cache), and a heartbeat
   every minute says how far each running notebook is.
3. Where things go. ``smoke`` (tiny settings, every cell's real code path; what CI runs) writes under
   ``build/smoke/`` (``figures/`` and ``executed/``), never over the committed figures. ``quick`` and ``full``
   write ``figures/<notebook>/`` and ``notebooks/executed/<name>.ipynb``. ``--out DIR`` sends any profile to DIR.
   An executed notebook is written to a temporary file first and renamed: a failed run never leaves a half-written
   one (the failed copy is kept in the system temp directory for debugging). Its artifacts go to
   ``<out>/.staging/<name>/`` and are swapped into ``figures/`` only when it succeeds: a failed notebook leaves the
   previous artifacts in place, marked STALE (``STALE.json`` beside them, and in INDEX.md).
   On a checkout with uncommitted changes (outside figures/ and notebooks/executed/), writing the checkout's
   figures/ is refused unless ``--allow-draft``, which marks every artifact it writes DRAFT; the scratch profiles
   mark theirs DRAFT without asking.
4. ``figures/INDEX.md`` lists every artifact and each notebook's wall time, profile and machine
   (``figures/timings.json``); ``figures/REPRODUCTION.md`` sets every catalogue artifact of the founding
   documents beside ours, with a verdict, and says what moved against the committed copy.

Resumable work (bench records, training cells) lives in ``$SPECREPRO_CACHE/runs/`` keyed by config and code
(``specrepro.run.cache``); nothing under figures/ is read back as an input. Exits non-zero, naming each failed
notebook and its failing cell's error, if any notebook fails; the others still run and are indexed.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures as cf
import contextlib
import datetime as dt
import json
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
KERNEL = "python3"
PROFILES = ("smoke", "quick", "full")
SCRATCH = {"smoke": ROOT / "build" / "smoke"}  # profiles that never write over the committed figures
HEARTBEAT_S = 60
KEEP_CALLS = 10  # timings.json keeps this many past calls (each one's wall time and per-notebook times)

sys.path[:0] = [str(NOTEBOOKS), str(ROOT)]
from artifacts import STAGING_ENV, mark, swap_in, write_index  # noqa: E402  (lives beside this script)
import freshness  # noqa: E402
from specrepro.core.provenance import git_revision  # noqa: E402
from specrepro.core.deps import file_digest  # noqa: E402
from specrepro.core.machine import cpu_model  # noqa: E402

# Notebooks that also run with other parameters: stem -> {variant: parameters}. A variant's executed copy is
# executed/<stem>-<variant>.ipynb; the notebook itself writes its figures to a folder of their own.
VARIANTS: dict[str, dict[str, dict]] = {
    "online_speculative_stream": {"sequences": {"examples": "sequences"}},  # online updates on whole sequences
}
# Runs that read what another run computed: run name -> the runs it waits for. None today: every notebook computes
# what it shows (the zoo's trained weights are inputs shipped in specrepro/zoo/, not outputs of a notebook).
DEPENDS: dict[str, tuple[str, ...]] = {}
# Notebooks whose verdicts rest on timings (a bench's speeds, batched walls): each runs alone, on every core, so that
# no sibling notebook's load is in its numbers (their bench would print "the machine is busy"). Smoke runs decide
# nothing and share the machine.
TIMED = frozenset({"batch_speculative", "eagle_feature_draft", "medusa_trees", "mentored_speed_quality",
                   "mjsd_joint_decoding", "ppd_parallel_prompt_decoding", "speculative_slides_tables",
                   "survey_mentored_staged_batch"})
# Notebooks that make no artifact: explored by hand in JupyterLab (tests/test_explore.py executes them headless).
INTERACTIVE = ("explore",)


def select(only: list[str] | None) -> list[Path]:
    """The notebooks to run, sorted (the interactive ones left out); ``only`` names them by stem or file name."""
    found = sorted(p for p in NOTEBOOKS.glob("*.ipynb") if p.stem not in INTERACTIVE)
    if not only:
        return found
    by_stem = {p.stem: p for p in found}
    wanted = [name[:-6] if name.endswith(".ipynb") else name for name in only]
    unknown = [name for name in wanted if name not in by_stem]
    if unknown:
        raise SystemExit(f"unknown notebook(s) {unknown}; available: {sorted(by_stem)}")
    return [by_stem[name] for name in sorted(set(wanted))]


def check_kernel() -> None:
    """Say which interpreter the kernel will run, and stop if it is not this one."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(KERNEL)
    program = spec.argv[0]
    # jupyter_client replaces a bare "python" (or pythonX / pythonX.Y) with sys.executable.
    bare = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2])}
    runs = sys.executable if program in bare else program
    print(f"kernel {KERNEL!r} ({spec.resource_dir}) runs {runs}", flush=True)
    if Path(runs).resolve() != Path(sys.executable).resolve():
        raise SystemExit(f"kernel {KERNEL!r} would run {runs}, not this interpreter "
                         f"{sys.executable}; install ipykernel in this environment")


def declared_parameters(notebook: Path) -> set[str]:
    """The names the notebook's tagged ``parameters`` cell assigns. Papermill would inject any other name silently
    (and the notebook would run with its default), so only these are passed."""
    cells = json.loads(notebook.read_text())["cells"]
    (cell,) = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    tree = ast.parse("".join(cell["source"]))
    return {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}


def runs_of(notebook: Path) -> list[tuple[str, dict]]:
    """(executed name, extra parameters) of each run of ``notebook``: itself, then its variants."""
    return [(notebook.stem, {})] + [(f"{notebook.stem}-{variant}", extra)
                                    for variant, extra in VARIANTS.get(notebook.stem, {}).items()]


def run_one(notebook: Path, parameters: dict, name: str, executed: Path, threads: int, figures: Path,
            draft: dict | None = None) -> str | None:
    """Execute one notebook into ``executed/<name>.ipynb`` in this process; None on success, else a one-line
    description of the failure. Runs in a worker process, so the thread settings stay its own.

    Its artifacts go to a staging folder and are swapped into ``figures`` whole only when it succeeds (marked DRAFT
    there when ``draft`` says the tree has uncommitted changes); a failed run leaves the previous artifacts in place,
    marked STALE with the failure."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)  # the kernel inherits them: numpy and torch start with this many threads
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    # the checkout the notebook runs from, read before it runs: an edit made while it runs (to a file it never used,
    # or the digests say so) does not make this run one "with uncommitted changes"
    made_at = git_revision(ignore=("figures", "notebooks/executed"))
    executed.mkdir(parents=True, exist_ok=True)
    staging = figures.parent / ".staging" / name
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    os.environ[STAGING_ENV] = str(staging)  # the kernel inherits it: artifacts.Artifacts writes there
    final, partial = executed / f"{name}.ipynb", executed / f".{name}.partial.ipynb"
    traced = staging / "deps.trace.json"  # the kernel's record of the files it used (specrepro.core.deps)
    ipython = kernel_startup(staging.parent / f".ipython-{name}", traced)
    os.environ["IPYTHONDIR"] = str(ipython)
    source = notebook.resolve().relative_to(ROOT).as_posix() if notebook.resolve().is_relative_to(ROOT) else None
    # (a notebook outside the checkout, as in the tests, is no file a run can depend on); digested before it runs
    files = {source: file_digest(notebook)} if source is not None else {}
    failure = None
    try:
        pm.execute_notebook(str(notebook), str(partial), parameters=parameters,
                            kernel_name=KERNEL, cwd=str(ROOT), progress_bar=False)
        files.update(json.loads(traced.read_text()))
    except PapermillExecutionError as error:
        kept = Path(tempfile.gettempdir()) / f"{name}.failed.ipynb"
        if partial.exists():
            shutil.move(partial, kept)
        failure = (f"{notebook.name}: cell [{error.cell_index}] of the executed copy (execution count "
                   f"{error.exec_count}) raised {error.ename}: {error.evalue}  [executed copy: {kept}]")
    except BaseException as error:  # kernel death, bad notebook JSON, no trace, Ctrl-C: clean up, report
        partial.unlink(missing_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(ipython, ignore_errors=True)
        if isinstance(error, KeyboardInterrupt):
            raise
        failure = f"{notebook.name}: {type(error).__name__}: {error}"
    if failure is not None:
        shutil.rmtree(ipython, ignore_errors=True)
        for folder in {name.replace("-", "_"), *(p.name for p in staging.glob("*") if p.is_dir())}:
            mark(figures / folder, "STALE.json", reason=f"the last run of {name} failed: {failure}")
        shutil.rmtree(staging, ignore_errors=True)
        return failure
    traced.unlink()
    for folder in swap_in(staging, figures):
        if draft is not None:
            mark(figures / folder, "DRAFT.json", **draft)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(ipython, ignore_errors=True)
    with contextlib.suppress(OSError):
        staging.parent.rmdir()  # once no other run stages there
    # the old record goes first: a crash between the two steps leaves a run with no record (stale), never a record
    # that belongs to another run
    freshness.record_path(executed, name).unlink(missing_ok=True)
    os.replace(partial, final)
    freshness.write_record(executed, name, files, notebook=source or str(notebook),
                           made_at=made_at,
                           profile=parameters.get("profile"), seed=parameters.get("seed"), draft=draft is not None,
                           machine=machine(), traced="this run")
    return None


STARTUP = """# written by notebooks/run_notebooks.py: trace the files this kernel's run uses (specrepro.core.deps)
from specrepro.core.deps import trace_kernel
trace_kernel({out!r})
"""


def kernel_startup(folder: Path, out: Path) -> Path:
    """An IPython folder whose startup file opens a dependency trace writing to ``out``; the kernel finds it through
    ``IPYTHONDIR``, so the trace is open before the notebook's first cell."""
    startup = folder / "profile_default" / "startup"
    shutil.rmtree(folder, ignore_errors=True)
    startup.mkdir(parents=True)
    (startup / "00-specrepro-trace.py").write_text(STARTUP.format(out=str(out)))
    return folder


def tree_state() -> dict | None:
    """None when the checkout has no uncommitted change to tracked files outside the notebooks' own outputs;
    else what a DRAFT mark records: the revision and why."""
    revision = git_revision(ignore=("figures", "notebooks/executed"))
    if not revision.endswith("(with uncommitted changes)"):
        return None
    return {"revision": revision, "reason": "made from a tree with uncommitted changes (git status names them): "
                                            "no commit reproduces it"}


def machine() -> dict:
    """The machine the notebooks ran on, as INDEX.md states it."""
    from specrepro.metrics.profile import cpu_info

    info = cpu_info()
    gpu = None
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    return {"cpu": info["name"], "cpu_model": cpu_model(), "cores": os.cpu_count(), "cpu_flags": info["kernel_flags"],
            "gpu": gpu, "python": platform.python_version()}


# ------------------------------------------------------------------------------------------------- timings


def timings_cache() -> Path:
    from specrepro.run.cache import cache_root

    return cache_root() / "notebook_timings.json"


def expected_seconds(profile: str, names: list[str], figures: Path) -> dict[str, float]:
    """Each run's wall time with this profile when it computed its cells: the longest of its recorded times (the last
    run's and each recent call's), from the committed timings and this machine's cache. Not the last time alone: a
    run whose cells came from the run cache (MJSD's 143.5 s against 471.3 s computed) would be scheduled last and
    its ETA read short."""
    expected: dict[str, float] = {}
    for source in (ROOT / "figures" / "timings.json", figures / "timings.json", timings_cache()):
        try:
            timings = json.loads(source.read_text())
        except (OSError, ValueError):
            continue
        seen = [(n, r["wall_s"]) for n, r in timings.get("runs", {}).items() if r.get("profile") == profile]
        seen += [(n, s) for call in timings.get("calls", []) if call.get("profile") == profile
                 for n, s in (call.get("runs") or {}).items()]
        for name, wall in seen:
            if name in names and isinstance(wall, (int, float)):
                expected[name] = max(expected.get(name, 0.0), float(wall))
    return expected


def record_timings(figures: Path, done: dict[str, dict], setup: dict, call: bool = True) -> None:
    """Merge this run's wall times into ``figures/timings.json`` (INDEX.md shows them) and into the cache; with
    ``call``, the call itself is appended to the list of recent calls, so a resumed run does not hide what a full one
    cost. The loop records each run as it finishes (``call=False``), so a stopped call keeps the times of the runs
    it made; ``finish`` then adds the call."""
    for path in (figures / "timings.json", timings_cache()):
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = {}
        runs = {**old.get("runs", {}), **done}
        entry = {"started_utc": setup["started_utc"], "profile": setup["profile"], "jobs": setup["jobs"],
                 "wall_s": setup.get("wall_s"), "cpu": setup["machine"]["cpu"],
                 "cpu_model": setup["machine"].get("cpu_model"),
                 "runs": {name: run["wall_s"] for name, run in done.items()}}
        calls = (old.get("calls", []) + [entry])[-KEEP_CALLS:] if call else old.get("calls", [])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"last_run": setup if call else old.get("last_run", setup),
                                   "runs": dict(sorted(runs.items())), "calls": calls}, indent=1) + "\n")
        os.replace(tmp, path)


def clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


# ------------------------------------------------------------------------------------------------- the run


def schedule(jobs: list[tuple[Path, str, dict]], expected: dict[str, float]) -> list[tuple[Path, str, dict]]:
    """Longest expected first (unknown ones first of all: they may be long), so two workers finish together."""
    return sorted(jobs, key=lambda job: -expected.get(job[1], float("inf")))


def alone(notebook: Path, profile: str, name: str = "", wide: frozenset[str] = frozenset()) -> bool:
    """Whether ``notebook`` (its run ``name``) runs with nothing beside it, on every core: a ``TIMED`` one outside
    smoke, or one of the ``wide`` runs (:func:`wide_runs`)."""
    return (notebook.stem in TIMED or name in wide) and profile != "smoke"


def wide_runs(jobs: list[tuple[Path, str, dict]], expected: dict[str, float], profile: str) -> frozenset[str]:
    """The untimed run that gets every core to itself: the only untimed run of the call (``--only`` one notebook),
    or the one expected to take at least as long as the other untimed runs together, which sets how long they take
    however they share the cores (the DistillSpec study: 15.9 min on one thread against 10.7 for the other eight on
    the 2-core Zen 3, and 1.4-1.5x faster on two threads). Not when any untimed run's time is unknown."""
    untimed = [name for notebook, name, _ in jobs if not alone(notebook, profile)]
    if profile == "smoke" or not untimed:
        return frozenset()
    if len(untimed) == 1:
        return frozenset(untimed)
    if any(name not in expected for name in untimed):
        return frozenset()
    longest = max(untimed, key=lambda name: expected[name])
    others = sum(expected[name] for name in untimed) - expected[longest]
    return frozenset({longest}) if expected[longest] >= others else frozenset()


def notebook_parameters(notebook: Path, given: dict) -> dict:
    """Those of ``given`` that ``notebook`` declares (a None only for ``out_root``); one clear error for a notebook
    that does not take ``profile`` and ``out_root``."""
    declared = declared_parameters(notebook)
    missing = {"profile", "out_root"} - declared
    if missing:
        raise SystemExit(f"{notebook.name} declares no parameter(s) {sorted(missing)}: every notebook takes "
                         "profile and out_root")
    return {k: v for k, v in given.items() if k in declared and (v is not None or k == "out_root")}


def startable(job: tuple[Path, str, dict], running: list[bool], profile: str,
              wide: frozenset[str] = frozenset()) -> bool:
    """Whether ``job`` may start beside the runs now running (``running``: whether each runs alone)."""
    return not running or not (alone(job[0], profile, job[1], wide) or any(running))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=PROFILES, default="quick",
                        help="smoke: every cell on tiny settings, into build/smoke/ (CI); quick: about 30 minutes on "
                             "2 cores; full: the documents' settings (a GPU)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these notebooks (stem or file name)")
    parser.add_argument("--seed", type=int, default=None,
                        help="pass this seed to every notebook (default: each notebook's own)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="notebooks at a time (default: 2 on 2 or more cores, else 1)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch/BLAS threads per notebook (default: cores // jobs)")
    parser.add_argument("--out", type=Path, default=None,
                        help="write figures/ and executed/ under this folder (default: build/smoke for smoke, "
                             "else the checkout's figures/ and notebooks/executed/)")
    parser.add_argument("--allow-draft", action="store_true",
                        help="write the checkout's figures/ from a tree with uncommitted changes, every artifact "
                             "marked DRAFT (default: refuse; commit first, so that each names a commit)")
    parser.add_argument("--status", action="store_true",
                        help="print each run as fresh or stale by the files it used (its executed/<run>.deps.json), "
                             "and what changed; run nothing")
    parser.add_argument("--rerun", action="store_true",
                        help="run every selected notebook, even one this machine made from files unchanged since "
                             "(by default such a run is kept)")
    parser.add_argument("--stale", action="store_true",
                        help="run only the runs that are not fresh (stale, untraced or missing); with none, say so, "
                             "rewrite the index and reports (seconds) and stop")
    return parser


def by_freshness(jobs: list[tuple[Path, str, dict]], executed: Path, args: argparse.Namespace) -> list:
    """The jobs to run, by what the runs' records say (``notebooks/freshness.py``). ``--status``: none (each run's
    freshness printed); ``--stale``: those not fresh; ``--rerun``: all; else all but the runs this machine made with
    this profile from files unchanged since (a second ``make figures`` with nothing changed runs nothing)."""
    names = [name for _, name, _ in jobs]
    if args.status:
        print(f"runs under {executed}, by the files each one used:")
        print("\n".join(freshness.status_lines(freshness.status(executed, names))))
        return []
    if args.stale:
        rerun = set(freshness.not_fresh(freshness.status(executed, names)))
        print(f"--stale: {len(rerun)} of {len(names)} run(s) are not fresh" + (f": {', '.join(sorted(rerun))}" if rerun
              else f"; nothing to run (none of the files they used changed; make status lists them)"))
        return [job for job in jobs if job[1] in rerun]
    kept = set() if args.rerun else set(freshness.made_here(executed, names, args.profile, args.seed))
    if kept:
        print(f"kept {len(kept)} run(s) this machine made with profile {args.profile} from files unchanged since "
              f"(--rerun runs them again): {', '.join(sorted(kept))}" + ("; nothing to run" if kept == set(names)
                                                                          else ""))
    return [job for job in jobs if job[1] not in kept]


def main(argv: list[str] | None = None) -> int:
    cores = os.cpu_count() or 1
    parser = build_parser()
    args = parser.parse_args(argv)
    jobs_n = args.jobs or min(2, cores)
    threads = args.threads or max(1, cores // jobs_n)
    if jobs_n < 1 or threads < 1:
        parser.error(f"--jobs and --threads must be at least 1 (got {jobs_n}, {threads})")

    out = args.out.resolve() if args.out else SCRATCH.get(args.profile, ROOT)
    figures = out / "figures"
    executed = NOTEBOOKS / "executed" if out == ROOT else out / "executed"
    draft = tree_state()
    if draft is not None and out == ROOT and not args.allow_draft and not args.status:
        print("run_notebooks.py: error: the checkout has uncommitted changes, so no commit would reproduce the "
              "artifacts: commit first, or pass --allow-draft (make figures ALLOW_DRAFT=1) to write them marked "
              "DRAFT", file=sys.stderr)
        return 2
    notebooks = select(args.only)
    if not notebooks:
        print("no notebooks found in notebooks/", file=sys.stderr)
        return 1
    jobs = [(nb, name, extra) for nb in notebooks for name, extra in runs_of(nb)]
    jobs = by_freshness(jobs, executed, args)
    if not jobs:  # the reports still follow the claims and the code, which may have changed: seconds, not runs
        return 0 if args.status else reports_only(figures, out, executed)
    check_kernel()
    expected = expected_seconds(args.profile, [name for _, name, _ in jobs], figures)
    jobs = schedule(jobs, expected)
    setup = {"profile": args.profile, "jobs": jobs_n, "threads_per_notebook": threads, "machine": machine(),
             "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    wide = wide_runs(jobs, expected, args.profile) if args.threads is None and threads < cores else frozenset()
    timed = sum(alone(nb, args.profile) for nb, _, _ in jobs)
    print(f"{len(jobs)} notebook run(s), profile {args.profile}, {jobs_n} at a time with {threads} thread(s) each"
          + (f", but the {timed} timed ones alone with {cores}" if timed else "")
          + (f", and {', '.join(sorted(wide))} alone with {cores} (the longest untimed run)" if wide else "")
          + f"; figures -> {figures}, executed notebooks -> {executed}", flush=True)
    if out != ROOT and not args.out:
        print(f"({args.profile} writes to a scratch folder, never over the committed figures/)", flush=True)

    def threads_of(notebook: Path, name: str) -> int:
        return cores if alone(notebook, args.profile, name, wide) else threads

    def parameters(notebook: Path, name: str, extra: dict) -> dict:
        return notebook_parameters(notebook, {"profile": args.profile, "out_root": None if out == ROOT else str(out),
                                              "threads": threads_of(notebook, name), "seed": args.seed, **extra})

    failures, done = [], {}
    start_all = time.perf_counter()
    pending = list(jobs)
    running: dict[cf.Future, tuple[str, float, Path]] = {}
    finished: set[str] = set()
    context = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=jobs_n, mp_context=context) as pool:
        while pending or running:
            while pending and len(running) < jobs_n:
                ready = [j for j in pending if set(DEPENDS.get(j[1], ())) <= finished
                         and startable(j, [alone(nb, args.profile, n, wide) for n, _, nb in running.values()],
                                              args.profile, wide)]
                if not ready:
                    break
                notebook, name, extra = ready[0]
                pending.remove(ready[0])
                params = parameters(notebook, name, extra)
                guess = expected.get(name)
                eta = (dt.datetime.now() + dt.timedelta(seconds=guess)).strftime("%H:%M") if guess else "?"
                print(f"[{len(done) + len(failures) + len(running) + 1}/{len(jobs)}] start {name} "
                      f"({', '.join(f'{k}={v}' for k, v in params.items())}); expected "
                      f"{clock(guess) if guess else 'unknown (first run here)'}, ETA {eta}", flush=True)
                future = pool.submit(run_one, notebook, params, name, executed, threads_of(notebook, name), figures,
                                     draft)
                running[future] = (name, time.perf_counter(), notebook)
            complete, _ = cf.wait(running, timeout=HEARTBEAT_S, return_when=cf.FIRST_COMPLETED)
            if not complete:
                states = [f"{n} {clock(time.perf_counter() - t0)}"
                          + (f"/{clock(expected[n])}" if n in expected else "") for n, t0, _ in running.values()]
                print(f"    ... {clock(time.perf_counter() - start_all)} elapsed; running: {'; '.join(states)}; "
                      f"{len(pending)} waiting", flush=True)
            for future in complete:
                name, t0, notebook = running.pop(future)
                elapsed = time.perf_counter() - t0
                finished.add(name)
                failure = future.result()
                freshness.remember(executed, name, made=not failure)  # here: the workers would race on the file
                if failure:
                    failures.append(failure)
                    print(f"    FAILED {name} after {clock(elapsed)}: {failure}", flush=True)
                else:
                    done[name] = {"wall_s": round(elapsed, 1), "profile": args.profile,
                                  "threads": threads_of(notebook, name),
                                  "alone": alone(notebook, args.profile, name, wide),
                                  "jobs": jobs_n, "cpu": setup["machine"]["cpu"],
                                  "cpu_model": setup["machine"]["cpu_model"], "gpu": setup["machine"]["gpu"],
                                  "finished_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
                    record_timings(figures, {name: done[name]}, setup, call=False)  # kept if the call is stopped
                    print(f"    ok {name} in {clock(elapsed)} -> {(executed / f'{name}.ipynb')}", flush=True)
    total = time.perf_counter() - start_all
    setup["wall_s"] = round(total, 1)
    return finish(figures, out, executed, done, setup, failures, total, len(jobs))


def finish(figures: Path, out: Path, executed: Path, done: dict[str, dict], setup: dict, failures: list[str],
           total: float, n_runs: int) -> int:
    """After the runs: their timings, the index, the verdicts and the reproduction report; the exit status."""
    figures.mkdir(parents=True, exist_ok=True)
    record_timings(figures, done, setup)
    write_reports(figures, out, executed, failures)
    print(f"wall time {clock(total)} for {n_runs} run(s)", flush=True)
    if failures:
        print(f"\n{len(failures)} notebook(s) failed:", file=sys.stderr)
        for failure in failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    print(f"all {n_runs} notebook run(s) done", flush=True)
    return 0


def reports_only(figures: Path, out: Path, executed: Path) -> int:
    """With no run to make: the index, the verdicts and the report rewritten; 1, said, if that fails."""
    failures: list[str] = []
    if write_reports(figures, out, executed, failures, ran=False):
        print("\n".join(failures), file=sys.stderr)
        return 1
    return 0


def write_reports(figures: Path, out: Path, executed: Path, failures: list[str], ran: bool = True) -> int:
    """``figures/INDEX.md`` (with each run's commit and freshness), ``VERDICTS.md`` and ``REPRODUCTION.md`` from
    what ``figures`` holds; a claim decided twice is added to ``failures``. 1 if any failure, else 0. With no run
    made (``ran`` False), REPRODUCTION.md is left as it is unless one of its rows changes."""
    if not figures.is_dir():
        return 0
    md, _ = write_index(figures)
    with md.open("a") as handle:  # each run's commit and freshness (notebooks/freshness.py)
        handle.write("\n".join(freshness.index_lines(executed)) + "\n")
    print(f"index: {md}", flush=True)
    from reproduction import write_verdicts

    try:
        print(f"verdicts: {write_verdicts(figures)}", flush=True)
    except ValueError as error:  # a claim decided in two notebooks
        failures.append(f"verdicts: {error}")
    report = reproduction_report(figures, out, executed, unless_rows_same=not ran)
    if report:
        print(f"reproduction report: {report}", flush=True)
    return 1 if failures else 0


def reproduction_report(figures: Path, out: Path, executed: Path, unless_rows_same: bool = False) -> Path | None:
    """figures/REPRODUCTION.md against the committed figures: the checkout's own when writing elsewhere, else
    HEAD's copy from git (this run has just overwritten the working tree's); with the stale artifacts."""
    from reproduction import committed_copy, write_reproduction

    if out != ROOT:
        return write_reproduction(figures, ROOT / "figures", executed=executed, unless_rows_same=unless_rows_same)
    with tempfile.TemporaryDirectory() as tmp:
        return write_reproduction(figures, committed_copy(ROOT, Path(tmp)), executed=executed,
                                  unless_rows_same=unless_rows_same)


if __name__ == "__main__":
    sys.exit(main())
