"""What every study notebook does the same way: a resumable run-cache folder, one interleaved bench in it, the
summary rows by variant, means per run, the paired tokens/s ratio and the held-out split of a suite.

Each notebook had its own copy of these (``bench_dir``/``cache_dir``, ``bench``, ``rows_of``, ``encoded``,
``cached_json``, ``paired_ratio``); the copies are gone and the notebooks call this module.
"""
from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..run.bench import encode_prompts, run_bench
from ..run.bench_types import BenchPrompt, BenchResult
from ..run.variants import BenchConfig
from ..core.record import median_speedup
from ..run.cache import CODE_SUFFIX, recording, reusable, run_dir
from ..core.executor import ExecutorConfig, run_cells
from ..engine.models import LoadedModel
from ..core.provenance import atomic_write_text


@dataclass(frozen=True)
class StudyCache:
    """A notebook's folders in the run cache, ``$SPECREPRO_CACHE/runs/<stem>-<part>-<key>/``, keyed by ``key`` and
    the code (the package and the notebook's own file): a matching key resumes, anything else starts a new folder;
    ``fresh`` empties it first. What a notebook writes under figures/ is a result and is never read back."""

    stem: str  # the notebook's file stem: "mjsd_joint_decoding"
    notebook: Path | None = None  # its .ipynb, hashed into every key; None: the package only
    fresh: bool = False  # True: recompute (delete the matching folder first)
    root: Path | None = None  # the cache root; None: specrepro.run.cache.cache_root()

    def dir(self, part: str, *key: Any) -> Path:
        """The folder of ``part`` under ``key`` and the notebook (not the package): everything a study writes there
        goes through ``run_bench`` or :func:`cached_json`, which keep a record of the code each cell ran and check it
        before reusing the cell (``specrepro.run.cache``)."""
        name = f"{self.stem}-{part.replace('/', '-')}"
        code = [self.notebook] if self.notebook is not None else []
        return run_dir(name, *key, code=code, fresh=self.fresh, root=self.root, traced=True)

    def bench(self, name: str, config: BenchConfig, prompts: Sequence[BenchPrompt], *key: Any,
              target: LoadedModel | None = None, draft: LoadedModel | None = None, echo: bool = True) -> BenchResult:
        """One interleaved ``run_bench`` of ``config`` on ``prompts`` in the folder ``dir(name, config, *key,
        prompt ids)``, resumed from what that folder holds."""
        folder = self.dir(name, config, *key, [p.id for p in prompts])
        t0 = time.perf_counter()
        result = run_bench(config, folder, target=target, draft=draft, prompts=list(prompts), progress=False)
        if echo:
            print(f"bench {name}: {len(result.records)} records in {time.perf_counter() - t0:.0f} s ({folder})")
        return result

    def benches(self, jobs: Sequence[tuple[str, BenchConfig, Sequence[BenchPrompt], tuple]], *,
                target: LoadedModel | None = None, draft: LoadedModel | None = None,
                executor: ExecutorConfig | str | None = None, echo: bool = True) -> list[BenchResult]:
        """A grid of benches: ``self.bench(name, config, prompts, *key)`` for each job (name, config, prompts,
        key), in job order, one after the other here or as Ray tasks (``executor``, ``specrepro.core.executor``).
        Each bench keeps its own folder, so the folders, their records and their keys are the same either way;
        on a cluster of several machines the cache root must be a filesystem every node sees."""
        t0 = time.perf_counter()
        results = run_cells(functools.partial(_bench_job, self, target, draft), list(jobs), executor)
        if echo:
            for (name, *_), result in zip(jobs, results):
                print(f"bench {name}: {len(result.records)} records ({result.out})")
            print(f"{len(results)} benches in {time.perf_counter() - t0:.0f} s "
                  f"({ExecutorConfig.parse(executor).describe()})")
        return results


def _bench_job(cache: StudyCache, target: LoadedModel | None, draft: LoadedModel | None,
               job: tuple[str, BenchConfig, Sequence[BenchPrompt], tuple]) -> BenchResult:
    """One bench of ``StudyCache.benches`` (module-level, so that a Ray task can run it)."""
    name, config, prompts, key = job
    return cache.bench(name, config, prompts, *key, target=target, draft=draft, echo=False)


