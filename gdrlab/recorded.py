"""Recorded measurements shipped with gdrlab, and the choice between live and recorded data.

A recorded file lives in ``gdrlab/data/recorded/<name>.json`` and has the form::

    {"provenance": {"kind": "recorded", "hardware": "...", "date": "...", "command": "..."},
     "rows": [{...}, ...]}

(a doctor report carries ``"report": {...}`` instead of ``"rows"``). :func:`load` returns the rows
as a DataFrame whose ``attrs["provenance"]`` is the file's provenance, so every plot made from it
can say where its points came from. :func:`live_or_recorded` measures when the hardware exists and
otherwise falls back to a recorded file, saying in one line why.
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
from pathlib import Path
from typing import Any, Callable

from . import provenance as _provenance
from .errors import Unavailable

__all__ = [
    "RecordedDataMissing", "RecordedDataInvalid", "data_dir", "available", "load", "load_document",
    "load_report", "provenance_label", "LiveOrRecorded", "live_or_recorded",
]

_KINDS = _provenance.KINDS


class RecordedDataMissing(FileNotFoundError):
    """No recorded file of that name ships with this copy of gdrlab."""


class RecordedDataInvalid(ValueError):
    """A recorded file exists but does not have the documented form."""


def data_dir() -> Path:
    """The folder holding recorded files (``$GDRLAB_RECORDED_DIR`` overrides it, for tests)."""
    override = os.environ.get("GDRLAB_RECORDED_DIR")
    return Path(override) if override else Path(__file__).resolve().parent / "data" / "recorded"


def available() -> list[str]:
    """Names (without ``.json``) of the recorded files that ship here, sorted."""
    d = data_dir()
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


def _path(name: str) -> Path:
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise RecordedDataInvalid(f"recorded data names are plain file names like 'h200-bar1', got {name!r}")
    stem = name[:-5] if name.endswith(".json") else name
    path = data_dir() / f"{stem}.json"
    if not path.is_file():
        have = ", ".join(available()) or "none"
        raise RecordedDataMissing(f"no recorded data shipped for {stem!r} (looked for {path.name} in "
                                  f"gdrlab/data/recorded; shipped: {have})")
    return path


def load_document(name: str) -> dict:
    """The whole JSON document of a recorded file, checked for a provenance block."""
    path = _path(name)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordedDataInvalid(f"{path.name} is not valid JSON: {exc}") from exc
    prov = doc.get("provenance") if isinstance(doc, dict) else None
    if not isinstance(prov, dict) or prov.get("kind") not in _KINDS:
        raise RecordedDataInvalid(f"{path.name} needs a 'provenance' object whose 'kind' is one of "
                                  f"{', '.join(_KINDS)}")
    prov.setdefault("name", path.stem)
    return doc


def load(name: str) -> Any:
    """The ``rows`` of a recorded file as a DataFrame carrying its provenance (``attrs`` and the
    ``source`` column of :func:`gdrlab.provenance.attach`, which survives ``pd.concat``)."""
    import pandas as pd

    doc = load_document(name)
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise RecordedDataInvalid(f"{name!r} has no 'rows' list"
                                  + (" (it holds a report: use load_report)" if "report" in doc else ""))
    return _provenance.attach(pd.DataFrame(rows), doc["provenance"])


def load_report(name: str) -> dict:
    """The ``report`` of a recorded file (e.g. ``h200-doctor``), with its provenance added under
    the key ``"provenance"``."""
    doc = load_document(name)
    report = doc.get("report")
    if not isinstance(report, dict):
        raise RecordedDataInvalid(f"{name!r} has no 'report' object")
    out = dict(report)
    out["provenance"] = dict(doc["provenance"])
    return out


def provenance_label(prov: Any, short: bool = False) -> str:
    """A short human label: ``live on host (GPU)``, ``recorded on HW (date)``, ``modelled, profile X``
    (:func:`gdrlab.provenance.label`; ``prov`` is a provenance dict or a DataFrame carrying one)."""
    return _provenance.label(prov, short)


@dataclasses.dataclass
class LiveOrRecorded:
    """What :func:`live_or_recorded` found: ``data`` (DataFrame or None), ``source`` ("live",
    "recorded" or "none") and ``why`` (one line a learner can read)."""

    data: Any
    source: str
    why: str

    @property
    def label(self) -> str:
        """The provenance label of ``data`` (or ``why`` when there is none)."""
        return provenance_label(self.data) if self.data is not None else self.why

    def __repr__(self) -> str:
        rows = 0 if self.data is None else len(self.data)
        return f"<{self.source} data, {rows} rows: {self.why}>"


def live_or_recorded(measure_fn: Callable[[], Any] | None, recorded_name: str | None, *,
                     live: bool = True, why_not_live: str = "live measurement skipped") -> LiveOrRecorded:
    """Measure now if this machine can; otherwise load ``recorded_name``.

    ``measure_fn()`` returns a DataFrame (the engine's functions tag it as live). It may raise
    :class:`gdrlab.errors.Unavailable` (no GPU, no second GPU, ...): that reason becomes ``why``.
    ``live=False`` skips the measurement (no GPU here, or the autograder), and ``why_not_live``
    says why in ``why``. When neither works,
    ``source`` is ``"none"`` and ``data`` is None; the caller shows ``why`` instead of a plot.
    """

    reason = why_not_live
    if measure_fn is not None and live:
        try:
            df = measure_fn()
        except Unavailable as exc:
            reason = f"cannot measure here ({exc})"
        else:
            if hasattr(df, "attrs") and "provenance" not in df.attrs:
                _provenance.attach(df, _provenance.live(), column=False)
            return LiveOrRecorded(df, "live", f"measured now on {platform.node()}")
    if recorded_name is None:
        return LiveOrRecorded(None, "none", reason + "; no recorded data for this measurement")
    try:
        df = load(recorded_name)
    except RecordedDataMissing:
        return LiveOrRecorded(None, "none", f"{reason}; no recorded data shipped for {recorded_name!r}")
    return LiveOrRecorded(df, "recorded", f"{reason}; showing {provenance_label(df)}")
