"""Output quality: perplexity under the target, ROUGE-L against a reference, corpus BLEU and chrF (issue 14).

The MJSD paper (``000``) judges a decoding method by the perplexity of what it generates, "based on the
probability of the large model" (Appendix C), and checks that the downstream score follows it with ROUGE-L
(Fig. 1). Here:

    perplexity   Eq. (1), PPL(x_{1:N}) = exp{-(1/N) Σ_t log p(x_t | x_{1:t-1})}, over exactly the N generated
                 tokens, each conditioned on the prompt and the tokens before it, under the target's UNWARPED
                 distribution p = softmax(logits): no temperature, top-k or top-p. A method that samples from a
                 warped p̃ is still scored by p, so a sharper warp shows up as a lower perplexity, as in the paper;
    rouge_l      the F-measure of ROUGE-L (longest common subsequence) from Google's ``rouge-score`` package,
                 with its Porter stemmer, as its README scores "rougeL";
    bleu_chrf    corpus BLEU and chrF from ``sacrebleu`` with its default settings, and their signatures (the
                 strings sacrebleu asks papers to report so that scores can be compared).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import torch
from rouge_score import rouge_scorer
from sacrebleu.metrics import BLEU, CHRF

from ..core.decoding import model_device
from ..core.kvcache import CachedModel
from ..engine import engine_of

# Rows of the [N, V] logits cast to float64 at a time: a 50k-token vocabulary costs 400 KB a row in float64.
_ROWS_PER_CHUNK = 256


class Perplexity(NamedTuple):
    """Eq. (1) of the MJSD paper for one generation; unpacks as ``ppl, mean_nll, n``.

    An empty generation has no perplexity (Eq. (1) divides by N = 0): ``ppl`` and ``mean_nll`` are None and
    ``reason`` says why.
    """

    ppl: float | None  # exp(mean_nll)
    mean_nll: float | None  # -(1/N) Σ_t log p(x_t | x_<t), in nats
    n: int  # N, the generated tokens scored

    @property
    def reason(self) -> str | None:
        """Why there is no perplexity, or None when there is one."""
        return None if self.n else "empty generation: Eq. (1) averages over N = 0 tokens"


def perplexity(model: torch.nn.Module, prompt_ids: Sequence[int], generated_ids: Sequence[int]) -> Perplexity:
    """Perplexity of ``generated_ids`` after ``prompt_ids`` under ``model`` (the target), MJSD paper Eq. (1).

    One forward over prompt + generated; row t of the logits is p(· | x_{1:t}) unwarped (softmax of the raw
    logits); the log-probabilities of the N generated tokens are summed in float64. The prompt tokens are
    context only and never scored. Pass the generated tokens as the record holds them (an EOS the method
    committed is a generated token and is scored). An empty generation gives ``Perplexity(None, None, 0)``
    with a ``reason``. Batch size 1. (:class:`PromptScorer` scores many generations after one prompt on the
    engine, computing the prompt once.)

    Raises ValueError for an empty prompt (the first generated token needs a context), ids outside the
    model's vocabulary, or prompt + generated longer than the model's context.
    """
    prompt, generated = _checked(model, prompt_ids, generated_ids)
    n = len(generated)
    if n == 0:
        return Perplexity(None, None, 0)
    x = torch.tensor([prompt + generated], dtype=torch.long, device=model_device(model))  # [1, P+N]
    with torch.inference_mode():
        # Only the rows that predict generated tokens are needed: positions P-1 .. P+N-2. Slicing from the end
        # is right whether or not the model honours logits_to_keep (it then returns all P+N rows).
        logits = model(input_ids=x, logits_to_keep=n + 1).logits[0, -(n + 1):-1]  # [N, V]
    return _of_logits(logits, x[0, len(prompt):])


class PromptScorer:
    """Eq. (1) for many generations after the same prompt (the methods of one bench prompt), on the target's engine
    when it has one: the prompt's keys and values are computed once per prompt and each generation runs its last
    prompt token and its own tokens (``kvcache.CachedModel.logits_for``), instead of a forward over the whole
    prompt each time. On a 2-core Zen 1 a 450-token prompt with 16 generated tokens costs 6.1 s in transformers'
    bf16 forward, 2.0 s as one engine forward and 0.10 s after the first.

    The engine's numbers are :func:`perplexity`'s up to rounding (its kernels are the ones decoding runs on). A
    score does not depend on which generations came before it: every call reruns the same columns from the same
    cached prompt. A model without an engine is scored by :func:`perplexity`. Same errors as :func:`perplexity`."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self._prompt: list[int] | None = None
        self._lm = None

    def __call__(self, prompt_ids: Sequence[int], generated_ids: Sequence[int]) -> Perplexity:
        if engine_of(self.model) is None:
            return perplexity(self.model, prompt_ids, generated_ids)
        prompt, generated = _checked(self.model, prompt_ids, generated_ids)
        n = len(generated)
        if n == 0:
            return Perplexity(None, None, 0)
        if prompt != self._prompt:
            self._prompt, self._lm = prompt, CachedModel(self.model, prompt_len=len(prompt))
        logits = self._lm.logits_for(prompt + generated, n_last=n + 1)[:-1]  # [N, V]: rows P-1 .. P+N-2
        return _of_logits(logits, torch.tensor(generated, dtype=torch.long, device=logits.device))


