"""The measuring code of the figure notebooks, one module per study (issue 22, item 6: notebooks only orchestrate).

A notebook under ``notebooks/`` keeps its parameters cell, its provenance cell, the calls below and the saving of
its figures and tables; everything that measures or computes a number, and any figure longer than a few lines
(``*_figures`` below), lives here, where ``tests/studies/`` runs it on the tiny models of ``tests/helpers.py``.

- :mod:`.common`: the run-cache folder and bench runner every study shares, the per-variant summary rows, the
  paired tokens/s ratio and the prompt splits;
- :mod:`.trees`: tokens per tree-verifying call of a tree drafter, a tree bench's profile and measured speedups
  (Medusa and PPD notebooks);
- :mod:`.survey`: mentored decoding on real rows, staged/fused decoding, β against batch size (survey and
  mentored blogs);
- :mod:`.mjsd`: the MJSD paper's tables and figures (its printed numbers, the validation choice, the claims);
- :mod:`.ppd`: the PPD paper's tables and figures from the zoo records, the ablation records, a τ grid and one bench;
- :mod:`.medusa`: the Medusa tree-size study (Fig. 6, Fig. 8(a-c), Table 1 on our heads);
- :mod:`.eagle`: the EAGLE draft by draft position, tree shape and size, one interleaved bench and Fig. 7's memory;
- :mod:`.batch`: batched speculative decoding against batch size B, beside the survey's prediction from the measured
  β(B, γ+1) and α, and the MJSD paper's Table 1 claim on the same runs;
- :mod:`.slides`: the slides' Tables 2 and 3 on our pair, beside their printed rows;
- :mod:`.survey_figures`, :mod:`.ppd_figures`, :mod:`.mjsd_figures`, :mod:`.eagle_figures`: the figures (and closing
  summaries) of those notebooks, drawn from the study's tables; the notebook saves each with its footer;
- :mod:`.show`: how a notebook prints a table's rows under it (floats rounded, some columns picked).
"""
