"""Draft distillation: divergences on hand-made distributions, the reduced-vocabulary draft stays exact in the
verification loop, save/load, and a tiny end-to-end ``distill`` run."""
import json
import math

import pytest
import torch

from specrepro.decode.autoregressive import autoregressive_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.training.data import (ChatFormat, Example, chat_format, generate_data, generate_shard,
                                     generate_task_shard, task_kind)
from specrepro.training.draft import DistillConfig, distill
from specrepro.training.evaluate import data_agreement, teacher_forced_agreement
from specrepro.training.losses import DIVERGENCES, coarsen, fkl, jsd, rkl, tvd
from specrepro.engine.draft_model import draft_from_target, load_draft_model, save_draft
from specrepro.drafters import LMDrafter
from specrepro.engine.models import LoadedModel, check_pair, load_model, tiny_model
from specrepro.decode.speculative import speculative_generate
from tests.helpers import TINY_CHAT, TINY_OPENINGS

P = torch.tensor([0.5, 0.3, 0.2, 0.0])
Q = torch.tensor([0.25, 0.25, 0.25, 0.25])


def _kl(a, b):
    return sum(x * math.log(x / y) for x, y in zip(a, b) if x > 0)


@pytest.mark.parametrize("name", sorted(DIVERGENCES))
def test_divergence_zero_when_equal(name):
    p = torch.softmax(torch.randn(3, 7, generator=torch.Generator().manual_seed(0)), -1)
    assert torch.allclose(DIVERGENCES[name](p, p.log()), torch.zeros(3), atol=1e-6)


def test_divergence_known_values():
    p, q = P.tolist(), Q.tolist()
    m = [(x + y) / 2 for x, y in zip(p, q)]
    assert float(fkl(P, Q.log())) == pytest.approx(_kl(p, q), rel=1e-5)
    assert float(rkl(P, Q.log())) == pytest.approx(_kl(q, [max(x, 1e-12) for x in p]), rel=1e-5)  # p = 0: huge
    assert float(jsd(P, Q.log())) == pytest.approx(0.5 * _kl(p, m) + 0.5 * _kl(q, m), rel=1e-5)
    assert float(tvd(P, Q.log())) == pytest.approx(0.5 * sum(abs(x - y) for x, y in zip(p, q)))
    assert float(jsd(P, Q.log())) <= math.log(2)


def test_tvd_is_one_minus_acceptance_rate():
    g = torch.Generator().manual_seed(1)
    p = torch.softmax(3 * torch.randn(100, 9, generator=g), -1)
    q = torch.softmax(3 * torch.randn(100, 9, generator=g), -1)
    alpha = torch.minimum(p, q).sum(-1)  # α = Σ min(p, q)
    assert torch.allclose(tvd(p, q.log()), 1 - alpha, atol=1e-6)


def test_divergences_finite_gradients_with_zero_mass():
    """q = 0 where p = 0 (a token the draft cannot emit) must give finite losses and no NaN gradients."""
    p = torch.tensor([[0.6, 0.4, 0.0]])
    z = torch.tensor([[0.3, -0.2, float("-inf")]], requires_grad=True)
    for name, div in DIVERGENCES.items():
        loss = div(p, z.log_softmax(-1)).sum()
        loss.backward()
        assert torch.isfinite(loss), name
        assert not torch.isnan(z.grad).any(), name
        z.grad = None


def test_coarsen_moves_unkept_teacher_mass_to_rest():
    # V = 6, the draft keeps ids 0, 2, 4 (draft indices 0, 1, 2); teacher top-2 = ids 2 and 5 (5 is not kept).
    token_map = torch.tensor([0, 3, 1, 3, 2, 3])
    logq_kept = torch.tensor([[0.2, 0.5, 0.3]]).log()  # [1, N=3]
    p, logq = coarsen(logq_kept, token_map, torch.tensor([[2, 5]]), torch.tensor([[0.6, 0.3]]), torch.tensor([0.1]))
    assert torch.allclose(p, torch.tensor([[0.6, 0.0, 0.4]]))
    assert torch.allclose(logq.exp(), torch.tensor([[0.5, 0.0, 0.5]]), atol=1e-6)


def _tiny_draft(target, kept):
    return draft_from_target(target, torch.tensor(kept), n_layers=1).eval().requires_grad_(False)


