"""Measurements beside speed: the device profile (L_fp(n), β(n), c per dtype)."""
from .calibrate import get_profile, measure
from .profile import DtypeChoice, Latency, Profile, ProfileKey, choose_dtype, load_profile

__all__ = ["DtypeChoice", "Latency", "Profile", "ProfileKey", "choose_dtype", "get_profile", "load_profile",
           "measure"]
