"""The one registry of builtin profiles: every name `gdrlab model --list` shows, in its order.

Most profiles are written in Python, each parameter with its source (:mod:`.catalog_classic`,
:mod:`.catalog_2026`); parameters that follow from a profile's own links and host class are filled
in by :mod:`.relations`. A profile fitted to recorded measurements is a data file written by its
calibration script (``h200-lab``: ``profiles/h200-lab.json``, by :mod:`.calibrate_h200`) and is
registered here by name like the others. Nothing outside this table is a builtin profile.

Where a value is not a published figure it says so ("assumed", "derived"). A derived value was
chosen so that the profile reproduces a published figure named in its source.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ..errors import InvalidArgument
from . import catalog_2026 as new
from . import catalog_classic as classic
from .relations import complete

__all__ = ["BUILTIN", "FITTED", "PROFILE_DIR", "names", "document"]

PROFILE_DIR = Path(__file__).with_name("profiles")

#: name -> a function building the profile's document (parameters as (value, source)).
BUILTIN: dict[str, Callable[[], dict]] = {
    "kepler-snb-2013": classic.kepler_snb,
    "kepler-ivb-2014": classic.kepler_ivb,
    "volta-dgx1": classic.volta_dgx1,
    "hopper-ndr": classic.hopper_ndr,
    "a100-hdr": new.a100_hdr,
    "gh200": new.gh200,
    "b200-xdr": new.b200_xdr,
    "l40s-pcie": new.l40s_pcie,
    "aws-p5-efa": new.aws_p5_efa,
}
#: name -> the data file a calibration script writes (fitted profiles).
FITTED: dict[str, str] = {"h200-lab": "h200-lab.json"}
#: The listing order.
_ORDER = ("kepler-snb-2013", "kepler-ivb-2014", "volta-dgx1", "hopper-ndr", "h200-lab", "a100-hdr", "gh200",
          "b200-xdr", "l40s-pcie", "aws-p5-efa")


def names() -> tuple[str, ...]:
    """Every builtin profile, in listing order."""
    return _ORDER


def document(name: str) -> dict:
    """The profile document of builtin ``name`` (``Profile.from_dict`` reads it)."""
    if name in FITTED:
        return json.loads((PROFILE_DIR / FITTED[name]).read_text())
    if name not in BUILTIN:
        raise InvalidArgument(f"unknown profile {name!r}; valid: {', '.join(names())}")
    return _as_doc(BUILTIN[name]())


def _as_doc(d: dict) -> dict:
    d = dict(d)
    topo = d.get("topology", {})
    nic: dict = next((v for v in topo.get("devices", {}).values() if v.get("kind") == "nic"), {})
    params = complete(d["params"], topo.get("host_class", "sapphire-rapids"), nic.get("link_layer", "InfiniBand"),
                      nic.get("mtu"))
    d["params"] = {k: {"value": float(v), "source": s} for k, (v, s) in params.items()}
    return d


def _check_registry() -> None:
    missing = [n for n in (*BUILTIN, *FITTED) if n not in _ORDER]
    if missing or len(set(_ORDER)) != len(BUILTIN) + len(FITTED):
        raise RuntimeError(f"catalog: profiles registered but not ordered (or the reverse): {missing or _ORDER}")


_check_registry()
