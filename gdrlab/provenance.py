"""Where a result came from: one builder, one label format, carried with the rows.

Every measured, recorded, modelled or imported DataFrame says whether its points are ``live``
(measured now, on this machine: :func:`live`), ``recorded`` (measured earlier on named hardware:
:func:`recorded`), ``modelled`` (:func:`modelled`) or ``imported`` (read from another tool's
output: :func:`imported`). Nothing else builds a provenance dict, and nothing else sets
``attrs["provenance"]`` (a test checks both). :func:`attach` keeps the full description in ``df.attrs["provenance"]`` and the label in a
``source`` column: ``pd.concat`` drops ``attrs`` whenever the frames differ, but the column
travels with each row, so a concatenation of live and recorded rows still says which is which
(``df.gdrlab.sources``).
"""
from __future__ import annotations

import datetime as _dt
import platform
from typing import Any

from ._version import __version__

__all__ = ["KINDS", "SOURCE_COLUMN", "live", "recorded", "modelled", "imported", "derived", "label", "attach",
           "of", "sources"]

KINDS = ("live", "recorded", "modelled", "imported")
#: The column :func:`attach` adds: the label of each row's provenance.
SOURCE_COLUMN = "source"


def _version() -> str:
    return __version__


def live(extra: dict[str, Any] | None = None, machine: dict[str, Any] | None = None) -> dict[str, Any]:
    """The provenance of a measurement made now on this machine: kind, host, UTC date and gdrlab
    version, then ``machine`` (what the engine says about the hardware, e.g. ``gpu`` and
    ``driver_version``: :func:`gdrlab.transfer.buffers.machine`), then ``extra``."""
    prov: dict[str, Any] = {
        "kind": "live",
        "host": platform.node(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gdrlab": _version(),
    }
    prov.update(machine or {})
    prov.update(extra or {})
    return prov


def recorded(hardware: str, date: str | None = None, **extra: Any) -> dict[str, Any]:
    """The provenance of a measurement made earlier: the hardware it ran on (one line a reader can
    check, e.g. "NVIDIA H200, PCIe Gen5 x16, driver 580.159.04"), the day, then ``extra`` (e.g.
    ``command``, ``file``)."""
    if not hardware:
        raise ValueError("recorded provenance names its hardware")
    prov: dict[str, Any] = {"kind": "recorded", "hardware": str(hardware)}
    if date:
        prov["date"] = str(date)
    prov.update(_checked(extra))
    return prov


def modelled(profile: str, level: str | None = None, **extra: Any) -> dict[str, Any]:
    """The provenance of numbers a model produced: the profile (or the model's name, e.g. "lab 03
    registration model"), its calibration level ("MPI", "verbs") where it has one, then ``extra``."""
    prov: dict[str, Any] = {"kind": "modelled", "profile": str(profile)}
    if level:
        prov["level"] = str(level)
    prov.update(_checked(extra))
    return prov


def imported(tool: str, version: str | None = None, *, options: str | None = None, host: str | None = None,
             **extra: Any) -> dict[str, Any]:
    """The provenance of rows read from another tool's output (perftest, nccl-tests, OSU,
    nvbandwidth, ucx_perftest): the tool, its version and options as its output states them, the
    host it ran on where given, then ``extra`` (e.g. ``file``, ``converted``: what units changed)."""
    prov: dict[str, Any] = {"kind": "imported", "tool": str(tool)}
    for key, value in (("version", version), ("options", options), ("host", host)):
        if value:
            prov[key] = str(value)
    prov.update(_checked(extra))
    return prov


def derived(data: Any, **extra: Any) -> dict[str, Any]:
    """A copy of ``data``'s provenance (a DataFrame or a provenance dict) for a table computed from
    it, with ``extra`` added; ValueError when ``data`` has none."""
    found = of(data)
    if found is None or found.get("kind") not in KINDS:
        raise ValueError("the data this is derived from carries no provenance")
    return {**found, **_checked(extra)}


def _checked(extra: dict[str, Any]) -> dict[str, Any]:
    if "kind" in extra or "source" in extra:
        raise ValueError("'kind' is the builder's and 'source' is the label column's: use hardware= or file=")
    return extra


def of(data: Any) -> dict[str, Any] | None:
    """The provenance dict of a DataFrame (``attrs``) or of a dict that is one; None if absent."""
    if isinstance(data, dict):
        return data
    attrs = getattr(data, "attrs", None)
    prov = attrs.get("provenance") if isinstance(attrs, dict) else None
    return prov if isinstance(prov, dict) else None


def label(prov: Any, short: bool = False) -> str:
    """A short human label: ``live on host (GPU)``, ``recorded on HW (date)``, ``modelled, profile X
    (MPI level)``, ``imported from perftest 6.28 (host)``.

    ``prov`` is a provenance dict or a DataFrame carrying one. ``short=True`` keeps the first two
    comma-separated parts of the hardware (for legends). ValueError when there is no provenance.
    """
    found = of(prov)
    if found is None or found.get("kind") not in KINDS:
        raise ValueError("no provenance: build it with gdrlab.provenance.live/recorded/modelled/imported and attach it")
    kind = found["kind"]
    if kind == "live":
        gpu = found.get("gpu")
        return f"live on {found.get('host') or 'this machine'}" + (f" ({gpu})" if gpu else "")
    if kind == "recorded":
        hw = str(found.get("hardware") or "unnamed hardware")
        if short:
            hw = ",".join(hw.split(",")[:2])
        date = str(found.get("date") or "")[:10]  # the day is enough for a legend
        return f"recorded on {hw}" + (f" ({date})" if date else "")
    if kind == "imported":
        tool = " ".join(str(found[k]) for k in ("tool", "version") if found.get(k))
        return f"imported from {tool or 'another tool'}" + (f" ({found['host']})" if found.get("host") else "")
    if found.get("fit"):   # a line someone fitted to measured points: not the kit's model
        return f"fitted by {found['fit']}"
    level = found.get("level")
    return f"modelled, profile {found.get('profile') or 'unnamed profile'}" + (f" ({level} level)" if level else "")


def attach(df: Any, prov: dict[str, Any], column: bool = True) -> Any:
    """Give ``df`` its provenance: ``attrs["provenance"]`` and, for frames of measured or modelled
    rows, a :data:`SOURCE_COLUMN` column holding :func:`label` on every row (``column=False`` for
    a table that is not rows of results, e.g. a topology matrix). Returns ``df``."""
    label(prov)  # refuses what is not a provenance of a known kind
    _register_accessor()
    df.attrs["provenance"] = dict(prov)
    if column:
        df[SOURCE_COLUMN] = label(prov)
    return df


def sources(df: Any) -> list[str]:
    """The distinct provenance labels of ``df``'s rows, in order of first appearance: from the
    :data:`SOURCE_COLUMN` column, else from ``attrs``; [] when neither says."""
    if SOURCE_COLUMN in getattr(df, "columns", ()):
        return list(dict.fromkeys(str(v) for v in df[SOURCE_COLUMN]))
    prov = of(df)
    return [label(prov)] if prov is not None else []


_registered = False


def _register_accessor() -> None:
    """``df.gdrlab.provenance`` and ``df.gdrlab.sources`` on every DataFrame (registered on first
    use, so importing gdrlab does not import pandas)."""
    global _registered
    if _registered:
        return
    import pandas as pd

    @pd.api.extensions.register_dataframe_accessor("gdrlab")
    class _GdrlabAccessor:
        def __init__(self, df: pd.DataFrame) -> None:
            self._df = df

        @property
        def provenance(self) -> dict[str, Any] | None:
            return of(self._df)

        @property
        def sources(self) -> list[str]:
            return sources(self._df)

    _registered = True
