"""Benchmark: every method on the same prompts, interleaved, resumable, with the cost model beside it.

    python -m specrepro bench --methods ar,speculative,prompt-lookup,hf-ar,hf-assisted,hf-prompt-lookup \\
        --target smollm2-135m-instruct --draft smollm2-135m-draft --suite mixed --max-new-tokens 64 \\
        --temperature 0 --gamma 4 --dtype auto --repeats 1 --out runs/bench

A method may be listed as a *variant* with its own dtype, γ, tree size, acceptance rule and parameters, so one run
compares them side by side: ``speculative:fp32:g2``, ``prompt-lookup:bf16:gauto``, ``ar:fp32``, ``ppd:t20``,
``medusa:typical``, ``mjsd:b4:tau0.5``, ``spectr:m2``, ``bild:f0.3:r2``, ``mentored:kl0.05`` (fields after the name in
any order: a dtype bf16 | fp16 | fp32 | auto, gN or gauto, tN, a rule exact | greedy | typical, and the method's own
parameters by the label prefix its ``Params`` declares: ``python -m specrepro methods`` lists them).
Unset fields take ``--dtype``, ``--gamma``, ``--tree-size``, ``--acceptance`` and the parameter flags given
(``--num-beams``, ``--tau``, ...), else the method's defaults.

How the timings are kept fair:

1. One warm-up run per variant on the first prompt (not recorded) before anything is timed.
2. The device profile of every dtype in use (L_fp(n) for n = 1..γ_max+1 and one draft decode step, so c and
   β(n); ``specrepro.metrics.calibrate.measure``) is measured at the start of each session on a realistic
   context; it predicts each variant's speedup from its real steps (``bench_summary``), and it is what
   ``--dtype auto`` and ``--gamma auto`` decide with.
3. Variants interleaved per prompt (for each prompt, for each repeat, every variant), so drift in machine load
   hits all of them alike; seed = base seed + repeat, the same for every variant.
4. Clocks synchronise with the device (``decoding.Clock``); the thread count is recorded.

``--batch-size B`` (default 1) decodes the prompts B at a time in one batched run per (batch, repeat, variant)
(``generate.generate_batch``, ``specrepro.decode.batched``): the first B prompts are batch 0, the next B batch 1, and so
on. Every variant must batch (``Method.batches``, derived from the drafter classes: ar, speculative, prompt-lookup,
unigram, bigram, medusa, mentored; one clear error otherwise, before a model loads), so the baseline is batched ar.
Each prompt still gets its own record under the same key, with its batch-1 seed (so its tokens are its batch-1
run's), ``batch_size`` and its ``batch``; its ``wall_time_s`` is its latency within the batch. The summary's
tokens/s is throughput (every row's tokens over the batches' wall times) and ``latency_per_token_s`` each row's
view; the device profile is timed over B rows per forward (``ProfileKey.batch``), so c, β and the predicted speedup
are the batched step's (β(B, γ+1) of the survey blog). Energy is the batch's, shared among its rows by their tokens.

Files in ``DIR``:

- ``.lock``            held (``flock``) by the one process running a bench in ``DIR``; a second is refused;
- ``config.json``      the arguments; a restart into ``DIR`` with different ones is refused
                       (``variants.ResumeMismatch``);
- ``records.jsonl``    one record per (variant, prompt_id, repeat), appended and flushed as each finishes;
                       a restart skips those already written; a line that is not a record, or repeats one, is
                       named on stderr and the file as found kept as ``records.jsonl.damaged-<time>``
                       (``store.repair_records``), and only the missing records are measured again;
- ``provenance.json``  git revision, versions, device, CPU flags, the dtype of every variant and why, threads,
                       load, seeds, the device profile of every session, the T = 0 cross-check (records whose
                       tokens differ from ar or their counterpart at the same dtype) and, under ``failed``, each
                       method that raised in the last call: its error and where;
- ``summary.csv``      per variant: tokens/s, speedup vs the ``ar`` baseline, α, tokens per target call, c, β,
                       the predicted speedup and efficiency = measured / predicted, whether the rule is lossless,
                       and quality and energy: perplexity of the outputs under the target (MJSD paper Eq. 1,
                       pooled over tokens; scored on the engine with each prompt computed once,
                       ``quality.PromptScorer``), ROUGE-L against the suite's references, joules per token
                       (NVML on CUDA, RAPL on a CPU that exposes it, else empty with the reason in the
                       provenance), and the error of a method that failed; written at the end.

A method that raises (building its drafter, warming up or on a prompt) is marked failed, said on stderr, and runs
no further in that call; every other method still runs and is written and summarised. Its records written before
the failure stay, and a restart into ``DIR`` tries its missing records again.

Where the parts live: ``variants.py`` (the labels and ``BenchConfig``), ``store.py`` (the folder's lock and
records), ``loaded.py`` (the models at each dtype), ``bench_session.py`` (the machine and the device profile),
``bench_summary.py`` (summary.csv) and ``bench_types.py`` (``BenchPrompt``, ``BenchResult``); this module runs
them in order (``run_bench``, ``run_sweep``).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from ..core.decoding import check_prompt, eos_ids, model_device
from ..core.deps import untraced
from ..core.executor import LOCAL, ExecutorConfig, run_cells
from ..core.prompts import load_prompts_file, load_suite
from ..core.provenance import atomic_write_text, host_speed
from ..decode.adaptive import FixedGamma
from ..drafters import Drafter
from ..engine.models import LoadedModel, draft_alpha_prior, load_tokenizer
from ..methods import Cost, Loop, Needs
from ..metrics.energy import open_meter
from ..metrics.profile import Profile, candidate_dtypes
from ..metrics.quality import PromptScorer, rouge_l
from .bench_summary import mismatches, summarize, write_summary
from .bench_types import BenchPrompt, BenchResult
from .generate import encode_prompt, generate_batch, generate_ids
from .hf_baselines import assisted_unsupported, hf_generate
from .loaded import Models, weights_digest
from .peers import LlamaCppPeer, gguf_for
from . import openvino_peer
from .plan import Plan, RunRequest, plan_run, tree_drafting
from .bench_session import cost_context, measure_profiles, profile_n_max, session_info, session_profiles, warn_if_busy
from .cache import BENCH_RECORD, recording, restart_if_code_changed
from .store import LOCK, RunFolder, record_key, repair_records
from .variants import BenchConfig, Variant, check_config

__all__ = ["encode_prompts", "run_bench", "run_sweep"]


# -------------------------------------------------------------------------------------------- prompts


def encode_prompts(target: LoadedModel, source: str, limit: int | None, chat_template: bool) -> list[BenchPrompt]:
    """``suite:NAME`` or ``file:PATH`` -> the first ``limit`` prompts, encoded (only ``target.tokenizer`` is read)."""
    kind, _, name = source.partition(":")
    if kind == "suite":
        prompts = load_suite(name, limit=limit)
    elif kind == "file":
        prompts = load_prompts_file(name)[:limit]
    else:
        raise ValueError(f"prompt source must be suite:NAME or file:PATH, got {source!r}")
    return [BenchPrompt(p.id, encode_prompt(target, list(p.messages), chat_template), p.extra.get("reference"),
                        p.where) for p in prompts]


def _digest(prompts: Sequence[BenchPrompt]) -> str:
    payload = json.dumps([[p.id, p.ids] for p in prompts]).encode()
    return hashlib.sha256(payload).hexdigest()


def _bench_prompts(config: BenchConfig, prompts: Sequence[BenchPrompt] | None,
                   target: LoadedModel | None) -> list[BenchPrompt]:
    """The run's prompts (the first ``limit``), each checked against the target's context before any model loads:
    its tokenizer and context length are read without its weights unless the target was passed in."""
    if target is not None:
        tokenizer, context = target.tokenizer, target.context_length
    elif (found := load_tokenizer(config.target)) is not None:
        tokenizer, context = found
    else:  # a reduced-vocabulary draft folder as the target: checked once loaded
        tokenizer, context = None, None
    if prompts is None:
        holder = target if target is not None else LoadedModel(config.target, None, tokenizer)  # tokenizer only
        prompts = encode_prompts(holder, config.prompts, config.limit, config.chat_template)
    else:
        prompts = list(prompts)[:config.limit]
    if not prompts:
        raise ValueError("no prompts to run")
    if len({p.id for p in prompts}) != len(prompts):
        raise ValueError("prompt ids must be unique: they key the records")
    if context is not None:
        for p in prompts:
            check_prompt(p.ids, config, context, p.where or f"prompt {p.id}")
    return prompts


# -------------------------------------------------------------------------------------------- run


def _request(v: Variant, config: BenchConfig, models: Models, device: torch.device, alpha: float | None,
             kept: dict, prompt_tokens: int | None = None) -> RunRequest:
    """What ``v`` asks of ``plan_run``; a resumed run keeps the dtype and tree size its first session chose. Auto
    choices weigh the suite's mean prompt length ``prompt_tokens`` (its prefill, and the step at its context)."""
    dtype = kept.get("dtype", {}).get(v.label)
    tree = kept.get("tree_sizes", {}).get(v.label)
    named_tree = v.tree_size or config.tree_size
    return RunRequest(dtype=dtype["dtype"] if dtype else v.dtype, gamma=v.gamma, gamma_max=config.gamma_max,
                      tree_size=tree["size"] if tree else named_tree, alpha_prior=alpha, target=config.target,
                      candidates=candidate_dtypes(device), default_dtype=models.reference,
                      dtype_reason=dtype["reason"] if dtype else (None if v.dtype is None else "named in the method list"),
                      tree_size_reason=tree["reason"] if tree else "named", prompt_tokens=prompt_tokens,
                      new_tokens=config.max_new_tokens if prompt_tokens else None)


