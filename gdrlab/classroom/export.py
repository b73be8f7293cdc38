"""The class view's export: every stored result row, in the result schema's column names, with
the provenance a recorded dataset needs (machine fingerprint, measurement date, an anonymised
learner), as CSV (safe to open in a spreadsheet) or Parquet (pandas + pyarrow); and
:func:`read_export`, which reads either back into a DataFrame."""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

from . import schema
from .store import Store

__all__ = ["EXPORT_COLUMNS", "ExportError", "export_frame", "export_parquet_bytes", "export_rows_csv", "read_export"]


#: The columns of an export, in order (see :func:`read_export` for what each holds).
EXPORT_COLUMNS = ("learner_id", "learner", "learner_anon", "fingerprint", "lab", "date", "received", "hardware",
                  "provenance_kind", "provenance",
                  "path", "wire", "size", "iters", "lat_min_us", "lat_p50_us", "lat_p99_us", "lat_mean_us", "bw_gbps",
                  "verified", "chunk", "depth", "source")
_INTEGER = ("learner_id", "size", "iters", "chunk", "depth")
_FLOAT = ("lat_min_us", "lat_p50_us", "lat_p99_us", "lat_mean_us", "bw_gbps")
_TEXT = tuple(c for c in EXPORT_COLUMNS if c not in _INTEGER + _FLOAT + ("verified",))
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


class ExportError(ValueError):
    """A file :func:`read_export` cannot read as a class export; the message is one line."""


def _cell(value: Any) -> Any:
    """A CSV cell that no spreadsheet evaluates: text starting with = + - @ (or a tab/CR) gets a
    leading apostrophe (OWASP's CSV injection advice); numbers stay numbers."""
    if isinstance(value, str) and value[:1] in _FORMULA:
        return "'" + value
    return "" if value is None else value


def anon(learner_id: Any) -> str:
    """The anonymised name of a learner: their number in the class, nothing else."""
    return f"learner-{learner_id}"


def _lines(store: Store, anonymise: bool) -> list[dict[str, Any]]:
    out = []
    for r in store.rows_after(0):
        data, prov = r["data"], r["provenance"]
        date = prov.get("date") if isinstance(prov.get("date"), str) else None
        hardware = prov.get("hardware") if isinstance(prov.get("hardware"), str) else None
        out.append({**{c: data.get(c) for c in EXPORT_COLUMNS if c in data},
                    "learner_id": r["learner_id"], "learner": anon(r["learner_id"]) if anonymise else r["learner"],
                    "learner_anon": anon(r["learner_id"]), "fingerprint": r["fingerprint"], "lab": r["lab"],
                    "date": date or r["received"], "received": r["received"], "hardware": hardware,
                    "provenance_kind": prov.get("kind"), "provenance": schema.canonical(prov)})
    return out


