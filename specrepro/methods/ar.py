"""Autoregressive decoding: one target forward per token, the baseline every speedup is measured against."""
from .base import Cost, Loop, Method

AR = Method("ar", Loop.AR, Cost.PLAIN, document="all (baseline)", output="p",
           summary="one target forward per token: argmax, or sampling from the warped p")
