"""Bench records as paired matrices (specrepro.metrics.noise)."""
import pytest
import numpy as np

from specrepro.metrics.noise import mean_nll, run_matrix


def test_run_matrix_pairs_by_prompt_and_drops_empty_generations():
    records = [{"method": m, "repeat": r, "prompt_id": p, "nll_sum": s, "nll_tokens": n}
               for m, r, p, s, n in [("ar", 0, "b", 4.0, 2), ("ar", 0, "a", 3.0, 3), ("ar", 1, "a", 6.0, 3),
                                     ("ar", 1, "b", 2.0, 1), ("spec", 0, "a", 1.0, 1), ("spec", 0, "b", 0.0, 0),
                                     ("other", 0, "a", 9.0, 1)]]
    runs, prompts, x = run_matrix(records, ["spec", "ar"], mean_nll)
    assert runs == [("spec", 0), ("ar", 0), ("ar", 1)]
    assert prompts == ["a"]  # "b" has no NLL in spec's run (empty generation)
    np.testing.assert_allclose(x, [[1.0], [1.0], [2.0]])
    with pytest.raises(ValueError, match="no records"):
        run_matrix(records, ["ar", "missing"], mean_nll)
    assert mean_nll({"nll_sum": None, "nll_tokens": 0}) is None
