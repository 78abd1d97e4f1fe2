"""The batch-B cache of ragged rows: every row scores as a fresh batch-1 forward would, keeps its own accepted path,
truncates, leaves; its valid entries are exactly a batch-1 cache's."""
from __future__ import annotations

import pytest
import torch

from specrepro.core.batch_cache import BatchCache
from specrepro.core.kvcache import CachedModel
from specrepro.core.tree import root_path

pytestmark = pytest.mark.usefixtures("one_thread")
EMPTY = (torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long))


def fresh(model, seq):
    """The next-token logits [V] after ``seq`` from a full forward, no cache."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([seq])).logits[0, -1]


def assert_rows_fresh(model, logits, ids, trees):
    """Row b's logits [N+1, V]: row 0 after ids[b], row i+1 after node i's root path (its dummy rows ignored)."""
    for b, (row, (tokens, parents)) in enumerate(zip(ids, trees)):
        if row is None:
            continue
        torch.testing.assert_close(logits[b, 0], fresh(model, row), atol=1e-4, rtol=1e-4)
        for i in range(tokens.numel()):
            seq = row + [int(tokens[j]) for j in root_path(parents, i)]
            torch.testing.assert_close(logits[b, i + 1], fresh(model, seq), atol=1e-4, rtol=1e-4)


def assert_entries_are_batch1(model, cache: BatchCache):
    """Each row's slots [0, L_b) hold the keys and values a batch-1 cache of its tokens holds."""
    for b, row in enumerate(cache.rows):
        one = CachedModel(model)
        one.logits_for(row)
        for (keys, values), (k1, v1) in zip(cache.layer_entries(), one.layer_entries()):
            torch.testing.assert_close(keys[b, :, :len(row)], k1[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(values[b, :, :len(row)], v1[0], atol=1e-5, rtol=1e-5)


def test_ragged_trees_keep_paths_truncate_and_leave(tiny_pair_64):
    target, _ = tiny_pair_64
    cache = BatchCache(target, 3)
    # Step 1 (the prefill too): prompts of 3, 7 and 1 tokens; a tree, a one-node chain, nothing.
    ids = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [4]]
    trees = [(torch.tensor([7, 8, 9, 30]), torch.tensor([-1, 0, -1, 2])), (torch.tensor([3]), torch.tensor([-1])),
             EMPTY]
    logits, hidden = cache.score(ids, trees, output_hidden=True)
    assert logits.shape == (3, 5, 64) and hidden.shape == (3, 5, target.config.hidden_size)
    assert_rows_fresh(target, logits, ids, trees)
    cache.keep([[2, 3], [0], []])  # ragged acceptance: 2, 1 and 0 nodes
    cache.check()
    assert cache.rows == [ids[0] + [9, 30], ids[1] + [3], ids[2]] and cache.n_slots == 8
    assert_entries_are_batch1(target, cache)

    # Step 2: chains after the kept paths; row 1 rolls back two tokens (a rejected stretch) before going on.
    ids = [cache.rows[0] + [40], cache.rows[1][:6] + [41, 42], cache.rows[2] + [43]]
    trees = [(torch.tensor([1, 2]), torch.tensor([-1, 0])), EMPTY, (torch.tensor([5, 6, 7]), torch.tensor([-1, 0, 1]))]
    logits, _ = cache.score(ids, trees)
    assert_rows_fresh(target, logits, ids, trees)
    cache.keep([[0, 1], [], [0]])
    cache.check()
    assert [len(row) for row in cache.rows] == [8, 8, 3]
    assert_entries_are_batch1(target, cache)

    # Row 0 sits out a step; then row 1 leaves and the others go on.
    ids = [None, cache.rows[1] + [2], cache.rows[2] + [3]]
    logits, _ = cache.score(ids)
    assert_rows_fresh(target, logits, ids, [EMPTY] * 3)
    cache.keep([[], [], []])
    cache.select([0, 2])
    cache.check()
    assert cache.batch_size == 2 and cache.n_slots == 8
    assert_entries_are_batch1(target, cache)
    ids = [cache.rows[0] + [4], cache.rows[1] + [5]]
    assert_rows_fresh(target, cache.score(ids)[0], ids, [EMPTY] * 2)
    cache.keep([[], []])
    cache.truncate(0, 4)
    cache.check()
    assert cache.n_slots == 5 and [len(row) for row in cache.rows] == [4, 5]


def test_bad_calls_get_one_clear_error(tiny_pair_64):
    target, _ = tiny_pair_64
    cache = BatchCache(target, 2)
    with pytest.raises(ValueError, match="batch_size"):
        BatchCache(target, 0)
    with pytest.raises(ValueError, match="expected ids and trees for the 2 rows"):
        cache.score([[1, 2]])
    with pytest.raises(ValueError, match="at least one row"):
        cache.score([None, None])
    with pytest.raises(ValueError, match="row 1: scoring needs at least one committed token"):
        cache.score([[1], []])
    with pytest.raises(ValueError, match="none is pending"):
        cache.keep([[], []])
    cache.score([[1, 2], [3]], [(torch.tensor([4, 5]), torch.tensor([-1, -1])), EMPTY])
    with pytest.raises(ValueError, match="not a root path"):
        cache.keep([[0, 1], []])
    with pytest.raises(ValueError, match="while a step is pending"):
        cache.select([0])
    cache.keep([[1], []])
    with pytest.raises(ValueError, match="distinct rows"):
        cache.select([0, 0])
    with pytest.raises(ValueError, match="row 0 reaches position 599"):
        cache.score([[1] * 600, [2]])
    assert cache.rows == [[1, 2, 5], [3]] and cache.pending is None  # an error leaves the cache as it was
    cache.check()
    cache.rows[0].append(9)  # corrupt the bookkeeping: the invariant catches it
    with pytest.raises(AssertionError, match="expected 2 rows of 4 slots"):
        cache.check()


def test_a_model_without_position_ids_cannot_batch(tiny_pair_64):
    target, _ = tiny_pair_64

    class NoPositions(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner, self.config = target, target.config

        def get_input_embeddings(self):
            return self.inner.get_input_embeddings()

        def forward(self, input_ids, attention_mask=None, **_):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask)

    with pytest.raises(ValueError, match="NoPositions.forward does not take"):
        BatchCache(NoPositions(), 2)


def test_ragged_prompts_prefill_row_by_row_as_the_batch_would(tiny_pair_64, monkeypatch):
    """Prompts of very unequal lengths (mostly padding as one forward) run one row at a time over their own columns,
    into the slots the batched forward writes: the same logits and entries as that forward and as batch 1."""
    from specrepro.core import batch_cache
    from specrepro.engine import session
    target, _ = tiny_pair_64
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, 64, (n,), generator=g).tolist() for n in (3, 40, 9)]
    trees = [(torch.tensor([5, 6]), torch.tensor([-1, 0]))] * 3
    calls = []
    monkeypatch.setattr(batch_cache, "run_rows", lambda *a: calls.append(a[-1]) or session.run_rows(*a))
    out = {}
    for share in (0.75, 0.0):  # the default; 0: one forward always
        monkeypatch.setattr(batch_cache, "ROW_BY_ROW_SHARE", share)
        cache = BatchCache(target, 3)
        first, _ = cache.score(ids)
        cache.keep([[] for _ in ids])
        step = [row + [int(first[b, -1].argmax())] for b, row in enumerate(ids)]
        out[share] = (first[:, -1], cache.score(step, trees)[0])
        assert_rows_fresh(target, out[share][1], step, trees)
        cache.keep([[] for _ in ids])
        assert_entries_are_batch1(target, cache)
    assert calls == [[(37, 40), (0, 40), (31, 40)]]  # the prefill only: a step of 3 columns is one forward
    for rows, batched in zip(out[0.75], out[0.0]):
        torch.testing.assert_close(rows, batched, atol=1e-5, rtol=1e-5)
