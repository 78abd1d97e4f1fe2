"""Command line: ``python -m specrepro generate ...`` (and ``bench``, see specrepro.bench)."""
from __future__ import annotations

import argparse
import json
import sys

from .config import DecodeConfig, SamplingConfig


def add_decode_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="smollm2-135m-instruct", help="zoo name, local folder or hub id")
    p.add_argument("--draft", default=None, help="zoo name, local folder, hub id, or layers:K (self-draft)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default=None, help="bf16 (default), fp16 or fp32")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--no-chat-template", action="store_true", help="feed the prompt as plain text")


def cmd_generate(args: argparse.Namespace) -> int:
    from .generate import METHODS, REGISTRY, generate
    from .models import load_draft, load_model
    from .prompts import load_prompts_file

    if args.method not in METHODS:
        raise ValueError(f"unknown method {args.method!r}; choose one of {', '.join(METHODS)}")
    needs = REGISTRY[args.method].needs
    sampling = SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    config = DecodeConfig(method=args.method, max_new_tokens=args.max_new_tokens, gamma=args.gamma,
                          sampling=sampling, seed=args.seed)
    if args.prompt is not None:
        prompts = [("prompt", [("user", args.prompt)])]
    else:
        prompts = [(p.id, list(p.messages)) for p in load_prompts_file(args.prompts)]
    if needs == "draft model" and args.draft is None:
        raise ValueError(f"--method {args.method} needs --draft NAME")
    if needs == "n-gram table" and args.ngram_table is None:
        raise ValueError(f"--method {args.method} needs --ngram-table FILE (an .npz written by NGramTable.save)")

    target = load_model(args.target, dtype=args.dtype, device=args.device)  # once per invocation
    draft = None
    if needs == "draft model":
        draft = load_draft(args.draft, target)
    elif needs == "n-gram table":
        draft = args.ngram_table
    for prompt_id, messages in prompts:
        rec = generate(target, messages, config, draft=draft, chat_template=not args.no_chat_template)
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
    parser = argparse.ArgumentParser(prog="python -m specrepro", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    gen = sub.add_parser("generate", help="generate text with one method")
    gen.add_argument("--method", default="speculative")
    src = gen.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="one prompt text")
    src.add_argument("--prompts", help='JSON Lines file, one {"prompt": ...} per line')
    add_decode_args(gen)
    gen.add_argument("--json", action="store_true", help="print one JSON object per prompt (JSON Lines)")
    gen.add_argument("--ngram-table", default=None, help="n-gram table (.npz) for --method unigram / bigram")
    gen.set_defaults(func=cmd_generate)

    bench = sub.add_parser("bench", help="benchmark methods on a prompt suite (see specrepro.bench)")
    bench.add_argument("--methods", required=True,
                       help="comma-separated: ar, speculative, prompt-lookup, unigram, bigram, hf-ar, hf-assisted, "
                            "hf-prompt-lookup")
    src = bench.add_mutually_exclusive_group(required=True)
    src.add_argument("--suite", help="offline suite: instruct, chat, math, summarize, humaneval or mixed")
    src.add_argument("--prompts", help='JSON Lines file, one {"prompt": ...} per line')
    bench.add_argument("--limit", type=int, default=None, help="run only the first N prompts")
    add_decode_args(bench)
    bench.add_argument("--repeats", type=int, default=1)
    bench.add_argument("--out", required=True, help="output directory (an interrupted run resumes there)")
    bench.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    bench.add_argument("--ngram-table", default=None, help="n-gram table (.npz) for unigram / bigram")
    bench.add_argument("--warmup-tokens", type=int, default=16, help="tokens per warm-up run (0: no warm-up)")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench.set_defaults(func=cmd_bench)
    return parser


def cmd_bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .bench import BenchConfig, format_summary, run_bench

    source = f"suite:{args.suite}" if args.suite else f"file:{Path(args.prompts).resolve()}"
    config = BenchConfig(
        methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()), target=args.target,
        draft=args.draft, prompts=source, limit=args.limit, max_new_tokens=args.max_new_tokens,
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, gamma=args.gamma,
        repeats=args.repeats, seed=args.seed, dtype=args.dtype, device=args.device, threads=args.threads,
        ngram_table=str(Path(args.ngram_table).resolve()) if args.ngram_table else None,
        chat_template=not args.no_chat_template, warmup_tokens=args.warmup_tokens)
    result = run_bench(config, args.out, progress=not args.no_progress)
    print(format_summary(result.summary))
    print(f"records, summary.csv and provenance.json in {result.out}")
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
