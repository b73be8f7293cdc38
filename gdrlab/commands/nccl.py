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

from .. import nccl, provenance
from ..errors import InvalidArgument
from ..nccl import explain, parse_log, plugin_logs, published_logs, recorded_logs, recorded_summary
from ._common import Subparsers, add_command, emit_json, table

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
    sub2 = p.add_subparsers(dest="nccl_action", metavar="[parse LOGFILE | recorded | versions]", required=False,
                            title="instead of a run (optional)")
    parse = sub2.add_parser("parse", help="read a saved NCCL_DEBUG=INFO log",
                            description="Which transport NCCL chose for each pair of ranks and why, from "
                                        "a log file or the name of a shipped log (default, p2p_off, "
                                        "p2p_shm_off, issue-707, ...: see `gdrlab nccl recorded`).")
    parse.add_argument("logfile", metavar="LOGFILE")
    # SUPPRESS keeps `gdrlab nccl --json parse F` working: the parent's value is not overwritten
    parse.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="print one JSON document on stdout and nothing else")
    ver = sub2.add_parser("versions", help="NCCL's GDR rule and log format by release (2.12-2.30), with sources",
                          description="What changed between NCCL releases in the GPUDirect RDMA decision and its "
                                      "log lines (path type numbers, default NCCL_NET_GDR_LEVEL, the sending side's "
                                      "rule, the per-pair line's level and subsystems, NCCL_IB_TIMEOUT, GIN), each "
                                      "with the source file and release tag it was read at.")
    ver.add_argument("--nccl-version", default=None, metavar="X.Y[.Z]",
                     help="the facts of one release (e.g. 2.28.9) instead of every change")
    vout = ver.add_mutually_exclusive_group()
    vout.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                      help="print one JSON document on stdout and nothing else")
    vout.add_argument("--csv", action="store_true", help="print the rows as CSV")
    rec = sub2.add_parser("recorded", help="the runs recorded on two NVLinked H200s, and the published logs")
    rec.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                     help="print one JSON document on stdout and nothing else")
    return p


