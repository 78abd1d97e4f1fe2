"""transformers' own decoders on the same model, prompt ids and settings (``hf_baselines.py``): baselines measured
beside ours, each bound to reproduce one of our methods token for token at T = 0."""
from .base import Cost, Loop, Method, Needs

HF_AR = Method("hf-ar", Loop.TRANSFORMERS, Cost.PLAIN, counterpart="ar",
               document="baseline", summary="transformers' `generate` on the same model and prompt ids (`bench` "
                                            "only); must reproduce `ar` at T = 0")
HF_ASSISTED = Method("hf-assisted", Loop.TRANSFORMERS, Cost.DRAFT_MODEL, needs=Needs.DRAFT_MODEL,
                     counterpart="speculative", document="baseline",
                     summary="transformers' assisted generation (`bench` only); must reproduce `speculative` at T = 0")
HF_PROMPT_LOOKUP = Method("hf-prompt-lookup", Loop.TRANSFORMERS, Cost.MODEL_FREE, counterpart="prompt-lookup",
                          document="baseline", summary="transformers' prompt lookup decoding (`bench` only); must "
                                                    "reproduce `prompt-lookup` at T = 0")
