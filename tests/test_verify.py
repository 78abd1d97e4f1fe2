"""The one verification step (specrepro.core.verify) and the scorer seam, shared by the loop and the staged drafter."""
import pytest
import torch

from specrepro.acceptance import TREE_RULES
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.drafters import PromptLookupDrafter, Proposal, Scores, score_tree
from specrepro.drafters.staged import StagedDrafter
from specrepro.core.kvcache import CachedModel
from specrepro.engine.models import tiny_model
from specrepro.decode.speculative import speculative_generate
from specrepro.core.verify import verify
from specrepro.core.warping import one_hot, warp

pytestmark = pytest.mark.usefixtures("one_thread")
T1 = SamplingConfig(temperature=1.0)
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]


@pytest.fixture(scope="module")
def pair():
    return tiny_model(vocab_size=32, n_layers=2, hidden=32, seed=2), tiny_model(vocab_size=32, n_layers=1, hidden=32,
                                                                                 seed=3)


def test_one_step_is_score_warp_rule_keep(pair):
    """verify = the tree forward, the warped rows, the rule on the caller's uniforms, and keep_path."""
    target, _ = pair
    tokens, parents = torch.tensor([5, 6, 7, 9]), torch.tensor([-1, 0, 1, -1])
    proposal = Proposal(tokens=tokens, probs=None, parents=parents)
    model = CachedModel(target)
    step = verify(model, PROMPT, proposal, T1, TREE_RULES["exact"], torch.Generator().manual_seed(5), score=score_tree)

    logits, _ = CachedModel(target).logits_for_tree(PROMPT, tokens, parents)
    p = warp(logits, T1)
    uniforms = torch.rand(5, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    path, next_token = TREE_RULES["exact"](p, one_hot(tokens, 32), tokens, parents, uniforms)
    assert step.path == list(path) and step.tokens == [int(tokens[i]) for i in path] + [next_token]
    assert torch.equal(step.p, p) and step.hidden is None and step.n_inputs == 5 and step.score_s == 0.0
    assert model.tree is None and model.ids == PROMPT + [int(tokens[i]) for i in path]  # the path was kept
    model.check()


class CountingLookup(PromptLookupDrafter):
    """Prompt lookup whose scorer counts its calls and reports one extra scored position."""

    def __init__(self):
        super().__init__()
        self.scored = 0

    def score(self, model, ids, tokens, parents) -> Scores:
        self.scored += 1
        s = score_tree(model, ids, tokens, parents)
        return Scores(s.logits, s.hidden, n_inputs=s.n_inputs + 1)


def test_the_loop_scores_through_the_drafters_scorer_and_records_what_it_scored(pair):
    target, _ = pair
    drafter = CountingLookup()
    config = DecodeConfig(max_new_tokens=20, gamma=3, sampling=T1, seed=1, stop_at_eos=False)
    rec = speculative_generate(target, drafter, PROMPT, config)
    assert drafter.scored == rec.target_calls == len(rec.input_lengths)
    # every step: the root, the N nodes (none on a plain step) and the scorer's extra position
    assert sum(rec.input_lengths) == 2 * rec.target_calls + sum(rec.tree_sizes) and rec.tree_sizes


def test_the_staged_inner_level_is_the_same_step(pair):
    """The inner level scores through the inner drafter's scorer once per draft-model forward."""
    target, draft = pair
    inner = CountingLookup()
    staged = StagedDrafter(draft, inner, inner_gamma=2)
    config = DecodeConfig(max_new_tokens=20, gamma=4, sampling=T1, seed=2, stop_at_eos=False)
    rec = speculative_generate(target, staged, PROMPT, config)
    assert inner.scored == rec.draft_calls > 0
