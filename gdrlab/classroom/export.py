"""The class view's CSV export: every stored result row, in the result schema's column names,
with learner, machine fingerprint, lab and provenance; safe to open in a spreadsheet."""
from __future__ import annotations

import csv
import io
from typing import Any

from . import schema
from .store import Store

__all__ = ["EXPORT_COLUMNS", "export_rows_csv"]


EXPORT_COLUMNS = ("learner_id", "learner", "fingerprint", "lab", "received", "provenance_kind", "provenance",
                  "path", "wire", "size", "iters", "lat_min_us", "lat_p50_us", "lat_p99_us", "lat_mean_us", "bw_gbps",
                  "verified", "chunk", "depth", "source")


def _cell(value: Any) -> Any:
    """A CSV cell that no spreadsheet evaluates: text starting with = + - @ (or a tab/CR) gets a
    leading apostrophe (OWASP's CSV injection advice); numbers stay numbers."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return "" if value is None else value


def export_rows_csv(store: Store, anonymise: bool = False) -> str:
    """Every stored result row, one CSV line each, in the result schema's column names."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(EXPORT_COLUMNS)
    for r in store.rows_after(0):
        data = r["data"]
        prov = r["provenance"]
        line = {"learner_id": r["learner_id"], "learner": f"learner-{r['learner_id']}" if anonymise else r["learner"],
                "fingerprint": r["fingerprint"], "lab": r["lab"], "received": r["received"],
                "provenance_kind": prov.get("kind"), "provenance": schema.canonical(prov), **data}
        w.writerow([_cell(line.get(c)) for c in EXPORT_COLUMNS])
    return buf.getvalue()