def export_rows_csv(store: Store, anonymise: bool = False) -> str:
    """Every stored result row, one CSV line each, in the :data:`EXPORT_COLUMNS`."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(EXPORT_COLUMNS)
    for line in _lines(store, anonymise):
        w.writerow([_cell(line.get(c)) for c in EXPORT_COLUMNS])
    return buf.getvalue()


def _typed(df: Any) -> Any:
    import pandas as pd
    for c in _INTEGER:
        df[c] = pd.to_numeric(df[c], errors="coerce").round().astype("Int64")
    for c in _FLOAT:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    df["verified"] = df["verified"].map(_boolean).astype("boolean")
    for c in _TEXT:
        df[c] = df[c].astype("string")
    return df


def _boolean(v: Any) -> Any:
    import pandas as pd
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    return pd.NA


def export_frame(store: Store, anonymise: bool = False) -> Any:
    """Every stored result row as a DataFrame of the :data:`EXPORT_COLUMNS`, typed as
    :func:`read_export` returns them."""
    import pandas as pd
    df = pd.DataFrame(_lines(store, anonymise), columns=list(EXPORT_COLUMNS))
    return _typed(df)


def export_parquet_bytes(store: Store, anonymise: bool = False) -> bytes:
    """:func:`export_frame` as a Parquet file (pyarrow), in memory."""
    buf = io.BytesIO()
    export_frame(store, anonymise).to_parquet(buf, engine="pyarrow", index=False)
    return buf.getvalue()


def read_export(path: str | os.PathLike[str]) -> Any:
    """A class export (``gdrlab class export``, or the dashboard's export links), CSV or Parquet,
    read back as a DataFrame: one row per measured result row, in this order.

    ============================  ============================================================
    ``learner_id``  (Int64)       the learner's number in the class
    ``learner``     (string)      the name the learner joined with, or ``learner-N`` in an
                                  anonymised export
    ``learner_anon`` (string)     ``learner-N`` always: use it, not ``learner``, in a dataset
                                  that leaves the class
    ``fingerprint`` (string)      the machine (32 hex digits, :func:`gdrlab.classroom.client.
                                  fingerprint`): two learners on one node share it
    ``lab``         (string)      the lab the result was sent for (``<NA>`` when none was named)
    ``date``        (string)      when it was measured (ISO 8601, from the frame's provenance),
                                  else when the server received it
    ``received``    (string)      when the server stored it (ISO 8601, UTC)
    ``hardware``    (string)      the provenance's hardware line (GPU, PCIe link, driver, CPU)
    ``provenance_kind`` (string)  live, recorded, modelled or imported
    ``provenance``  (string)      the frame's whole provenance, canonical JSON
                                  (:mod:`gdrlab.provenance`)
    ``path`` ... ``source``       the result schema's columns (:data:`gdrlab.vocab.BENCH_COLUMNS`):
                                  ``path``, ``wire`` (string), ``size``, ``iters`` (Int64),
                                  ``lat_min_us``, ``lat_p50_us``, ``lat_p99_us``, ``lat_mean_us``,
                                  ``bw_gbps`` (float64, NaN when not measured), ``verified``
                                  (boolean), ``chunk``, ``depth`` (Int64), ``source`` (string)
    ============================  ============================================================

    The format is told by the file's first bytes (Parquet's ``PAR1``), not by its name. In a CSV
    export, text that a spreadsheet would evaluate was written with a leading apostrophe; it is
    read back without it. ``attrs["class_export"]`` holds the file and its format. Anything else
    raises :class:`ExportError` with one line.
    """
    import pandas as pd

    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise ExportError(f"{p}: cannot be read ({exc.strerror or exc})") from None
    if head == b"PAR1":
        fmt = "parquet"
        try:
            df = pd.read_parquet(p, engine="pyarrow")
        except ImportError:
            raise ExportError(f"{p}: reading Parquet needs pyarrow: pip install 'gdrlab[class]'") from None
        except Exception as exc:  # noqa: BLE001 - pyarrow's many error types, one line
            raise ExportError(f"{p}: not a readable Parquet file ({type(exc).__name__}: {exc})") from None
    else:
        fmt = "csv"
        try:
            df = pd.read_csv(p, dtype=str, keep_default_na=False, na_values=[""], encoding="utf-8")
        except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise ExportError(f"{p}: not a class export CSV ({type(exc).__name__}: {str(exc)[:200]})") from None
        for c in df.columns:
            df[c] = df[c].map(_unquote)
    missing = [c for c in EXPORT_COLUMNS if c not in df.columns]
    if missing:
        raise ExportError(f"{p}: not a class export: column{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(missing)} missing")
    df = _typed(df[list(EXPORT_COLUMNS)].copy())
    for i, text in enumerate(df["provenance"]):
        if text is pd.NA or not isinstance(json.loads(text) if _json_ok(text) else None, dict):
            raise ExportError(f"{p}: row {i + 1}: the provenance column is not a JSON object")
    df.attrs["class_export"] = {"path": str(p), "format": fmt}
    return df


def _json_ok(text: Any) -> bool:
    try:
        json.loads(text)
    except (TypeError, ValueError):
        return False
    return True


def _unquote(v: Any) -> Any:
    if isinstance(v, str) and len(v) > 1 and v[0] == "'" and v[1] in _FORMULA:
        return v[1:]
    return v
