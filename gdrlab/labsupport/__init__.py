"""Support code for the numbered labs: the logic their cells call, kept out of the notebooks.

Each lab has one module (``gdrlab.labsupport.lab03`` ...). This package holds what they share:
the quick-mode switch, optional imports that explain themselves, and provenance labels.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..widgets.plots import Ticks

__all__ = ["quick_mode", "optional_module", "provenance_label", "modelled_provenance", "profile_with_level",
           "nccl_log_lines",
           "SIZE_TICKS"]

# Tick labels for log-scaled size axes (bytes), so plots read "4K" rather than "4096".
SIZE_TICKS: Ticks = {"tickvals": [2 ** k for k in range(0, 31, 2)],
                     "ticktext": ["1", "4", "16", "64", "256", "1K", "4K", "16K", "64K", "256K", "1M", "4M",
                                  "16M", "64M", "256M", "1G"]}


def quick_mode() -> bool:
    """True under ``GDRLAB_QUICK=1`` or the nbgrader autograder: shrink sweeps, no widget loops
    (the same switch as :func:`gdrlab.widgets.quick_mode`)."""
    try:
        from ..widgets.quick import quick_mode as _quick
    except ImportError:  # widgets need the [lab] extra only for figures; the switch is plain
        quick = os.environ.get("GDRLAB_QUICK", "").strip().lower() not in ("", "0", "false", "no", "off")
        return quick or bool(os.environ.get("NBGRADER_EXECUTION"))
    return _quick()


def optional_module(name: str) -> tuple[ModuleType | None, str]:
    """Import ``name`` if it exists; ``(module, "")`` or ``(None, why it could not be imported)``."""
    try:
        return importlib.import_module(name), ""
    except ImportError as exc:
        return None, f"{name} is not available here ({exc})"


def provenance_label(prov: dict[str, Any] | None, fallback: str = "modelled") -> str:
    """The label of ``prov`` (:func:`gdrlab.provenance.label`, the one format), or ``fallback``
    when there is none."""
    from .. import provenance
    try:
        return provenance.label(prov)
    except ValueError:
        return fallback


def nccl_log_lines(name: str, keywords: tuple[str, ...]) -> tuple[list[str], str]:
    """Explained lines of a recorded ``NCCL_DEBUG=INFO`` log that mention any of ``keywords``,
    and the log's provenance label: ``(lines, label)``. Empty lines and the reason when the log
    or the reader is missing."""
    log, why = optional_module("gdrlab.nccl.log")
    if log is None:
        return [], why
    logs = log.recorded_logs()
    if name not in logs:
        return [], f"no recorded NCCL log named {name!r} (shipped: {', '.join(logs) or 'none'})"
    parsed = log.parse_log(logs[name].read_text(encoding="utf-8", errors="replace"))
    lines = [ln for ln in log.explain(parsed) if any(k.lower() in ln.lower() for k in keywords)]
    try:
        prov = log.recorded_summary().get("provenance")
    except Exception:  # the label is a courtesy; the lines stand on their own
        prov = None
    label = provenance_label(prov, "recorded") if isinstance(prov, dict) else "recorded"
    return lines, f"{label} ({name})"


def modelled_provenance(profile: str, **extra: Any) -> dict[str, Any]:
    """Provenance of a modelled table or figure: kind, profile and the profile's calibration
    ``level`` ("MPI" or "verbs"), so every label says which layer the numbers stand for."""
    from .. import model
    from ..errors import InvalidArgument

    from .. import provenance
    try:
        level = getattr(model.get_profile(profile), "level", None)
    except InvalidArgument:  # a label such as "lab 03 registration model" names no profile
        level = None
    return provenance.modelled(profile, level, **extra)


def profile_with_level(profile: str) -> str:
    """``"kepler-snb-2013 (MPI level)"``: a profile's name with its calibration level, for titles."""
    level = modelled_provenance(profile).get("level")
    return f"{profile} ({level} level)" if level else profile

