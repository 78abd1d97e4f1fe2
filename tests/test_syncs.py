"""Host syncs per speculative step, counted on the CPU (issue 38, item 6): what the step would make the host wait for
on a GPU. The counter (tests/syncs.py) tracks which tensors would live on the device; ``verify.to_host`` is the
download, counted once per call (on a CPU run it copies nothing, so the test counts it where it is called)."""
import collections

import pytest
import torch

import specrepro.decode.batched
import specrepro.core.verify
from specrepro.decode.batched import batched_generate
from specrepro.core.config import DecodeConfig, SamplingConfig
from specrepro.drafters import LMDrafter, PromptLookupDrafter
from specrepro.engine.models import tiny_model
from specrepro.decode.speculative import speculative_generate
from specrepro.core.verify import download, to_host
from tests.syncs import MARK, SyncCounter

pytestmark = pytest.mark.usefixtures("one_thread")
GAMMA = 4
T1 = SamplingConfig(temperature=1.0)
LOOPING = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7, 8, 9, 10, 11, 12, 5, 6]  # prompt lookup copies 4 tokens at every step
OURS = ("specrepro/core/verify.py", "specrepro/core/warping.py", "specrepro/acceptance/", "specrepro/decode/batched.py",
        "specrepro/decode/speculative.py")


@pytest.fixture(scope="module")
def target():
    return tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=2)


@pytest.fixture
def counter(target, monkeypatch):
    """A SyncCounter over the target; ``to_host`` counted as one download per call with device tensors, its
    results host tensors from then on."""
    counter = SyncCounter(target)

    def counted(tensors):
        out = to_host(tensors)
        if any(getattr(t, MARK, False) for t in tensors):
            counter.reads["specrepro/core/verify.py:to_host"] += 1
        host = [t.view(t.shape) for t in out]  # new tensor objects, so that the device ones keep their mark
        for t in host:
            setattr(t, MARK, False)
        return host

    monkeypatch.setattr(specrepro.core.verify, "to_host", counted)
    monkeypatch.setattr(specrepro.decode.batched, "to_host", counted)
    return counter


def one_step(counter, run, step=2):
    """The reads and uploads of the loop's ``step``-th step (1-based; step 1 also prefills)."""
    snaps = []
    with counter:
        run(lambda *args: snaps.append((counter.reads.copy(), counter.uploads.copy())))
    (r0, u0), (r1, u1) = snaps[step - 2], snaps[step - 1]
    return r1 - r0, u1 - u0


def ours(sites: collections.Counter) -> int:
    return sum(n for site, n in sites.items() if site.startswith(OURS))


def test_the_counter_counts_device_reads_and_uploads_only(target):
    with SyncCounter(target) as c:
        logits = target(torch.tensor([[1, 2, 3]])).logits[0]  # [3, V] from the device's weights
        p = logits.softmax(-1)
        int(p.argmax()), float(p[0, 0]), p[0].tolist(), bool(p.sum() > 0), p.cpu()
        host = torch.rand(4)
        int(host.argmax()), host.tolist()  # host reads: no sync
        host[0] = p[0, 0]  # a device value written to the host: a download
        host.to(p.device), torch.tensor([1, 2], device=p.device)
        torch.tensor([], device=p.device), torch.arange(3, device=p.device)  # nothing copied
    assert sum(c.reads.values()) == 6 and sum(c.uploads.values()) == 2


def test_download_is_exact_for_any_dtype_and_shape():
    ts = [torch.rand(3, 5), torch.arange(7), torch.rand(6, dtype=torch.float64)[::2], torch.tensor(True),
          torch.tensor([1, 2], dtype=torch.int16), torch.empty(0, 3), torch.rand(2, 3).t()]
    for t, back in zip(ts, download(ts)):
        assert back.dtype == t.dtype and back.shape == t.shape and torch.equal(back, t)
    assert all(a is b for a, b in zip(to_host(ts), ts))  # host tensors: nothing copied


