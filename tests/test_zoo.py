"""The zoo's shipped weights are declared inputs: each says the commands that make it again (as its README and its
training record do), and each loads through the package's own loaders with shapes that fit the offline target
(prepared by `make models`)."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from specrepro.core.config import DecodeConfig
from specrepro.drafters.medusa import head_logits, load_heads
from specrepro.drafters.ppd import load_prompt_tokens
from specrepro.methods import drafter_for
from specrepro.engine.models import SELF_DRAFTS, ZOO, load_draft, load_model, main, self_draft_folder

PACKAGE = Path(__file__).resolve().parents[1] / "specrepro"
SHIPPED = [name for name, entry in ZOO.items() if entry.folder is not None]
TARGET = "smollm2-135m-instruct"


def readme_commands(folder: Path) -> list[str]:
    """The indented command block after "Made by" in a zoo folder's README.md, continuation lines joined."""
    text = (folder / "README.md").read_text()
    block = re.search(r"Made by[^\n]*\n\n((?:    [^\n]*\n)+)", text)
    assert block is not None, f"{folder}/README.md has no 'Made by' command block"
    joined = re.sub(r"\\\n\s*", " ", block.group(1))
    return [" ".join(line.split()) for line in joined.splitlines() if line.strip()]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_weights_say_how_to_make_them_again(name):
    """made_by is the README's "Made by" block, and the first command is the one the training record kept."""
    entry, folder = ZOO[name], PACKAGE / ZOO[name].folder
    assert entry.made_by and list(entry.made_by) == readme_commands(folder)
    recorded = json.loads((folder / "training_record.json").read_text())["command"]  # [python, -m, module, ...]
    assert shlex.split(entry.made_by[0])[1:] == recorded[1:]


def test_every_zoo_entry_is_listed_with_its_commands(capsys):
    main(["list"])
    out = capsys.readouterr().out
    for name, entry in ZOO.items():
        assert name in out and entry.made_by
        assert all(f"made by: {command}" in out for command in entry.made_by)


@pytest.fixture(scope="module")
def target():
    return load_model(TARGET, dtype="bf16", device="cpu")


def test_the_shipped_draft_fits_the_target(target):
    draft = load_draft("smollm2-135m-draft", target)  # checks the vocabulary against the target's
    assert draft.vocab_size == target.vocab_size == target.model.config.vocab_size
    ids = torch.tensor([[1, 2, 3]])  # [1, T]
    with torch.inference_mode():
        assert draft.model(input_ids=ids).logits.shape == (1, 3, target.vocab_size)  # [1, T, V] over the full vocabulary
    assert draft.model.config.num_hidden_layers < target.model.config.num_hidden_layers


def test_the_shipped_medusa_heads_fit_the_target(target):
    hidden = target.model.config.hidden_size
    heads, config = load_heads(self_draft_folder("medusa heads", None, TARGET), dtype=torch.bfloat16)
    assert config.hidden_size == hidden and config.target == TARGET and len(heads.blocks) == config.num_heads
    assert all(tuple(block.weight.shape) == (hidden, hidden) for block in heads.blocks)
    assert len(config.rank_probs) == config.num_heads  # one row of rank probabilities per head
    h = torch.zeros(2, hidden, dtype=torch.bfloat16)  # [B, H]
    with torch.inference_mode():
        logits = head_logits(heads, target.model.get_output_embeddings(), h)
    assert logits.shape == (config.num_heads, 2, target.vocab_size)  # [K, B, V]
    drafter = drafter_for(None, "medusa", target, DecodeConfig(method="medusa"))  # the registry's builder
    assert drafter.config == config


def test_the_shipped_ppd_prompt_tokens_fit_the_target(target):
    hidden = target.model.config.hidden_size
    tokens, config = load_prompt_tokens(self_draft_folder("ppd prompt tokens", None, TARGET), dtype=torch.bfloat16)
    assert config.hidden_size == hidden and config.target == TARGET
    assert tuple(tokens.embeds.shape) == (config.prompt_tokens, config.epts, hidden)  # [m, e, H]
    assert len(config.rank_probs) == config.prompt_tokens  # one row of rank probabilities per prompt token
    drafter = drafter_for(None, "ppd", target, DecodeConfig(method="ppd"))  # the registry's builder
    assert drafter.config == config


def test_the_shipped_eagle_draft_fits_the_target(target):
    from specrepro.drafters.eagle import load_draft as load_eagle
    draft, config = load_eagle(self_draft_folder("eagle draft", None, TARGET), target.model)
    assert config.hidden_size == target.model.config.hidden_size and config.target == TARGET
    assert len(config.rank_probs) == config.depth  # one row of rank probabilities per draft depth
    assert draft.vocab.numel() == config.draft_vocab and int(draft.vocab.max()) < target.vocab_size
    drafter = drafter_for(None, "eagle", target, DecodeConfig(method="eagle"))  # the registry's builder
    assert drafter.config == config
    ablations = json.loads((self_draft_folder("eagle draft", None, TARGET) / "ablations.json").read_text())
    assert ablations["shipped"] in {v["name"] for v in ablations["variants"]}


def test_every_self_drafting_weight_of_the_target_is_shipped():
    assert {folders[TARGET] for folders in SELF_DRAFTS.values()} <= set(SHIPPED)
