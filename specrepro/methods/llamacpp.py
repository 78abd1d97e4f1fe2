"""llama.cpp's own decoders on the GGUF the zoo target is dequantised from (``peers.py``): baselines measured beside
ours on the same prompt ids and threads. They need the optional ``[peers]`` extra (llama-cpp-python). llama.cpp computes
in the GGUF's quantised types, so its tokens are its own: no counterpart of ours to reproduce token for token."""
from .base import Cost, Loop, Method

LLAMACPP_AR = Method("llamacpp-ar", Loop.LLAMA_CPP, Cost.PLAIN, document="baseline",
                     output="p of the GGUF (llama.cpp's quantised compute)",
                     summary="llama.cpp decoding the zoo target's GGUF (`bench` only, the `[peers]` extra); same prompt "
                             "ids and threads, its own tokens")
LLAMACPP_PROMPT_LOOKUP = Method("llamacpp-prompt-lookup", Loop.LLAMA_CPP, Cost.MODEL_FREE, document="baseline",
                                output="lossless for the GGUF's p (llama.cpp's quantised compute)",
                                summary="llama-cpp-python's prompt lookup (`LlamaPromptLookupDecoding`, γ drafts) on the "
                                        "same GGUF (`bench` only, the `[peers]` extra)")