def cached_json(path: Path, compute: Callable[[], Any], record: Path | None = None) -> Any:
    """``compute()``, kept as JSON at ``path`` (written whole or not at all) and read back by a run with the same
    key while the code it ran is unchanged: a grid computed one file per point resumes at the first point it has not
    measured. The code is recorded in ``record`` (default ``<path>.code.json``; a study whose cells share one warm-up
    names one record for all of them), checked before ``path`` is reused (``run.cache.reusable``)."""
    own = record is None  # a record of its own, which nothing else vouches for once it is stale
    record = record or path.with_name(path.name + CODE_SUFFIX)
    if path.exists() and reusable(record, path.name):
        return json.loads(path.read_text())
    if own:
        record.unlink(missing_ok=True)
    with recording(record):
        value = compute()
    atomic_write_text(path, json.dumps(value))
    return value


def bench_device(result: BenchResult) -> str:
    """The device a bench ran on, as its tables name it: "CPU <model>" or "<GPU name> (cuda:N)" (its provenance)."""
    prov = result.provenance
    device, name = str(prov.get("device", "cpu")), prov.get("device_name") or ""
    return f"CPU {name}".strip() if device.startswith("cpu") else f"{name} ({device})".strip()


def rows_of(result: BenchResult) -> dict[str, dict]:
    """The bench summary's rows by variant label."""
    return {r["method"]: r for r in result.summary}


def records_of(result: BenchResult, label: str) -> list[dict]:
    """The records of one variant, in run order."""
    return [r for r in result.records if r["method"] == label]


def run_means(records: Sequence[dict], key: str) -> dict[tuple[str, int], float]:
    """(variant, repeat) -> the mean of ``key`` over that run's prompts."""
    runs: dict[tuple[str, int], list] = {}
    for rec in records:
        runs.setdefault((rec["method"], rec["repeat"]), []).append(rec[key])
    return {run: statistics.mean(values) for run, values in runs.items()}


def paired_ratio(records: Sequence[dict], method: str, baseline: str) -> float | None:
    """Median over (prompt, repeat) of ``method``'s tokens/s over ``baseline``'s on the same prompt and repeat
    (the bench summary's ``speedup_median``, against any baseline)."""
    return median_speedup([r for r in records if r["method"] == method], [r for r in records if r["method"] == baseline])


def suite_prompts(target: LoadedModel, suite: str, limit: int | None = None, *,
                  references: bool = True) -> list[BenchPrompt]:
    """The suite's prompts encoded for ``target`` (chat template), through ``bench.encode_prompts``; without their
    reference answers when ``references`` is False (a bench then scores no ROUGE-L)."""
    prompts = encode_prompts(target, f"suite:{suite}", limit, True)
    return prompts if references else [replace(p, reference=None) for p in prompts]


def cap(n: int | None, limit: int | None) -> int | None:
    """At most ``limit`` of a profile's ``n`` (None: all)."""
    return n if limit is None else (limit if n is None else min(n, limit))


def holdout_split(prompts: Sequence, held_out: int) -> tuple[list, list]:
    """(rest, held out): the last ``held_out`` prompts are the held-out split, disjoint from the rest by
    construction."""
    if held_out < 1:
        raise ValueError(f"a held-out split needs at least one prompt, got {held_out}")
    rest, last = list(prompts[:-held_out]), list(prompts[-held_out:])
    assert not {p.id for p in rest} & {p.id for p in last}
    return rest, last


def task_arrays(records: Sequence[dict], prompt_ids: Sequence[str], labels: Sequence[str]) -> np.ndarray:
    """[P, S, M, 2]: (new tokens, wall seconds) of each prompt, repeat (seed) and method ``labels``, so a paired
    bootstrap resamples prompts and seeds with every method's runs of one (prompt, seed) kept together."""
    by_key = {(r["method"], r["prompt_id"], r["repeat"]): r for r in records}
    repeats = sorted({r["repeat"] for r in records})
    return np.array([[[[by_key[m, p, s]["new_tokens"], by_key[m, p, s]["wall_time_s"]] for m in labels]
                      for s in repeats] for p in prompt_ids], dtype=float)
