"""Unigram and bigram drafts (the slides' Table 2): a table fitted on target-written text proposes (c = 0)."""
import dataclasses
from pathlib import Path

from ..drafters import NGramDrafter, NGramTable
from .base import Cost, Loop, Method, Needs


def table_drafter(order: int):
    def build(draft: NGramTable | str | Path, target, config) -> NGramDrafter:
        table = draft if isinstance(draft, NGramTable) else NGramTable.load(draft)
        if table.order < order:
            raise ValueError(f"a {'bigram' if order == 2 else 'unigram'} draft needs an order-{order} table, "
                             f"got a {table.name} table")
        # A bigram table carries its unigram counts, so one fitted file serves both methods.
        return NGramDrafter(dataclasses.replace(table, order=order))
    return build


UNIGRAM = Method("unigram", Loop.SPECULATIVE, Cost.MODEL_FREE, needs=Needs.NGRAM_TABLE, drafter=table_drafter(1),
                 drafter_type=NGramDrafter, document="slides",
                 summary="unigram draft (Table 3): `--ngram-table FILE`, an `.npz` of `drafters.ngram.fit_ngram` "
                         "(c = 0)")
BIGRAM = Method("bigram", Loop.SPECULATIVE, Cost.MODEL_FREE, needs=Needs.NGRAM_TABLE, drafter=table_drafter(2),
                drafter_type=NGramDrafter, document="slides",
                summary="bigram draft (Table 3): `--ngram-table FILE`, as unigram's (c = 0)")
