"""Every bad-input case of issue 28, as data: the command line after ``python -m specrepro``, the files to lay down
first, and what the one line on stderr must say.

Each case must end with exit status 2, one non-empty stderr line (``python -m specrepro <cmd>: error: ...`` or
``specrepro: error: ...``), no traceback, nothing on stdout, and its folder byte-for-byte as it was (no --out
created, no profile measured into the cache). tests/cli/test_bad_input.py runs them; ``python -m tests.cli.report``
tables them.

Placeholders, filled by tests/cli/harness.py for each case:
    {target}, {draft}  tiny model folders (a one-layer random Llama with the SmolLM2 tokenizer; context 512)
    {prompts}          a file of 4 short prompts
    {tmp}              the case's own folder (it holds ``files`` and the case's $SPECREPRO_CACHE)
    {out}              {tmp}/out, which does not exist
    {cores}            the cores this process may run on (os.sched_getaffinity)
"""
from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Folder:
    """A folder to create; ``immutable``: then ``chattr +i`` (root writes through chmod, not through that)."""
    immutable: bool = False


@dataclass(frozen=True)
class ModelCopy:
    """A copy of the tiny target's folder (config.json, weights, tokenizer)."""


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    expect: tuple[str, ...]  # substrings of the error line
    words: tuple[str, ...] = ()  # whole words of the error line (method names such as "ar", a core count)
    forbid: tuple[str, ...] = ()  # substrings it must not contain
    files: tuple[tuple[str, object], ...] = ()  # (path under {tmp}, str | bytes | Folder | ModelCopy)
    max_chars: int | None = None
    requires: str | None = None  # "cpu-only torch" or "chattr": skipped where the machine lacks it

    @property
    def command(self) -> str:
        return self.argv[0]


def jsonl(*prompts: str) -> str:
    return "".join(json.dumps({"prompt": p}) + "\n" for p in prompts)


LONG = " ".join(["word"] * 700)  # ~700 tokens: with any --max-new-tokens more than the tiny model's 512 positions
LONG_SECOND = jsonl("Say hello.", LONG)
LATIN1_SECOND = b'{"prompt": "Say hello."}\n{"prompt": "caf\xe9 au lait"}\n'

# Small runs, so that a case the code under test does not reject still ends in seconds.
BASE = {
    "generate": {"--method": "ar", "--target": "{target}", "--prompts": "{prompts}", "--dtype": "fp32",
                 "--threads": "1", "--max-new-tokens": "4", "--json": None},
    "bench": {"--methods": "ar", "--target": "{target}", "--prompts": "{prompts}", "--out": "{out}",
              "--dtype": "fp32", "--threads": "1", "--max-new-tokens": "4", "--no-quality": None,
              "--warmup-tokens": "0", "--no-progress": None},
    "calibrate": {"--target": "{target}", "--dtype": "fp32", "--threads": "1", "--repeats": "1",
                  "--context-tokens": "16"},
}


def argv(command: str, method: str | None = None, **changes: str | None) -> tuple[str, ...]:
    """``command`` with its small base options, ``changes`` (``max_new_tokens="9"`` -> ``--max-new-tokens 9``)
    replacing or adding options; ``method`` is --method for generate and --methods for bench."""
    options = dict(BASE[command])
    if method is not None:
        changes["methods" if command == "bench" else "method"] = method
    for key, value in changes.items():
        options["--" + key.replace("_", "-")] = value
    out = [command]
    for flag, value in options.items():
        out += [flag] if value is None else [flag, value]
    return tuple(out)


def each(commands: str, label: str, expect: tuple[str, ...], method: str | None = None, **kw) -> list[Case]:
    """One case per command in ``commands`` ("generate bench", ...), named "<command> <label>"; keyword
    arguments that are Case fields go to the Case, the rest to ``argv``."""
    fields = {k: kw.pop(k) for k in ("words", "forbid", "files", "max_chars", "requires") if k in kw}
    return [Case(f"{c} {label}", argv(c, method, **kw), expect, **fields) for c in commands.split()]


