"""Where the independent cells of a grid run: in this process, one after the other (the default), or as Ray tasks
on a local Ray cluster or on one already running (issue 24, item 3: "sweeps on an existing distributed engine").

    results = run_cells(train_one, cells, ExecutorConfig.parse("ray"), progress="DistillSpec cells",
                        on_result=write_record)

The grids that use it: the bench sweeps (``bench.run_sweep``, ``studies.common.StudyCache.benches``), the
DistillSpec grid (``training.distillspec.run_study``), the PPD ablations (``training.ppd_ablations``) and the MJSD
validation grid (``studies.mjsd.validation_grid``). Whichever executor runs them, the results, the resume keys and
the records are the same:

- ``fn`` is called on each cell exactly as the local loop calls it, and the results come back in cell order;
- ``on_result(i, result)`` runs in the driver, in cell order, so a grid's resume files and record files are
  written by one process in the same order as the local loop writes them (a Ray task writes nothing of the
  driver's);
- a task runs with ``torch.set_num_threads(num_cpus)``: the local loop's thread count when ``num_cpus`` is it.

``fn`` and the cells travel to the workers by pickle: ``fn`` must be a module-level function (or a
``functools.partial`` of one) and every argument picklable. ``fn`` is put in Ray's object store once, so the
models and tensors a partial carries are sent once, not once per task. On a cluster of several machines, the
package must be installed on every node, and the folders a cell itself writes (a bench sweep's run folders, a PPD
row's folder) must be on a filesystem every node sees.

Ray is optional: ``pip install 'specrepro[ray]'`` or ``make test RAY=1``.
"""
from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .deps import Trace, inherit

KINDS = ("local", "ray")
INSTALL_HINT = "pip install 'specrepro[ray]' (or: make venv RAY=1)"


class CellError(RuntimeError):
    """A cell raised: which cell (its index and value), what it raised and, from a Ray task, the worker's
    traceback. From the local executor the original exception is the ``__cause__``."""

    def __init__(self, index: int, cell: Any, message: str):
        super().__init__(message)
        self.index, self.cell = index, cell