def _checked(model: torch.nn.Module, prompt_ids: Sequence[int], generated_ids: Sequence[int]
             ) -> tuple[list[int], list[int]]:
    """The ids as lists of ints, or ValueError (see :func:`perplexity`)."""
    prompt, generated = [int(t) for t in prompt_ids], [int(t) for t in generated_ids]
    if not prompt:
        raise ValueError("the prompt is empty: the first generated token must be conditioned on at least one token")
    if not generated:
        return prompt, generated
    ids = prompt + generated
    vocab = model.get_output_embeddings().weight.shape[0]
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"token ids {bad[:5]} are outside the model's vocabulary of {vocab}")
    context = getattr(model.config, "max_position_embeddings", None)
    if context is not None and len(ids) > context:
        raise ValueError(f"prompt of {len(prompt)} + {len(generated)} generated tokens exceeds the model's context "
                         f"of {context}")
    return prompt, generated


def _of_logits(logits: torch.Tensor, targets: torch.Tensor) -> Perplexity:
    """Eq. (1) from logits [N, V] (row t predicts targets[t]), the log-softmax in float64, a chunk of rows at a
    time."""
    total_nll = 0.0
    with torch.inference_mode():
        for rows, tokens in zip(logits.split(_ROWS_PER_CHUNK), targets.split(_ROWS_PER_CHUNK)):
            logp = torch.log_softmax(rows.to(torch.float64), dim=-1)  # [n_chunk, V], unwarped p
            total_nll -= logp.gather(1, tokens[:, None]).sum().item()
    mean_nll = total_nll / len(targets)
    return Perplexity(math.exp(mean_nll), mean_nll, len(targets))


# ------------------------------------------------------------------------------------------ overlap

_ROUGE_L = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure of ``prediction`` against ``reference`` (MJSD paper Fig. 1), in [0, 1].

    ``rouge-score``'s "rougeL" with its Porter stemmer: both texts are lower-cased, split into runs of
    [a-z0-9] (everything else separates tokens), the tokens stemmed; then with L = LCS length,
    P = L / |prediction| and R = L / |reference|, F = 2PR / (P + R). A text with no such token scores 0.
    The whole text is one sequence (not "rougeLsum", which splits it into sentences at newlines).
    """
    return _ROUGE_L.score(reference, prediction)["rougeL"].fmeasure


@dataclass(frozen=True)
class BleuChrf:
    """Corpus BLEU and chrF on sacrebleu's 0-100 scale, with the signatures that pin down their settings."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    n: int  # predictions scored


def bleu_chrf(predictions: Sequence[str], references: Sequence[str]) -> BleuChrf:
    """Corpus BLEU and chrF of ``predictions`` against one reference each (sacrebleu defaults: 13a tokeniser,
    exponential smoothing; chrF with character 6-grams, β = 2).

    Raises ValueError when the lists differ in length or are empty.
    """
    predictions, references = list(predictions), list(references)
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references; give one each")
    if not predictions:
        raise ValueError("no predictions to score")
    bleu, chrf = BLEU(), CHRF()
    return BleuChrf(bleu=bleu.corpus_score(predictions, [references]).score,
                    chrf=chrf.corpus_score(predictions, [references]).score,
                    bleu_signature=str(bleu.get_signature()), chrf_signature=str(chrf.get_signature()),
                    n=len(predictions))
