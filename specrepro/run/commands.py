"""Command line: ``python -m specrepro generate ...`` (and ``bench``, see specrepro.run.bench)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from ..engine import ENGINES
from ..engine import ENV as ENGINE_ENV
from ..core.prompts import GROUNDED, SUITES
from ..core.cli import (Parser, check_writable, device, existing_file, interrupted_while_starting, non_negative_int,
                  positive_int, resume_command, run_command, threads)

with interrupted_while_starting():  # torch and transformers load here: a Ctrl-C meanwhile is one line too
    from ..acceptance import TREE_RULES
    from ..core.config import PRESETS, DecodeConfig, SamplingConfig
    from ..methods import (BATCHING, METHODS, OUR_METHODS, REGISTRY, RUN_FLAGS, Method, check_parameters_taken,
                          method, parameter_fields)


def add_decode_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="smollm2-135m-instruct", help="zoo name, local folder or hub id")
    p.add_argument("--draft", default=None, help="zoo name, local folder, hub id, or layers:K (self-draft)")
    p.add_argument("--max-new-tokens", type=positive_int, default=64)
    p.add_argument("--temperature", type=float, default=None, help="0 (default): argmax")
    p.add_argument("--top-k", type=int, default=None, help="keep the k most likely tokens (default 0: all)")
    p.add_argument("--top-p", type=float, default=None, help="nucleus mass (default 1: all)")
    p.add_argument("--preset", default=None, choices=sorted(PRESETS),
                   help="a named warping instead of --temperature/--top-k/--top-p: mjsd = the MJSD paper's top-k 20 "
                        "then top-p 0.9 at T = 1 (its 'greedy' baseline is ar sampling with it)")
    p.add_argument("--gamma", type=gamma_arg, default=None,
                   help="draft tokens per step (default 4), or auto: chosen each step from the device profile and α "
                        "so far")
    p.add_argument("--tree-size", type=positive_int, default=None,
                   help="nodes of the draft tree for tree methods (medusa, ppd; default: the hardware-aware size)")
    p.add_argument("--acceptance", default=None, choices=tuple(TREE_RULES),
                   help="verification rule: exact (lossless, default), greedy (T = 0 only) or typical "
                        "(Medusa's typical acceptance: LOSSY, faster at T > 0); spectr, mjsd, bild and mentored are "
                        "their methods' own rules")
    # One flag per method parameter, derived from the methods' Params: only the flags given are recorded, and a flag
    # that none of the run's methods takes is an error (params_from).
    for name, (field, takers) in parameter_fields().items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(field.default), default=None,
                       choices=field.metadata.get("choices"),
                       help=f"{field.metadata['help']} (default {field.default}; methods: {', '.join(takers)})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto",
                   help="auto (default: the fastest for the method per the device profile), bf16, fp16 or fp32")
    p.add_argument("--device", type=device, default=None, help="cpu or cuda (default: cuda when available)")
    add_engine_flag(p)
    p.add_argument("--no-chat-template", action="store_true", help="feed the prompt as plain text")


def add_engine_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=ENGINES, default=None, dest="forward_engine",
                   help="specrepro (default: the static-cache engine, specrepro.engine, for the Llama family, holding "
                        "weights that lie on a 4-bit grid, as the offline model's Q4_1 ones, as 4-bit integers on a "
                        "bf16 CPU; any other model runs on transformers and its records say so), specrepro-dense (the "
                        "same engine with dense weights) or transformers (transformers' own forward, the reference "
                        "path)")


def sampling_from(args: argparse.Namespace) -> SamplingConfig:
    """--preset, or --temperature/--top-k/--top-p (defaults: argmax); both at once is one clear error."""
    given = {k: v for k, v in (("temperature", args.temperature), ("top_k", args.top_k), ("top_p", args.top_p))
             if v is not None}
    if args.preset is not None:
        if given:
            raise ValueError(f"--preset {args.preset} sets the warping; drop {', '.join('--' + k.replace('_', '-') for k in given)}")
        return PRESETS[args.preset]
    return SamplingConfig(**given)


DEFAULT_GAMMA, DEFAULT_ACCEPTANCE, DEFAULT_GAMMA_MAX = 4, "exact", 16  # what --gamma, --acceptance and
# --gamma-max mean when not given


def given_params(args: argparse.Namespace) -> dict:
    """The method parameters given on the command line: {field name: value} (each has a flag of its name)."""
    return {name: getattr(args, name) for name in parameter_fields() if getattr(args, name, None) is not None}


def given_settings(args: argparse.Namespace) -> dict:
    """The method parameters and the run-wide settings (``RUN_FLAGS``: --gamma, --tree-size, --acceptance, --draft,
    --ngram-table) given on the command line."""
    return {**given_params(args), **{name: getattr(args, name) for name in RUN_FLAGS
                                      if getattr(args, name, None) is not None}}


def params_from(args: argparse.Namespace, spec: Method):
    """``spec``'s parameters from the command line; a setting it does not read is one clear error."""
    check_parameters_taken(given_settings(args), [spec])
    return spec.params_from(given_params(args))


