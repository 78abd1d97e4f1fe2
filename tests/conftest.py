import os

import pytest
import torch

# The engine's code runs eagerly in tests, set before any test module builds a model (tiny models would spend longer
# compiling than running; subprocesses inherit it): tests/test_engine.py compiles on purpose.
os.environ.setdefault("SPECREPRO_ENGINE_COMPILE", "0")

from specrepro.engine.models import tiny_model


@pytest.fixture(scope="session")
def tiny_pair():
    """A tiny random target p and a different tiny random draft q over the same 10-token vocabulary."""
    target = tiny_model(vocab_size=10, n_layers=2, hidden=32, seed=0)
    draft = tiny_model(vocab_size=10, n_layers=1, hidden=32, seed=1)
    return target, draft


@pytest.fixture(scope="session")
def tiny_pair_64():
    target = tiny_model(vocab_size=64, n_layers=2, hidden=32, seed=2)
    draft = tiny_model(vocab_size=64, n_layers=1, hidden=32, seed=3)
    return target, draft


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models are all framework overhead: a second thread only adds contention."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(autouse=True)
def _deterministic_threads():
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture(scope="module")
def bench_pair():
    """The benches' tiny pair: a 32-token target and its first layer as the draft (``layers:1``)."""
    from specrepro.engine.models import LoadedModel, layer_skip_draft
    target = LoadedModel("tiny", tiny_model(vocab_size=32, n_layers=2, hidden=16, seed=0), None)
    return target, LoadedModel("layers:1", layer_skip_draft(target.model, 1), None)


@pytest.fixture(scope="module")
def bench_table_path(tmp_path_factory):
    """A bigram table over the bench pair's 32 tokens, saved as the benches' --ngram-table file."""
    from specrepro.drafters import fit_ngram
    g = torch.Generator().manual_seed(0)
    table = fit_ngram(torch.randint(0, 32, (10, 10), generator=g).tolist(), 32, order=2)
    return str(table.save(tmp_path_factory.mktemp("ngram") / "bigram.npz"))

