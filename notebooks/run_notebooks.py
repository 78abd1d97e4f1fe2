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


# Notebooks that also run with other parameters: stem -> {variant: parameters}. A variant's executed copy is
# executed/<stem>-<variant>.ipynb; the notebook itself writes its figures to a folder of their own.
VARIANTS: dict[str, dict[str, dict]] = {
    "online_speculative_stream": {"sequences": {"examples": "sequences"}},  # online updates on whole sequences
}


def runs_of(notebook: Path) -> list[tuple[str, dict]]:
    """(executed name, extra parameters) of each run of ``notebook``: itself, then its variants."""
    return [(notebook.stem, {})] + [(f"{notebook.stem}-{variant}", extra)
                                    for variant, extra in VARIANTS.get(notebook.stem, {}).items()]


def run_one(notebook: Path, parameters: dict, name: str | None = None) -> str | None:
    """Execute one notebook into executed/<name>.ipynb (default: its own name); None on success, else a one-line
    description of the failure."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    EXECUTED.mkdir(parents=True, exist_ok=True)
    name = name or notebook.stem
    final = EXECUTED / f"{name}.ipynb"
    partial = EXECUTED / f".{name}.partial.ipynb"
    try:
        pm.execute_notebook(str(notebook), str(partial), parameters=parameters,
                            kernel_name=KERNEL, cwd=str(ROOT), progress_bar=False)
    except PapermillExecutionError as error:
        kept = Path(tempfile.gettempdir()) / f"{name}.failed.ipynb"
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
    jobs = [(notebook, name, extra) for notebook in notebooks for name, extra in runs_of(notebook)]
    for i, (notebook, name, extra) in enumerate(jobs, 1):
        print(f"[{i}/{len(jobs)}] {name} (profile={args.profile}{''.join(f', {k}={v}' for k, v in extra.items())})"
              " ...", flush=True)
        start = time.perf_counter()
        failure = run_one(notebook, {**parameters, **extra}, name)
        elapsed = time.perf_counter() - start
        if failure:
            failures.append(failure)
            print(f"    FAILED after {elapsed:.1f} s: {failure}", flush=True)
        else:
            print(f"    ok in {elapsed:.1f} s -> {(EXECUTED / f'{name}.ipynb').relative_to(ROOT)}", flush=True)

    FIGURES.mkdir(exist_ok=True)
    md, _ = write_index(FIGURES)
    print(f"index: {md.relative_to(ROOT)}", flush=True)
    if failures:
        print(f"\n{len(failures)} notebook(s) failed:", file=sys.stderr)
        for failure in failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    print(f"all {len(jobs)} notebook run(s) done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