def _fmt(rows: list[dict[str, Any]], columns: list[str]) -> str:
    return table([{k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows], columns)


RECORDED_PREFIX = "h200x2-nvlink-"


def _short_published(stem: str) -> str:
    """``nccl-issue-1151-gdr-distance`` -> ``issue-1151``: the NCCL issue the excerpt comes from."""
    parts = stem.split("-")
    if len(parts) >= 3 and parts[0] == "nccl" and parts[1] == "issue" and parts[2].isdecimal():
        return f"issue-{parts[2]}"
    return stem


def log_names() -> dict[str, tuple[Path, str]]:
    """Every name ``gdrlab nccl parse`` takes for a shipped log: ``{name: (path, source)}``. The
    recorded H200 runs answer to the names ``gdrlab nccl recorded`` lists (``default``) and their
    file names; the published excerpts to ``issue-NNN`` and their file names."""

    out: dict[str, tuple[Path, str]] = {}
    for stem, path in recorded_logs().items():
        short = stem.removeprefix(RECORDED_PREFIX)
        out[short] = out[stem] = (path, f"recorded:{short}")
    for stem, path in published_logs().items():
        short = _short_published(stem)
        out[short] = out[stem] = (path, f"published:{short}")
    for stem, path in plugin_logs().items():  # GIN and AWS OFI excerpts: by file name only
        out.setdefault(stem, (path, f"plugin:{stem}"))
    return out


def short_names() -> list[str]:
    """The short names, recorded runs first: what messages and listings show."""
    seen: list[str] = []
    for _, source in log_names().values():
        if source.startswith("plugin:"):
            continue  # listed apart: see plugin_names()
        short = source.split(":", 1)[1]
        if short not in seen:
            seen.append(short)
    return seen


def plugin_names() -> list[str]:
    """The shipped excerpts with GIN and AWS OFI plugin lines, by file name without ``.log``."""
    return list(plugin_logs())


def _read_log(name: str) -> tuple[str, str]:

    path = Path(name)
    if path.is_file():
        return path.read_text(errors="replace"), str(path)
    shipped = log_names()
    if name in shipped:
        found, source = shipped[name]
        return found.read_text(), source
    raise InvalidArgument(f"no such log file: {name} (shipped logs: {', '.join(short_names())}; "
                          f"GIN and AWS OFI excerpts: {', '.join(plugin_names())})")


_PLUGIN_ISSUES = {"nccl-issue-": "NVIDIA/nccl", "ofi-issue-": "aws/aws-ofi-nccl"}


def _plugin_provenance(source: str) -> dict[str, Any]:
    """An excerpt of ``plugins/``: the repository and issue its file name gives."""
    stem = source.split(":", 1)[1]
    for prefix, repo in _PLUGIN_ISSUES.items():
        issue = stem.removeprefix(prefix).split("-", 1)[0]
        if stem.startswith(prefix) and issue.isdecimal():
            return provenance.recorded(f"a user's machine, as posted in {repo} issue #{issue} "
                                       f"(https://github.com/{repo}/issues/{issue}); an excerpt, not measured by "
                                       "gdrlab", file=source)
    return provenance.recorded(f"a published log excerpt ({stem}); not measured by gdrlab", file=source)


def _published_provenance(source: str) -> dict[str, Any]:

    issue = source.split(":", 1)[1].removeprefix("issue-")
    return provenance.recorded(f"a user's machine, as posted in NVIDIA/nccl issue #{issue} "
                               f"(https://github.com/NVIDIA/nccl/issues/{issue}); an excerpt, not measured by gdrlab",
                               file=source)


def _print_parsed(parsed: dict[str, Any], explain_lines: list[str]) -> None:
    ver = parsed["version"] or "unknown version"
    print(f"NCCL {ver}, {parsed['nranks'] or '?'} ranks, {parsed['nnodes'] or '?'} node(s)")
    for line in explain_lines:
        print("  " + line.translate(_ESCAPE_CONTROLS))
    if parsed["results"]:
        print()
        print(_fmt(parsed["results"], ["op", "size", "time_us", "algbw_gbps", "busbw_gbps"]))


def _run_parse(args: argparse.Namespace) -> int:

    text, source = _read_log(args.logfile)
    parsed = parse_log(text)
    if args.json:
        # A log given as a file is recorded on hardware this command cannot name: the file says.
        prov = provenance.recorded(f"the machine that wrote {source}", file=source)
        if source.startswith("recorded:"):
            prov = provenance.derived(recorded_summary()["provenance"], file=source)
        elif source.startswith("published:"):
            prov = _published_provenance(source)
        elif source.startswith("plugin:"):
            prov = _plugin_provenance(source)
        emit_json(dict(parsed, explain=explain(parsed), provenance=prov))
    else:
        print(f"{source}:")
        _print_parsed(parsed, explain(parsed))
    return 0


def _run_recorded(args: argparse.Namespace) -> int:

    summary = recorded_summary()
    published = [{"name": source.split(":", 1)[1], "log": path.stem, "source": source}
                 for name, (path, source) in log_names().items()
                 if source.startswith("published:") and name == path.stem]
    plugins = [{"name": stem, "log": stem, "source": f"plugin:{stem}"} for stem in plugin_names()]
    if args.json:
        emit_json(dict(summary, published=published, plugin_excerpts=plugins))
        return 0
    print(_fmt(summary["runs"], RUN_COLUMNS))
    prov = summary["provenance"]
    print(f"\nrecorded {prov['date']} on {prov['hardware']}; {prov['software']}")
    if published:
        print("\nPublished excerpts with NCCL's GPUDirect RDMA decisions over InfiniBand (users' logs "
              "from NVIDIA/nccl issues, not measured here): " + ", ".join(p["name"] for p in published))
    if plugins:
        print("\nPublished excerpts with GIN (GPU-initiated networking) and AWS OFI (EFA) lines: "
              + ", ".join(p["name"] for p in plugins))
    print("\nRead any of them: gdrlab nccl parse NAME (e.g. gdrlab nccl parse "
          + (published[0]["name"] if published else "default") + ")")
    return 0


VERSION_COLUMNS = ["fact", "since", "until", "value", "source"]


def _version_rows(one: str | None) -> list[dict[str, Any]]:
    from ..nccl import versions
    if one is not None:
        f = versions.facts(one)
        return [{"fact": k, "since": None, "until": None, "value": _text(f[k]), "source": f["sources"][k]}
                for k in versions.TABLE]
    rows = []
    for name, changes in versions.TABLE.items():
        for i, (since, value, source) in enumerate(changes):
            later = [v for v in versions.known_versions() if i + 1 < len(changes) and v < changes[i + 1][0]]
            until = later[-1] if later else (versions.NEWEST if i + 1 == len(changes) else None)
            if name == "default_gdr_level":
                value = {"NCCL_NET_GDR_C2C=1": value[0], "NCCL_NET_GDR_C2C=0 or absent": value[1]}
            rows.append({"fact": name, "since": versions.format_version(since),
                         "until": versions.format_version(until) if until else None, "value": _text(value),
                         "source": source})
    return rows


def _text(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k} {_text(v)}" for k, v in value.items())
    if isinstance(value, (tuple, list)):
        return " ".join(_text(v) for v in value)
    return "none" if value is None else str(value)


def _run_versions(args: argparse.Namespace) -> int:
    import csv
    rows = _version_rows(args.nccl_version)
    if args.json:
        from ..nccl import versions
        emit_json({"rows": rows, "newest": versions.format_version(versions.NEWEST),
                   "facts": versions.facts(args.nccl_version) if args.nccl_version else None})
    elif args.csv:
        w = csv.DictWriter(sys.stdout, fieldnames=VERSION_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    else:
        cols = VERSION_COLUMNS if args.nccl_version is None else ["fact", "value", "source"]
        print(table(rows, cols))
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
    if action == "versions":
        return _run_versions(args)

    disable = [d.strip() for d in args.disable.split(",") if d.strip()]
    kw = {"iters": args.iters, "timeout_s": args.timeout}
    if args.compare:
        if disable:
            raise InvalidArgument("--compare chooses the disabled transports itself; drop --disable")
        out = nccl.compare(args.sizes, **kw)
        for name, one in out["runs"].items():
            _save(args.save_log and f"{args.save_log}.{name}", one.pop("log"))
        if args.json:
            emit_json(out)
        else:
            print(_fmt(out["rows"], RUN_COLUMNS))
        return 0
    result = nccl.run_allreduce(args.sizes, disable, **kw)
    _save(args.save_log, result.pop("log"))
    if args.json:
        emit_json(result)
        return 0
    print(_fmt(result["results"], RESULT_COLUMNS))
    print()
    parsed = result["parsed"]
    _print_parsed(dict(parsed, results=[], nranks=parsed["nranks"] or result["nranks"]), result["explain"])
    return 0
