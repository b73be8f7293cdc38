"""``gdrlab import FILE``: another tool's results as the rows ``gdrlab bench`` prints, with
``imported`` provenance and the unit conversions made."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from .. import imports
from ..vocab import BENCH_TABLE_COLUMNS
from ._common import Subparsers, add_command, emit_json, printable, table, utf8_text

HELP = "read perftest, nccl-tests, OSU, nvbandwidth or ucx_perftest output as bench rows"
DESCRIPTION = ("Read the text or JSON output of perftest (ib_*_bw, ib_*_lat, --out_json), nccl-tests "
               "(stdout or -J JSON), OSU (osu_latency, osu_bw, osu_bibw, osu_mbw_mr), nvbandwidth (stdout "
               "or -j) or ucx_perftest, or the class view's CSV/Parquet export, into the columns of "
               "`gdrlab bench` rows: size in bytes, one-way latency in microseconds, bandwidth in GB/s "
               "(10^9 bytes/s). Each tool's own units are converted (perftest MB/sec = 2^20 B/s, "
               "--report_gbits Gb/sec = 10^9 bit/s, OSU MB/s = 10^6 B/s, ucx_perftest MB/s = 2^20 B/s) "
               "and the output says what was converted. The tool is detected when --tool is not given.")


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "import", HELP, DESCRIPTION)
    p.add_argument("file", metavar="FILE", help="the tool's output (text or JSON), or a class export")
    p.add_argument("--tool", default=None, choices=list(imports.TOOLS), help="which tool wrote FILE (default: detect)")
    p.add_argument("--gbits", action="store_true",
                   help="perftest --out_json only: the run used --report_gbits (its JSON does not say)")
    p.add_argument("--csv", action="store_true", help="print the rows as CSV (notes go to stderr)")
    return p


def _records(df: Any) -> list[dict[str, Any]]:
    clean = df.astype(object).where(df.notna(), None)
    return [dict(r) for r in clean.to_dict(orient="records")]


def _say(prov: dict[str, Any]) -> list[str]:
    lines = [f"converted: {c}" for c in prov.get("converted") or []]
    return lines + [f"note: {n}" for n in prov.get("notes") or []]


def run(args: argparse.Namespace) -> int:
    utf8_text("FILE", args.file)
    df = imports.read(args.file, args.tool, gbits=args.gbits)
    prov = dict(df.attrs.get("provenance") or {})
    if args.json:
        emit_json({"tool": prov.get("tool"), "rows": _records(df), "provenance": prov,
                   "converted": prov.get("converted") or [], "notes": prov.get("notes") or []})
        return 0
    if args.csv:
        df.to_csv(sys.stdout, index=False)
        for line in _say(prov):
            print(printable(line, 300), file=sys.stderr)
        return 0
    rows = _records(df)
    extra = [c for c in df.columns if c not in BENCH_TABLE_COLUMNS and c in imports.EXTRA_SHOWN]
    cols = [c for c in BENCH_TABLE_COLUMNS if c in df.columns and df[c].notna().any()] + extra
    shown = [{k: (f"{v:.4g}" if isinstance(v, float) else printable(str(v), 60) if v is not None else None)
              for k, v in r.items()} for r in rows]
    print(table(shown, cols))
    print(printable(str(df["source"].iloc[0]), 200))
    for line in _say(prov):
        print(printable(line, 300))
    return 0
