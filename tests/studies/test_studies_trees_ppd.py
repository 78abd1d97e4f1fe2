"""specrepro.studies.trees and .ppd: measured tokens per tree-verifying call, and the PPD notebook's aggregates
over bench and training records."""
from __future__ import annotations

import pytest
import torch

from specrepro.bench import BenchPrompt
from specrepro.drafters.medusa import MedusaConfig, MedusaDrafter, MedusaHeads
from specrepro.studies import ppd
from specrepro.studies.trees import tree_tau

pytestmark = pytest.mark.usefixtures("one_thread")
RANKS = ((0.5, 0.2, 0.1, 0.05), (0.3, 0.15, 0.1, 0.05), (0.2, 0.1, 0.05, 0.05))


def medusa(model, tree_size):
    torch.manual_seed(0)
    heads = MedusaHeads(model.config.hidden_size, 3)
    config = MedusaConfig(hidden_size=model.config.hidden_size, num_heads=3, target="tiny", rank_probs=RANKS)
    return MedusaDrafter(heads.eval().requires_grad_(False), config, model.get_output_embeddings(), tree_size=tree_size)


def test_tree_tau_counts_tree_calls_only(tiny_pair_64):
    target, _ = tiny_pair_64
    prompts = [BenchPrompt("a", [1, 2, 3, 4]), BenchPrompt("b", [9, 8, 7])]
    tau = tree_tau(target, medusa(target, 4), prompts, max_new=8, gamma=3, seed=0, method="medusa")
    assert 1.0 <= tau <= 4.0  # at most the tree's depth (3) plus the target's own token
    with pytest.raises(ValueError):  # one token: the plain first step only, no tree was verified
        tree_tau(target, medusa(target, 4), prompts, max_new=1, gamma=3, seed=0, method="medusa")


def test_throughput_by_suite():
    records = [{"method": m, "prompt_id": pid, "new_tokens": 10, "wall_time_s": s}
               for m, pid, s in (("ar", "a", 1.0), ("ppd", "a", 0.5), ("ar", "b", 2.0), ("ppd", "b", 1.0),
                                 ("medusa", "a", 0.1))]
    table = ppd.throughput_by_suite(records, {"chat": ["a"], "math": ["b"]})
    assert table == [{"suite": "chat", "ar_tok_s": 10.0, "ppd_tok_s": 20.0, "ppd_speedup": 2.0},
                     {"suite": "math", "ar_tok_s": 5.0, "ppd_tok_s": 10.0, "ppd_speedup": 2.0}]


def test_mean_input_length_leaves_the_prefill_out():
    records = [{"method": "ppd", "input_lengths": [30, 4, 6]}, {"method": "ppd", "input_lengths": [20, 8]},
               {"method": "ar", "input_lengths": [25]}]
    assert ppd.mean_input_length(records, "ppd") == 6.0 and ppd.mean_input_length(records, "ar") == 1.0


def test_distance_accuracy_picks_the_printed_cells():
    record = {"held_out_topk_accuracy": {"distance_1": [0.4, 0.5, 0.6, 0.7, 0.8], "distance_2": [0.1, 0.2, 0.3, 0.35, 0.4]}}
    assert ppd.distance_accuracy(record) == {"@1 top-1": 0.4, "@1 top-5": 0.8, "@2 top-1": 0.1, "@2 top-5": 0.4}
