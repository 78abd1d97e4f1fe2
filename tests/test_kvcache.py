"""Tree scoring in one target forward (CachedModel.logits_for_tree, keep_path) against plain full forwards."""
import pytest
import torch
from transformers import DynamicCache

from specrepro.core import tree
from specrepro.core.kvcache import CachedModel, drop_last
from specrepro.engine.models import load_model, tiny_model

ATOL = RTOL = 1e-5  # fp32: tree and full forwards differ only by matmul shapes
PROMPT = [1, 5, 3, 7, 2, 9]
VOCAB = 64


def random_parents(n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.tensor([int(torch.randint(-1, i, (), generator=gen)) for i in range(n)])  # parent in [-1, i-1]


def binary_parents(depth: int) -> torch.Tensor:
    """Full binary tree, breadth first: nodes 0, 1 are the root's children, node j's children are 2j+2, 2j+3."""
    n = 2 ** (depth + 1) - 2
    return torch.tensor([-1, -1] + [(i - 2) // 2 for i in range(2, n)])


SHAPES = {
    "chain": tree.chain_parents(5),
    "star": torch.full((4,), -1),
    "binary3": binary_parents(3),  # 14 nodes: 2 + 4 + 8
    "random": random_parents(10, seed=0),
}


def random_tokens(n: int, seed: int) -> torch.Tensor:
    return torch.randint(VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


def full(model, seq: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain full forward, no cache: (next-token logits [V], final hidden state [H]) after ``seq``."""
    with torch.inference_mode():
        out = model(torch.tensor([seq]), output_hidden_states=True)
    return out.logits[0, -1], out.hidden_states[-1][0, -1]


def path_tokens(tokens: torch.Tensor, path: list[int]) -> list[int]:
    return [int(tokens[i]) for i in path]


def assert_rows_match(model, ids, tokens, parents, logits, hidden, atol=ATOL, rtol=RTOL):
    """Row 0 = after ids, row i+1 = after node i's root path; hidden rows likewise."""
    n = parents.numel()
    assert logits.shape == (n + 1, VOCAB) and hidden.shape == (n + 1, model.config.hidden_size)
    for row in range(n + 1):
        seq = ids + path_tokens(tokens, tree.root_path(parents, row - 1))
        ref_logits, ref_hidden = full(model, seq)
        torch.testing.assert_close(logits[row], ref_logits, atol=atol, rtol=rtol)
        torch.testing.assert_close(hidden[row], ref_hidden, atol=atol, rtol=rtol)


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def target(request):
    model = tiny_model(vocab_size=VOCAB, n_layers=2, hidden=32, seed=4)
    model.set_attn_implementation(request.param)
    assert model.config._attn_implementation == request.param
    return model


def warm(cm: CachedModel, how: str) -> None:
    """Leave the cache empty, holding all of PROMPT (one position to roll back), or a divergent sequence."""
    if how == "prompt":
        cm.logits_for(PROMPT)
    elif how == "divergent":
        cm.logits_for(PROMPT[:3] + [11, 12, 13, 14, 15])


@pytest.mark.parametrize("cached", ["empty", "prompt", "divergent"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_row_equals_a_full_forward(target, shape, cached):
    parents = SHAPES[shape]
    tokens = random_tokens(parents.numel(), seed=1)
    cm = CachedModel(target)
    warm(cm, cached)
    logits, hidden = cm.logits_for_tree(PROMPT, tokens, parents, output_hidden=True)
    assert_rows_match(target, PROMPT, tokens, parents, logits, hidden)
    cm.check()
    assert cm.ids == PROMPT and cm.tree.tokens == tokens.tolist()
    assert cm.cache_len == len(PROMPT) + parents.numel()


def test_hidden_is_the_final_norm_output_the_lm_head_reads(target):
    parents = SHAPES["random"]
    logits, hidden = CachedModel(target).logits_for_tree(PROMPT, random_tokens(10, seed=2), parents,
                                                         output_hidden=True)
    with torch.inference_mode():
        torch.testing.assert_close(target.lm_head(hidden), logits, atol=ATOL, rtol=RTOL)
    _, none = CachedModel(target).logits_for_tree(PROMPT, random_tokens(10, seed=2), parents)
    assert none is None


def test_chain_causal_path_equals_tree_mask_path(target, monkeypatch):
    parents, tokens = SHAPES["chain"], random_tokens(5, seed=3)
    causal = CachedModel(target).logits_for_tree(PROMPT, tokens, parents, output_hidden=True)
    monkeypatch.setattr(tree, "is_chain", lambda parents: False)  # force the 4D tree-mask path
    masked = CachedModel(target).logits_for_tree(PROMPT, tokens, parents, output_hidden=True)
    for a, b in zip(causal, masked):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL)


def cached_keys_match_fresh_prefill(model, cm: CachedModel) -> None:
    fresh = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(torch.tensor([cm.ids]), cache=fresh, use_cache=True)
    for (keys, values), ref in zip(cm.layer_entries(), fresh.layers):
        torch.testing.assert_close(keys, ref.keys, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(values, ref.values, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("shape, path", [
    ("binary3", []),
    ("binary3", [0]),  # the prefix case: a plain suffix crop
    ("binary3", [0, 2, 6]),
    ("binary3", [1, 5, 13]),  # through non-first siblings at every level
    ("binary3", [0, 3]),
    ("star", [3]),
    ("chain", [0, 1, 2, 3, 4]),  # the full root path of a chain
    ("chain", [0, 1]),
    ("random", None),  # the deepest node's full root path
])
def test_keep_path_compacts_the_cache(target, shape, path):
    parents = SHAPES[shape]
    if path is None:
        path = tree.root_path(parents, int(tree.depths(parents).argmax()))
    tokens = random_tokens(parents.numel(), seed=4)
    cm = CachedModel(target)
    cm.logits_for_tree(PROMPT, tokens, parents)
    cm.keep_path(path)
    cm.check()
    committed = PROMPT + path_tokens(tokens, path)
    assert cm.ids == committed and cm.tree is None and cm.cache_len == len(committed)
    cached_keys_match_fresh_prefill(target, cm)
    for t in (0, 17):
        rows = cm.logits_for(committed + [t])
        assert rows.shape[0] == 1  # the compacted cache was used, only the new token ran
        torch.testing.assert_close(rows[-1], full(target, committed + [t])[0], atol=ATOL, rtol=RTOL)
        cm.rollback(len(committed))


def test_rounds_of_score_keep_append(target):
    """The decoding loop's use: score a tree, keep an accepted path, append a token, score the next tree."""
    gen = torch.Generator().manual_seed(5)
    cm, ids = CachedModel(target), list(PROMPT)
    for step in range(5):
        n = int(torch.randint(1, 9, (), generator=gen))
        parents = tree.chain_parents(n) if step == 2 else random_parents(n, seed=10 + step)
        tokens = random_tokens(n, seed=20 + step)
        logits, hidden = cm.logits_for_tree(ids, tokens, parents, output_hidden=True)
        assert_rows_match(target, ids, tokens, parents, logits, hidden)
        cm.check()
        node = int(torch.randint(-1, n, (), generator=gen))  # -1: nothing accepted
        path = tree.root_path(parents, node)
        cm.keep_path(path)
        cm.check()
        ids = ids + path_tokens(tokens, path)
        assert cm.ids == ids
        ids.append(int(logits[len(path) and path[-1] + 1].argmax()))  # the bonus/recovered token, not cached


def test_any_other_call_drops_a_pending_tree(target):
    parents, tokens = SHAPES["binary3"], random_tokens(14, seed=6)
    cm = CachedModel(target)
    cm.logits_for_tree(PROMPT, tokens, parents)
    row = cm.logits_for(PROMPT + [int(tokens[1])])  # a sibling that is not first in the cache
    cm.check()
    assert cm.ids == PROMPT + [int(tokens[1])] and cm.tree is None
    torch.testing.assert_close(row[-1], full(target, PROMPT + [int(tokens[1])])[0], atol=ATOL, rtol=RTOL)
    cm.logits_for_tree(PROMPT, tokens, parents)
    cm.rollback(3)
    cm.check()
    assert cm.ids == PROMPT[:3] and cm.cache_len == 3
    with pytest.raises(ValueError, match="none is pending"):
        cm.keep_path([])


def test_empty_tree_scores_the_next_token(target):
    cm = CachedModel(target)
    logits, _ = cm.logits_for_tree(PROMPT, [], [])
    assert logits.shape == (1, VOCAB)
    torch.testing.assert_close(logits[0], full(target, PROMPT)[0], atol=ATOL, rtol=RTOL)
    cm.keep_path([])
    cm.check()
    assert cm.ids == PROMPT


def test_bf16_tree_rows_close_to_full_forwards():
    """bf16 runs through the same additive mask (its dtype must match the queries for SDPA); rounding differs
    between matmul shapes, so the bound is loose (tiny_model's logits are scaled up, |logit| ~ 10)."""
    for impl in ("sdpa", "eager"):
        model = tiny_model(vocab_size=VOCAB, n_layers=2, hidden=32, seed=4, dtype=torch.bfloat16)
        model.set_attn_implementation(impl)
        parents, tokens = SHAPES["binary3"], random_tokens(14, seed=7)
        logits, hidden = CachedModel(model).logits_for_tree(PROMPT, tokens, parents, output_hidden=True)
        assert logits.dtype == torch.bfloat16
        assert_rows_match(model, PROMPT, tokens, parents, logits, hidden, atol=0.25, rtol=0.05)


@pytest.mark.parametrize("ids, tokens, parents, match", [
    ([1, 2], [3, 4], [-1, 1], "parent index must be"),  # node 1 is its own parent
    ([1, 2], [3, 4, 5], [-1, 0, 2], "parent index must be"),  # a later parent
    ([1, 2], [3, 4, 5], [-1, 0], "needs 3 parent indices"),
    ([], [3], [-1], "ids is empty"),
    ([1] * 510, [3, 4, 5], [-1, 0, 1], "context is 512 positions"),
    ([1, 2], [[3, 4]], [-1, 0], "1-D"),
])
def test_bad_trees_are_refused(target, ids, tokens, parents, match):
    cm = CachedModel(target)
    with pytest.raises(ValueError, match=match):
        cm.logits_for_tree(ids, tokens, parents)
    assert cm.cache_len == 0 and cm.tree is None


def test_a_tree_that_just_fits_the_context_is_scored(target):
    cm = CachedModel(target)
    logits, _ = cm.logits_for_tree([1] * 509, [3, 4, 5], [-1, 0, 1])  # deepest position 511 of 512
    assert logits.shape == (4, VOCAB)


@pytest.mark.parametrize("path", [[3], [0, 1], [1, 2], [0, 4], [14], [-1], [0, 2, 6, 6], [2, 6]])
def test_keep_path_refuses_a_path_that_is_not_a_root_path(target, path):
    cm = CachedModel(target)
    cm.logits_for_tree(PROMPT, random_tokens(14, seed=8), SHAPES["binary3"])
    with pytest.raises(ValueError, match="not a root path"):
        cm.keep_path(path)
    cm.check()  # nothing changed: the tree is still pending
    cm.keep_path([0, 2, 6])
    assert len(cm.ids) == len(PROMPT) + 3


def test_keep_path_without_a_scored_tree(target):
    cm = CachedModel(target)
    with pytest.raises(ValueError, match="none is pending"):
        cm.keep_path([])
    cm.logits_for_tree(PROMPT, [3, 4], [-1, -1])
    cm.keep_path([1])
    with pytest.raises(ValueError, match="none is pending"):  # a tree is kept once
        cm.keep_path([])


def test_tree_attention_needs_a_4d_mask_implementation():
    model = tiny_model(vocab_size=VOCAB, n_layers=1, hidden=32, seed=4, engine="transformers")  # (the engine's
    model.config._attn_implementation = "flash_attention_2"  # mask is always an input) refused before any forward
    cm = CachedModel(model)
    with pytest.raises(ValueError, match="attn_implementation 'flash_attention_2'"):
        cm.logits_for_tree(PROMPT, [3, 4], [-1, -1])


@pytest.mark.slow
def test_offline_model_tree_rows_and_kept_path():
    smol = load_model("smollm2-135m-instruct", dtype="fp32", device="cpu")
    model, vocab = smol.model, smol.vocab_size
    ids = smol.tokenizer("The capital of France is")["input_ids"]
    parents = torch.tensor([-1, -1, 0, 0, 2])
    tokens = torch.tensor(smol.tokenizer(" Paris. It is the city of light")["input_ids"][:5])
    cm = CachedModel(model)
    logits, hidden = cm.logits_for_tree(ids, tokens, parents, output_hidden=True)
    assert logits.shape == (6, vocab)
    for row in range(6):
        ref_logits, ref_hidden = full(model, ids + path_tokens(tokens, tree.root_path(parents, row - 1)))
        torch.testing.assert_close(logits[row], ref_logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(hidden[row], ref_hidden, atol=1e-4, rtol=1e-4)
    cm.keep_path([0, 2, 4])
    cm.check()
    committed = ids + path_tokens(tokens, [0, 2, 4])
    rows = cm.logits_for(committed + [13])
    assert rows.shape[0] == 1
    torch.testing.assert_close(rows[-1], full(model, committed + [13])[0], atol=1e-4, rtol=1e-4)


def test_drop_last_is_the_one_suffix_crop(target):
    """``drop_last(cache, n)`` drops the newest n positions of every layer; n = 0 leaves the cache alone (a bare
    ``crop(0)`` would empty it)."""
    cache = DynamicCache(config=target.config)
    with torch.inference_mode():
        target(input_ids=torch.tensor([PROMPT]), cache=cache, use_cache=True)
    drop_last(cache, 0)
    assert cache.get_seq_length() == len(PROMPT)
    drop_last(cache, 2)
    assert cache.get_seq_length() == len(PROMPT) - 2
    assert all(layer.keys.shape[-2] == len(PROMPT) - 2 for layer in cache.layers if layer.is_initialized)
    with pytest.raises(ValueError, match="n >= 0"):
        drop_last(cache, -1)