def gamma_arg(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"gamma must be an integer >= 1 or auto, got {value!r}") from None


def plan_generate(spec: Method, args: argparse.Namespace, config: DecodeConfig, prompt_tokens: int | None = None,
                  models=None):
    """The run's plan (``plan.plan_run``): dtype, γ policy and tree size with their reasons, weighed at the prompts'
    mean length ``prompt_tokens`` when known, and with ``models(dtype)`` its drafter. Profiles come from the cache
    (``python -m specrepro calibrate``), or are measured now and cached."""
    import torch

    from ..metrics.calibrate import get_profile
    from ..metrics.profile import candidate_dtypes, cpu_info
    from ..engine.models import default_device, draft_alpha_prior
    from .host_cost import measure_host
    from .plan import RunRequest, lazy_profiles, plan_run

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device) if args.device else default_device()
    draft = args.draft if spec.cost.draft_cost else None
    profiles = lazy_profiles(lambda dtype: get_profile(args.target, draft, dtype, device=device,
                                                       threads=args.threads, compiled=args.compile,
                                                       host=measure_host))
    request = RunRequest(dtype=args.dtype, gamma=config.gamma, tree_size=args.tree_size, target=args.target,
                         alpha_prior=draft_alpha_prior(draft, config.sampling.temperature) if draft else None,
                         tree_weights=args.draft if spec.token_tree else None, candidates=candidate_dtypes(device),
                         dtype_reason="named with --dtype", tree_size_reason="named with --tree-size",
                         prompt_tokens=prompt_tokens, new_tokens=config.max_new_tokens if prompt_tokens else None)
    plan = plan_run(spec, profiles, request, models=models, config=config)
    return plan, {**plan.provenance(), "cpu_kernel_flags": cpu_info()["kernel_flags"]}


def check_generate(spec: Method, args: argparse.Namespace) -> tuple[DecodeConfig, list[tuple[str, list]], int | None]:
    """The whole ``generate`` run checked before a model loads: the method and every setting it is given, the models'
    names, and every prompt against the target's context (its tokenizer only). Returns the config, the prompts and
    their mean length in tokens (None without a local tokenizer)."""
    from ..core.decoding import check_prompt
    from .generate import encode_prompt
    from ..methods import Needs
    from ..engine.models import LoadedModel, check_model_name, load_tokenizer
    from ..core.prompts import load_prompts_file

    if spec.name not in OUR_METHODS:
        raise ValueError(f"{spec.name!r} is a baseline of {spec.loop.value}: it runs in bench (generate runs "
                         f"{', '.join(OUR_METHODS)})")
    config = spec.config(max_new_tokens=args.max_new_tokens, sampling=sampling_from(args),
                         gamma=DEFAULT_GAMMA if args.gamma is None else args.gamma, tree_size=args.tree_size,
                         acceptance=args.acceptance or DEFAULT_ACCEPTANCE, seed=args.seed,
                         params=params_from(args, spec))
    spec.check_batch(args.batch_size, config.gamma)
    if spec.needs is Needs.NGRAM_TABLE and args.ngram_table is None:
        raise ValueError(f"--method {spec.name} needs --ngram-table FILE (an .npz written by NGramTable.save)")
    if spec.needs is Needs.DRAFT_MODEL:
        if args.draft is None:
            raise ValueError(f"--method {spec.name} needs --draft NAME")
        check_model_name(args.draft, "--draft", target=args.target)
    if args.prompt is not None:
        prompts = [("prompt", [("user", args.prompt)], "--prompt")]
    else:
        prompts = [(p.id, list(p.messages), p.where) for p in load_prompts_file(args.prompts)]
    check_model_name(args.target, "--target")
    found, lengths = load_tokenizer(args.target), []
    if found is not None:
        tokenizer, context = found
        for _, messages, where in prompts:
            ids = encode_prompt(LoadedModel(args.target, None, tokenizer), messages, not args.no_chat_template)
            check_prompt(ids, config, context, where)
            lengths.append(len(ids))
    mean_length = round(sum(lengths) / len(lengths)) if lengths else None
    return config, [(prompt_id, messages) for prompt_id, messages, _ in prompts], mean_length


