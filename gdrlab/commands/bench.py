"""``gdrlab bench``: measure a path over a wire."""
from __future__ import annotations

import argparse
import os
import stat
import sys
from typing import TYPE_CHECKING, Any, Callable

from ..errors import GdrlabError, InvalidArgument
from ..topology import from_sysfs
from ..topology._tree import parse_cpulist
from ..transfer.lanes import Parity
from ..transfer.mpi_wire import from_options as mpi_wire_from_options
from ..transfer.stats import COLUMN_ANCHORS, PARITY_COLUMNS
from ..vocab import (
    BENCH_COLUMNS,
    BENCH_MODES,
    BENCH_TABLE_COLUMNS,
    DEFAULT_CHUNK_BYTES,
    DEFAULT_PIPELINE_DEPTH,
    MEMORY_KINDS,
    WIRES,
    path_info,
    paths_over,
)
from ._common import (
    Subparsers,
    add_command,
    emit_json,
    parse_decimal,
    parse_whole,
    printable,
    table,
    utf8_text,
)

if TYPE_CHECKING:
    import pandas as pd

HELP = "measure latency and bandwidth of a transfer path"
DESCRIPTION = ("Ping-pong latency (half round trip) and streaming bandwidth of one path at each "
               "size, verified. Without --peer a local `gdrlab serve` process is started. The token for "
               "--peer comes from --token-file FILE or $GDRLAB_TOKEN (neither shows in `ps`).")
MAX_TOKEN_BYTES = 256  # the engine's limit for the token in its HELLO frame (as `gdrlab serve`)
U32_MAX = 2**32 - 1  # counts cross into the engine as unsigned 32-bit integers
#: The whole-number options, their least and greatest values.
COUNTS = {"iters": (1, U32_MAX), "warmup": (0, U32_MAX), "window": (1, U32_MAX), "depth": (1, U32_MAX),
          "device": (0, U32_MAX), "streams": (1, 16), "qps": (1, 16)}


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "bench", HELP, DESCRIPTION)
    p.add_argument("--path", default="host",
                   help=f"{', '.join(p for p in paths_over('tcp') if p in paths_over('verbs'))} (tcp and verbs), "
                        f"{', '.join(p for p in paths_over('verbs') if p not in paths_over('tcp'))} (verbs) or "
                        f"{', '.join(paths_over('none'))} (GPU to GPU, no wire); default host")
    p.add_argument("--wire", default=None, choices=[*WIRES, "ucx", "mpi"],
                   help="default tcp (GPU-to-GPU paths: none); ucx: through UCX (gdrlab[ucx]); mpi: the MPI "
                        "library between two ranks of mpirun -n 2 (GPU memory needs a CUDA-aware MPI)")
    p.add_argument("--sizes", default="8:1M", help="e.g. 8,4K,1M or a range 8:64M (powers of two); default 8:1M")
    p.add_argument("--iters", default=None, help="timed iterations per size (default: by size)")
    p.add_argument("--warmup", default=None, help="untimed iterations before each test (osu -x; default: by size)")
    p.add_argument("--window", default=None,
                   help="bandwidth messages in flight (osu -W; default: by size)")
    p.add_argument("--mode", default="both", choices=list(BENCH_MODES))
    p.add_argument("--peer", default=None, metavar="HOST:PORT", help="a running `gdrlab serve`")
    p.add_argument("--local-peer", default="auto", choices=["auto", "process", "thread"],
                   help="without --peer: the peer as a process or a thread of this process; auto (default): "
                        "process for host, thread for GPU paths (two processes time-slice one GPU)")
    tok = p.add_mutually_exclusive_group()
    tok.add_argument("--token-file", metavar="FILE", default=None,
                     help="read the token for --peer from FILE (default: $GDRLAB_TOKEN)")
    tok.add_argument("--token", default=None,
                     help="the token for --peer on the command line: visible to every user in `ps`; "
                          "prefer --token-file or $GDRLAB_TOKEN")
    p.add_argument("--chunk", default=None, help=f"pipelined chunk size (default {DEFAULT_CHUNK_BYTES >> 10}K)")
    p.add_argument("--depth", default=None,
                   help=f"pipelined buffers in flight (default {DEFAULT_PIPELINE_DEPTH})")
    p.add_argument("--device", default="0", help="GPU for GPU paths (default 0)")
    p.add_argument("--timeout", default="10", help="seconds any blocking call may wait")
    p.add_argument("--tclass", default=None,
                   help="verbs: GRH traffic class, e.g. 106 for DSCP 26 on lossless RoCE (default $GDRLAB_IB_TC, 0)")
    p.add_argument("--sl", default=None, help="verbs: InfiniBand service level 0..15 (default $GDRLAB_IB_SL, 0)")
    p.add_argument("--pkey-index", default=None,
                   help="verbs: index in the port's P_Key table (default $GDRLAB_IB_PKEY_INDEX, 0)")
    p.add_argument("--explain", action="store_true",
                   help="beside each row: the model's prediction for this machine (from what `gdrlab doctor` "
                        "reads), the bottleneck and a verdict (normal, low with the likeliest causes, high)")
    p.add_argument("--mpi", action="store_true",
                   help="run as two MPI ranks (mpirun -n 2): rank 1 serves, rank 0 measures")
    _add_parity(p)
    return p