def test_a_model_free_step_waits_twice(target, counter):
    """Prompt lookup (drafting on the host) at γ = 4, T = 1: the step's syncs are the kvcache's upload of its input
    ids (kvcache.py, one torch.tensor per forward) and verification's one download of p and the tokens; the
    rule's per-token reads run on the host."""
    config = DecodeConfig(max_new_tokens=12, gamma=GAMMA, sampling=T1, seed=0, stop_at_eos=False)
    drafter = PromptLookupDrafter()
    reads, uploads = one_step(counter, lambda on_step: speculative_generate(target, drafter, LOOPING, config,
                                                                          on_step=on_step))
    assert drafter.propose(LOOPING, GAMMA, T1, torch.Generator()).size == GAMMA  # a full chain was verified
    assert reads == {"specrepro/core/verify.py:to_host": 1}, reads
    assert sum(uploads.values()) <= 1, uploads  # the cache's, not ours
    assert sum(reads.values()) + sum(uploads.values()) <= 2


def test_a_draft_model_step_waits_once_to_verify_and_once_per_drafted_token(target, counter):
    """The draft is the target itself, so all γ = 4 drafts are accepted: the most per-token work a rule does. Ours:
    one wait per drafted token (``warping.sample``'s read of the token: the draft's next forward takes host ids)
    and one download to verify; the rest are the caches' uploads of input ids (kvcache.py)."""
    config = DecodeConfig(max_new_tokens=15, gamma=GAMMA, sampling=T1, seed=0, stop_at_eos=False)
    rec = []
    reads, uploads = one_step(counter, lambda on_step: rec.append(speculative_generate(
        target, LMDrafter(target), [1, 2, 3], config, on_step=on_step)))
    assert rec[0].accept_lengths[1] == GAMMA
    assert reads["specrepro/core/verify.py:to_host"] == 1
    assert sum(n for site, n in reads.items() if site.startswith("specrepro/core/warping.py")) == GAMMA
    assert ours(reads) == GAMMA + 1 and ours(uploads) == 0, (reads, uploads)


def test_a_batched_step_waits_once_per_draft_position_and_once_to_verify(target, counter):
    """B = 3 rows, a batched draft model at γ = 4: one download of every drafting row's q per draft position and one
    download of every row's p to verify, whatever B (before: one read per row and token)."""
    config = DecodeConfig(max_new_tokens=15, gamma=GAMMA, sampling=T1, seed=0, stop_at_eos=False)
    draft = tiny_model(vocab_size=64, n_layers=1, hidden=32, seed=3)
    counter.watch(draft)  # the draft's weights are on the device too
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8], [9, 10]]
    reads, uploads = one_step(counter, lambda on_step: batched_generate(
        target, lambda b: LMDrafter(draft), prompts, config, on_step=on_step))
    assert reads["specrepro/core/verify.py:to_host"] == GAMMA + 1
    assert ours(reads) == GAMMA + 1 and ours(uploads) == 0, (reads, uploads)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="reads the device's own sync warnings: a GPU run")
def test_on_a_gpu_our_part_of_a_step_waits_once():
    """The same prompt-lookup step on CUDA under ``torch.cuda.set_sync_debug_mode("warn")``: of the synchronising
    calls torch reports, those from our files (verification, warping, the rules, the loops) are the one download.
    The others (the caches' uploads, the Clock's) are printed for the GPU check's log."""
    import traceback
    import warnings
    model = tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=2).cuda()
    config = DecodeConfig(max_new_tokens=12, gamma=GAMMA, sampling=T1, seed=0, stop_at_eos=False)
    sites, snaps = collections.Counter(), []

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" in str(message):
            frames = [f for f in traceback.extract_stack() if "/specrepro/" in f.filename]
            sites[f"{frames[-1].filename.split('/specrepro/')[-1]}:{frames[-1].lineno}" if frames else "?"] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            speculative_generate(model, PromptLookupDrafter(), LOOPING, config,
                                 on_step=lambda *args: snaps.append(sites.copy()))
        finally:
            torch.cuda.set_sync_debug_mode(0)
    step = snaps[1] - snaps[0]
    print("syncs in one prompt-lookup step at gamma 4 on CUDA:", dict(step))
    assert sum(n for site, n in step.items() if site.startswith(tuple(s.removeprefix("specrepro/") for s in OURS))) <= 1
