"""Command line: ``python -m specrepro generate ...`` (and ``bench``, see specrepro.bench)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from .cli import Parser, existing_file, positive_int
from .config import ACCEPTANCE_RULES, ONLINE_DIVERGENCES, ONLINE_EXAMPLES, PRESETS, DecodeConfig, MethodParams, SamplingConfig


# The help (and choices) of each MethodParams field's flag.
METHOD_FLAG_HELP: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "num_beams": ("mjsd: beams of the draft's beam sampling; mjgd: beams of the target's beam search", None),
    "tau": ("mjsd: a prefix passes when min(1, p(x_1:j)/q(x_1:j)) > tau, tau in [0, 1]", None),
    "fallback_threshold": ("bild: the draft stops where its max probability falls below this (τ1)", None),
    "rollback_threshold": ("bild: roll back from the first token with −log p(x) above this (τ2, nats)", None),
    "num_drafts": ("spectr, multi-draft: i.i.d. draft sequences verified together (m)", None),
    "kl_bound": ("mentored: D, the bound on KL(target ‖ resulting distribution) per token (0: exact)", None),
    "online_buffer": ("online: verification steps (with the target's rows) kept in the FIFO buffer", None),
    "online_every": ("online: L, one update of the draft after every L served sequences", None),
    "online_steps": ("online: optimiser steps per update", None),
    "online_lr": ("online: the draft's learning rate", None),
    "online_divergence": ("online: the distillation loss of the updates (DistillSpec's fkl, rkl, jsd, tvd)",
                          ONLINE_DIVERGENCES),
    "online_examples": ("online: train each verification step over its own context (steps), or each served sequence "
                        "once with the target's rows on it (sequences: far cheaper updates)", ONLINE_EXAMPLES),
}


def add_decode_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="smollm2-135m-instruct", help="zoo name, local folder or hub id")
    p.add_argument("--draft", default=None, help="zoo name, local folder, hub id, or layers:K (self-draft)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=None, help="0 (default): argmax")
    p.add_argument("--top-k", type=int, default=None, help="keep the k most likely tokens (default 0: all)")
    p.add_argument("--top-p", type=float, default=None, help="nucleus mass (default 1: all)")
    p.add_argument("--preset", default=None, choices=sorted(PRESETS),
                   help="a named warping instead of --temperature/--top-k/--top-p: mjsd = the MJSD paper's top-k 20 "
                        "then top-p 0.9 at T = 1 (its 'greedy' baseline is ar sampling with it)")
    p.add_argument("--gamma", type=gamma_arg, default=4,
                   help="draft tokens per step, or auto: chosen each step from the device profile and α so far")
    p.add_argument("--tree-size", type=int, default=None,
                   help="nodes of the draft tree for tree methods (medusa, ppd; default: the hardware-aware size)")
    p.add_argument("--acceptance", default="exact", choices=ACCEPTANCE_RULES,
                   help="verification rule: exact (lossless, default), greedy (T = 0 only) or typical "
                        "(Medusa's typical acceptance: LOSSY, faster at T > 0)")
    defaults = MethodParams()
    for field in dataclasses.fields(MethodParams):  # one flag per field, of its name (params_from reads them back)
        text, choices = METHOD_FLAG_HELP[field.name]
        value = getattr(defaults, field.name)
        p.add_argument(f"--{field.name.replace('_', '-')}", type=type(value), default=value, choices=choices,
                       help=text)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto",
                   help="auto (default: the fastest for the method per the device profile), bf16, fp16 or fp32")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--no-chat-template", action="store_true", help="feed the prompt as plain text")


def sampling_from(args: argparse.Namespace) -> SamplingConfig:
    """--preset, or --temperature/--top-k/--top-p (defaults: argmax); both at once is one clear error."""
    given = {k: v for k, v in (("temperature", args.temperature), ("top_k", args.top_k), ("top_p", args.top_p))
             if v is not None}
    if args.preset is not None:
        if given:
            raise ValueError(f"--preset {args.preset} sets the warping; drop {', '.join('--' + k.replace('_', '-') for k in given)}")
        return PRESETS[args.preset]
    return SamplingConfig(**given)


def params_from(args: argparse.Namespace) -> MethodParams:
    """The method parameters given on the command line (each ``MethodParams`` field has a flag of its name)."""
    return MethodParams(**{f.name: getattr(args, f.name) for f in dataclasses.fields(MethodParams)})


def gamma_arg(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"gamma must be an integer >= 1 or auto, got {value!r}") from None


def plan_dtype_and_gamma(method: str, args: argparse.Namespace):
    """The dtype to load (the profile's choice for ``--dtype auto``, and why) and the γ policy.

    Profiles come from the cache (``python -m specrepro calibrate``), or are measured now and cached.
    Returns (dtype, provenance for the records, γ policy or None for a fixed γ)."""
    import torch

    from .adaptive import AdaptiveGamma
    from .methods import method_kind, tree_cost
    from .metrics.profile import DEFAULT_ALPHA_PRIOR, candidate_dtypes, choose_dtype, cpu_info, dtype_name, get_profile
    from .models import default_device, draft_alpha_prior

    kind = method_kind(method)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device) if args.device else default_device()
    draft = args.draft if kind == "draft model" else None
    alpha = draft_alpha_prior(draft, sampling_from(args).temperature) if draft else None
    profiles = {}

    def profile(dtype: str):
        if dtype not in profiles:
            profiles[dtype] = get_profile(args.target, draft, dtype, device=device, threads=args.threads)
        return profiles[dtype]
    if args.dtype == "auto":
        for dtype in candidate_dtypes(device):
            profile(dtype)
        choice = choose_dtype(profiles, kind, args.gamma, DEFAULT_ALPHA_PRIOR if alpha is None else alpha,
                              tree_cost=tree_cost(method, args.draft, args.target, args.gamma))
        dtype, why = choice.dtype, choice.reason
    else:
        dtype, why = dtype_name(args.dtype), "named with --dtype"
    policy = None
    if args.gamma == "auto" and kind != "plain":
        policy = AdaptiveGamma.from_profile(profile(dtype), model_free=kind != "draft model", alpha_prior=alpha)
    return dtype, {"dtype_reason": why, "cpu_kernel_flags": cpu_info()["kernel_flags"]}, policy


def hardware_tree_size(args: argparse.Namespace, dtype: str, drafter, config: DecodeConfig):
    """A token-tree drafter resized to the hardware-aware tree size on this device's profile (the registry's
    chooser: Medusa maximises τ(n)/L_fp(n+1), PPD τ(n)/E[L_fp] over its tree states), and why."""
    import dataclasses

    from .methods import method
    from .metrics.profile import get_profile

    profile = get_profile(args.target, None, dtype, device=args.device, threads=args.threads)
    size = method(args.method).choose_tree_size(drafter.config, profile, config.gamma)
    return drafter.resized(size.size), dataclasses.replace(config, tree_size=size.size), size.reason


def cmd_generate(args: argparse.Namespace) -> int:
    from .generate import generate
    from .methods import OUR_METHODS, drafter_for, method
    from .models import SELF_DRAFTS, load_draft, load_model
    from .prompts import load_prompts_file

    if args.method not in OUR_METHODS:
        raise ValueError(f"unknown method {args.method!r} for generate; choose one of {', '.join(OUR_METHODS)} "
                         f"(transformers' baselines run in bench)")
    spec = method(args.method)
    needs = spec.needs
    config = spec.resolve(DecodeConfig(method=args.method, max_new_tokens=args.max_new_tokens, gamma=args.gamma,
                                       sampling=sampling_from(args), tree_size=args.tree_size,
                                       acceptance=args.acceptance, seed=args.seed, params=params_from(args)))
    if args.prompt is not None:
        prompts = [("prompt", [("user", args.prompt)])]
    else:
        prompts = [(p.id, list(p.messages)) for p in load_prompts_file(args.prompts)]
    if needs == "draft model" and args.draft is None:
        raise ValueError(f"--method {args.method} needs --draft NAME")
    if needs == "n-gram table" and args.ngram_table is None:
        raise ValueError(f"--method {args.method} needs --ngram-table FILE (an .npz written by NGramTable.save)")

    dtype, provenance, policy = plan_dtype_and_gamma(args.method, args)
    target = load_model(args.target, dtype=dtype, device=args.device)  # once per invocation
    draft = None
    if needs == "draft model":
        draft = load_draft(args.draft, target)
    elif needs == "n-gram table":
        draft = args.ngram_table
    elif needs in SELF_DRAFTS:
        draft = args.draft  # a folder or zoo name; None: the target's own in the zoo
    if spec.token_tree:
        draft = drafter_for(draft, args.method, target, config)
        if args.tree_size is None:
            draft, config, provenance["tree_size_reason"] = hardware_tree_size(args, dtype, draft, config)
    for prompt_id, messages in prompts:
        rec = generate(target, messages, config, draft=draft, chat_template=not args.no_chat_template,
                       gamma_policy=policy, provenance=provenance)
        if args.json:
            d = rec.to_dict()
            d.update(prompt_id=prompt_id, target=args.target, draft=args.draft)
            print(json.dumps(d), flush=True)
        else:
            alpha = f"{rec.alpha:.3f}" if rec.alpha is not None else "-"
            print(f"[{prompt_id}] {rec.text}\n-- {rec.new_tokens} tokens, {rec.tokens_per_s:.1f} tok/s, "
                  f"{rec.target_calls} target calls, alpha {alpha}", flush=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m specrepro", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    gen = sub.add_parser("generate", help="generate text with one method")
    gen.add_argument("--method", default="speculative",
                     help="ar, speculative, prompt-lookup, unigram, bigram, medusa, ppd, mjgd (K = --gamma), mjsd, "
                          "bild, spectr, multi-draft, mentored, staged or fused")
    src = gen.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="one prompt text")
    src.add_argument("--prompts", type=existing_file, help='JSON Lines file, one {"prompt": ...} per line')
    add_decode_args(gen)
    gen.add_argument("--json", action="store_true", help="print one JSON object per prompt (JSON Lines)")
    gen.add_argument("--ngram-table", type=existing_file, default=None,
                     help="n-gram table (.npz) for --method unigram / bigram")
    gen.add_argument("--threads", type=positive_int, default=None, help="torch.set_num_threads (default: torch's)")
    gen.set_defaults(func=cmd_generate)

    cal = sub.add_parser("calibrate", help="measure the device profile: c, L_fp(n), β(n) per dtype (cached)")
    cal.add_argument("--target", default="smollm2-135m-instruct", help="zoo name, local folder or hub id")
    cal.add_argument("--draft", default=None, help="draft model (for c); none: the target alone")
    cal.add_argument("--dtype", default="auto", help="auto (every candidate dtype of the device), bf16, fp16 or fp32")
    cal.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    cal.add_argument("--threads", type=positive_int, default=None, help="torch.set_num_threads (default: torch's)")
    cal.add_argument("--out", default=None, help="also write the profile(s) here (a .json file, or a folder)")
    cal.add_argument("--recalibrate", action="store_true", help="measure again even if a cached profile exists")
    cal.add_argument("--repeats", type=int, default=5, help="timed rounds per median")
    cal.add_argument("--context-tokens", type=int, default=256, help="length of the cached prefix")
    cal.set_defaults(func=cmd_calibrate)

    bench = sub.add_parser("bench", help="benchmark methods on a prompt suite (see specrepro.bench)")
    bench.add_argument("--methods", required=True,
                       help="comma-separated: ar, speculative, prompt-lookup, unigram, bigram, medusa, ppd, mjgd, mjsd, "
                            "bild, spectr, multi-draft, hf-ar, hf-assisted, hf-prompt-lookup; each may carry its own "
                            "dtype, γ, tree size, rule, beams, drafts and τ: speculative:fp32:g2, "
                            "prompt-lookup:auto:gauto, ppd:t20, mjsd:b4:tau0.5, spectr:m2")
    src = bench.add_mutually_exclusive_group(required=True)
    src.add_argument("--suite", help="offline suite: instruct, chat, math, summarize, humaneval or mixed")
    src.add_argument("--prompts", type=existing_file, help='JSON Lines file, one {"prompt": ...} per line')
    bench.add_argument("--limit", type=int, default=None, help="run only the first N prompts")
    add_decode_args(bench)
    bench.add_argument("--repeats", type=int, default=1)
    bench.add_argument("--out", required=True, help="output directory (an interrupted run resumes there)")
    bench.add_argument("--threads", type=positive_int, default=None, help="torch.set_num_threads (default: torch's)")
    bench.add_argument("--ngram-table", type=existing_file, default=None, help="n-gram table (.npz) for unigram / bigram")
    bench.add_argument("--warmup-tokens", type=int, default=16, help="tokens per warm-up run (0: no warm-up)")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench.add_argument("--no-quality", action="store_true",
                       help="skip the quality scores (perplexity under the target, ROUGE-L) of every record")
    bench.add_argument("--gamma-max", type=int, default=16, help="largest γ that --gamma auto considers")
    bench.set_defaults(func=cmd_bench)
    return parser


def cmd_calibrate(args: argparse.Namespace) -> int:
    from pathlib import Path

    import torch

    from .metrics.profile import DEFAULT_ALPHA_PRIOR, candidate_dtypes, choose_dtype, dtype_name, get_profile
    from .models import default_device, draft_alpha_prior

    device = torch.device(args.device) if args.device else default_device()
    dtypes = candidate_dtypes(device) if args.dtype == "auto" else (dtype_name(args.dtype),)
    if args.out is not None and len(dtypes) > 1 and Path(args.out).suffix == ".json":
        raise ValueError("--dtype auto writes one profile per dtype: give --out a folder, not a .json file")
    alpha = draft_alpha_prior(args.draft) if args.draft else None
    profiles = {}
    for dtype in dtypes:
        out = None
        if args.out is not None:
            out = Path(args.out) if Path(args.out).suffix == ".json" else Path(args.out) / f"profile-{dtype}.json"
        profiles[dtype] = get_profile(args.target, args.draft, dtype, device=device, threads=args.threads,
                                      recalibrate=args.recalibrate, context_tokens=args.context_tokens,
                                      repeats=args.repeats, out=out)
    for dtype, p in profiles.items():
        betas = " ".join(f"β({n})={p.beta(n):.2f}" for n in range(2, 10))
        c = f"c={p.c:.3f}" if p.c is not None else "c=- (no draft)"
        print(f"{dtype}: L_fp(1)={1e3 * p.decode_s:.1f} ms (IQR {1e3 * p.forward[0][1].p25_s:.1f}-"
              f"{1e3 * p.forward[0][1].p75_s:.1f}), {c}, {betas}")
    if len(profiles) > 1:
        print("auto, plain decoding: " + choose_dtype(profiles, "plain").reason)
        if args.draft is not None:
            prior = DEFAULT_ALPHA_PRIOR if alpha is None else alpha
            print("auto, speculative (γ auto): " + choose_dtype(profiles, "draft model", "auto", prior).reason)
        print("auto, model-free drafts (γ auto): " + choose_dtype(profiles, "model-free", "auto").reason)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import dataclasses
    from pathlib import Path

    from .bench import BenchConfig, format_summary, run_bench

    source = f"suite:{args.suite}" if args.suite else f"file:{Path(args.prompts).resolve()}"
    sampling = sampling_from(args)
    config = BenchConfig(
        methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()), target=args.target,
        draft=args.draft, prompts=source, limit=args.limit, max_new_tokens=args.max_new_tokens,
        temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p, preset=args.preset,
        gamma=args.gamma, gamma_max=args.gamma_max, tree_size=args.tree_size, acceptance=args.acceptance,
        **dataclasses.asdict(params_from(args)), quality=not args.no_quality,
        repeats=args.repeats, seed=args.seed, dtype=args.dtype, device=args.device, threads=args.threads,
        ngram_table=str(Path(args.ngram_table).resolve()) if args.ngram_table else None,
        chat_template=not args.no_chat_template, warmup_tokens=args.warmup_tokens)
    result = run_bench(config, args.out, progress=not args.no_progress)
    print(format_summary(result.summary))
    print(f"records, summary.csv and provenance.json in {result.out}")
    if result.failed:  # the other methods' results are written; the run as a whole did not succeed
        for label, err in result.failed.items():
            print(f"specrepro: error: {label} failed ({err['where']}): {err['error']}: {err['message']}",
                  file=sys.stderr)
        print(f"specrepro: error: {len(result.failed)} method(s) failed: {', '.join(result.failed)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:  # bad input: one clear line, no traceback
        print(f"specrepro: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
