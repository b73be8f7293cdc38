"""``gdrlab bench``: measure a path over a wire."""
from __future__ import annotations

import sys

from ._common import add_json_flag, table

COLUMNS = ["path", "wire", "size", "iters", "lat_min_us", "lat_p50_us", "lat_p99_us", "bw_gbps", "verified"]


def add_parser(sub):
    p = sub.add_parser(
        "bench", help="measure latency and bandwidth of a transfer path",
        description="Ping-pong latency (half round trip) and streaming bandwidth of one path at each "
                    "size, verified. Without --peer a local `gdrlab serve` process is started.")
    p.add_argument("--path", default="host",
                   help="host, staged, shared, pipelined (tcp) or gdr (verbs); default host")
    p.add_argument("--wire", default="tcp", choices=["tcp", "verbs"], help="default tcp")
    p.add_argument("--sizes", default="8:1M", help="e.g. 8,4K,1M or a range 8:64M (powers of two); default 8:1M")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per size (default: by size)")
    p.add_argument("--mode", default="both", choices=["lat", "bw", "both"])
    p.add_argument("--peer", default=None, metavar="HOST:PORT", help="a running `gdrlab serve`")
    p.add_argument("--local-peer", default="auto", choices=["auto", "process", "thread"],
                   help="without --peer: the peer as a process or a thread of this process; auto (default): "
                        "process for host, thread for GPU paths (two processes time-slice one GPU)")
    p.add_argument("--token", default=None, help="token for --peer (default $GDRLAB_TOKEN)")
    p.add_argument("--chunk", default="256K", help="pipelined chunk size (default 256K)")
    p.add_argument("--depth", type=int, default=4, help="pipelined buffers in flight (default 4)")
    p.add_argument("--device", type=int, default=0, help="GPU for GPU paths (default 0)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds any blocking call may wait")
    p.add_argument("--mpi", action="store_true",
                   help="run as two MPI ranks (mpirun -n 2): rank 1 serves, rank 0 measures")
    add_json_flag(p)
    return p


def run(args) -> int:
    from ..units import format_size, parse_size

    chunk = parse_size(args.chunk)
    if args.mpi:
        from ..mpi import bench_mpi
        return bench_mpi(args, chunk)

    def progress(done, total, row):
        if sys.stderr.isatty() or not args.json:
            lat = row.get("lat_p50_us")
            bw = row.get("bw_gbps")
            print(f"[{done}/{total}] {format_size(row['size']):>6}  p50 {lat:9.2f} us  {bw:8.3f} GB/s",
                  file=sys.stderr, flush=True)

    from ..engine import bench
    df = bench(path=args.path, sizes=args.sizes, iters=args.iters, mode=args.mode, wire=args.wire,
               peer=args.peer, token=args.token, chunk=chunk, depth=args.depth, device=args.device,
               timeout_s=args.timeout, progress=progress, local_peer=args.local_peer)
    rows = df.to_dict(orient="records")
    if args.json:
        from ._common import emit_json
        emit_json({"rows": rows, "provenance": df.attrs.get("provenance", {})})
    else:
        print(table([{k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows], COLUMNS))
    return 0