CASES: list[Case] = [
    # --- prompts files
    *each("generate bench", "--prompts missing file", ("--prompts", "{tmp}/missing.jsonl"),
          prompts="{tmp}/missing.jsonl"),
    *each("generate bench", "--prompts a folder", ("--prompts", "{tmp}/folder"),
          prompts="{tmp}/folder", files=(("folder", Folder()),)),
    *each("generate bench", "--prompts not UTF-8 (line 2)", ("{tmp}/latin1.jsonl:2",),
          prompts="{tmp}/latin1.jsonl", files=(("latin1.jsonl", LATIN1_SECOND),)),
    *each("generate bench", "--prompts 2nd prompt too long", ("{tmp}/long.jsonl:2", "tokens"),
          prompts="{tmp}/long.jsonl", files=(("long.jsonl", LONG_SECOND),)),
    *each("generate bench", "--max-new-tokens beyond the context", ("--max-new-tokens",), max_new_tokens="1000"),
    # --- numbers and devices
    *each("generate bench calibrate", "--threads 0", ("--threads",), threads="0"),
    *each("generate bench calibrate", "--threads 999", ("--threads",), words=("{cores}",), threads="999"),
    *each("generate bench calibrate", "--device tpu", ("--device", "tpu"), device="tpu"),
    *each("generate bench calibrate", "--device cuda without CUDA", ("--device", "cuda"), device="cuda",
          requires="cpu-only torch"),
    *each("bench", "--limit 0", ("--limit",), limit="0"),
    *each("bench", "--limit -1", ("--limit",), limit="-1"),
    *each("bench", "--warmup-tokens -1", ("--warmup-tokens",), warmup_tokens="-1"),
    *each("calibrate", "--context-tokens 0", ("--context-tokens",), forbid=("n_last",), context_tokens="0"),
    # --- inputs that are not what they claim
    *each("generate bench", "--ngram-table missing file", ("--ngram-table", "{tmp}/missing.npz"),
          method="bigram", ngram_table="{tmp}/missing.npz"),
    *each("generate bench", "--draft an empty folder", ("--draft", "holds no model"), forbid=("not a local folder",),
          method="speculative", draft="{tmp}/empty", files=(("empty", Folder()),)),
    *each("calibrate", "--draft an empty folder", ("--draft", "holds no model"), forbid=("not a local folder",),
          draft="{tmp}/empty", files=(("empty", Folder()),)),
    # --- a flag the chosen method ignores
    *each("generate", "--method ar --acceptance typical", ("--acceptance",), words=("ar",), acceptance="typical"),
    *each("generate", "--method ar --gamma 3", ("--gamma",), words=("ar",), gamma="3"),
    *each("generate", "--method speculative --tree-size 8", ("--tree-size",), words=("speculative",),
          method="speculative", draft="{draft}", tree_size="8"),
    *each("bench", "--methods ar --acceptance typical", ("--acceptance",), words=("ar",), acceptance="typical"),
    *each("bench", "--methods ar,speculative --tree-size 8", ("--tree-size",), words=("ar", "speculative"),
          method="ar,speculative", draft="{draft}", tree_size="8"),
    # --- an --out that cannot be written
    *each("bench calibrate", "--out an existing file", ("--out", "{tmp}/out-file"),
          out="{tmp}/out-file", files=(("out-file", "a file, not a folder\n"),)),
    *each("bench calibrate", "--out under /proc", ("--out", "/proc/specrepro-out"), out="/proc/specrepro-out"),
    *each("bench calibrate", "--out an immutable folder", ("--out", "{tmp}/frozen"),
          out="{tmp}/frozen", files=(("frozen", Folder(immutable=True)),), requires="chattr"),
    *each("bench", "--out inside an immutable folder", ("--out", "{tmp}/frozen/run"),
          out="{tmp}/frozen/run", files=(("frozen", Folder(immutable=True)),), requires="chattr"),
    *each("bench", "--out a model folder", ("--out",), forbid=("delete",), max_chars=300,
          out="{tmp}/model", files=(("model", ModelCopy()),)),
]

assert len({c.name for c in CASES}) == len(CASES), "case names key the tests and the report"

# More of the same kinds: a model name that cannot load (found before the target loads), a setting no method reads.
CASES += [
    *each("generate bench", "--draft layers:K beyond the target", ("--draft", "layers:5"), method="speculative",
          draft="layers:5"),
    *each("bench", "--gamma-max without gamma auto", ("--gamma-max",), words=("ar",), gamma_max="8"),
    *each("generate", "--method prompt-lookup --draft", ("--draft",), words=("prompt-lookup",),
          method="prompt-lookup", draft="{draft}"),
    *each("bench", "--methods ar --draft", ("--draft",), words=("ar",), draft="{draft}"),
]
assert len({c.name for c in CASES}) == len(CASES), "case names key the tests and the report"