AUTO_CANDIDATES = ("ar", "prompt-lookup", "speculative", "eagle", "medusa", "ppd")  # --method auto weighs these


def auto_method(args: argparse.Namespace) -> tuple[Method, str]:
    """``--method auto``: the candidate with the lowest expected seconds per token on this device's profiles
    (``plan.choose_method``), AR among them; "speculative" only with a ``--draft``, and the token-tree methods with
    the zoo's weights for the target (left out, said, where there are none). Then γ auto unless ``--gamma``."""
    import torch

    from ..engine.models import default_device, draft_alpha_prior
    from ..metrics.calibrate import get_profile
    from ..metrics.profile import candidate_dtypes
    from .host_cost import measure_host
    from .plan import RunRequest, choose_method, lazy_profiles

    device = torch.device(args.device) if args.device else default_device()
    profiles = lazy_profiles(lambda dtype: get_profile(args.target, args.draft, dtype, device=device,
                                                       threads=args.threads, compiled=args.compile,
                                                       host=measure_host))
    temperature = sampling_from(args).temperature
    request = RunRequest(gamma="auto", target=args.target, candidates=candidate_dtypes(device),
                         alpha_prior=draft_alpha_prior(args.draft, temperature) if args.draft else None)
    choice = choose_method([method(n) for n in AUTO_CANDIDATES if n != "speculative" or args.draft], profiles,
                           request)
    return choice.method, choice.reason


def cmd_generate(args: argparse.Namespace) -> int:
    from .generate import generate
    from ..engine.models import load_draft, load_model
    from ..methods import Needs

    chosen = None
    if args.method == "auto":
        spec, chosen = auto_method(args)
        print(f"specrepro generate: --method auto runs {spec.name}: {chosen}", file=sys.stderr)
        args.draft = args.draft if spec.needs is Needs.DRAFT_MODEL else None  # a tree method: the zoo's weights
        args.gamma = "auto" if args.gamma is None else args.gamma
    else:
        spec = method(args.method)
    config, prompts, prompt_tokens = check_generate(spec, args)
    loaded: dict = {}

    def models(dtype: str):  # once per invocation, at the planned dtype (the plan builds the drafter on them)
        target = load_model(args.target, dtype=dtype, device=args.device)
        draft_model = load_draft(args.draft, target) if spec.needs is Needs.DRAFT_MODEL else None
        if args.compile:
            from ..engine.compiled import compile_forward
            for one in (target, draft_model):
                if one is not None:
                    compile_forward(one.model)
        loaded.update(target=target, source=spec.needs.source(draft_model, args.ngram_table, weights=args.draft))
        return target, loaded["source"]

    plan, provenance = plan_generate(spec, args, config, prompt_tokens, models=models)
    if chosen is not None:
        provenance = {**provenance, "method_choice": chosen}
    target, source = (loaded["target"], loaded["source"]) if loaded else models(plan.dtype)
    if args.compile:
        provenance = {**provenance, "compiled": True}
    config, draft = plan.config(config), plan.drafter
    if args.batch_size > 1:
        return generate_batches(args, target, source, prompts, config, provenance)
    for n, (prompt_id, messages) in enumerate(prompts, start=1):
        rec = generate(target, messages, config, draft=draft, chat_template=not args.no_chat_template,
                       gamma_policy=plan.gamma_policy, provenance=provenance)
        print_record(args, prompt_id, rec)
        args.kept = f"printed {n} of {len(prompts)} outputs"
    return 0


