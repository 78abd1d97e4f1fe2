"""Quality metrics (specrepro.metrics.quality) and the offline suites' reference answers."""
import math
import re
from types import SimpleNamespace

import pytest
import torch

from specrepro.engine import engine_of
from specrepro.metrics.quality import Perplexity, PromptScorer, bleu_chrf, perplexity, rouge_l
from specrepro.core.prompts import load_suite

# --- perplexity, MJSD Eq. (1) -----------------------------------------------------------------------


class BigramLM(torch.nn.Module):
    """A hand-made LM: the next-token logits after token a are ``table[a]``, whatever came before."""

    def __init__(self, table: torch.Tensor, honour_keep: bool = True, context: int = 512):
        super().__init__()
        self.table = table  # [V, V]
        self.head = torch.nn.Linear(1, table.shape[0], bias=False)  # only its shape is read: V
        self.config = SimpleNamespace(max_position_embeddings=context)
        self.honour_keep = honour_keep

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, logits_to_keep=0):
        logits = self.table[input_ids]  # [1, T, V]
        if self.honour_keep and logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return SimpleNamespace(logits=logits)


# Rows are log-probabilities, so softmax(row) is exactly the probability vector written here.
PROBS = torch.tensor([[0.5, 0.25, 0.25],
                      [0.1, 0.2, 0.7],
                      [1 / 3, 1 / 3, 1 / 3]], dtype=torch.float64)


@pytest.mark.parametrize("honour_keep", [True, False])
def test_perplexity_of_a_bigram_model_is_the_hand_computed_value(honour_keep):
    model = BigramLM(PROBS.log().float(), honour_keep=honour_keep)
    # prompt [2, 0]; generated 1, 2, 2, 0: p(1|0) = 0.25, p(2|1) = 0.7, p(2|2) = 1/3, p(0|2) = 1/3
    ppl, mean_nll, n = perplexity(model, [2, 0], [1, 2, 2, 0])
    expected_nll = -(math.log(0.25) + math.log(0.7) + 2 * math.log(1 / 3)) / 4
    assert n == 4
    assert mean_nll == pytest.approx(expected_nll, rel=1e-6)
    assert ppl == pytest.approx((0.25 * 0.7 / 9) ** (-1 / 4), rel=1e-6)


def test_perplexity_scores_only_the_generated_tokens():
    model = BigramLM(PROBS.log().float())
    # the prompt's own tokens (an unlikely 0 -> 1 -> 0) never enter the average
    assert perplexity(model, [0, 1, 0, 1, 2], [2]).ppl == pytest.approx(3.0, rel=1e-6)
    assert perplexity(model, [2], [2]).ppl == pytest.approx(3.0, rel=1e-6)


def test_perplexity_over_more_rows_than_one_chunk_matches_a_float64_sum():
    # 400 generated tokens cross the 256-row chunk boundary; the closed form is summed in Python floats
    model = BigramLM(PROBS.log().float())
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 3, (401,), generator=gen).tolist()
    prompt, generated = ids[:1], ids[1:]
    expected = -sum(math.log(PROBS[a, b].item()) for a, b in zip(ids, ids[1:])) / len(generated)
    result = perplexity(model, prompt, generated)
    assert result.n == 400
    assert result.mean_nll == pytest.approx(expected, rel=1e-6)


def test_perplexity_on_the_tiny_llama_equals_one_forward_per_prefix(tiny_pair_64, one_thread):
    target, _ = tiny_pair_64
    prompt, generated = [5, 17, 3, 40], [8, 8, 61, 2, 33, 9, 0]
    # by hand: score each generated token with a separate forward over exactly the tokens before it
    nll = 0.0
    with torch.inference_mode():
        for t, token in enumerate(generated):
            row = target(input_ids=torch.tensor([prompt + generated[:t]])).logits[0, -1].double()  # [V]
            log_z = math.log(sum(math.exp(v) for v in row.tolist()))
            nll -= row[token].item() - log_z
    ppl, mean_nll, n = perplexity(target, prompt, generated)
    assert n == len(generated)
    assert mean_nll == pytest.approx(nll / n, rel=1e-5)
    assert ppl == pytest.approx(math.exp(nll / n), rel=1e-5)


def test_the_prompt_scorer_is_perplexity_on_the_engine_whatever_came_before(tiny_pair_64, one_thread):
    target, _ = tiny_pair_64
    assert engine_of(target) is not None  # else the scorer is perplexity itself and this test would hold trivially
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 64, (150,), generator=gen).tolist()  # more than one 64-column chunk
    runs = [torch.randint(0, 64, (n,), generator=gen).tolist() for n in (7, 1, 16, 7)]
    runs[3][:3] = runs[0][:3]  # shares its first tokens with the first: the cached prompt is still all it reuses
    reference = [perplexity(target, prompt, g) for g in runs]  # transformers' forward over the whole sequence
    shared = PromptScorer(target)
    scored = [shared(prompt, g) for g in runs]
    alone = [PromptScorer(target)(prompt, g) for g in runs]  # a fresh scorer each: the prompt computed in the call
    for ref, got, own in zip(reference, scored, alone):
        assert got.n == ref.n and got.mean_nll == pytest.approx(ref.mean_nll, rel=1e-4)
        assert got.mean_nll == pytest.approx(own.mean_nll, rel=1e-6)  # order does not matter
    assert shared(prompt[:-1], runs[0]).mean_nll != pytest.approx(scored[0].mean_nll, rel=1e-6)  # a new prompt
    assert shared(prompt, runs[0]).mean_nll == pytest.approx(scored[0].mean_nll, rel=1e-6)
    assert shared(prompt, []).n == 0
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        shared(prompt, [64])
    with pytest.raises(ValueError, match="exceeds the model's context of 512"):
        shared(prompt * 4, [1])


