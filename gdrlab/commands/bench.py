"""``gdrlab bench``: measure a path over a wire."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Callable

from ..vocab import BENCH_MODES, BENCH_TABLE_COLUMNS, DEFAULT_CHUNK_BYTES, DEFAULT_PIPELINE_DEPTH, WIRES, paths_over
from ._common import Subparsers, add_command, emit_json, table

if TYPE_CHECKING:
    import pandas as pd

HELP = "measure latency and bandwidth of a transfer path"
DESCRIPTION = ("Ping-pong latency (half round trip) and streaming bandwidth of one path at each "
               "size, verified. Without --peer a local `gdrlab serve` process is started.")


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "bench", HELP, DESCRIPTION)
    p.add_argument("--path", default="host",
                   help=f"{', '.join(p for p in paths_over('tcp') if p in paths_over('verbs'))} (tcp and verbs), "
                        f"{', '.join(p for p in paths_over('verbs') if p not in paths_over('tcp'))} (verbs) or "
                        f"{', '.join(paths_over('none'))} (GPU to GPU, no wire); default host")
    p.add_argument("--wire", default=None, choices=list(WIRES), help="default tcp (GPU-to-GPU paths: none)")
    p.add_argument("--sizes", default="8:1M", help="e.g. 8,4K,1M or a range 8:64M (powers of two); default 8:1M")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per size (default: by size)")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations before each test (default: by size)")
    p.add_argument("--window", type=int, default=None,
                   help="bandwidth messages in flight (default: by size)")
    p.add_argument("--mode", default="both", choices=list(BENCH_MODES))
    p.add_argument("--peer", default=None, metavar="HOST:PORT", help="a running `gdrlab serve`")
    p.add_argument("--local-peer", default="auto", choices=["auto", "process", "thread"],
                   help="without --peer: the peer as a process or a thread of this process; auto (default): "
                        "process for host, thread for GPU paths (two processes time-slice one GPU)")
    p.add_argument("--token", default=None, help="token for --peer (default $GDRLAB_TOKEN)")
    p.add_argument("--chunk", default=None, help=f"pipelined chunk size (default {DEFAULT_CHUNK_BYTES >> 10}K)")
    p.add_argument("--depth", type=int, default=None,
                   help=f"pipelined buffers in flight (default {DEFAULT_PIPELINE_DEPTH})")
    p.add_argument("--device", type=int, default=0, help="GPU for GPU paths (default 0)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds any blocking call may wait")
    p.add_argument("--tclass", type=int, default=None,
                   help="verbs: GRH traffic class, e.g. 106 for DSCP 26 on lossless RoCE (default $GDRLAB_IB_TC, 0)")
    p.add_argument("--sl", type=int, default=None, help="verbs: InfiniBand service level 0..15 (default $GDRLAB_IB_SL, 0)")
    p.add_argument("--pkey-index", type=int, default=None,
                   help="verbs: index in the port's P_Key table (default $GDRLAB_IB_PKEY_INDEX, 0)")
    p.add_argument("--mpi", action="store_true",
                   help="run as two MPI ranks (mpirun -n 2): rank 1 serves, rank 0 measures")
    return p


def _progress(args: argparse.Namespace) -> Callable[[int, int, dict[str, Any]], None]:
    from ..units import format_size

    def progress(done: int, total: int, row: dict[str, Any]) -> None:
        if sys.stderr.isatty() or not args.json:
            print(f"[{done}/{total}] {format_size(row['size']):>6}  p50 {row['lat_p50_us']:9.2f} us  "
                  f"{row['bw_gbps']:8.3f} GB/s", file=sys.stderr, flush=True)
    return progress


def _print(df: pd.DataFrame, args: argparse.Namespace) -> None:
    rows = df.to_dict(orient="records")
    if args.json:
        emit_json({"rows": rows, "provenance": df.attrs.get("provenance", {})})
    else:
        print(table([{k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows],
                    list(BENCH_TABLE_COLUMNS)))


def _recorded_hint(path: str) -> str:
    """Where a path that cannot run here was recorded, so a newcomer still sees real numbers."""
    from .. import recorded

    name = f"h200-bench-{path}"
    if name in recorded.available():
        return f". Recorded on an H200: gdrlab.recorded.load('{name}')"
    return ""


def run(args: argparse.Namespace) -> int:
    from ..units import parse_size

    chunk = parse_size(args.chunk) if args.chunk is not None else None
    if (args.tclass, args.sl, args.pkey_index) != (None, None, None):
        from ..transfer.verbs_wire import apply_link_options
        apply_link_options(args.tclass, args.sl, args.pkey_index)
    if args.mpi:
        from ..transfer.mpi import bench_mpi
        status, df = bench_mpi(args, chunk, _progress(args))
        if df is not None:
            _print(df, args)
        return status

    from ..errors import Unavailable
    from ..transfer.driver import bench
    try:
        df = bench(path=args.path, sizes=args.sizes, iters=args.iters, mode=args.mode, wire=args.wire,
                   peer=args.peer, token=args.token, chunk=chunk, depth=args.depth, device=args.device,
                   window=args.window, warmup=args.warmup, timeout_s=args.timeout, progress=_progress(args),
                   local_peer=args.local_peer)
    except Unavailable as exc:
        if args.wire == "verbs":  # the recordings are tcp rows: no stand-in for a missing HCA
            raise
        raise Unavailable(f"{exc}{_recorded_hint(args.path)}") from exc
    _print(df, args)
    return 0
