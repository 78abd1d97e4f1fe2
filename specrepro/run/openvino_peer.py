"""OpenVINO GenAI beside ours (issue 64): the bench baselines ``openvino-ar`` and ``openvino-prompt-lookup``, OpenVINO
GenAI's ``LLMPipeline`` on the zoo target exported to OpenVINO IR, with the run's threads.

Two installs, kept apart:

- the runtime, ``openvino-genai`` (with ``openvino`` and ``openvino-tokenizers``), is part of the ``[peers]`` extra and
  installs beside ours without conflict;
- the export, optimum-intel, is not: it pulls its own torch, torchvision and transformers, and a torchvision built for
  another torch breaks ours on import. So it lives in a venv of its own, ``build/openvino-export`` (``make models
  PEERS=1`` makes it, and ``python -m specrepro.run.openvino_peer export`` runs it), and it is called only to write the
  IR: ``optimum-cli export openvino`` of the zoo target's folder (the fp32 weights ``make models`` dequantised from the
  GGUF), 4-bit asymmetric weights in groups of 32 over every layer (``--ratio 1.0``, the grid of the GGUF's Q4_1, as
  the engine holds them), the tied embedding and head in 8 bits (optimum's backup precision; the GGUF's head is Q8_0).
  The IR goes to ``$SPECREPRO_CACHE/openvino/<target>-int4-g32`` with ``export.json`` saying how it was made.

What the baselines do (OpenVINO GenAI 2026.4):

- the same prompt token ids as ours, given as an ``ov.Tensor`` (no tokenizer of OpenVINO's on the way in); every
  ``generate`` starts from an empty cache (no chat mode), so the prefill is paid as ours and timed with the decoding;
- T = 0: greedy. OpenVINO computes in its own int4/int8 kernels, so its tokens follow ours for a while and may part
  at a near-tie (records say ``token_comparable: false``). T > 0: its multinomial sampler seeded with the record's seed
  (its own generator: the same seed is not the same draws as ours);
- prompt lookup: the pipeline made with ``prompt_lookup=True``, ``num_assistant_tokens`` = γ and ``max_ngram_size`` =
  3 (as our prompt-lookup drafter's); OpenVINO verifies the proposed tokens in one forward and keeps the matching ones.
  It is exact at T = 0 by construction; at T > 0 GenAI documents it for greedy and sampling alike;
- one pipeline per kind (plain, prompt lookup) is made once and reused for every prompt; the record's target calls are
  the generation steps OpenVINO's raw metrics count (``m_batch_sizes``: the tokens each step added; the prefill's
  token is added where the plain pipeline leaves it out), and for prompt lookup each later step's tokens less one are
  its accepted drafts;
- with the CPU plugin's defaults (bf16 compute where the CPU has bf16 units; the plain pipeline and the prompt-lookup
  one may take different attention paths): on a Zen 4 the two pipelines' greedy tokens part after a few dozen
  tokens, so its prompt lookup is not token for token its AR either.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..core.config import DecodeConfig
from ..core.provenance import atomic_write_text
from ..core.record import GenerationRecord
from ..methods import Cost, Loop, Method
from .peers import INSTALL, module_installed, require_module  # noqa: F401 (INSTALL: the same extra)

EXPORT_VENV = Path("build/openvino-export")
EXPORT_HOW = "make models PEERS=1 (or python -m specrepro.run.openvino_peer export)"
WEIGHTS = "int4-g32"  # 4-bit asymmetric, groups of 32, every layer: the GGUF's Q4_1 grid
EXPORT_ARGS = ("--task", "text-generation-with-past", "--weight-format", "int4", "--group-size", "32", "--ratio", "1.0")
LOOKUP_MAX_NGRAM = 3  # as our prompt-lookup drafter's (drafters/prompt_lookup.py)


def installed() -> bool:
    """Whether OpenVINO GenAI is installed (without loading its library)."""
    return module_installed("openvino_genai")


def require(what: str):
    """The ``openvino_genai`` module, or one clear error saying that ``what`` needs it and how to install it."""
    return require_module("openvino_genai", "OpenVINO GenAI", what)


def model_dir(target: str) -> Path:
    """Where the target's OpenVINO IR lives (written by :func:`export`)."""
    from ..engine.models import cache_root
    return cache_root() / "openvino" / f"{target}-{WEIGHTS}"


