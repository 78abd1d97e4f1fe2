#!/usr/bin/env python
"""Run every figure notebook with papermill, then index what they wrote under figures/.

    python notebooks/run_notebooks.py --profile quick|full [--only NAME ...]

1. Each ``notebooks/*.ipynb`` (sorted; only the named ones with ``--only``) runs with the
   parameter ``profile`` (and ``seed`` when given) in the kernel ``python3``, which jupyter_client
   starts with this interpreter, so running this script with ``.venv/bin/python`` runs the
   notebooks in the venv.
2. The executed notebook goes to ``notebooks/executed/<name>.ipynb``: written to a temporary
   file first and renamed, so a failed or interrupted run never leaves a half-written one (a
   failed run's notebook is kept in the system temp directory for debugging).
3. ``figures/INDEX.md`` and ``figures/index.json`` are rebuilt from every
   ``figures/<notebook>/index.json``.

Exits non-zero, naming each failed notebook and its failing cell's error, if any notebook fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
EXECUTED = NOTEBOOKS / "executed"
FIGURES = ROOT / "figures"
KERNEL = "python3"

sys.path.insert(0, str(NOTEBOOKS))
from artifacts import write_index  # noqa: E402  (lives beside this script)


def select(only: list[str] | None) -> list[Path]:
    """The notebooks to run, sorted; ``only`` names them by stem or file name."""
    found = sorted(NOTEBOOKS.glob("*.ipynb"))
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


def run_one(notebook: Path, parameters: dict) -> str | None:
    """Execute one notebook; None on success, else a one-line description of the failure."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    EXECUTED.mkdir(parents=True, exist_ok=True)
    final = EXECUTED / notebook.name
    partial = EXECUTED / f".{notebook.stem}.partial.ipynb"
    try:
        pm.execute_notebook(str(notebook), str(partial), parameters=parameters,
                            kernel_name=KERNEL, cwd=str(ROOT), progress_bar=False)
    except PapermillExecutionError as error:
        kept = Path(tempfile.gettempdir()) / f"{notebook.stem}.failed.ipynb"
        if partial.exists():
            shutil.move(partial, kept)
        return (f"{notebook.name}: cell [{error.cell_index}] of the executed copy (execution count "
                f"{error.exec_count}) raised {error.ename}: {error.evalue}  [executed copy: {kept}]")
    except BaseException as error:  # kernel death, bad notebook JSON, Ctrl-C: clean up, report
        partial.unlink(missing_ok=True)
        if isinstance(error, KeyboardInterrupt):
            raise
        return f"{notebook.name}: {type(error).__name__}: {error}"
    os.replace(partial, final)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=("quick", "full"), default="quick",
                        help="quick: minutes on a laptop; full: the sample sizes of the figures")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="run only these notebooks (stem or file name)")
    parser.add_argument("--seed", type=int, default=None,
                        help="pass this seed to every notebook (default: each notebook's own)")
    args = parser.parse_args(argv)

    notebooks = select(args.only)
    if not notebooks:
        print("no notebooks found in notebooks/", file=sys.stderr)
        return 1
    check_kernel()
    parameters = {"profile": args.profile}
    if args.seed is not None:
        parameters["seed"] = args.seed

    failures = []
    for i, notebook in enumerate(notebooks, 1):
        print(f"[{i}/{len(notebooks)}] {notebook.name} (profile={args.profile}) ...", flush=True)
        start = time.perf_counter()
        failure = run_one(notebook, parameters)
        elapsed = time.perf_counter() - start
        if failure:
            failures.append(failure)
            print(f"    FAILED after {elapsed:.1f} s: {failure}", flush=True)
        else:
            print(f"    ok in {elapsed:.1f} s -> {(EXECUTED / notebook.name).relative_to(ROOT)}",
                  flush=True)

    FIGURES.mkdir(exist_ok=True)
    md, _ = write_index(FIGURES)
    print(f"index: {md.relative_to(ROOT)}", flush=True)
    if failures:
        print(f"\n{len(failures)} notebook(s) failed:", file=sys.stderr)
        for failure in failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    print(f"all {len(notebooks)} notebook(s) ran", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