def _add_parity(p: argparse.ArgumentParser) -> None:
    """The options a perftest or OSU user looks for (each help names its counterpart)."""
    p.add_argument("--bidir", action="store_true",
                   help="bandwidth in both directions at once; bw_gbps counts both (perftest -b, osu_bibw; tcp)")
    p.add_argument("--rate", action="store_true",
                   help="add msg_rate_mps: messages per second with --window messages in flight "
                        "(osu_mbw_mr, perftest's MsgRate column)")
    p.add_argument("--duration", default=None, metavar="SECONDS",
                   help="time budget per size (like perftest -D; excludes --iters): a short probe times a "
                        "few iterations, then one warmed-up test runs as many as fill the budget; the p50 is "
                        "that test's")
    p.add_argument("--csv", action="store_true", help="rows as CSV on stdout (the same fields as --json's rows)")
    p.add_argument("--gbits", action="store_true",
                   help="add bw_gbits: bandwidth in Gb/s, 10**9 bits per second (perftest --report_gbits)")
    p.add_argument("--src-mem", default=None, choices=list(MEMORY_KINDS),
                   help="this side's message memory (tcp, verbs: the path's kind, pageable for host and "
                        "device for GPU paths, host also takes pinned; --wire ucx: what UCX can move)")
    p.add_argument("--dst-mem", default=None, choices=list(MEMORY_KINDS),
                   help="the peer's message memory (tcp, verbs: the peer allocates the path's kind, so only "
                        "that is accepted; --wire ucx: what UCX can move)")
    p.add_argument("--cpu-affinity", default=None, metavar="auto|LIST",
                   help="pin this process and the local peer to CPUs: auto (the NUMA node of the GPU, or of "
                        "the NIC for the verbs wire, from the topology) or a list such as 0-3,8")
    p.add_argument("--streams", default=None, metavar="N",
                   help="tcp: spread bandwidth over N connections (UCX's lanes); latency uses the first")
    p.add_argument("--qps", default=None, metavar="N",
                   help="verbs: spread bandwidth over N queue pairs, one session each (perftest -q)")


def _progress(args: argparse.Namespace) -> Callable[[int, int, dict[str, Any]], None]:
    from ..units import format_size

    def progress(done: int, total: int, row: dict[str, Any]) -> None:
        if sys.stderr.isatty() or not (args.json or getattr(args, "csv", False)):
            print(f"[{done}/{total}] {format_size(row['size']):>6}  p50 {row['lat_p50_us']:9.2f} us  "
                  f"{row['bw_gbps']:8.3f} GB/s", file=sys.stderr, flush=True)
    return progress


EXPLAIN_COLUMNS = ("model_lat_us", "model_bw_gbps", "bottleneck", "verdict", "likely_causes")