class _Run:
    """One call of ``run_bench``: its folder, provenance, records, the plan of every variant and the energy meter
    read around each generation. On Ray each task gets its own copy of the run (Ray unpickles a task's arguments
    for every task), and that copy opens its own meter (``__setstate__``): a meter is a handle on one machine's
    counter."""

    def __init__(self, out: Path, config: BenchConfig, models: Models, prompts: list[BenchPrompt],
                 drafters: dict[str, Drafter]):
        self.out, self.config, self.models, self.prompts, self.given = out, config, models, prompts, drafters
        self.variants = config.variants()
        self.prov_path = out / "provenance.json"
        self.provenance = (json.loads(self.prov_path.read_text()) if self.prov_path.exists()
                           else {"config": config.to_dict(), "sessions": []})
        self.records = repair_records(out)
        self.written = {record_key(r) for r in self.records}
        self.done = len(self.written)
        # The prompts in batches of --batch-size (one prompt each at batch size 1); a job is (batch, repeat, variant),
        # to do while any of its prompts lacks its record.
        size = config.batch_size
        self.batches = [prompts[i:i + size] for i in range(0, len(prompts), size)]
        self.todo = [(g, r, v.label) for g, batch in enumerate(self.batches) for r in range(config.repeats)
                     for v in self.variants if any((v.label, p.id, r) not in self.written for p in batch)]
        self.device = model_device(models.target.model)
        self.alpha = draft_alpha_prior(config.draft, config.temperature) if config.draft else None
        self.eos = eos_ids(models.target.model, models.target.tokenizer)
        self.meter = open_meter(self.device)  # NVML / RAPL total-energy counters read around each generation
        self.failed: dict[str, dict] = {}  # label -> what it raised and where: one method never takes the others down
        self.plans: dict[str, Plan] = {}
        self.session: dict | None = None  # this call's entry of provenance["sessions"], when it measures
        self.profiles: dict[str, Profile] = {}  # dtype -> device profile pooled over the sessions (start_session)
        self._peers: dict[Loop, object] = {}  # llama.cpp's and OpenVINO's engines, made by the first use of ``peer``
        self.scorer = PromptScorer(models.target.model)  # Eq. (1), each prompt's keys and values computed once

    def __getstate__(self) -> dict:
        return {**self.__dict__, "meter": None, "scorer": None}  # a counter handle does not travel; see __setstate__

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.meter = open_meter(self.device)  # the counter of the machine this copy runs on
        self.scorer = PromptScorer(self.models.target.model)

    def save(self) -> None:
        atomic_write_text(self.prov_path, json.dumps(self.provenance, indent=1) + "\n")

    def attempt(self, label: str, where: str, work: Callable[[], object]) -> object | None:
        """``work()`` for variant ``label``, or None if it raised: then the variant is marked failed (stderr,
        provenance, summary) and not tried again in this call."""
        if label in self.failed:
            return None
        try:
            return work()
        except Exception as err:  # any method's bug or refusal: recorded, and the other methods go on
            self.failed[label] = {"error": type(err).__name__, "message": str(err), "where": where}
            print(f"specrepro bench: {label} failed ({where}): {type(err).__name__}: {err}", file=sys.stderr)
            return None

    def start_session(self) -> None:
        """The session's device profile of every dtype in use (every candidate when a variant says auto), measured
        before any timed record, then every variant's plan: dtype, γ policy, tree size and drafter."""
        kept = {"dtype": self.provenance.get("resolved_dtypes", {}), "tree_sizes": self.provenance.get("tree_sizes", {})}
        if self.todo or not kept["dtype"]:
            self.session = session_info(self.config, self.device)
            warn_if_busy(self.session)
            torch_variants = [v for v in self.variants if v.method.loop.own_weights]  # (llama.cpp's: no profile)
            dtypes = {kept["dtype"][v.label]["dtype"] if v.label in kept["dtype"] else
                      (v.dtype if v.dtype not in (None, "auto") else self.models.reference) for v in torch_variants}
            if any(v.dtype == "auto" and v.label not in kept["dtype"] for v in torch_variants):
                dtypes |= set(candidate_dtypes(self.device))
            n_max = profile_n_max(self.variants, self.config)
            context = cost_context(self.prompts, self.config, self.models.target.context_length, n_max)
            profiles = measure_profiles(self.models, sorted(dtypes, key=str), context, self.config, n_max)
            self.session["profiles"] = {d: p.to_dict() for d, p in profiles.items()}
            self.provenance["sessions"].append(self.session)
        self.profiles = session_profiles(self.provenance["sessions"])
        for v in self.variants:
            self.attempt(v.label, "planning its run", lambda: self._plan(v, kept))
        self.provenance["resolved_dtypes"] = {label: {"dtype": p.dtype, "reason": p.dtype_reason}
                                              for label, p in self.plans.items()}
        self.provenance["tree_sizes"] = {label: {"size": p.tree_size, "reason": p.tree_size_reason} | (
            {"draft_step_s": p.draft_step_s} if p.draft_step_s is not None else {})
                                         for label, p in self.plans.items() if p.tree_size is not None}
        if self.session is not None:
            base = next((self.plans[v.label] for v in self.variants if v.method.name == "ar" and v.label in self.plans),
                        next((p for p in self.plans.values() if p.method.loop.own_weights), None))
            gamma = self.config.gamma if isinstance(self.config.gamma, int) else None
            bp = self.profiles[base.dtype] if base is not None else None
            self.session["costs"] = None if bp is None else {
                "dtype": base.dtype, "c": bp.c, "beta": bp.beta(gamma + 1) if gamma and gamma + 1 <= bp.n_max else None}
        self.save()

    def peer(self, loop: Loop):
        """Another engine with the run's threads, made by its first run: llama.cpp on the target's GGUF
        (``LlamaCppPeer``), or OpenVINO GenAI on the target's exported IR (``OpenVinoPeer``)."""
        if loop not in self._peers:
            threads = torch.get_num_threads()
            self._peers[loop] = (LlamaCppPeer(gguf_for(self.config.target), threads=threads) if loop is Loop.LLAMA_CPP
                                 else openvino_peer.OpenVinoPeer(openvino_peer.exported(self.config.target), threads))
        return self._peers[loop]

    def _plan(self, v: Variant, kept: dict) -> None:
        if not v.method.loop.own_weights:  # llama.cpp, OpenVINO: their files' own types, a fixed γ
            engine, gamma = v.method.loop.value, v.gamma if v.method.cost is not Cost.PLAIN else 1
            self.plans[v.label] = Plan(v.method, self.peer(v.method.loop).model_type,
                                       f"{engine} decodes its own file of the target in its own types",
                                       FixedGamma(gamma), "named")
            return
        def models(dtype: str):
            target, draft = self.models.at(dtype, v.compiled)
            return target, v.method.needs.source(draft, self.config.ngram_table)  # self-drafting: the zoo's
        given = self.given.get(v.label, self.given.get(v.method.name))
        mean_prompt = round(sum(len(p.ids) for p in self.prompts) / len(self.prompts)) if self.prompts else None
        request = _request(v, self.config, self.models, self.device, self.alpha, kept, mean_prompt)
        plan = plan_run(v.method, self.profiles, request,
                        models=None if given is not None else models, config=self.config.decode_config(v, 0))
        if given is not None:
            plan.drafter, plan.draft_step_s = given, tree_drafting(v.method, given)
        if plan.tree_size is not None and plan.drafter.tree_size != plan.tree_size:
            plan.drafter = plan.drafter.resized(plan.tree_size)  # a drafter passed in, at another size
        self.plans[v.label] = plan

    def job(self, label: str, repeat: int, max_new_tokens: int | None = None):
        """(variant, plan, target, draft, resolved DecodeConfig) of ``label``'s run at ``repeat``."""
        v, plan = next(v for v in self.variants if v.label == label), self.plans[label]
        t, d = self.models.at(plan.dtype, v.compiled)
        return v, plan, t, d, plan.config(self.config.decode_config(v, repeat, max_new_tokens))

    def run_one(self, label: str, prompt: BenchPrompt, repeat: int, max_new_tokens: int | None = None):
        v = next(v for v in self.variants if v.label == label)
        if not v.method.loop.own_weights:  # llama.cpp, OpenVINO: none of our models at its "dtype"
            dc = self.plans[label].config(self.config.decode_config(v, repeat, max_new_tokens))
            with self.meter.measure() as energy:
                rec = self.peer(v.method.loop).generate(v.method, prompt.ids, dc, self.eos,
                                                        self.models.target.tokenizer)
            rec.set_energy(energy.joules, energy.source, energy.reason)
            return rec
        v, plan, t, d, dc = self.job(label, repeat, max_new_tokens)
        with self.meter.measure() as energy:
            if v.method.loop is Loop.TRANSFORMERS:
                rec = hf_generate(v.method, t, prompt.ids, dc, self.eos, d)
                rec.provenance = {"dtype": plan.dtype, "dtype_reason": plan.dtype_reason}
            else:
                rec = generate_ids(t, prompt.ids, dc, draft=plan.drafter, gamma_policy=plan.gamma_policy,
                                   provenance={**plan.provenance(), **({"compiled": True} if v.compiled else {})})
        rec.set_energy(energy.joules, energy.source, energy.reason)
        return rec

    def run_batch(self, label: str, batch: list[BenchPrompt], repeat: int,
                  max_new_tokens: int | None = None) -> list:
        """The prompts of ``batch`` decoded at once (``generate.generate_batch``), each row drafted by a drafter of its
        own built from the plan's source, every row seeded as its batch-1 run; the batch's energy shared among its
        rows by their tokens."""
        v, plan, t, d, dc = self.job(label, repeat, max_new_tokens)
        with self.meter.measure() as energy:
            recs = generate_batch(t, [p.ids for p in batch], dc, seeds=[dc.seed] * len(batch),
                                  draft=v.method.needs.source(d, self.config.ngram_table),
                                  provenance={**plan.provenance(), **({"compiled": True} if v.compiled else {})})
        tokens = sum(rec.new_tokens for rec in recs)
        for rec in recs:
            share = rec.new_tokens / tokens if tokens else 1 / len(recs)
            rec.set_energy(None if energy.joules is None else energy.joules * share, energy.source, energy.reason)
        return recs

    def record_batch(self, label: str, g: int, repeat: int) -> list[dict]:
        """The timed run of batch ``g`` (one prompt at batch size 1) as the rows ``records.jsonl`` keeps, one per
        prompt, with their quality scores."""
        batch, v = self.batches[g], next(v for v in self.variants if v.label == label)
        # a dependency trace (core/deps.py) saw this variant's code in its warm-up; it stays out of the timing
        with untraced(self.config.warmup_tokens > 0):
            if self.config.batch_size == 1:
                recs, where = [self.run_one(label, batch[0], repeat)], {}
            else:
                recs, where = self.run_batch(label, batch, repeat), {"batch_size": self.config.batch_size, "batch": g}
        return [{**rec.to_dict(), "method": label, "base_method": v.method.name, "prompt_id": prompt.id,
                 "repeat": repeat, "seed": self.config.seed + repeat, "target": self.config.target,
                 "draft": self.config.draft if v.method.needs is Needs.DRAFT_MODEL else None, **where,
                 **self.quality(rec, prompt)} for rec, prompt in zip(recs, batch)]

    def warm_up(self, label: str) -> None:
        """One unrecorded run of ``label`` on the first prompt (the first batch at --batch-size > 1)."""
        tokens = min(self.config.warmup_tokens, self.config.max_new_tokens)
        if self.config.batch_size == 1:
            self.attempt(label, "warm-up", lambda: self.run_one(label, self.prompts[0], 0, tokens))
        else:
            self.attempt(label, "warm-up", lambda: self.run_batch(label, self.batches[0], 0, tokens))

    def where(self, g: int, repeat: int) -> str:
        """How an error names job (batch ``g``, ``repeat``)."""
        batch = self.batches[g]
        if self.config.batch_size == 1:
            return f"prompt {batch[0].id}, repeat {repeat}"
        return f"batch {g} (prompts {', '.join(p.id for p in batch)}), repeat {repeat}"

    def quality(self, rec, prompt: BenchPrompt) -> dict:
        """MJSD paper Eq. (1) under the run's reference target (one dtype for every variant), and ROUGE-L."""
        if not self.config.quality:
            return {}
        ppl = self.scorer(prompt.ids, rec.token_ids)
        return {"perplexity": ppl.ppl, "nll_sum": None if ppl.n == 0 else ppl.mean_nll * ppl.n, "nll_tokens": ppl.n,
                "rouge_l": rouge_l(rec.text, prompt.reference) if prompt.reference is not None else None}

    def measure(self, progress: bool, on_record: Callable[[dict], None] | None,
                executor: ExecutorConfig = LOCAL) -> None:
        """Warm every variant up, then run the (prompt, repeat, variant) jobs left, interleaved, each record appended
        and flushed as it finishes. A baseline that cannot run with these models is skipped and said. On Ray
        (``executor``), each prompt is a task (``_prompt_cell``, which warms its variants up on its own copy of the
        models) and its records are appended here in prompt order."""
        from tqdm.auto import tqdm

        skipped = {}
        draft = self.models.draft
        for v in self.variants:
            if (v.method.loop is Loop.TRANSFORMERS and v.method.cost is Cost.DRAFT_MODEL and draft is not None
                    and (why := assisted_unsupported(draft.model))):
                skipped[v.label] = why
                print(f"specrepro bench: skipping {v.label}: {why}", file=sys.stderr)
        todo = [job for job in self.todo if job[2] not in skipped]
        if not todo:
            return
        session = self.session
        peer_loops = {v.method.loop for v in self.variants
                      if not v.method.loop.own_weights and v.label not in {*skipped, *self.failed}}
        if Loop.LLAMA_CPP in peer_loops:
            session["peer"] = self.peer(Loop.LLAMA_CPP).describe()  # engine, version, the GGUF, threads
        if Loop.OPENVINO in peer_loops:
            session["openvino"] = self.peer(Loop.OPENVINO).describe()  # version, the IR and its export, threads
        session.update(skipped=skipped, model_notes=self.models.notes,
                       energy={"source": self.meter.source, "scope": getattr(self.meter, "scope", None),
                               "reason": self.meter.reason},
                       quality=({"perplexity": f"MJSD Eq. (1) under the {self.models.reference} target, unwarped",
                                 "rouge_l": "rouge-score rougeL F-measure, stemmed, against the suite's references"}
                                if self.config.quality else None))
        if executor.kind != "local":
            return self._measure_cells(todo, executor, progress, on_record)
        if self.config.warmup_tokens > 0:
            for v in self.variants:
                if v.label not in skipped:
                    self.warm_up(v.label)
        bar = tqdm(total=self.done + sum(len(self.batches[g]) for g, _, _ in todo), initial=self.done,
                   desc=f"bench {self.out.name}", file=sys.stderr, disable=not progress, unit="run")
        written = 0
        with open(self.out / "records.jsonl", "a") as handle:
            for g, repeat, label in todo:
                rows = self.attempt(label, self.where(g, repeat), lambda: self.record_batch(label, g, repeat))
                bar.update(len(self.batches[g]))
                for row in rows or ():
                    written += self._append(handle, row, on_record)
        bar.close()
        self._close_session(written)

    def _append(self, handle, row: dict, on_record: Callable[[dict], None] | None) -> int:
        """One record appended to records.jsonl, flushed and synced (an interrupted run keeps every finished line);
        1, or 0 for a record already written (a batch that a previous call left part-written runs whole again)."""
        if record_key(row) in self.written:
            return 0
        self.written.add(record_key(row))
        handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
        self.records.append(row)
        if on_record is not None:
            on_record(row)
        return 1

    def _measure_cells(self, todo: list[tuple[int, int, str]], executor: ExecutorConfig, progress: bool,
                       on_record: Callable[[dict], None] | None) -> None:
        """The jobs left as one cell per prompt (per batch at --batch-size > 1; its repeats and variants interleaved
        as here), run by ``executor``; each cell's records appended here in prompt order, so records.jsonl is the
        file a local run writes. A method that fails in a cell is marked failed; the cells already sent still try
        it."""
        cells: dict[int, tuple[int, list[tuple[int, str]]]] = {}
        for g, repeat, label in todo:  # batch-major already: the local order within each batch is kept
            cells.setdefault(g, (g, []))[1].append((repeat, label))
        written = 0
        with open(self.out / "records.jsonl", "a") as handle:
            def write(_: int, done: tuple[list[dict], dict]) -> None:
                nonlocal written
                rows, failed = done
                for label, err in failed.items():
                    self.failed.setdefault(label, err)
                for row in rows:
                    written += self._append(handle, row, on_record)
            run_cells(functools.partial(_prompt_cell, self), list(cells.values()), executor,
                      progress=f"bench {self.out.name} (prompts)" if progress else False, on_result=write)
        self._close_session(written, executor=executor.describe())

    def _close_session(self, written: int, **extra) -> None:
        """This call's session's end in provenance.json: when it finished, what it wrote, the host's speed then."""
        self.session.update(finished_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), records_written=written,
                            **extra, host_speed_end=host_speed())
        self.save()

    def finish(self) -> BenchResult:
        """summary.csv, the failures and the T = 0 cross-check: every method should reproduce greedy decoding token
        for token (in bf16 a (γ+1)-token forward can round differently from a 1-token one and flip a near-tie)."""
        resolved = [dataclasses.replace(v, dtype=self.plans[v.label].dtype if v.label in self.plans else
                                        self.provenance.get("resolved_dtypes", {}).get(v.label, {}).get("dtype"))
                    for v in self.variants]
        greedy = self.config.temperature == 0
        baseline = next((v.label for v in resolved if v.label == "ar"),
                        next((v.label for v in resolved if v.method.name == "ar"), None))
        summary = summarize(self.records, resolved, greedy, self.profiles, baseline, self.failed)
        write_summary(self.out, summary)
        self.provenance["failed"] = self.failed
        self.provenance["t0_mismatches"] = mismatches(self.records, resolved, greedy)
        self.save()
        for line in self.provenance["t0_mismatches"]:
            print(f"specrepro bench: T=0 tokens differ: {line}", file=sys.stderr)
        return BenchResult(out=self.out, records=self.records, summary=summary, provenance=self.provenance,
                           failed=self.failed)


