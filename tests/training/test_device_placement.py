"""DistillSpec's inputs go to the model's device (issue 38, item 6): a CUDA target never gets CPU input ids.

No GPU here, so the models stand on the 'meta' device: a spy records the device of what it is given (meta tensors
mixed with CPU ones raise nothing, so the spy is what can fail) and answers with CPU values of the right shape."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specrepro.engine.draft_model import draft_from_target
from specrepro.engine.models import tiny_model
from specrepro.training import data, distillspec, evaluate, losses

V = 32
META = torch.device("meta")


class Seen(Exception):
    pass


class Spy(torch.nn.Module):
    """A causal LM 'on' the meta device: records its inputs' devices, returns random CPU logits [B, L, V]."""

    def __init__(self):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1, device=META))
        self.seen: list[torch.device] = []

    def forward(self, input_ids: torch.Tensor, **kwargs):
        self.seen.append(input_ids.device)
        return SimpleNamespace(logits=torch.randn(*input_ids.shape, V))

    def generate(self, ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int, **kwargs):
        self.seen += [ids.device, attention_mask.device]
        B, L = ids.shape
        return SimpleNamespace(sequences=torch.randint(0, V, (B, L + max_new_tokens)),
                               logits=[torch.randn(B, V) for _ in range(max_new_tokens)])


def test_teacher_examples_feed_the_target_on_its_device_and_keep_rows_on_the_cpu():
    spy = Spy()
    (ex,) = distillspec.teacher_examples(spy, [([1, 2, 3], [4, 5])], top_k=4)
    assert spy.seen == [META]
    assert ex.top_ids.device.type == "cpu" and ex.top_probs.device.type == "cpu"


def test_generate_with_rows_feeds_ids_and_mask_on_the_models_device():
    spy = Spy()
    (out,) = data.generate_with_rows(spy, [[1, 2, 3]], max_new=3, temperature=0.0, stop=31, top_k=4)
    assert spy.seen == [META, META]
    assert out[1].device.type == "cpu" and out[2].device.type == "cpu"  # rows are stored, so on the CPU


def batch() -> data.DistillBatch:
    ex = data.Example.with_rows([1, 2, 3, 4], slice(2, None), torch.tensor([[1, 2], [3, 4]]),
                                torch.tensor([[0.5, 0.2], [0.6, 0.1]]))
    return data.collate([ex], max_len=8)


def test_a_batch_moves_every_field():
    moved = batch().to(META)
    assert {f.device for f in vars(moved).values()} == {META}


def test_the_student_reads_its_batch_on_its_own_device(monkeypatch):
    draft = draft_from_target(tiny_model(vocab_size=V, n_layers=1, hidden=32), torch.arange(V), n_layers=1)
    draft = draft.to(META)
    seen = []

    def reduced_logits(input_ids, use_cache=None):
        seen.append(input_ids.device)
        raise Seen  # masked indexing has no meta kernel: what matters is what the forward was given

    monkeypatch.setattr(draft, "reduced_logits", reduced_logits)
    with pytest.raises(Seen):
        losses.student_rows(draft, batch())
    assert seen == [META]


def test_data_agreement_scores_the_batch_on_the_drafts_device(monkeypatch):
    draft = SimpleNamespace(token_map=torch.zeros(V, dtype=torch.long, device=META), kept_ids=torch.arange(V))
    seen = []

    def student_rows(d, b):
        seen.append(b.input_ids.device)
        return torch.zeros(2, V), torch.zeros(2, 3), torch.zeros(2, 3)

    monkeypatch.setattr(evaluate, "student_rows", student_rows)
    monkeypatch.setattr(data.DistillBatch, "to", lambda self, device: seen.append(device) or batch())
    evaluate.data_agreement(draft, [data.Example.with_rows([1, 2, 3], slice(1, None), torch.zeros(2, 3).long(),
                                                           torch.zeros(2, 3))], max_len=8)
    assert seen[0] == META
