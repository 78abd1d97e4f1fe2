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
    from .generate import METHODS, generate
    from .models import load_draft, load_model
    from .prompts import load_prompts_file

    if args.method not in METHODS:
        raise ValueError(f"unknown method {args.method!r}; choose one of {', '.join(METHODS)}")
    sampling = SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    config = DecodeConfig(method=args.method, max_new_tokens=args.max_new_tokens, gamma=args.gamma,
                          sampling=sampling, seed=args.seed)
    if args.prompt is not None:
        prompts = [("prompt", [("user", args.prompt)])]
    else:
        prompts = [(p.id, list(p.messages)) for p in load_prompts_file(args.prompts)]
    if args.method != "ar" and args.draft is None:
        raise ValueError(f"--method {args.method} needs --draft NAME")

    target = load_model(args.target, dtype=args.dtype, device=args.device)  # once per invocation
    draft = load_draft(args.draft, target) if args.draft is not None and args.method != "ar" else None
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
    gen.set_defaults(func=cmd_generate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:  # bad input: one clear line, no traceback
        print(f"specrepro: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