def generate_batches(args: argparse.Namespace, target, source, prompts: list, config: DecodeConfig,
                     provenance: dict) -> int:
    """``generate --batch-size B``: the prompts in batches of B (``generate.generate_batch``), one output per prompt,
    in order; every prompt's tokens are its batch-1 run's."""
    from .generate import generate_batch
    from ..core.prompts import encode_prompt

    for start in range(0, len(prompts), args.batch_size):
        chunk = prompts[start:start + args.batch_size]
        ids = [encode_prompt(target, messages, not args.no_chat_template) for _, messages in chunk]
        records = generate_batch(target, ids, config, draft=source, provenance=provenance)
        for (prompt_id, _), rec in zip(chunk, records):
            print_record(args, prompt_id, rec)
        args.kept = f"printed {start + len(chunk)} of {len(prompts)} outputs"
    return 0


def print_record(args: argparse.Namespace, prompt_id: str, rec) -> None:
    if args.json:
        d = rec.to_dict()
        d.update(prompt_id=prompt_id, target=args.target, draft=args.draft)
        print(json.dumps(d), flush=True)
    else:
        alpha = f"{rec.alpha:.3f}" if rec.alpha is not None else "-"
        print(f"[{prompt_id}] {rec.text}\n-- {rec.new_tokens} tokens, {rec.tokens_per_s:.1f} tok/s, "
              f"{rec.target_calls} target calls, alpha {alpha}", flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m specrepro", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    gen = sub.add_parser("generate", help="generate text with one method")
    gen.add_argument("--method", default="speculative", type=method_arg,
                     help=f"one of {', '.join(OUR_METHODS)} (python -m specrepro methods: what each is), or auto: "
                          f"the one of {', '.join(AUTO_CANDIDATES)} expected fastest on this device, with γ auto")
    src = gen.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="one prompt text")
    src.add_argument("--prompts", type=existing_file, help='JSON Lines file, one {"prompt": ...} per line')
    add_decode_args(gen)
    gen.add_argument("--json", action="store_true", help="print one JSON object per prompt (JSON Lines)")
    gen.add_argument("--ngram-table", type=existing_file, default=None,
                     help="n-gram table (.npz) for --method unigram / bigram")
    gen.add_argument("--threads", type=threads, default=None, help="torch.set_num_threads (default: torch's)")
    gen.add_argument("--compile", action="store_true",
                     help="compile the engine's graphs (specrepro.engine: inductor with freezing, one graph per shape "
                          "bucket, about a minute each on 2 cores the first time, then cached); the default engine "
                          "runs eagerly with prepacked weights")
    gen.add_argument("--batch-size", type=positive_int, default=1,
                     help=f"decode this many prompts at once (specrepro.decode.batched: {', '.join(BATCHING)}; each "
                          "prompt's tokens are its batch-1 run's)")
    gen.set_defaults(func=cmd_generate, interrupted=generate_interrupted, kept="printed no output")

    cal = sub.add_parser("calibrate", help="measure the device profile: c, L_fp(n), β(n) per dtype (cached)")
    cal.add_argument("--target", default="smollm2-135m-instruct", help="zoo name, local folder or hub id")
    cal.add_argument("--draft", default=None, help="draft model (for c); none: the target alone")
    cal.add_argument("--dtype", default="auto", help="auto (every candidate dtype of the device), bf16, fp16 or fp32")
    cal.add_argument("--device", type=device, default=None, help="cpu or cuda (default: cuda when available)")
    cal.add_argument("--threads", type=threads, default=None, help="torch.set_num_threads (default: torch's)")
    cal.add_argument("--out", default=None, help="also write the profile(s) here (a .json file, or a folder)")
    cal.add_argument("--recalibrate", action="store_true", help="measure again even if a cached profile exists")
    cal.add_argument("--repeats", type=positive_int, default=5, help="timed rounds per median")
    cal.add_argument("--context-tokens", type=positive_int, default=256, help="length of the cached prefix")
    cal.add_argument("--compile", action="store_true",
                     help="time the engine's forwards compiled (inductor with freezing, one graph per shape bucket; "
                          "the warm-up pays the compile, kept under $SPECREPRO_CACHE/inductor)")
    add_engine_flag(cal)
    cal.set_defaults(func=cmd_calibrate, interrupted=calibrate_interrupted, kept=[])

    bench = sub.add_parser("bench", help="benchmark methods on a prompt suite (see specrepro.run.bench)")
    bench.add_argument("--methods", required=True,
                       help=f"comma-separated: {', '.join(METHODS)}; each may carry its own dtype, γ, tree size, "
                            f"rule and parameters: {', '.join(example_labels())}")
    src = bench.add_mutually_exclusive_group(required=True)
    src.add_argument("--suite", help=f"offline suite: {', '.join(SUITES[:-1])} or {SUITES[-1]} (the suites "
                                     f"whose output copies from its input: {', '.join(GROUNDED)})")
    src.add_argument("--prompts", type=existing_file, help='JSON Lines file, one {"prompt": ...} per line')
    bench.add_argument("--limit", type=positive_int, default=None, help="run only the first N prompts")
    add_decode_args(bench)
    bench.add_argument("--repeats", type=positive_int, default=1)
    bench.add_argument("--batch-size", type=positive_int, default=1,
                       help="decode this many prompts at once (specrepro.decode.batched: every method listed must batch, "
                            "the baseline is batched ar, and the device profile is timed at this batch size)")
    bench.add_argument("--out", required=True, help="output directory (an interrupted run resumes there)")
    bench.add_argument("--threads", type=threads, default=None, help="torch.set_num_threads (default: torch's)")
    bench.add_argument("--ngram-table", type=existing_file, default=None, help="n-gram table (.npz) for unigram / bigram")
    bench.add_argument("--warmup-tokens", type=non_negative_int, default=16,
                       help="tokens per warm-up run (0: no warm-up)")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench.add_argument("--no-quality", action="store_true",
                       help="skip the quality scores (perplexity under the target, ROUGE-L) of every record")
    bench.add_argument("--gamma-max", type=positive_int, default=None,
                       help=f"largest γ that --gamma auto considers (default {DEFAULT_GAMMA_MAX})")
    from ..core.executor import executor_arg
    bench.add_argument("--executor", type=executor_arg, default="local",
                       help="where the prompts run: local (default: here, interleaved), ray (one Ray task per prompt "
                            "on a local cluster), ray://HOST:PORT or HOST:PORT (a running cluster); each task takes "
                            "--threads CPUs (1 if unset); see specrepro.core.executor")
    bench.set_defaults(func=cmd_bench, interrupted=bench_interrupted)

    from .export_config import add_parser as add_export_parser
    add_export_parser(sub)  # export-config: vLLM's / SGLang's speculative settings for a method (export_config.py)

    listing = sub.add_parser("methods", help="list every method: its loop, cost, needs, parameters and summary")
    listing.set_defaults(func=cmd_methods, interrupted=lambda args, argv: "nothing to keep")
    return parser


