"""specrepro.core.executor: a grid's cells run here or as Ray tasks with the same results in the same order, a failing
cell is named, and (issue 24, item 3) a local Ray cluster of 2 workers runs the DistillSpec grid to the same cells
and the same records as the local executor. The Ray tests are skipped when ray is not installed."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys

import pytest
import torch

from specrepro.core.executor import CellError, ExecutorConfig, run_cells

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install 'specrepro[ray]', or "
                                                  "make test RAY=1): the Ray executor is not tested")
RAY2 = ExecutorConfig("ray", None, num_cpus=1, workers=2)
TIMINGS = ("sampling_s", "train_s", "eval_s", "data_s")  # wall-clock seconds: the only fields allowed to differ


def square(x: int) -> int:  # module-level: a Ray task imports it by name
    return x * x


def fails_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three is refused")
    return x


def torch_threads(_cell) -> int:
    return torch.get_num_threads()


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray cluster for the module: 2 CPUs, so 2 one-CPU tasks at a time (2 workers), no dashboard."""
    import ray

    for attempt in (1, 2):  # Ray waits 30 s for its raylet (hard-coded): a machine busy with other work can miss it
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    yield ray
    ray.shutdown()


def test_parse_reads_every_form_of_the_flag():
    assert ExecutorConfig.parse(None) == ExecutorConfig.parse("local") == ExecutorConfig()
    assert ExecutorConfig.parse("ray", num_cpus=2, workers=3) == ExecutorConfig("ray", None, 2, 3)
    assert ExecutorConfig.parse("ray://head:10001").address == "ray://head:10001"
    assert ExecutorConfig.parse("ray:auto").address == "auto"
    assert ExecutorConfig.parse("10.0.0.1:6379") == ExecutorConfig("ray", "10.0.0.1:6379")
    assert ExecutorConfig.parse(RAY2) is RAY2
    with pytest.raises(ValueError, match="--executor must be"):
        ExecutorConfig.parse("dask")
    with pytest.raises(ValueError, match="kind"):
        ExecutorConfig("spark")
    with pytest.raises(ValueError, match="num_cpus"):
        ExecutorConfig("ray", num_cpus=0)
    with pytest.raises(ValueError, match="no address"):
        ExecutorConfig("local", address="auto")


def test_local_cells_come_back_in_order_and_on_result_sees_each_in_order():
    seen = []
    assert run_cells(square, [3, 1, 2], on_result=lambda i, r: seen.append((i, r))) == [9, 1, 4]
    assert seen == [(0, 9), (1, 1), (2, 4)]
    assert run_cells(square, []) == []


def test_a_failing_local_cell_is_named_and_stops_the_grid():
    seen = []
    with pytest.raises(CellError, match=r"cell 2 \(3\) failed: ValueError: three is refused") as err:
        run_cells(fails_on_three, [1, 2, 3, 4], on_result=lambda i, r: seen.append(i))
    assert err.value.index == 2 and err.value.cell == 3 and isinstance(err.value.__cause__, ValueError)
    assert seen == [0, 1]  # the cells before it went through on_result; none after it ran


def test_ray_asked_for_without_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(RuntimeError, match=r"specrepro\[ray\].*RAY=1"):
        run_cells(square, [1], "ray")


@needs_ray
def test_ray_cells_come_back_in_cell_order_with_the_asked_threads(ray_cluster):
    seen = []
    cells = list(range(8))
    assert run_cells(square, cells, RAY2, on_result=lambda i, r: seen.append(i)) == [c * c for c in cells]
    assert seen == cells  # in cell order, whatever order the tasks finished in
    assert run_cells(torch_threads, [0, 1], dataclasses.replace(RAY2, num_cpus=1)) == [1, 1]
    assert ray_cluster.is_initialized()  # a cluster the caller started is left running


@needs_ray
def test_a_failing_ray_cell_is_named_with_the_workers_traceback(ray_cluster):
    with pytest.raises(CellError, match=r"(?s)cell 2 \(3\) failed on a Ray worker: ValueError: three is refused"
                                        r".*fails_on_three") as err:
        run_cells(fails_on_three, [1, 2, 3, 4], RAY2)
    assert err.value.index == 2


# ---------------------------------------------------------------- the check: the DistillSpec grid on Ray


def without_timings(obj):
    if isinstance(obj, dict):
        return {k: without_timings(v) for k, v in obj.items() if k not in TIMINGS}
    if isinstance(obj, list):
        return [without_timings(v) for v in obj]
    return obj