def test_reduced_vocab_logits_and_exact_greedy():
    target = tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=2)
    kept = list(range(0, 64, 2))
    draft = _tiny_draft(target, kept)
    check_pair(LoadedModel("draft", draft, None), LoadedModel("target", target, None))
    logits = draft(torch.tensor([[1, 3, 4, 63]])).logits  # odd ids are not kept: they share the "other" row
    assert logits.shape == (1, 4, 64)
    outside = torch.ones(64, dtype=torch.bool)
    outside[kept] = False
    assert torch.isinf(logits[..., outside]).all() and (logits[..., outside] < 0).all()
    assert torch.isfinite(logits[..., kept]).all()

    prompt = [1, 5, 9, 12]
    ar = autoregressive_generate(target, prompt, DecodeConfig(method="ar", max_new_tokens=24, stop_at_eos=False))
    spec = speculative_generate(target, LMDrafter(draft), prompt,
                                DecodeConfig(max_new_tokens=24, gamma=4, stop_at_eos=False))
    assert spec.token_ids == ar.token_ids


def test_reduced_vocab_draft_proposes_only_kept_tokens():
    target = tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=2)
    kept = list(range(0, 64, 3))
    drafter = LMDrafter(_tiny_draft(target, kept))
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        prop = drafter.propose([1, 2, 3], 4, SamplingConfig(temperature=1.0), g)
        assert set(prop.tokens.tolist()) <= set(kept)
        outside = torch.ones(64, dtype=torch.bool)
        outside[kept] = False
        assert (prop.probs[:, outside] == 0).all()


def test_save_load_roundtrip(tmp_path):
    target = tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=2)
    draft = _tiny_draft(target, list(range(40)))
    save_draft(draft, tmp_path / "d", note="test")
    loaded, tok = load_draft_model(tmp_path / "d", dtype=torch.float32)
    ids = torch.tensor([[1, 2, 50, 7]])
    expect = draft.to(torch.bfloat16).float()(ids).logits  # the folder stores bf16 weights
    assert tok is None
    assert torch.allclose(loaded(ids).logits, expect, atol=1e-5, equal_nan=True)
    via_zoo_loader = load_model(str(tmp_path / "d"), dtype="fp32", device="cpu")
    assert via_zoo_loader.vocab_size == 64


def test_generate_shard_is_deterministic():
    target = tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=1)
    cfg = DistillConfig(gen_batch=4, user_max_new=6, answer_max_new=8, top_k=4, seed=3)
    chat = ChatFormat((1, 5, 6), 2, (7, 8))
    for index in (0, 1):  # greedy and sampled answers
        a, b = generate_shard(target, chat, cfg, index), generate_shard(target, chat, cfg, index)
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert a["has_row"].sum() > 0


def test_tiny_end_to_end_distill(tmp_path):
    target = LoadedModel("tiny", tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=1), None)
    cfg = DistillConfig(target="tiny", shards=2, task_shards=1, threads=1, gen_batch=8, user_max_new=8,
                        answer_max_new=12, top_k=8, n_layers=1, n_kept=40, steps=30, batch_size=8, lr=3e-3,
                        warmup=3, eval_max_new=12, cost_steps=3)
    chat = TINY_CHAT
    prompts = {"held-out": [[1, 5, 6, 9, 10, 2, 7, 8]]}
    rec = distill(cfg, tmp_path, target=target, chat=chat, eval_prompts=prompts, command=["test"],
                  openings=TINY_OPENINGS)
    for f in ("config.json", "training_record.json", "draft/model.safetensors", "draft/draft_config.json",
              "data/shard_00000.pt", "data/shard_00001.pt", "data/task_00000.pt"):
        assert (tmp_path / f).is_file(), f
    saved = json.loads((tmp_path / "training_record.json").read_text())
    assert saved["train"]["steps"] == 30 and saved["seed"] == 0 and saved["command"] == ["test"]
    assert rec["train"]["val_loss_after"] < rec["train"]["val_loss_before"]
    assert 0 <= rec["alpha"]["T=0"]["alpha"] <= 1 and 0 <= rec["alpha"]["T=1"]["alpha"] <= 1
    assert rec["cost"]["c"] > 0 and rec["data"]["teacher_rows"] > 0
    assert 0 <= rec["agreement"]["top1"] <= 1 and rec["agreement"]["positions"] == 12
    for part in ("held_out", "train"):
        on = rec["agreement_on_data"][part]
        assert 0 <= on["top1"] <= 1 and 0 <= on["overlap"] <= 1 and on["rows"] > 0
    # Resumable: a second run reuses every shard.
    again = distill(cfg.__class__(**{**cfg.to_dict(), "steps": 2}), tmp_path, target=target, chat=chat,
                    eval_prompts=prompts, command=["test"], openings=TINY_OPENINGS)
    assert again["data"]["shards_generated_now"] == 0
    assert again["machine"]["cpu"]["logical_cores"] >= 1 and again["machine"]["threads"] >= 1  # where it ran
    assert len(again["data"]["tokens_digest"]) == 64  # which conversations, token for token