def exported(target: str) -> Path:
    """The target's exported IR folder, or one clear error saying how to make it."""
    out = model_dir(target)
    if not (out / "openvino_model.xml").is_file() or not (out / "export.json").is_file():
        raise ValueError(f"OpenVINO GenAI runs the target exported to OpenVINO IR, and {target} has not been exported "
                         f"here ({out} holds no openvino_model.xml); run {EXPORT_HOW}")
    return out


def check_runnable(labels, target: str) -> None:
    """One clear error, before any model loads, when OpenVINO baselines are listed (``labels``) but cannot run."""
    labels = list(labels)
    if labels:
        require(", ".join(labels))
        exported(target)


def export(target: str, venv: Path = EXPORT_VENV, force: bool = False) -> Path:
    """Export the zoo target to OpenVINO IR with the export venv's optimum-cli (module docstring); written beside
    its final folder and moved into place only when whole. Returns the folder."""
    from ..engine.models import zoo_path
    out = model_dir(target)
    if (out / "export.json").is_file() and not force:
        return out
    cli = venv / "bin" / "optimum-cli"
    if not cli.is_file():
        raise ValueError(f"the OpenVINO export needs optimum-intel in its own venv ({venv}: not there); run "
                         f"{EXPORT_HOW}")
    source = zoo_path(target)
    if not (source / "config.json").is_file():
        raise ValueError(f"{target} has no dequantised folder at {source}; run make models")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    command = [str(cli), "export", "openvino", "--model", str(source), *EXPORT_ARGS, str(tmp)]
    print(f"specrepro: exporting {target} to OpenVINO IR ({WEIGHTS}) -> {out} (once)", file=sys.stderr)
    start = time.perf_counter()
    subprocess.run(command, check=True)
    versions = json.loads(subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import importlib.metadata as m, json; print(json.dumps({p: m.version(p) "
         "for p in ('optimum-intel', 'nncf', 'openvino', 'openvino-tokenizers', 'torch', 'transformers')}))"],
        check=True, capture_output=True, text=True).stdout)
    atomic_write_text(tmp / "export.json", json.dumps(
        {"target": target, "source": str(source), "weights": WEIGHTS,
         "command": ["optimum-cli", "export", "openvino", "--model", "<source>", *EXPORT_ARGS, "<out>"],
         "exporter_versions": versions, "seconds": round(time.perf_counter() - start, 1)}, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


class OpenVinoPeer:
    """OpenVINO GenAI on one exported IR with a fixed thread count: the bench's OpenVINO baselines."""

    def __init__(self, folder: str | Path, threads: int):
        self.folder, self.threads = Path(folder), int(threads)
        self._pipes: dict[bool, object] = {}  # prompt lookup -> its LLMPipeline

    def __getstate__(self) -> dict:  # (a Ray worker gets the settings and makes its own pipelines)
        return {**self.__dict__, "_pipes": {}}

    @property
    def properties(self) -> dict:
        """The CPU plugin's settings every pipeline gets: the run's threads, one stream, latency first."""
        return {"INFERENCE_NUM_THREADS": self.threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}

    def pipeline(self, lookup: bool):
        have = self._pipes.get(lookup)
        if have is None:
            genai = require("OpenVINO GenAI")
            extra = {"prompt_lookup": True} if lookup else {}
            have = self._pipes[lookup] = genai.LLMPipeline(str(self.folder), "CPU", **extra, **self.properties)
        return have

    @functools.cached_property
    def export_info(self) -> dict:
        return json.loads((self.folder / "export.json").read_text())

    @property
    def model_type(self) -> str:
        return self.export_info["weights"]

    def describe(self) -> dict:
        """What every record and session says about the engine: its version, the IR, how it was made, the threads."""
        genai = require("OpenVINO GenAI")
        import openvino
        return {"engine": "OpenVINO GenAI", "version": genai.__version__, "openvino": openvino.__version__,
                "model_file": str(self.folder.name), "model_type": self.model_type, "threads": self.threads,
                "properties": self.properties, "export": self.export_info}

    def generation_config(self, spec: Method, config: DecodeConfig, eos: set[int]):
        genai, s = require("OpenVINO GenAI"), config.sampling
        g = genai.GenerationConfig()
        g.max_new_tokens = config.max_new_tokens
        g.ignore_eos = not config.stop_at_eos
        g.stop_token_ids = set(int(e) for e in eos) if config.stop_at_eos else set()
        g.do_sample = not s.greedy
        if not s.greedy:
            g.temperature, g.top_k, g.top_p = float(s.temperature), int(s.top_k or 0), float(s.top_p)
            g.rng_seed = int(config.seed % 2 ** 31)
        if spec.cost is Cost.MODEL_FREE:
            g.num_assistant_tokens, g.max_ngram_size = int(config.gamma), LOOKUP_MAX_NGRAM
        return g

    def generate(self, spec: Method, prompt_ids: list[int], config: DecodeConfig, eos: set[int],
                 tokenizer=None) -> GenerationRecord:
        """One run of an OpenVINO baseline on ``prompt_ids`` (module docstring)."""
        if spec.loop is not Loop.OPENVINO:
            raise ValueError(f"{spec.name!r} is not an OpenVINO GenAI baseline")
        import numpy as np
        import openvino
        lookup = spec.cost is Cost.MODEL_FREE
        pipe, g = self.pipeline(lookup), self.generation_config(spec, config, eos)
        ids = openvino.Tensor(np.asarray([prompt_ids], dtype=np.int64))
        start = time.perf_counter()
        result = pipe.generate(ids, g)
        wall = time.perf_counter() - start
        tokens = [int(t) for t in result.tokens[0]][:config.max_new_tokens]
        stop = "eos" if tokens and tokens[-1] in eos and config.stop_at_eos else "max_new_tokens"
        steps = [int(b) for b in result.perf_metrics.raw_metrics.m_batch_sizes]  # tokens each step added
        if sum(steps) < len(tokens):  # (the plain pipeline leaves its prefill's token out of the steps)
            steps = [len(tokens) - sum(steps), *steps]
        gamma = int(config.gamma) if lookup else 0
        accepted = [max(0, k - 1) for k in steps[1:]] if lookup else []
        rec = GenerationRecord(method=spec.name, token_ids=tokens, prompt_tokens=len(prompt_ids), wall_time_s=wall,
                               target_calls=len(steps), accept_lengths=accepted,
                               proposed_lengths=[gamma] * len(accepted), gammas=[gamma] * len(accepted),
                               time_other_s=wall, stop_reason=stop, config=config.to_dict(),
                               provenance=self.provenance(spec, config))
        if tokenizer is not None:
            rec.text = tokenizer.decode(tokens, skip_special_tokens=True)
        return rec

    def provenance(self, spec: Method, config: DecodeConfig) -> dict:
        s = config.sampling
        sampler = "greedy" if s.greedy else (f"OpenVINO GenAI's multinomial sampler: top-k {s.top_k or 'off'}, top-p "
                                             f"{s.top_p}, temperature {s.temperature}, seed {config.seed % 2 ** 31}")
        why = ("OpenVINO computes in its own int4/int8 kernels: greedy tokens follow ours for a while and may part"
               if s.greedy else "OpenVINO's sampler draws from its own generator: the same seed is not the same draws")
        return {**self.describe(), "dtype": self.model_type, "sampler": sampler,
                "method": {"name": spec.name, **spec.describe()}, "token_comparable": False,
                "not_comparable_because": why}


def main(argv: list[str] | None = None) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="python -m specrepro.run.openvino_peer",
                                     description="export the zoo target to OpenVINO IR for the openvino-* baselines")
    parser.add_argument("command", choices=["export"])
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--force", action="store_true", help="export again over an existing IR")
    args = parser.parse_args(argv)
    try:
        print(export(args.target, force=args.force))
    except (ValueError, subprocess.CalledProcessError) as err:
        print(f"specrepro: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
