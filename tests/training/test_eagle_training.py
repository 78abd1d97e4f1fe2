"""EAGLE training: the unrolled passes see what tree nodes see at decode time, the loss falls, ranks are measured."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specrepro.drafters.eagle import EagleConfig, EagleDraft, causal
from specrepro.engine.models import tiny_model
from specrepro.training.data import Example
from specrepro.training.eagle import held_out_ranks, sequence_loss, unroll, unroll_masks
from specrepro.training.features import Features, target_features

pytestmark = pytest.mark.usefixtures("one_thread")


def setup(layers=(-1,), vocab=0, seed=2):
    target = tiny_model(vocab_size=32, n_layers=2, hidden=16, seed=seed)
    config = EagleConfig(hidden_size=16, feature_layers=layers, draft_vocab=vocab, depth=3, target="tiny")
    torch.manual_seed(0)
    draft = EagleDraft(target, config)
    with torch.no_grad():
        draft.fc.weight.add_(torch.randn_like(draft.fc.weight) * 0.3)
        if vocab:
            draft.vocab.copy_(torch.arange(0, 32, 32 // vocab)[:vocab])
    return target, draft


def test_unroll_masks_give_each_pass_the_context_of_its_tree_depth():
    m = unroll_masks(5, 3)
    assert m[0].tolist() == torch.ones(5, 5, dtype=torch.bool).tril().tolist()
    # pass 2, row 4: real pairs 0..2, pass 1's row 3, itself
    assert m[2][4].nonzero().flatten().tolist() == [0, 1, 2, 5 + 3, 10 + 4]


def test_an_unrolled_pass_is_the_decode_time_tree_node():
    """Pass 1 at row i equals a depth-2 node run after the committed pairs 0..i−1 with the draft's own f̂ of row
    i−1, as the drafter runs it (``causal`` prefix, then the node seeing the prefix and itself)."""
    target, draft = setup(layers=(1, -1))
    tokens = torch.randint(0, 32, (9,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        feats = torch.cat([s[0] for s in (lambda st: (st[1], st[-1]))(
            target.model(input_ids=tokens[None], output_hidden_states=True).hidden_states)], -1)
        outs = unroll(draft, feats[:-1], tokens[1:], 2)
        i = 5
        pos = torch.arange(1, i + 1)[None]
        prefix, kv = draft(draft.reduce(feats[:i])[None], tokens[1:i + 1][None], pos, causal(0, i))
        node, _ = draft(prefix[:, -1:], tokens[i + 1:i + 2][None], torch.tensor([[i + 1]]),
                        torch.ones(1, i + 1, dtype=torch.bool), kv)
    assert torch.allclose(outs[0][:i], prefix[0], atol=1e-5)
    assert torch.allclose(outs[1][i], node[0, 0], atol=1e-5)


def test_the_loss_falls_and_ranks_are_measured():
    target, draft = setup(vocab=16)
    g = torch.Generator().manual_seed(3)
    examples = []
    for _ in range(4):
        toks = torch.randint(0, 32, (14,), generator=g)
        examples.append(Example(toks, torch.ones(14, dtype=torch.bool), toks[:, None], torch.ones(14, 1),
                                torch.zeros(14)))
    feats = target_features(target, examples, (-1,), 14)
    assert isinstance(feats[0], Features) and feats[0].f.shape == (14, 16)
    draft.requires_grad_(True)
    opt = torch.optim.Adam(draft.parameters(), lr=3e-3)
    with torch.no_grad():
        first = float(sum(sequence_loss(draft, target.lm_head, e, f, 2, 0.1) for e, f in zip(examples, feats)))
    for _ in range(60):
        loss = sum(sequence_loss(draft, target.lm_head, e, f, 2, 0.1) for e, f in zip(examples, feats))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.8 * first
    acc, counts = held_out_ranks(draft.eval(), target.lm_head, examples, feats, 3, 5)
    full, _ = held_out_ranks(draft, target.lm_head, examples, feats, 3, 5, full_head=True)
    assert acc.shape == (3, 5) and np.all(np.diff(acc, axis=1) >= 0) and counts[0] == 4 * 13
    assert np.all(full[:, -1] >= 0) and counts[1] <= counts[0]