def test_empty_generation_has_no_perplexity_and_says_why():
    result = perplexity(BigramLM(PROBS.log().float()), [0], [])
    assert isinstance(result, Perplexity)
    assert (result.ppl, result.mean_nll, result.n) == (None, None, 0)
    assert "empty generation" in result.reason
    assert perplexity(BigramLM(PROBS.log().float()), [0], [1]).reason is None


@pytest.mark.parametrize("prompt, generated, message", [
    ([], [1], "prompt is empty"),
    ([0], [3], "outside the model's vocabulary"),
    ([-1], [1], "outside the model's vocabulary"),
    ([0] * 6, [1] * 5, "exceeds the model's context of 10"),
])
def test_perplexity_refuses_bad_input(prompt, generated, message):
    with pytest.raises(ValueError, match=message):
        perplexity(BigramLM(PROBS.log().float(), context=10), prompt, generated)


# --- ROUGE-L, BLEU, chrF ----------------------------------------------------------------------------


def test_rouge_l_of_identical_and_disjoint_texts():
    text = "The committee met in Bristol on 3 March."
    assert rouge_l(text, text) == 1.0
    assert rouge_l("apples and pears", "quantum field theory") == 0.0
    assert rouge_l("", text) == 0.0


def test_rouge_l_hand_checked_lcs():
    # LCS of [the cat sat on the mat] and [the cat lay on a mat] is [the cat on mat]: P = R = 4/6
    assert rouge_l("the cat sat on the mat", "the cat lay on a mat") == pytest.approx(2 / 3)
    # stemmed: [polic kill the gunman yesterday] vs [the gunman wa kill]; LCS [the gunman] = 2,
    # P = 2/5, R = 2/4, F = 2PR / (P + R) = 4/9
    assert rouge_l("Police killed the gunman yesterday", "the gunman was killed") == pytest.approx(4 / 9)


def test_rouge_l_lowercases_drops_punctuation_and_stems():
    assert rouge_l("The CATS, running!", "the cat runs") == 1.0


def test_bleu_and_chrf():
    refs = ["the cat sat on the mat today", "a quick brown fox jumps over the lazy dog"]
    same = bleu_chrf(refs, refs)
    assert same.bleu == pytest.approx(100.0) and same.chrf == pytest.approx(100.0) and same.n == 2
    assert "nrefs:1" in same.bleu_signature and "nrefs:1" in same.chrf_signature
    other = bleu_chrf(["zzz qqq", "vvv www"], refs)
    assert other.bleu == pytest.approx(0.0) and other.chrf < 5.0
    partial = bleu_chrf(["the cat sat on a mat today", "a quick brown fox jumps over the dog"], refs)
    assert 0.0 < partial.bleu < 100.0 and 0.0 < partial.chrf < 100.0
    with pytest.raises(ValueError, match="2 predictions but 1 references"):
        bleu_chrf(refs, refs[:1])
    with pytest.raises(ValueError, match="no predictions"):
        bleu_chrf([], [])


# --- reference answers of the offline suites ----------------------------------------------------------

WORDS = {"instruct": (40, 150), "chat": (40, 150), "summarize": (50, 90)}


@pytest.mark.parametrize("name", sorted(WORDS))
def test_every_instruct_chat_summarize_prompt_has_a_reference(name):
    suite = load_suite(name)
    low, high = WORDS[name]
    for p in suite:
        reference = p.extra.get("reference")
        assert isinstance(reference, str) and reference.strip(), p.id
        assert low <= len(reference.split()) <= high, (p.id, len(reference.split()))
        assert reference not in p.prompt and all(reference != c for _, c in p.messages), p.id
    assert len({p.extra["reference"] for p in suite}) == len(suite)


def test_the_mixed_suite_keeps_the_references():
    for p in load_suite("mixed"):
        assert ("reference" in p.extra) == (p.suite in WORDS), p.id


def _words(text):
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def test_each_summary_belongs_to_its_own_passage():
    # A faithful summary reuses its passage's words: it overlaps its own passage far more than any other.
    suite = load_suite("summarize")
    passages = [_words(p.prompt.rsplit("\n\n", 1)[0]) for p in suite]
    for i, p in enumerate(suite):
        words = _words(p.extra["reference"])
        overlap = [len(words & passage) / len(words) for passage in passages]  # [n_passages]
        assert overlap[i] >= 0.7, (p.id, overlap[i])
        assert overlap[i] - max(o for j, o in enumerate(overlap) if j != i) >= 0.25, p.id