def test_shipped_draft_loads_from_the_zoo():
    from specrepro.engine.models import ZOO, prepare
    folder = prepare("smollm2-135m-draft")  # shipped in the repo: a missing file must fail, not skip
    draft = load_model("smollm2-135m-draft", device="cpu")
    assert draft.vocab_size == 49152 and draft.tokenizer is not None
    record = json.loads((folder / "training_record.json").read_text())
    assert record["config"]["target"] == "smollm2-135m-instruct" and record["command"]
    assert record["config"] == DistillConfig().to_dict()  # the defaults are the shipped recipe
    assert (folder / "model.safetensors").stat().st_size < 50 * 2**20
    assert ZOO["smollm2-135m-draft"].folder is not None
    logits = draft.model(torch.tensor([[1, 2, 3]])).logits  # [1, 3, V]
    assert torch.isfinite(logits).sum(-1).eq(draft.model.n_kept).all()


@pytest.mark.parametrize("index", range(10))  # the five kinds, greedy then sampled answers
def test_task_shard_kinds(index):
    target = tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=1)
    cfg = DistillConfig(gen_batch=3, user_max_new=6, answer_max_new=8, article_max_new=7, top_k=4, seed=3)
    a, b = (generate_task_shard(target, TINY_CHAT, TINY_OPENINGS, cfg, index) for _ in range(2))
    assert all(torch.equal(a[k], b[k]) for k in a)  # deterministic
    kind = task_kind(index)
    assert a["tokens"].shape[0] == (6 if kind == "summarize" else 3)
    for s in range(a["tokens"].shape[0]):
        toks, rows = a["tokens"][s, : a["length"][s]].tolist(), a["has_row"][s, : a["length"][s]]
        assert toks[:3] == [1, 5, 6] and not rows[:3].any()  # the framing is given, not written
        if s < 3:  # an opening follows (given: no teacher row), then the target's own user turn
            n = 2 if toks[3] == 20 else 1
            assert toks[3: 3 + n] in ([20, 21], [22]) and not rows[3: 3 + n].any() and rows[3 + n]
        assert rows.sum() > 0
        headers = sum(toks[j: j + 2] == [7, 8] for j in range(len(toks)))
        assert headers == (2 if kind == "chat" else 1)
        # the teacher rows put their top-1 probability first and, with the tail mass, sum to 1
        probs = a["top_probs"][s][a["has_row"][s]].float()
        assert (probs[:, 0] >= probs[:, -1]).all()
        assert torch.allclose(probs.sum(-1) + a["tail"][s][a["has_row"][s]], torch.ones(int(rows.sum())), atol=2e-3)
    if kind == "summarize":  # the second conversation pastes the first one's article and asks for a summary
        for s in range(3):
            first = a["tokens"][s, : a["length"][s]].tolist()
            header = next(j for j in range(len(first)) if first[j: j + 2] == [7, 8])
            article = first[header + 2:]
            article = article[:-1] if article[-1] == 2 else article
            second = a["tokens"][3 + s, : a["length"][3 + s]].tolist()
            assert second[: 3 + len(article) + 4] == [1, 5, 6, *article, 30, 31, 32, 2]


def test_task_data_needs_openings_and_a_user_header(tmp_path):
    target = tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=1)
    cfg = DistillConfig(shards=0, task_shards=5, gen_batch=2, user_max_new=4, answer_max_new=4, top_k=4)
    with pytest.raises(ValueError, match="task openings"):
        generate_data(target, TINY_CHAT, cfg, tmp_path)
    with pytest.raises(ValueError, match="user_header"):
        generate_task_shard(target, ChatFormat((1, 5, 6), 2, (7, 8)), TINY_OPENINGS, cfg, 4)  # index 4: chat


def test_chat_format_of_the_offline_target():
    target = load_model("smollm2-135m-instruct", dtype="fp32", device="cpu")
    chat = chat_format(target)
    tok = target.tokenizer
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                                    {"role": "user", "content": "Bye"}], add_generation_prompt=True,
                                   tokenize=True, return_dict=False)
    hi, hello, bye = (tok(w, add_special_tokens=False)["input_ids"] for w in ("Hi", "Hello", "Bye"))
    built = [*chat.user_prefix, *hi, chat.end, *chat.assistant_header, *hello, chat.end, *chat.user_header, *bye,
             chat.end, *chat.assistant_header]
    assert list(text) == built


