"""``gdrlab nccl``: run an all-reduce through NCCL and read which transport it chose.

``gdrlab nccl [--sizes ...] [--disable p2p,shm] [--compare]`` runs one process per GPU here;
``gdrlab nccl parse LOGFILE`` reads a saved ``NCCL_DEBUG=INFO`` log (or a recorded one by name);
``gdrlab nccl recorded`` shows the runs recorded on two NVLinked H200s.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._common import Subparsers, add_command, table

HELP = "NCCL all-reduce across the GPUs here, and which transport NCCL chose"
DESCRIPTION = ("Runs an all-reduce through NCCL (PyTorch, else CuPy) with one process per GPU and "
               "NCCL_DEBUG=INFO, reports bus bandwidth per size (nccl-tests' definition: "
               "busbw = algbw * 2(n-1)/n) and the transport NCCL chose for each pair of ranks, "
               "with the reasons found in its log. NVLink multicast (NVLS) is always off.")

# Log text is shown as data: control characters (escape codes, carriage returns) are escaped so a
# crafted log cannot drive the terminal; str.translate keeps a 10 MB line linear.
_ESCAPE_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c != 0x09}
RESULT_COLUMNS = ["size", "iters", "time_us", "algbw_gbps", "busbw_gbps", "verified"]
RUN_COLUMNS = ["name", "transport", "time_size", "time_us", "busbw_size", "busbw_gbps", "generation"]


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "nccl", HELP, DESCRIPTION)
    p.add_argument("--sizes", default="8,64K,1M,16M,256M", help="message sizes (default 8,64K,1M,16M,256M)")
    p.add_argument("--disable", default="", help="transports to switch off: p2p, shm, ib (comma separated)")
    p.add_argument("--compare", action="store_true",
                   help="run three times: default, p2p off, p2p and shm off, and compare")
    p.add_argument("--iters", type=int, default=None, help="timed all-reduces per size (default: by size)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a run may take (default 300)")
    p.add_argument("--save-log", default=None, metavar="FILE",
                   help="write the captured NCCL log here (with --compare: FILE.<name>)")
    sub2 = p.add_subparsers(dest="nccl_action", metavar="[parse LOGFILE | recorded]", required=False,
                            title="instead of a run (optional)")
    parse = sub2.add_parser("parse", help="read a saved NCCL_DEBUG=INFO log",
                            description="Which transport NCCL chose for each pair of ranks and why, from "
                                        "a log file or the name of a recorded log (see `gdrlab nccl recorded`).")
    parse.add_argument("logfile", metavar="LOGFILE")
    # SUPPRESS keeps `gdrlab nccl --json parse F` working: the parent's value is not overwritten
    parse.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="print one JSON document on stdout and nothing else")
    rec = sub2.add_parser("recorded", help="the runs recorded on two NVLinked H200s")
    rec.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                     help="print one JSON document on stdout and nothing else")
    return p


def _fmt(rows: list[dict[str, Any]], columns: list[str]) -> str:
    return table([{k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows], columns)


def _read_log(name: str) -> tuple[str, str]:
    from ..errors import InvalidArgument
    from ..nccl import recorded_logs

    path = Path(name)
    if path.is_file():
        return path.read_text(errors="replace"), str(path)
    recorded = recorded_logs()
    if name in recorded:
        return recorded[name].read_text(), f"recorded:{name}"
    raise InvalidArgument(f"no such log file: {name} (recorded logs: {', '.join(recorded)})")


def _print_parsed(parsed: dict[str, Any], explain_lines: list[str]) -> None:
    ver = parsed["version"] or "unknown version"
    print(f"NCCL {ver}, {parsed['nranks'] or '?'} ranks, {parsed['nnodes'] or '?'} node(s)")
    for line in explain_lines:
        print("  " + line.translate(_ESCAPE_CONTROLS))
    if parsed["results"]:
        print()
        print(_fmt(parsed["results"], ["op", "size", "time_us", "algbw_gbps", "busbw_gbps"]))


def _run_parse(args: argparse.Namespace) -> int:
    from ..nccl import explain, parse_log

    text, source = _read_log(args.logfile)
    parsed = parse_log(text)
    if args.json:
        from .. import provenance
        from ._common import emit_json
        # A log given as a file is recorded on hardware this command cannot name: the file says.
        prov = provenance.recorded(f"the machine that wrote {source}", file=source)
        if source.startswith("recorded:"):
            from ..nccl import recorded_summary
            prov = provenance.derived(recorded_summary()["provenance"], file=source)
        emit_json(dict(parsed, explain=explain(parsed), provenance=prov))
    else:
        print(f"{source}:")
        _print_parsed(parsed, explain(parsed))
    return 0


def _run_recorded(args: argparse.Namespace) -> int:
    from ..nccl import recorded_summary

    summary = recorded_summary()
    if args.json:
        from ._common import emit_json
        emit_json(summary)
        return 0
    print(_fmt(summary["runs"], RUN_COLUMNS))
    prov = summary["provenance"]
    print(f"\nrecorded {prov['date']} on {prov['hardware']}; {prov['software']}")
    return 0


def _save(path: str | None, log: str) -> None:
    if path:
        Path(path).write_text(log)
        print(f"gdrlab nccl: log written to {path}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "nccl_action", None)
    if action == "parse":
        return _run_parse(args)
    if action == "recorded":
        return _run_recorded(args)
    from .. import nccl

    disable = [d.strip() for d in args.disable.split(",") if d.strip()]
    kw = {"iters": args.iters, "timeout_s": args.timeout}
    if args.compare:
        if disable:
            from ..errors import InvalidArgument
            raise InvalidArgument("--compare chooses the disabled transports itself; drop --disable")
        out = nccl.compare(args.sizes, **kw)
        for name, one in out["runs"].items():
            _save(args.save_log and f"{args.save_log}.{name}", one.pop("log"))
        if args.json:
            from ._common import emit_json
            emit_json(out)
        else:
            print(_fmt(out["rows"], RUN_COLUMNS))
        return 0
    result = nccl.run_allreduce(args.sizes, disable, **kw)
    _save(args.save_log, result.pop("log"))
    if args.json:
        from ._common import emit_json
        emit_json(result)
        return 0
    print(_fmt(result["results"], RESULT_COLUMNS))
    print()
    parsed = result["parsed"]
    _print_parsed(dict(parsed, results=[], nranks=parsed["nranks"] or result["nranks"]), result["explain"])
    return 0
