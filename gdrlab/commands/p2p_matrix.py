"""``gdrlab p2p-matrix``: GPU-to-GPU bandwidth and latency for every pair, peer access on and off."""
from __future__ import annotations

import argparse
import sys

from ._common import Subparsers, add_command, emit_json

HELP = "GPU-to-GPU bandwidth and latency matrices (p2p and p2p-staged paths)"
DESCRIPTION = ("For every ordered pair of GPUs: cuDeviceCanAccessPeer, unidirectional and "
               "bidirectional bandwidth at the largest size and latency at the smallest size, "
               "with peer access on (p2p) and off (p2p-staged: the driver stages through host "
               "memory). Medians, like CUDA's p2pBandwidthLatencyTest. Needs two or more GPUs.")


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "p2p-matrix", HELP, DESCRIPTION)
    p.add_argument("--sizes", default="8,256M",
                   help="latency size and bandwidth size: the smallest and largest of the list (default 8,256M)")
    p.add_argument("--iters", type=int, default=None, help="timed copies per measurement (default: by size)")
    return p


def run(args: argparse.Namespace) -> int:
    from .. import provenance
    from ..errors import InvalidArgument, Unavailable
    from ..transfer import p2p
    from ..transfer.buffers import cuda_status, gpus, machine

    lat_size, bw_size = p2p.choose_sizes(args.sizes)
    if args.iters is not None and args.iters < 1:
        raise InvalidArgument("--iters must be at least 1")
    status = cuda_status()
    infos = gpus()
    try:
        p2p.require_gpus(len(infos), "" if status["usable"] else status["reason"])
    except Unavailable as exc:
        raise Unavailable(f"{exc}. Recorded on 2x H200 (NVLink): "
                          "gdrlab.recorded.load_document('h200x2-p2p-matrix')") from exc

    def progress(done: int, total: int, what: str) -> None:
        if not args.json or sys.stderr.isatty():
            print(f"[{done}/{total}] {what}", file=sys.stderr, flush=True)

    result = p2p.p2p_matrix(len(infos), p2p.live_measure(args.iters), p2p.live_can_access,
                            lat_size=lat_size, bw_size=bw_size, progress=progress,
                            provenance=provenance.live({"what": "gdrlab p2p-matrix",
                                                          "gpus": [g["name"] for g in infos]}, machine()))
    if args.json:
        emit_json(result)
    else:
        print(p2p.format_report(result))
    return 0