def test_teacher_forced_agreement():
    target = tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=1)
    other = tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=2)
    prompts = {"a": [[1, 5, 6, 9]], "b": [[3, 4], [7, 8, 9]]}
    same = teacher_forced_agreement(target, target, prompts, max_new=10, eos=set())
    assert same["positions"] == 30 and same["per_suite"]["b"]["positions"] == 20
    assert same["top1"] == 1.0 and same["overlap"] == pytest.approx(1.0, abs=1e-5)
    diff = teacher_forced_agreement(target, other, prompts, max_new=10, eos=set())
    assert diff["overlap"] < 0.9
    # Σ min(p, q) at one position, by hand
    seq = torch.tensor([[1, 5, 6, 9]])
    p, q = target(seq).logits[0, -1].softmax(-1), other(seq).logits[0, -1].softmax(-1)
    first = teacher_forced_agreement(target, other, {"a": [[1, 5, 6, 9]]}, max_new=1, eos=set())
    assert first["overlap"] == pytest.approx(float(torch.minimum(p, q).sum()), rel=1e-5)


def test_data_agreement_reads_the_teacher_rows():
    """Teacher rows copied from the draft itself: its argmax is the teacher's (top-1 = 1) and Σ min(p, q) over the
    stored top-k is the draft's own top-k mass; a teacher whose top-1 the draft cannot emit scores 0 there."""
    target = tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=1)
    draft = draft_from_target(target, torch.arange(0, 64, 2), n_layers=1)  # even ids kept
    tokens = torch.tensor([1, 5, 6, 9, 10, 2, 7, 8])
    with torch.no_grad():
        q = draft(input_ids=tokens[None]).logits[0].softmax(-1)  # [L, V]
    top = torch.topk(q, 4, dim=-1)  # [L, 4]
    shift = lambda x: torch.cat([x[:1] * 0, x[:-1]])  # row j holds the teacher for token j (predicted at j-1)
    has_row = torch.ones(len(tokens), dtype=torch.bool)
    has_row[0] = False
    own = Example(tokens, has_row, shift(top.indices), shift(top.values), shift(1 - top.values.sum(-1)))
    got = data_agreement(draft, [own], max_len=64)
    assert got["rows"] == len(tokens) - 1 and got["top1"] == 1.0
    assert got["overlap"] == pytest.approx(float(top.values[:-1].sum()) / (len(tokens) - 1), rel=1e-5)
    odd = torch.full_like(top.indices, 1) + 2 * torch.arange(4)  # odd ids: never kept, q = 0 there
    other = Example(tokens, has_row, shift(odd), shift(top.values), shift(1 - top.values.sum(-1)))
    assert data_agreement(draft, [other], max_len=64) == {"top1": 0.0, "overlap": 0.0, "rows": 7, "sequences": 1}


def test_the_engine_writes_each_row_as_greedy_decoding_alone_would_with_its_teacher_rows():
    """``generate_with_rows`` on the engine: prompts of unequal lengths in one batch; each row's tokens are batch-1
    greedy decoding's up to and including the stop id (then the row leaves), and each teacher row is the model's
    own top-k of its next-token distribution there; sampled rows repeat under the same global seed."""
    from specrepro.engine import engine_of
    from specrepro.training.data import generate_with_rows
    target = tiny_model(vocab_size=32, n_layers=2, hidden=32, seed=5)
    assert engine_of(target) is not None
    prompts = [[1, 2, 3], [4] * 11, [7, 8]]
    stop = generate_with_rows(target, prompts, max_new=12, temperature=0.0, stop=-1, top_k=4)[0][0][3]
    out = generate_with_rows(target, prompts, max_new=12, temperature=0.0, stop=stop, top_k=4)
    cfg = DecodeConfig(method="ar", max_new_tokens=12, sampling=SamplingConfig(temperature=0.0), seed=0)
    for prompt, (new, ids, probs) in zip(prompts, out):
        alone = autoregressive_generate(target, prompt, cfg, eos={stop}).token_ids
        assert new == alone and ids.shape == probs.shape == (len(new), 4)
        with torch.inference_mode():
            full = target(input_ids=torch.tensor([prompt + new])).logits[0, len(prompt) - 1:-1].float().softmax(-1)
        torch.testing.assert_close(probs, full.topk(4, dim=-1).values, atol=1e-5, rtol=1e-4)
    assert len(out[0][0]) == 4 and out[0][0][-1] == stop  # (row 0 stopped there, and left the batch)
    runs = []
    for _ in range(2):
        torch.manual_seed(3)
        runs.append([new for new, _, _ in generate_with_rows(target, prompts, 12, 1.0, stop=stop, top_k=4)])
    assert runs[0] == runs[1]