def method_arg(value: str) -> Method | str:
    if value == "auto":
        return value  # chosen on the device profiles when the run starts (auto_method)
    try:
        return method(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def example_labels() -> list[str]:
    """One bench label per method with parameters, from its label fields: ``mjsd:b8:tau0.1``."""
    out = ["speculative:fp32:g2", "prompt-lookup:auto:gauto", "ppd:t20"]
    for spec in REGISTRY.values():
        fields = spec.label_fields()
        if fields:
            out.append(":".join([spec.name] + [f"{k}{f.default}" for k, f in fields.items()]))
    return out


def cmd_methods(args: argparse.Namespace) -> int:
    from ..methods import methods_table
    print(methods_table())
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from pathlib import Path

    import torch

    from ..metrics.calibrate import get_profile
    from ..metrics.profile import DEFAULT_ALPHA_PRIOR, candidate_dtypes, choose_dtype, dtype_name
    from .host_cost import measure_host
    from ..engine.models import check_model_name, default_device, draft_alpha_prior

    device = torch.device(args.device) if args.device else default_device()
    dtypes = candidate_dtypes(device) if args.dtype == "auto" else (dtype_name(args.dtype),)
    check_model_name(args.target, "--target")
    if args.draft is not None:
        check_model_name(args.draft, "--draft", target=args.target)
    if args.out is not None:  # checked before anything is measured
        one_file = Path(args.out).suffix == ".json"
        if one_file and len(dtypes) > 1:
            raise ValueError("--dtype auto writes one profile per dtype: give --out a folder, not a .json file")
        check_writable(args.out, "--out", folder=not one_file)
    alpha = draft_alpha_prior(args.draft) if args.draft else None
    peer = calibration_peer(args.target, device, args.threads)
    profiles = {}
    for dtype in dtypes:
        out = None
        if args.out is not None:
            out = Path(args.out) if Path(args.out).suffix == ".json" else Path(args.out) / f"profile-{dtype}.json"
        profiles[dtype] = get_profile(args.target, args.draft, dtype, device=device, threads=args.threads,
                                      recalibrate=args.recalibrate, context_tokens=args.context_tokens,
                                      repeats=args.repeats, out=out, compiled=args.compile, peer=peer,
                                      host=measure_host)
        args.kept.append(dtype)
    for dtype, p in profiles.items():
        print_profile(dtype, p)
    if len(profiles) > 1:
        print("auto, plain decoding: " + choose_dtype(profiles, "plain").reason)
        if args.draft is not None:
            prior = DEFAULT_ALPHA_PRIOR if alpha is None else alpha
            print("auto, speculative (γ auto): " + choose_dtype(profiles, "draft model", "auto", prior).reason)
        print("auto, model-free drafts (γ auto): " + choose_dtype(profiles, "model-free", "auto").reason)
    return 0


def calibration_peer(target: str, device, threads: int | None):
    """llama.cpp on the target's GGUF with the run's threads, for calibrate to time beside ours; None (said on stderr)
    where it is not installed, the device is not a CPU, or the target has no GGUF."""
    import torch

    from .peers import INSTALL, LlamaCppPeer, gguf_for, installed

    if device.type != "cpu":
        return None
    if not installed():
        print(f"calibrate: llama.cpp's step is not measured: llama-cpp-python is not installed ({INSTALL})",
              file=sys.stderr)
        return None
    try:
        gguf = gguf_for(target)
    except ValueError as err:
        print(f"calibrate: llama.cpp's step is not measured: {err}", file=sys.stderr)
        return None
    return LlamaCppPeer(gguf, threads=threads or torch.get_num_threads())


def print_profile(dtype: str, p) -> None:
    """A profile's lines: the step and β(n); longer contexts and prefill; the step against the bandwidth floor and
    the compute roofline; llama.cpp's step and β(n) on the same GGUF, context and threads, where measured."""
    ns = range(2, min(9, p.n_max) + 1)
    betas = " ".join(f"β({n})={p.beta(n):.2f}" for n in ns)
    c = f"c={p.c:.3f}" if p.c is not None else "c=- (no draft)"
    print(f"{dtype}: L_fp(1)={1e3 * p.decode_s:.1f} ms (IQR {1e3 * p.forward[0][1].p25_s:.1f}-"
          f"{1e3 * p.forward[0][1].p75_s:.1f}), {c}, {betas}")
    if p.contexts or p.prefill:
        longer = ", ".join(f"L_fp(1)={1e3 * p.at_context(c).decode_s:.1f} ms β(5)={p.at_context(c).beta(5):.2f} "
                           f"after {c}" for c, _ in p.contexts if p.n_max >= 5)
        prefill = ", ".join(f"{n} tokens {1e3 * lat.median_s:.0f} ms" for n, lat in p.prefill)
        print(f"{dtype}: longer contexts: {longer or '-'}; prefill: {prefill or '-'}")
    if p.host is not None:
        h = p.host
        print(f"{dtype}: host's work per step outside the forwards: plain {1e3 * h.ar_step_s:.2f} ms "
              f"({h.ar_step_s / p.decode_s:.2f} L_fp(1)), {h.method} γ={h.gamma} {1e3 * h.spec_step_s:.2f} ms "
              f"({h.spec_step_s / p.decode_s:.2f} L_fp(1)); predictions add it to every step")
    m = p.machine
    if p.floor_s is not None:
        print(f"{dtype}: bandwidth floor {1e3 * p.floor_s:.1f} ms per decode step ({m['weight_bytes'] / 1e6:.0f} MB "
              f"of weights ÷ {m['bandwidth_bytes_s'] / 1e9:.1f} GB/s copy bandwidth): L_fp(1) is "
              f"{p.decode_s / p.floor_s:.1f}x the floor")
    if p.held_floor_s is not None:
        print(f"{dtype}: as the engine holds them ({m['held_bytes'] / 1e6:.0f} MB: 4-bit and 8-bit where the GGUF's "
              f"integers are), the weights' floor is {1e3 * p.held_floor_s:.1f} ms: L_fp(1) is "
              f"{p.decode_s / p.held_floor_s:.1f}x it")
    if p.compute_floor_s is not None:
        ridge = f"; beyond n ≈ {p.floor_s / p.compute_floor_s:.0f} tokens a forward is compute-bound" if p.floor_s else ""
        threads = f"{m['gemm_threads']} thread{'s' if m['gemm_threads'] != 1 else ''}"
        gemm = m.get("gemm_dtype", dtype)  # (fp32 where the CPU has no bf16 GEMM: see metrics.calibrate.roofline)
        print(f"{dtype}: compute roofline {m['gemm_flops_s'] / 1e9:.0f} GFLOP/s (a large {gemm} GEMM, {threads}): a "
              f"one-token step's {m['step_flops'] / 1e9:.2f} GFLOP of GEMMs take {1e3 * p.compute_floor_s:.2f} ms; "
              f"L_fp(1) is {p.decode_s / p.compute_floor_s:.0f}x it, L_fp({p.n_max}) "
              f"{p.l_fp(p.n_max) / (p.n_max * p.compute_floor_s):.1f}x the {p.n_max}-token compute floor{ridge}")
    if "host_speed_start" in m:
        a, b = m["host_speed_start"], m["host_speed_end"]
        print(f"{dtype}: host speed on a fixed workload (core.provenance.host_speed), start → end: one-thread read "
              f"{a['read_gb_s']:.1f} → {b['read_gb_s']:.1f} GB/s, Python loop {a['python_loop_ms']:.1f} → "
              f"{b['python_loop_ms']:.1f} ms")
    if p.peer is not None:
        e = p.peer
        peer_betas = " ".join(f"β({n})={e.beta(n):.2f}" for n in ns)
        print(f"{dtype}: {e.engine} {e.version} ({e.model_file}, {e.model_type}, {e.threads} "
              f"thread{'s' if e.threads != 1 else ''}, after "
              f"{e.context_tokens} tokens): L(1)={1e3 * e.decode_s:.1f} ms, {peer_betas}; our {dtype} L_fp(1) is "
              f"{p.decode_s / e.decode_s:.1f}x its")


def check_bench(args: argparse.Namespace):
    """The bench's settings checked before anything loads: each given setting is read by some listed method, and
    --out can be written. Returns the BenchConfig (which checks every label, value and parameter)."""
    from pathlib import Path

    from .variants import BenchConfig
    from ..methods import Needs
    from ..engine.models import check_model_name

    check_writable(args.out, "--out")
    check_model_name(args.target, "--target")
    source = f"suite:{args.suite}" if args.suite else f"file:{Path(args.prompts).resolve()}"
    sampling = sampling_from(args)
    config = BenchConfig(
        methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()), target=args.target,
        draft=args.draft, prompts=source, limit=args.limit, max_new_tokens=args.max_new_tokens,
        temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p, preset=args.preset,
        gamma=DEFAULT_GAMMA if args.gamma is None else args.gamma, gamma_max=args.gamma_max or DEFAULT_GAMMA_MAX,
        tree_size=args.tree_size, acceptance=args.acceptance or DEFAULT_ACCEPTANCE,
        params=tuple(given_params(args).items()), quality=not args.no_quality,
        repeats=args.repeats, seed=args.seed, dtype=args.dtype, device=args.device, threads=args.threads,
        ngram_table=str(Path(args.ngram_table).resolve()) if args.ngram_table else None,
        chat_template=not args.no_chat_template, warmup_tokens=args.warmup_tokens, batch_size=args.batch_size)
    variants = config.variants()
    settings = given_settings(args)
    check_parameters_taken({k: v for k, v in settings.items() if k != "draft"}, [v.method for v in variants])
    if args.gamma_max is not None and not any(v.gamma == "auto" for v in variants):
        raise ValueError(f"--gamma-max {args.gamma_max}: no method of {', '.join(config.methods)} runs with gamma auto "
                         f"(--gamma auto, or a label's gauto), the only policy that reads it")
    if args.draft is not None:  # in bench, medusa and ppd run the zoo's weights: --draft is the draft model only
        if not any(v.method.needs is Needs.DRAFT_MODEL for v in variants):
            raise ValueError(f"--draft {args.draft}: none of {', '.join(config.methods)} drafts with a model (bench "
                             f"runs medusa and ppd with the zoo's weights)")
        check_model_name(args.draft, "--draft", target=args.target)
    return config


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench
    from .bench_summary import format_summary

    config = check_bench(args)
    result = run_bench(config, args.out, executor=args.executor, progress=not args.no_progress)
    print(format_summary(result.summary))
    print(f"records, summary.csv and provenance.json in {result.out}")
    if result.failed:  # the other methods' results are written; the run as a whole did not succeed
        for label, err in result.failed.items():
            print(f"specrepro: error: {label} failed ({err['where']}): {err['error']}: {err['message']}",
                  file=sys.stderr)
        print(f"specrepro: error: {len(result.failed)} method(s) failed: {', '.join(result.failed)}", file=sys.stderr)
        return 1
    return 0