@needs_ray
@pytest.mark.usefixtures("one_thread")
def test_a_local_ray_cluster_runs_the_distillspec_grid_to_the_same_cells_and_records(ray_cluster, tmp_path):
    """The notebook's smoke grid (on-policy draft and mix sources: sampling, teacher rows, the target's pool) on the
    tiny pair of tests/training/test_distillspec.py, once here and once as Ray tasks on 2 workers: the same cells,
    cell files and study table, wall-clock seconds aside; a Ray run resumes like a local one."""
    from specrepro.engine.draft_model import draft_from_target
    from specrepro.engine.models import tiny_model
    from specrepro.training import distillspec as ds
    from tests.training.test_distillspec import SMALL, V, study_data

    target = tiny_model(vocab_size=V, n_layers=1, hidden=32, seed=5)
    draft = draft_from_target(tiny_model(vocab_size=V, n_layers=1, hidden=32, seed=9), torch.arange(V), n_layers=1)
    draft = draft.eval().requires_grad_(False)
    cfg = dataclasses.replace(SMALL, sources=("draft", "mix"), divergences=("rkl", "tvd"))
    data = study_data()
    local = ds.run_study(target, draft, data, cfg, tmp_path / "local", progress=False)
    remote = ds.run_study(target, draft, data, cfg, tmp_path / "ray", progress=False, executor=RAY2)
    assert [c["cell"] for c in remote["cells"]] == [c["cell"] for c in local["cells"]] == [
        "draft-rkl", "draft-tvd", "mix-rkl", "mix-tvd"]
    assert without_timings(remote) == without_timings(local)
    for cell in cfg.cells():
        name = f"cells/{'-'.join(cell)}.json"
        a, b = (json.loads((tmp_path / run / name).read_text()) for run in ("local", "ray"))
        assert without_timings(a) == without_timings(b) and list(a) == list(b)  # same fields in the same order
    again = ds.run_study(target, draft, data, cfg, tmp_path / "ray", progress=False, executor=RAY2)
    assert json.dumps(again["cells"]) == json.dumps(remote["cells"])  # resumed: no cell ran again


# ---------------------------------------------------------------- a bench with its prompts as Ray tasks


@needs_ray
@pytest.mark.usefixtures("one_thread")
def test_a_bench_on_ray_writes_the_records_of_a_local_run_in_its_order(ray_cluster, tmp_path):
    """The tiny pair and prompts of tests/test_bench.py, ar and speculative sampling at T = 1: the same record keys
    in the same order of records.jsonl, and the same sampled tokens (the seeds are per record, not per process)."""
    from specrepro.run.bench import run_bench
    from specrepro.run.store import load_records
    from specrepro.run.variants import BenchConfig
    from specrepro.engine.models import LoadedModel, layer_skip_draft, tiny_model
    from tests.test_bench import PROMPTS

    target = LoadedModel("tiny", tiny_model(vocab_size=32, n_layers=2, hidden=16, seed=0), None)
    draft = LoadedModel("layers:1", layer_skip_draft(target.model, 1), None)
    cfg = BenchConfig(methods=("ar", "speculative"), target="tiny", draft="layers:1", prompts="test",
                      max_new_tokens=6, gamma=3, repeats=2, warmup_tokens=2, cost_repeats=1, temperature=1.0,
                      threads=1)
    runs = {}
    for name, executor in (("local", None), ("ray", RAY2)):
        result = run_bench(cfg, tmp_path / name, target=target, draft=draft, prompts=PROMPTS, progress=False,
                           executor=executor)
        assert not result.failed
        runs[name] = load_records(result.out)
    keys = [[(r["method"], r["prompt_id"], r["repeat"]) for r in records] for records in runs.values()]
    assert keys[0] == keys[1] and len(keys[0]) == len(PROMPTS) * 2 * 2
    assert [r["token_ids"] for r in runs["ray"]] == [r["token_ids"] for r in runs["local"]]