def _explained(df: pd.DataFrame, device: Any) -> pd.DataFrame:
    """``df`` with the model of this machine beside each row (works without a GPU: host rows)."""
    from ..model import explain_rows, profile_from_machine

    try:
        dev = int(device)
    except (TypeError, ValueError):
        dev = 0
    prof = profile_from_machine(device=dev)
    out = explain_rows(df, prof)
    out.attrs = {**df.attrs, "model_profile": prof.name, "model": prof.description}
    return out


def _columns(names: list[str]) -> list[dict[str, str]]:
    """Each row field with its unit, meaning and the perftest/OSU option or column it matches."""
    known = {c.name: (c.unit, c.meaning) for c in BENCH_COLUMNS}
    known.update({n: (u, m) for n, u, m in PARITY_COLUMNS})
    out = []
    for n in names:
        unit, meaning = known.get(n, ("", ""))
        anchor = COLUMN_ANCHORS.get(n, {})
        out.append({"name": n, "unit": unit, "meaning": meaning, "perftest": anchor.get("perftest", ""),
                    "osu": anchor.get("osu", "")})
    return out


def _print_csv(df: pd.DataFrame) -> None:
    import csv
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(list(df.columns))
    for r in df.itertuples(index=False):
        w.writerow(["" if isinstance(v, float) and v != v else v for v in r])