def _prompt_cell(run: _Run, cell: tuple[int, list[tuple[int, str]]]) -> tuple[list[dict], dict]:
    """One prompt (one batch at --batch-size > 1) of a bench on a Ray worker: each of its variants warmed up, then
    the (repeat, variant) jobs in order; (its records, the methods that failed). ``run`` is this task's own copy,
    with its own models and meter, so the warm-up runs on the very models the task then times. Module-level for
    Ray."""
    g, jobs = cell
    for label in dict.fromkeys(label for _, label in jobs) if run.config.warmup_tokens > 0 else ():
        run.warm_up(label)
    rows = [run.attempt(label, run.where(g, repeat), lambda: run.record_batch(label, g, repeat))
            for repeat, label in jobs]
    return [row for batch in rows if batch is not None for row in batch], run.failed


def run_bench(config: BenchConfig, out: str | Path, *, target: LoadedModel | None = None,
              draft: LoadedModel | None = None, prompts: Sequence[BenchPrompt] | None = None,
              drafters: dict[str, Drafter] | None = None, on_record: Callable[[dict], None] | None = None,
              progress: bool = True, executor: ExecutorConfig | str | None = None) -> BenchResult:
    """Run (or resume) a benchmark into ``out``; models and prompts are loaded from ``config`` unless given.

    ``drafters`` overrides the drafter of a speculative method (e.g. an n-gram drafter built in memory), keyed
    by method name or variant label. ``on_record(record)`` runs after each record is written (tests interrupt a run
    with it). ``executor`` (``specrepro.core.executor``; default local) may run the prompts as Ray tasks of
    ``config.threads`` CPUs (1 if unset): the session's profile, plans and files stay here, each task times its
    prompt's interleaved runs on its own node (a paired speedup compares runs of one node), and the records are
    appended here in prompt order, under the same keys as a local run's.
    """
    executor = ExecutorConfig.parse(executor)
    if executor.kind == "ray":
        executor = dataclasses.replace(executor, num_cpus=config.threads or 1)
    out, drafters = Path(out), dict(drafters or {})
    check_config(out, config, ignore=("prompt_digest", "weights_digest"))  # before any slow loading
    variants = config.variants()
    if config.batch_size > 1 and drafters:
        raise ValueError(f"drafters passed in ({', '.join(drafters)}) run at batch size 1: a batch builds a drafter "
                         f"per row from the run's models and tables")
    own = [v for v in variants if v.label not in drafters and v.method.name not in drafters]
    if config.ngram_table is None and (ngram := [v.label for v in own if v.method.needs is Needs.NGRAM_TABLE]):
        raise ValueError(f"methods {ngram} need --ngram-table FILE (an .npz written by NGramTable.save)")
    with RunFolder(out):
        prompts = _bench_prompts(config, prompts, target)  # every prompt checked before a model loads
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        restart_if_code_changed(out, out / BENCH_RECORD, keep=(LOCK,))
        # code.json: the files this bench ran, warm-ups included (on Ray: what ran in this process)
        with recording(out / BENCH_RECORD):
            models = Models(config, target, draft, needs_draft=any(v.method.needs is Needs.DRAFT_MODEL for v in own))
            config = dataclasses.replace(config, prompt_digest=_digest(prompts), weights_digest=weights_digest(
                models.target.model, models.draft.model if models.draft else None))
            check_config(out, config)
            atomic_write_text(out / "config.json", json.dumps(config.to_dict(), indent=1) + "\n")
            run = _Run(out, config, models, prompts, drafters)
            run.start_session()
            run.measure(progress, on_record, executor)
            return run.finish()


