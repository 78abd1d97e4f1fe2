"""OpenVINO GenAI's own decoders on the zoo target exported to OpenVINO IR (``run/openvino_peer.py``): baselines
measured beside ours on the same prompt ids and threads. They need the optional ``[peers]`` extra (openvino-genai) and
the export (``make models PEERS=1``). OpenVINO computes in its own int4/int8 kernels, so its tokens are its own."""
from .base import Cost, Loop, Method

OPENVINO_AR = Method("openvino-ar", Loop.OPENVINO, Cost.PLAIN, document="baseline",
                     output="p of the exported IR (OpenVINO's int4/int8 compute)",
                     summary="OpenVINO GenAI's LLMPipeline decoding the zoo target exported to int4 IR (`bench` only, the "
                             "`[peers]` extra); same prompt ids and threads, its own tokens")
OPENVINO_PROMPT_LOOKUP = Method("openvino-prompt-lookup", Loop.OPENVINO, Cost.MODEL_FREE, document="baseline",
                                output="OpenVINO's greedy/sampled tokens of the IR's p (its verification kernels, not "
                                       "token for token its AR's)",
                                summary="OpenVINO GenAI's prompt lookup (`prompt_lookup=True`, γ drafts, n-grams up to 3) "
                                        "on the same IR (`bench` only, the `[peers]` extra)")