def _print(df: pd.DataFrame, args: argparse.Namespace) -> None:
    if getattr(args, "explain", False):
        df = _explained(df, getattr(args, "device", 0))
    rows = df.to_dict(orient="records")
    if getattr(args, "csv", False):
        _print_csv(df)
    elif args.json:
        extra = {"model": df.attrs["model"]} if "model" in df.attrs else {}
        notes = {"notes": args.notes} if getattr(args, "notes", None) else {}
        emit_json({"rows": rows, "provenance": df.attrs.get("provenance", {}), **extra,
                   "columns": _columns(list(df.columns)), **notes})
    else:
        cols = list(BENCH_TABLE_COLUMNS) + [n for n, _, _ in PARITY_COLUMNS if n in df.columns] + (
            [c for c in EXPLAIN_COLUMNS if c in df.columns] if getattr(args, "explain", False) else [])
        print(table([{k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows], cols))


def _recorded_hint(path: str) -> str:
    """Where a path that cannot run here was recorded, so a newcomer still sees real numbers."""
    from .. import recorded

    name = f"h200-bench-{path}"
    if name in recorded.available():
        return f". Recorded on an H200: gdrlab.recorded.load('{name}')"
    return ""


def _sizes(flag: str, text: str) -> list[int]:
    """The sizes written for ``flag``; InvalidArgument naming it otherwise."""
    from ..units import parse_sizes
    try:
        return parse_sizes(text)
    except ValueError as exc:
        raise InvalidArgument(f"{flag}: {exc}") from None


def check_numbers(args: argparse.Namespace) -> int | None:
    """Turn every number the user wrote into one (``args`` in place), refusing anything but ASCII
    digits with one line naming the flag; returns --chunk in bytes (None: the default)."""
    for name, (lo, hi) in COUNTS.items():
        if getattr(args, name) is not None:
            setattr(args, name, parse_whole(f"--{name}", getattr(args, name), lo, hi))
    from ..transfer.peers import MAX_TIMEOUT_S
    args.timeout = parse_decimal("--timeout", args.timeout, 0, MAX_TIMEOUT_S)
    args.sizes = _sizes("--sizes", args.sizes)
    if args.chunk is None:
        return None
    chunk = _sizes("--chunk", args.chunk)
    if len(chunk) != 1:
        raise InvalidArgument(f"--chunk takes one size, got {printable(args.chunk, 40)}")
    return chunk[0]


def check_peer(peer: str) -> None:
    """--peer is HOST:PORT (or [v6]:PORT) with a port of ASCII digits 1..65535."""
    utf8_text("--peer", peer)
    host, sep, port = peer.rpartition(":")
    if not sep or not host.strip("[]"):
        raise InvalidArgument(f"--peer must be HOST:PORT, got {printable(peer, 80)}")
    parse_whole("--peer port", port, 1, 65535)


def resolve_token(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """(token for the driver, warnings) from --token-file, --token or $GDRLAB_TOKEN (None: the
    driver reads $GDRLAB_TOKEN itself); one clear line for a token that cannot be used. Unlike
    `gdrlab serve`, --token is warned about on loopback too: every user of a shared machine reaches
    127.0.0.1 and can read the command line."""
    warnings: list[str] = []
    token: str | None
    if args.token_file is not None:
        path = printable(args.token_file)
        where = f"--token-file {path}"
        try:  # O_NONBLOCK: a FIFO named here must not hang the command before it is refused
            with open(os.open(args.token_file, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
                mode = os.fstat(f.fileno()).st_mode
                if not stat.S_ISREG(mode):
                    raise InvalidArgument(f"{where}: not a regular file")
                raw = f.read(MAX_TOKEN_BYTES + 2)
        except OSError as exc:
            raise InvalidArgument(f"{where}: {exc.strerror}") from None
        if mode & 0o077:
            warnings.append(f"--token-file {path} can be read by other users: chmod 600 {path}")
        try:
            token = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise InvalidArgument(f"{where}: the token is not valid UTF-8 text") from None
        if not token:
            raise InvalidArgument(f"{where} holds no token (it is empty or only whitespace): write the "
                                  "server's token into it")
    elif args.token is not None:
        token, where = utf8_text("--token", args.token), "--token"
        warnings.append("--token puts the secret on the command line, where every user of this machine "
                        "can read it (ps, /proc/PID/cmdline): use --token-file FILE or $GDRLAB_TOKEN")
    elif args.peer is not None:
        where = "$GDRLAB_TOKEN"
        if len(utf8_text(where, os.environ.get("GDRLAB_TOKEN", "")).encode("utf-8")) > MAX_TOKEN_BYTES:
            raise InvalidArgument(f"{where}: a token of more than {MAX_TOKEN_BYTES} bytes is refused")
        return None, warnings
    else:
        return None, warnings
    if len(token.encode("utf-8")) > MAX_TOKEN_BYTES:
        raise InvalidArgument(f"{where}: a token of more than {MAX_TOKEN_BYTES} bytes is refused")
    return token, warnings


def _parity(args: argparse.Namespace) -> Any:
    """The parity options as the driver takes them; one line for a combination that cannot be."""
    if args.csv and args.json:
        raise InvalidArgument("--csv and --json exclude each other: pick one output")
    if args.streams is not None and (args.wire or "tcp") != "tcp":
        raise InvalidArgument(f"--streams spreads bandwidth over tcp connections; on the {args.wire} wire "
                              + ("use --qps" if args.wire == "verbs" else "there is one lane"))
    if args.qps is not None and args.wire != "verbs":
        raise InvalidArgument("--qps spreads bandwidth over verbs queue pairs: add --wire verbs (tcp: --streams)")
    if args.mpi and (args.bidir or args.streams or args.qps):
        raise InvalidArgument("--bidir, --streams and --qps are not run between MPI ranks yet: leave out --mpi")
    duration = None if args.duration is None else parse_decimal("--duration", args.duration, 0, 3600)
    if duration is not None and duration <= 0:
        raise InvalidArgument("--duration must be more than 0 seconds")
    return Parity(bidir=args.bidir, rate=args.rate, duration=duration, lanes=args.streams or args.qps or 1,
                  src_mem=args.src_mem, dst_mem=args.dst_mem, gbits=args.gbits)


def pin_cpus(text: str, path: str, wire: str | None, device: Any) -> tuple[list[int], str]:
    """Pins this process (and so the local peer it starts, which inherits the mask) to CPUs:
    ``auto`` (the NUMA node of the GPU, or of the nearest NIC, from the topology) or a list such as
    ``0-3,8``. Returns (the CPUs, a note saying why); one line when it cannot."""
    allowed = os.sched_getaffinity(0)
    if text != "auto":
        try:
            cpus = parse_cpulist(utf8_text("--cpu-affinity", text))
        except ValueError as exc:
            raise InvalidArgument(f"--cpu-affinity: {printable(text, 40)} is not 'auto' or a CPU list ({exc})") from None
        why = "as asked"
    else:
        topo = from_sysfs()
        gpu = path_info(path).gpu
        names = [f"GPU{device}"] if gpu and f"GPU{device}" in topo.gpus else []
        if wire == "verbs" or not names:
            names += topo.nics[:1]
        node = next((topo.device(n).get("numa_node") for n in names if topo.device(n).get("numa_node") is not None),
                    None)
        if node is None:
            raise InvalidArgument("--cpu-affinity auto: no GPU or NIC with a known NUMA node here "
                                  f"({', '.join(names) or 'none found'}); give a CPU list instead")
        cpus = list(topo.cpus_by_numa.get(node, []))
        why = f"NUMA node {node}, nearest {names[0]}"
    cpus = [c for c in cpus if c in allowed]
    if not cpus:
        raise InvalidArgument(f"--cpu-affinity {printable(text, 40)}: none of those CPUs is allowed here "
                              f"(allowed: {sorted(allowed)[:16]})")
    os.sched_setaffinity(0, cpus)
    return cpus, why


def run(args: argparse.Namespace) -> int:
    chunk = check_numbers(args)
    parity = _parity(args)
    args.notes = []
    if args.cpu_affinity is not None:
        cpus, why = pin_cpus(args.cpu_affinity, args.path, args.wire, args.device)
        args.notes.append(f"CPU affinity: {','.join(map(str, cpus))} ({why}); the local peer inherits it")
    if args.peer is not None:
        check_peer(args.peer)
    token, warnings = resolve_token(args)
    for warning in warnings:
        print(f"gdrlab bench: warning: {warning}", file=sys.stderr, flush=True)
    if (args.tclass, args.sl, args.pkey_index) != (None, None, None):
        from ..transfer.verbs_wire import _LINK_OPTIONS, apply_link_options
        tclass, sl, pkey_index = (None if v is None else parse_whole(flag, v, 0, _LINK_OPTIONS[flag][2])
                                  for flag, v in (("--tclass", args.tclass), ("--sl", args.sl),
                                                  ("--pkey-index", args.pkey_index)))
        apply_link_options(tclass, sl, pkey_index)
    if args.wire == "mpi":  # the MPI library moves the buffers between the two ranks of mpirun -n 2
        status, df = mpi_wire_from_options(vars(args), _progress(args))
        if df is not None:
            _print(df, args)
        return status
    if args.mpi:
        from ..transfer.driver import options
        from ..transfer.mpi import bench_mpi, world_rank
        try:
            opts = options(args.path, args.sizes, args.iters, mode=args.mode, wire=args.wire, chunk=chunk,
                           depth=args.depth, device=args.device, window=args.window, warmup=args.warmup,
                           timeout_s=args.timeout, parity=parity)
        except GdrlabError:
            # every rank checks the same arguments and stops here; rank 0 alone says why (one --json document)
            if world_rank() != 0:
                return 1
            raise
        status, df = bench_mpi(opts, _progress(args), peer=args.peer, local_peer=args.local_peer)
        if df is not None:
            _print(df, args)
        return status

    from ..errors import Unavailable
    from ..transfer.driver import bench
    try:
        df = bench(path=args.path, sizes=args.sizes, iters=args.iters, mode=args.mode, wire=args.wire,
                   peer=args.peer, token=token, chunk=chunk, depth=args.depth, device=args.device,
                   window=args.window, warmup=args.warmup, timeout_s=args.timeout, progress=_progress(args),
                   local_peer=args.local_peer, parity=parity)
    except Unavailable as exc:
        if args.wire not in (None, "tcp"):  # the recordings are tcp rows: no stand-in for a missing HCA or UCX
            raise
        raise Unavailable(f"{exc}{_recorded_hint(args.path)}") from exc
    _print(df, args)
    return 0
