"""Performance model of every transfer path, from named hardware profiles.

Predicts one-way latency (us) and streaming bandwidth (GB/s) against message size for the paths of
the kit (``host``, ``staged``, ``shared``, ``pipelined``, ``gdr``, ``gdrcopy``, ``p2p``,
``p2p-staged``), finds crossovers and the hybrid policy a library would derive, models BAR1 as a
limited resource, and fits profiles to measurements. Every result is labelled "modelled".

>>> from gdrlab import model
>>> model.crossover("kepler-snb-2013", "gdr", "pipelined")   # doctest: +SKIP
"""
from __future__ import annotations

from .bar1 import bar1_available_bytes, register_mr
from .fit import calibrate
from .core import (NETWORK_PATHS, PATHS, STAGES, WIRES, available_paths, bandwidth_gbps, default_paths, explain,
                   latency_us,
                   predict, predict_all, stage_us)
from .machine import explain_rows, machine_facts, profile_from_machine
from .params import LEVELS, PARAMS, PLACEMENTS, param_names, param_range
from .policy import CHUNK_NOTE, band_margin_us, crossings, crossover, hybrid_policy, ranges_of, settled_policy, step_bands
from .profile import Profile, borrow_nic, get_profile, profiles
from . import initiated, storage  # the storage route and GPU-initiated networking (own parameter tables)

__all__ = [
    "PATHS", "NETWORK_PATHS", "PLACEMENTS", "LEVELS", "STAGES", "WIRES", "PARAMS", "Profile", "profiles", "get_profile",
    "borrow_nic", "param_names", "param_range", "predict", "predict_all", "latency_us", "bandwidth_gbps", "stage_us",
    "available_paths", "default_paths", "explain", "crossover", "crossings", "CHUNK_NOTE", "hybrid_policy", "step_bands", "settled_policy", "ranges_of",
    "band_margin_us", "storage", "initiated", "register_mr", "profile_from_machine", "machine_facts", "explain_rows", "bar1_available_bytes", "calibrate",
]

