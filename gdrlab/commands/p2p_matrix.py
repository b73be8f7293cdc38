"""``gdrlab p2p-matrix``: GPU-to-GPU bandwidth and latency for every pair, peer access on and off."""
from __future__ import annotations

import argparse
import sys

from ._common import Subparsers, add_command, emit_json, parse_whole

HELP = "GPU-to-GPU bandwidth and latency matrices (p2p and p2p-staged paths)"
DESCRIPTION = ("For every ordered pair of GPUs: cuDeviceCanAccessPeer, unidirectional and "
               "bidirectional bandwidth at the largest size and latency at the smallest size, "
               "with peer access on (p2p) and off (p2p-staged: the driver stages through host "
               "memory). Medians on the host clock, like CUDA's p2pBandwidthLatencyTest. Needs two "
               "or more GPUs; --diagonal also runs on one.")


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "p2p-matrix", HELP, DESCRIPTION)
    p.add_argument("--sizes", default="8,256M",
                   help="latency size and bandwidth size: the smallest and largest of the list (default 8,256M)")
    p.add_argument("--iters", default=None, help="timed copies per measurement (default: by size)")
    p.add_argument("--read", action="store_true",
                   help="the destination GPU runs each copy and reads the peer's memory (p2pBandwidthLatencyTest "
                        "--p2p_read); default: the source GPU runs it and writes the peer")
    p.add_argument("--engine", default="ce",
                   help="ce: copy engines (cuMemcpyPeerAsync); sm: the SM copy kernel on the GPU that runs the "
                        "copy (p2pBandwidthLatencyTest --sm_copy); with peer access off the copy engines stage "
                        "through host memory either way (default ce)")
    p.add_argument("--diagonal", action="store_true",
                   help="also each GPU copying its own memory (the sample's diagonal); runs on one GPU")
    p.add_argument("--bidir", action="store_true",
                   help="measure only the bidirectional bandwidth matrix (both directions at once, on two streams)")
    return p


def run(args: argparse.Namespace) -> int:
    from .. import provenance
    from ..errors import InvalidArgument, Unavailable
    from ..transfer import p2p
    from ..transfer.buffers import cuda_status, gpus, machine

    lat_size, bw_size = p2p.choose_sizes(args.sizes)
    iters = None if args.iters is None else parse_whole("--iters", args.iters, 1, 10_000_000)
    if args.engine not in p2p.ENGINES:
        raise InvalidArgument(f"--engine {args.engine!r}: valid values are {', '.join(p2p.ENGINES)}")
    status = cuda_status()
    infos = gpus()
    if not status["usable"] or not args.diagonal or not infos:
        try:
            p2p.require_gpus(len(infos), "" if status["usable"] else status["reason"])
        except Unavailable as exc:
            hint = " (--diagonal measures each GPU copying its own memory and runs on one GPU)" if infos else ""
            raise Unavailable(f"{exc}{hint}. Recorded on 2x H200 (NVLink): "
                              "gdrlab.recorded.load_document('h200x2-p2p-matrix')") from exc

    def progress(done: int, total: int, what: str) -> None:
        if not args.json or sys.stderr.isatty():
            print(f"[{done}/{total}] {what}", file=sys.stderr, flush=True)

    custom = args.read or args.engine != "ce"
    measure = p2p.copy_measure(args.engine, read=args.read, iters=iters) if custom else p2p.live_measure(iters)
    what = {"what": "gdrlab p2p-matrix", "gpus": [g["name"] for g in infos], "engine": args.engine,
            "issued_by": "destination GPU (reads the peer)" if args.read else "source GPU (writes the peer)"}
    result = p2p.p2p_matrix(len(infos), measure, p2p.live_can_access, lat_size=lat_size, bw_size=bw_size,
                            progress=progress, provenance=provenance.live(what, machine()), diagonal=args.diagonal,
                            only=["bidir_bw_gbps"] if args.bidir else None)
    result["engine"], result["read"] = args.engine, args.read
    if args.engine == "sm":
        result["notes"].append("peer access off: the SM copy kernel cannot reach the peer's memory, so those "
                               "copies are copy-engine copies staged through host memory (as the CUDA sample does)")
    if custom:
        result["notes"].append(f"copies by {'the SM copy kernel' if args.engine == 'sm' else 'the copy engines'}, "
                               f"issued by the {what['issued_by']}")
    if args.json:
        emit_json(result)
    else:
        print(p2p.format_report(result))
    return 0
