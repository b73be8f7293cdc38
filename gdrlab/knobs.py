"""Every environment variable gdrlab reads, in one table: the engine's (``_native.KNOBS``, one
X-macro table in ``native/src/core/knobs.h``) and the package's own beside them (:data:`PACKAGE`).

Each knob is read under its own name first, then NCCL's where it has one, so a cluster's NCCL
settings apply unchanged. ``gdrlab doctor`` prints :func:`in_effect`; a test checks the table
against docs/cluster.md and the README (every knob documented, no documented knob missing).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from ._engine import native
from .errors import Unavailable

__all__ = ["Knob", "PACKAGE", "table", "in_effect"]


@dataclass(frozen=True)
class Knob:
    """One environment variable: ``name``, NCCL's name read after it (``""`` when none), the
    default in words, what it sets and who reads it (``engine`` or ``package``)."""

    name: str
    nccl: str
    default: str
    meaning: str
    reader: str


#: The variables the Python package reads itself.
PACKAGE: tuple[Knob, ...] = tuple(Knob(*row, "package") for row in (
    ("GDRLAB_TOKEN", "", "none", "the token for --peer and `gdrlab serve` (never shown in ps)"),
    ("GDRLAB_QUICK", "", "off", "labs: short sweeps (also set in a graded run)"),
    ("GDRLAB_WORKDIR", "", "~/gdrlab-labs", "where `gdrlab lab` puts the learner's copies"),
    ("GDRLAB_RECORDED_DIR", "", "the package's data/recorded", "more recorded datasets for gdrlab.recorded"),
    ("GDRLAB_MPI_HOST", "", "the route to rank 0", "bench --mpi: the address rank 1 listens on"),
    ("GDRLAB_CONFIG_DIR", "", "$XDG_CONFIG_HOME/gdrlab", "the class view's client settings (gdrlab class)"),
))


def table() -> tuple[Knob, ...]:
    """The engine's knobs (when the engine is built) and the package's."""
    try:
        engine = tuple(Knob(str(n), str(a), str(d), str(m), "engine") for n, a, d, m in native().KNOBS)
    except Unavailable:
        engine = ()
    return engine + PACKAGE


def in_effect(env: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """Each knob with the value in effect: ``{"name", "value", "set_by", "meaning", "reader"}``;
    ``set_by`` is the variable that supplied it (ours or NCCL's), ``""`` for the default."""
    e = os.environ if env is None else env
    out = []
    for k in table():
        set_by = next((n for n in (k.name, k.nccl) if n and e.get(n)), "")
        value = e[set_by] if set_by else f"({k.default})"
        if set_by and "TOKEN" in set_by:
            value = "set (not shown)"
        out.append({"name": k.name, "value": value, "set_by": set_by, "meaning": k.meaning, "reader": k.reader})
    return out