# What Ctrl-C keeps, said in one line with the command that goes on (cli.run_command).

def generate_interrupted(args: argparse.Namespace, argv: list[str]) -> str:
    return f"{args.kept}; the same command runs every prompt again: {resume_command(argv)}"


def calibrate_interrupted(args: argparse.Namespace, argv: list[str]) -> str:
    kept = f"the {', '.join(args.kept)} profile(s) are cached" if args.kept else "no profile was finished"
    return f"{kept}; resume (a cached profile is not measured again): {resume_command(argv)}"


def bench_interrupted(args: argparse.Namespace, argv: list[str]) -> str:
    from pathlib import Path

    from .store import load_records

    out = Path(args.out)
    n = len(load_records(out)) if out.is_dir() else 0
    where = f"in {out}/records.jsonl" if n else "(nothing written)"
    return f"kept {n} record{'' if n == 1 else 's'} {where}; resume: {resume_command(argv)}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parsed: list[argparse.Namespace] = []

    def work() -> int:
        parsed.append(build_parser().parse_args(argv))
        if getattr(parsed[0], "forward_engine", None) is not None:  # (export-config's --engine is another flag)
            os.environ[ENGINE_ENV] = parsed[0].forward_engine  # every model this process loads, and its subprocesses
        return parsed[0].func(parsed[0])

    def interrupted() -> str:
        return (parsed[0].interrupted(parsed[0], argv) if parsed else
                f"nothing was done; run it again: {resume_command(argv)}")
    return run_command(work, interrupted)


if __name__ == "__main__":
    sys.exit(main())