@needs_ray
@pytest.mark.usefixtures("one_thread")
def test_bench_grids_on_ray_fill_the_folders_a_local_run_fills(ray_cluster, tmp_path):
    """``bench.run_sweep`` and ``StudyCache.benches`` (the MJSD validation grid's runner): each point a bench in the
    same folder, with the same records (tokens at T = 0), as when run here."""
    from specrepro.run.bench import run_sweep
    from specrepro.run.store import load_records
    from specrepro.run.variants import BenchConfig
    from specrepro.engine.models import LoadedModel, layer_skip_draft, tiny_model
    from specrepro.studies.common import StudyCache
    from tests.test_bench import PROMPTS

    target = LoadedModel("tiny", tiny_model(vocab_size=32, n_layers=2, hidden=16, seed=0), None)
    draft = LoadedModel("layers:1", layer_skip_draft(target.model, 1), None)
    base = BenchConfig(methods=("ar", "speculative"), target="tiny", draft="layers:1", prompts="test", max_new_tokens=5,
                       gamma=2, warmup_tokens=0, cost_repeats=1, threads=1, quality=False)
    objects = dict(target=target, draft=draft, prompts=PROMPTS[:2])
    tokens = lambda folder: [(r["method"], r["prompt_id"], r["token_ids"]) for r in load_records(folder)]
    rows = {}
    for name, executor in (("local", None), ("ray", RAY2)):
        rows[name] = run_sweep(base, tmp_path / name, gammas=[1, 2], temperatures=[0.0], executor=executor, **objects)
    assert [(r["method"], r["gamma"]) for r in rows["ray"]] == [(r["method"], r["gamma"]) for r in rows["local"]]
    for point in ("T0_g1", "T0_g2"):
        assert tokens(tmp_path / "ray" / point) == tokens(tmp_path / "local" / point)

    jobs = [(f"validation/{kind}", dataclasses.replace(base, gamma=g), PROMPTS[:2], ("fp32",))
            for kind, g in (("a", 1), ("b", 2))]
    local = StudyCache("t", root=tmp_path / "cache-local").benches(jobs, target=target, draft=draft, echo=False)
    remote = StudyCache("t", root=tmp_path / "cache-ray").benches(jobs, target=target, draft=draft, executor=RAY2,
                                                                 echo=False)
    assert [r.out.relative_to(tmp_path / "cache-ray") for r in remote] == [
        r.out.relative_to(tmp_path / "cache-local") for r in local]  # the same keys, so the same folders
    assert [tokens(r.out) for r in remote] == [tokens(r.out) for r in local]


def test_the_bench_command_takes_an_executor_and_refuses_a_bad_one(capsys):
    from specrepro.run.commands import build_parser

    argv = ["bench", "--methods", "ar", "--suite", "mixed", "--out", "unused"]
    assert build_parser().parse_args(argv).executor == ExecutorConfig()
    assert build_parser().parse_args(argv + ["--executor", "ray://head:10001"]).executor.address == "ray://head:10001"
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv + ["--executor", "dask"])
    assert "--executor must be" in capsys.readouterr().err


# --- GPUs (issue 38, item 6): a task that ships CUDA models asks Ray for a GPU -------------------------------


class OnCuda(torch.nn.Module):
    """A model whose parameters say they are on CUDA (a stand-in: no GPU here)."""

    def parameters(self, recurse: bool = True):
        return iter([type("P", (), {"device": torch.device("cuda:0")})()])


class FakeRay:
    """The calls ``_run_ray`` makes, run at once in this process; records what each task asked for."""

    def __init__(self):
        self.asked: list[dict] = []

    def is_initialized(self):
        return True  # as if connected: nothing started, nothing shut down

    def remote(self, **options):
        self.asked.append(options)
        return lambda fn: type("Remote", (), {"remote": staticmethod(lambda *a: fn(*a))})()

    def put(self, value):
        return value

    def wait(self, refs, num_returns=1):
        return refs[:1], refs[1:]

    def get(self, ref):
        return ref


def grid(model):
    import functools
    return functools.partial(lambda m, x: x + 1, model)


@pytest.mark.parametrize("model, executor, gpus", [
    (OnCuda(), RAY2, 1.0),  # CUDA models: one GPU per task
    (torch.nn.Linear(1, 1), RAY2, 0.0),  # CPU models: none
    (OnCuda(), dataclasses.replace(RAY2, num_gpus=0.25), 0.25),  # four cells share a GPU
])
def test_a_ray_task_asks_for_gpus_when_its_models_are_on_cuda(monkeypatch, model, executor, gpus):
    from specrepro.core import executor as ex
    fake = FakeRay()
    monkeypatch.setattr(ex, "import_ray", lambda: fake)
    assert run_cells(grid(model), [1, 2], executor) == [2, 3]
    assert fake.asked == [{"num_cpus": 1, "num_gpus": gpus, "max_retries": 0}]


def test_a_negative_gpu_count_is_refused():
    with pytest.raises(ValueError, match="num_gpus"):
        ExecutorConfig("ray", num_gpus=-1)


@needs_ray
def test_failing_grids_again_and_again_leave_the_driver_standing(ray_cluster):
    """A failed cell stops its grid without cancelling the tasks still out: on Ray 2.60 a cancel that raced a
    task's reply aborted this very process (task_manager.cc check, exit 1; one grid in three here, and CI died of
    it). Twenty failing grids, each followed by a good one, on one cluster."""
    for _ in range(20):
        with pytest.raises(CellError):
            run_cells(fails_on_three, [1, 2, 3, 4], RAY2)
        assert run_cells(square, list(range(6)), RAY2) == [c * c for c in range(6)]
