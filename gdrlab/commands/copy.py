"""``gdrlab copy``: host<->GPU and GPU<->GPU copies by the copy engines or the SM copy kernel, timed
on the host clock and with CUDA events, every copy verified (nvbandwidth's questions)."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from .. import provenance
from ..errors import InvalidArgument
from ..transfer import copies
from ..transfer.copies import DIRECTIONS, ENGINES, PATTERNS, PEER_MODES
from ..units import format_size, parse_sizes
from ..vocab import MEMORY_KINDS
from ._common import Subparsers, add_command, emit_json, parse_whole, table

HELP = "host<->GPU and GPU<->GPU copies: copy engines or SM kernel, nvbandwidth's testcases"
DESCRIPTION = """\
Copies on this machine, as nvbandwidth measures them. Each sample queues the copies (one, two with
--bidir, one per GPU with --pattern), waits for all, and is timed twice: on the host clock (what an
application sees: queueing, copy, completion) and with CUDA events recorded on each copy's stream
around it (the GPU's own time: first start to last end of the copies one GPU runs; a copy run by
another GPU counts with its own time, as two GPUs' events do not compare). Bandwidth counts the bytes of every
copy of the sample (with --bidir both directions; nvbandwidth's CE bidirectional tests report the
measured direction only, about half). Every copy is verified: before a checked sample each
destination is overwritten, after it each must hold the source's pattern (outside the timed window).

nvbandwidth testcase of each mode (-t NAME; _ce or _sm from --engine):
  --dir h2d                      host_to_device_memcpy_ce / _sm
  --dir d2h                      device_to_host_memcpy_ce / _sm
  --dir h2d|d2h --bidir          host_to_device_bidirectional_memcpy_ce / device_to_host_bidirectional_memcpy_ce (/ _sm)
  --dir d2d, two GPUs            device_to_device_memcpy_write_ce (--read: _read_ce) (/ _sm)
  --dir d2d --bidir, two GPUs    device_to_device_bidirectional_memcpy_write_ce (--read: _read_ce) (/ _sm)
  --dir d2d, one GPU             none (p2pBandwidthLatencyTest's diagonal: a GPU to itself)
  --pattern host-to-all          host_to_all_memcpy_ce (--dir d2h: all_to_host_memcpy_ce), --bidir: _bidirectional_
  --pattern all-to-one           all_to_one_write_ce (--read: all_to_one_read_ce) (/ _sm)
host-to-all and all-to-one need two or more GPUs.

--engine sm runs a copy kernel written in PTX and embedded in the engine (16-byte vector loads and
stores in a grid-stride loop); it declares PTX ISA 6.0 and target sm_50, and the driver JIT-compiles
it for the GPU at first use (no CUDA toolkit is needed). SM copies reach pinned host memory and
peer GPUs' memory, not pageable memory."""


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "copy", HELP, DESCRIPTION)
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--dir", default="h2d", metavar="DIR", help=f"{', '.join(DIRECTIONS)} (default h2d)")
    p.add_argument("--engine", default="ce", help=f"{' or '.join(ENGINES)}: copy engines (cuMemcpy*Async) or the "
                   "SM copy kernel (default ce)")
    p.add_argument("--pattern", default="one-to-one", help=f"{', '.join(PATTERNS)} (default one-to-one)")
    p.add_argument("--bidir", action="store_true", help="both directions at once, each on its own stream")
    p.add_argument("--read", action="store_true",
                   help="d2d: the copy runs on the destination GPU (it reads the peer); default: on the source")
    p.add_argument("--src-mem", default=None, help=f"{', '.join(MEMORY_KINDS)}: the source's memory "
                   "(default pinned on the host end, device on a GPU end)")
    p.add_argument("--dst-mem", default=None, help="the destination's memory, as --src-mem")
    p.add_argument("--device", default="0", help="GPU of a host copy, source GPU of d2d, the one GPU of all-to-one")
    p.add_argument("--dst-device", default=None, help="destination GPU of a d2d copy (default: --device)")
    p.add_argument("--peer", default="auto", help=f"peer access between two GPUs: {', '.join(PEER_MODES)} "
                   "(default auto: on where cuDeviceCanAccessPeer allows it)")
    p.add_argument("--sizes", default="8:64M", help="e.g. 8,4K,1M or a range 8:64M (powers of two); default 8:64M")
    p.add_argument("--iters", default=None, help="timed samples per size (default: by size)")
    p.add_argument("--warmup", default=None, help="untimed samples before them (default: by iters)")
    p.add_argument("--check-every", default="1", help="verify every Nth sample and the last (default 1: every copy)")
    p.add_argument("--csv", action="store_true", help="rows as CSV on stdout (the same fields as --json's rows)")
    return p


def _choice(flag: str, value: str, valid: Iterable[str]) -> str:
    if value not in valid:
        raise InvalidArgument(f"{flag} {value!r}: valid values are {', '.join(valid)}")
    return value


COLUMNS = ["size", "iters", "host_lat_p50_us", "host_bw_gbps", "event_lat_p50_us", "event_bw_gbps", "checks"]


def run(args: argparse.Namespace) -> int:
    _choice("--dir", args.dir, copies.DIRECTIONS)
    _choice("--engine", args.engine, copies.ENGINES)
    _choice("--pattern", args.pattern, copies.PATTERNS)
    _choice("--peer", args.peer, copies.PEER_MODES)
    for flag, v in (("--src-mem", args.src_mem), ("--dst-mem", args.dst_mem)):
        if v is not None:
            _choice(flag, v, MEMORY_KINDS)
    if args.csv and args.json:
        raise InvalidArgument("--csv and --json exclude each other: pick one output")
    device = parse_whole("--device", args.device, 0, 63)
    dst_device = None if args.dst_device is None else parse_whole("--dst-device", args.dst_device, 0, 63)
    iters = None if args.iters is None else parse_whole("--iters", args.iters, 1, 10_000_000)
    warmup = None if args.warmup is None else parse_whole("--warmup", args.warmup, 0, 1_000_000)
    check_every = parse_whole("--check-every", args.check_every, 1, 10_000_000)
    if args.read and args.dir != "d2d":
        raise InvalidArgument("--read applies to GPU-to-GPU copies (--dir d2d)")
    n = len(parse_sizes(args.sizes))

    def progress(done: int, total: int, row: dict) -> None:
        if total > 1 and (not (args.json or args.csv) or sys.stderr.isatty()):
            print(f"[{done}/{total}] {format_size(row['size'])}B: host {row['host_bw_gbps']:.2f} GB/s, "
                  f"event {row['event_bw_gbps']:.2f} GB/s", file=sys.stderr, flush=True)

    df = copies.copy_sweep(args.dir, args.sizes, iters, engine=args.engine, pattern=args.pattern,
                           src_mem=args.src_mem, dst_mem=args.dst_mem, bidir=args.bidir, device=device,
                           dst_device=dst_device, read=args.read, warmup=warmup, check_every=check_every,
                           peer=args.peer, progress=progress if n > 1 else None)
    _print(args, df)
    return 0


def _print(args: argparse.Namespace, df: Any) -> None:
    first = df.iloc[0]
    timing = {"host": "host clock: queue every copy of the sample, wait for all (what an application sees)",
              "event": "CUDA events on each copy's stream around it (GPU time: first start to last end)"}
    if args.csv:
        df.to_csv(sys.stdout, index=False)
        return
    if args.json:
        emit_json({"timing": timing, "rows": df.to_dict(orient="records"), "provenance": df.attrs.get("provenance")})
        return
    what = f"{first['direction']} {first['pattern']}, engine {first['engine']}"
    what += ", bidirectional" if first["bidir"] else ""
    print(f"gdrlab copy: {what}; {first['src_mem']} -> {first['dst_mem']}; {int(first['copies'])} copies per sample")
    print(f"nvbandwidth testcase: {first['nvbandwidth'] or 'none'}")
    if first["engine"] == "sm":
        print(f"SM copy kernel: PTX ISA 6.0, target sm_50, JIT-compiled by the driver; "
              f"grid of {int(first['sm_blocks'])} x {int(first['sm_threads'])} threads at the first size")
    for key, text in timing.items():
        print(f"  {key}_*: {text}")
    rows = [{c: (f"{r[c]:.2f}" if isinstance(r[c], float) else r[c]) for c in COLUMNS} for r in
            df.to_dict(orient="records")]
    print(table(rows, COLUMNS))
    print(f"every copy verified: {bool(df['verified'].all())} ({int(df['checks'].sum())} checks); "
          f"source: {provenance.label(df.attrs.get('provenance'))}")