def sweep_cell(base: BenchConfig, out: Path, objects: dict, cell: tuple[float, int]) -> list[dict]:
    """One point of a sweep, ``cell`` = (temperature, γ): ``run_bench`` into ``out/T{T}_g{γ}`` (its own folder,
    lock, device profile and interleaving), and its summary rows. Module-level, so that a Ray task can run it."""
    temperature, gamma = cell
    config = dataclasses.replace(base, temperature=float(temperature), gamma=gamma)
    return run_bench(config, Path(out) / f"T{temperature:g}_g{gamma}", **objects).summary


def run_sweep(base: BenchConfig, out: str | Path, gammas: Sequence[int], temperatures: Sequence[float],
              executor: ExecutorConfig | str | None = None, **objects) -> list[dict]:
    """``run_bench`` once per (temperature, γ) into ``out/T{T}_g{γ}``; summary rows with both added.

    ``executor`` (``specrepro.core.executor``; default local, one bench after the other) may run the points as Ray
    tasks: each is a whole bench, timed on the node that ran it against its own ``ar`` and device profile, and
    written to its own folder (a filesystem every node sees, on a cluster of several machines). Timing benches
    side by side on one machine share its cores and memory bandwidth: give each task ``num_cpus`` = the bench's
    threads, and no more tasks at once than the machine has cores for."""
    cells = [(float(temperature), gamma) for temperature in temperatures for gamma in gammas]
    summaries = run_cells(functools.partial(sweep_cell, base, Path(out), objects), cells, executor)
    return [{"temperature": temperature, **row, "gamma": gamma}
            for (temperature, gamma), summary in zip(cells, summaries) for row in summary]