@dataclass(frozen=True)
class ExecutorConfig:
    """How a grid runs its cells."""

    kind: str = "local"  # "local": this process, in order; "ray": one Ray task per cell
    address: str | None = None  # ray: a running cluster ("auto", "ray://head:10001", "10.0.0.1:6379"); None: start a
    # local cluster of ``workers`` task slots for this call and shut it down after
    num_cpus: int = 1  # ray: CPUs each task reserves, and the torch threads it runs with
    workers: int | None = None  # ray without an address: tasks at once on the local cluster (None: cores // num_cpus)
    # ray: GPUs each task reserves (a fraction shares one); None: 1 when the cells' function carries a model on
    # CUDA (Ray hides every GPU from a task that asks for none, so its CUDA tensors could not even be unpickled)
    num_gpus: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"executor kind must be one of {KINDS}, got {self.kind!r}")
        if self.num_gpus is not None and (isinstance(self.num_gpus, bool) or not isinstance(self.num_gpus, (int, float))
                                          or not self.num_gpus >= 0):
            raise ValueError(f"executor num_gpus must be a number >= 0, got {self.num_gpus!r}")
        for name in ("num_cpus", "workers"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"executor {name} must be an integer >= 1, got {value!r}")
        if self.kind == "local" and self.address is not None:
            raise ValueError(f"the local executor takes no address, got {self.address!r}")

    @classmethod
    def parse(cls, text: "str | ExecutorConfig | None", num_cpus: int = 1,
              workers: int | None = None) -> "ExecutorConfig":
        """``--executor`` as the command lines take it: ``local`` (or None), ``ray`` (a local cluster),
        ``ray://HOST:PORT`` (Ray Client), ``ray:ADDRESS`` (``ray:auto``, ``ray:10.0.0.1:6379``) or a bare
        ``HOST:PORT`` of a running cluster."""
        if isinstance(text, ExecutorConfig):
            return text
        text = (text or "local").strip()
        if text == "local":
            return cls("local")
        if text == "ray":
            return cls("ray", None, num_cpus, workers)
        if text.startswith("ray://"):
            return cls("ray", text, num_cpus, workers)
        if text.startswith("ray:"):
            return cls("ray", text[len("ray:"):] or None, num_cpus, workers)
        if ":" in text or text == "auto":
            return cls("ray", text, num_cpus, workers)
        raise ValueError(f"--executor must be local, ray, ray://HOST:PORT, ray:ADDRESS or HOST:PORT, got {text!r}")

    def describe(self) -> str:
        if self.kind == "local":
            return "local"
        where = self.address or f"a local cluster of {self.slots()} task slot(s)"
        gpus = "" if not self.num_gpus else f", {self.num_gpus:g} GPU(s) per task"
        return f"ray ({where}, {self.num_cpus} CPU(s) per task{gpus})"

    def slots(self) -> int:
        """Tasks at once on a local cluster."""
        return self.workers or max(1, (os.cpu_count() or 1) // self.num_cpus)


LOCAL = ExecutorConfig()


def executor_arg(value: str) -> ExecutorConfig:
    """argparse ``type=`` for ``--executor``: one clear line for a bad value."""
    import argparse

    try:
        return ExecutorConfig.parse(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _cell_name(index: int, cell: Any) -> str:
    text = repr(cell)
    return f"cell {index} ({text if len(text) <= 120 else text[:117] + '...'})"


def _bar(progress: bool | str, total: int):
    from tqdm.auto import tqdm

    desc = progress if isinstance(progress, str) else "cells"
    return tqdm(total=total, desc=desc, file=sys.stderr, disable=not progress or total == 0, unit="cell")


def run_cells(fn: Callable[[Any], Any], cells: Sequence[Any], executor: ExecutorConfig | str | None = None,
              progress: bool | str = False, on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
    """``[fn(cell) for cell in cells]`` on ``executor`` (default: local), in cell order. ``progress`` (True, or the
    bar's name) shows a bar that moves as cells finish; ``on_result(i, result)`` runs in this process in cell
    order as soon as cells 0..i are done (a grid writes its resume files there). A cell that raises stops the grid
    with a :class:`CellError` naming it; the cells before it have gone through ``on_result``."""
    executor = ExecutorConfig.parse(executor)
    cells = list(cells)
    if executor.kind == "local":
        return _run_local(fn, cells, progress, on_result)
    return _run_ray(fn, cells, executor, progress, on_result)


def _run_local(fn, cells, progress, on_result) -> list[Any]:
    results, bar = [], _bar(progress, len(cells))
    try:
        for i, cell in enumerate(cells):
            try:
                result = fn(cell)
            except Exception as err:
                raise CellError(i, cell, f"{_cell_name(i, cell)} failed: {type(err).__name__}: {err}") from err
            results.append(result)
            bar.update(1)
            if on_result is not None:
                on_result(i, result)
    finally:
        bar.close()
    return results


@dataclass(frozen=True)
class _Failure:
    """What a Ray task raised, as text (the exception itself may not unpickle in the driver)."""

    kind: str
    message: str
    trace: str


def cuda_models(fn: Callable[[Any], Any]) -> bool:
    """Whether ``fn`` (a ``functools.partial``, as the grids pass) carries a model with parameters on CUDA."""
    bound = list(getattr(fn, "args", ())) + list((getattr(fn, "keywords", None) or {}).values())
    for value in bound:
        parameters = getattr(value, "parameters", None)
        if callable(parameters):
            first = next(iter(parameters()), None)
            if first is not None and first.device.type == "cuda":
                return True
    return False


def task_gpus(fn: Callable[[Any], Any], executor: ExecutorConfig) -> float:
    """GPUs a Ray task of ``fn`` asks for: the executor's, or 1 when its models are on CUDA, else 0."""
    if executor.num_gpus is not None:
        return float(executor.num_gpus)
    return 1.0 if cuda_models(fn) else 0.0


def _task(fn: Callable[[Any], Any], cell: Any, threads: int) -> Any:
    """The body of every Ray task: the torch threads of the executor, then ``fn(cell)``; a raised exception comes
    back as a :class:`_Failure` so that the driver can name the cell."""
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:  # a grid without torch
        pass
    try:
        with Trace() as trace:  # what the task used comes back with its result (core/deps.py)
            result = fn(cell)
        return _Traced(result, trace.digests())
    except Exception as err:
        return _Failure(type(err).__name__, str(err), traceback.format_exc())


@dataclass(frozen=True, eq=False)  # (hashed by identity, as a Ray reply is)
class _Traced:
    """A Ray task's result with the files of the checkout it used ({file: SHA-256}, ``core.deps.Trace``), which the
    driver counts for the traces open there."""

    result: Any
    files: dict


def import_ray():
    """``ray``, or one clear error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RuntimeError(f"--executor ray needs the optional dependency ray, which is not installed: "
                           f"{INSTALL_HINT}") from None
    return ray


def start_ray(executor: ExecutorConfig) -> bool:
    """Connect to ``executor.address`` or start a local cluster of ``executor.slots() * num_cpus`` CPUs; False if
    Ray was already initialised in this process (then the caller leaves it running)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    if executor.address is not None:
        ray.init(address=executor.address, log_to_driver=True)
    else:
        ray.init(num_cpus=executor.slots() * executor.num_cpus, include_dashboard=False, log_to_driver=True)
    return True


def _run_ray(fn, cells, executor: ExecutorConfig, progress, on_result) -> list[Any]:
    ray = import_ray()
    started = start_ray(executor)
    bar = _bar(progress, len(cells))
    try:
        remote = ray.remote(num_cpus=executor.num_cpus, num_gpus=task_gpus(fn, executor), max_retries=0)(_task)
        fn_ref = ray.put(fn)  # sent to the object store once; each task gets the same reference
        refs = [remote.remote(fn_ref, cell, executor.num_cpus) for cell in cells]
        index = {ref: i for i, ref in enumerate(refs)}
        done: dict[int, Any] = {}
        flushed, waiting = 0, list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            i = index[ready[0]]
            result = ray.get(ready[0])
            if isinstance(result, _Failure):
                raise CellError(i, cells[i], f"{_cell_name(i, cells[i])} failed on a Ray worker: {result.kind}: "
                                             f"{result.message}\n{result.trace}")
            inherit(result.files)
            done[i] = result.result
            bar.update(1)
            while flushed in done and on_result is not None and flushed < len(cells):
                on_result(flushed, done[flushed])
                flushed += 1
        return [done[i] for i in range(len(cells))]
    finally:
        bar.close()
        # A failed cell stops the grid: the results of the tasks still queued or running are dropped, not cancelled:
        # on Ray 2.60 a cancel that races a task's reply aborts the driver (task_manager.cc: "Tried to complete task
        # that was not pending", exit 1), which CI met. A cluster this call started stops them at shutdown.
        if started:
            ray.shutdown()
