"""The one sweep loop: parses sizes once, picks the wire, streams rows.

Every wire (tcp, verbs, and the GPU-to-GPU copies that cross none) takes the same arguments;
an argument a wire cannot honour is refused with one line naming it, never dropped.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .. import provenance
from ..errors import InvalidArgument, PeerClosed, Unavailable
from ..units import parse_sizes
from ..vocab import (
    BENCH_MODES,
    DEFAULT_CHUNK_BYTES,
    DEFAULT_PIPELINE_DEPTH,
    P2P_PATHS,
    PATHS,
    WIRES,
    path_info,
    paths_over,
)
from .buffers import cuda_status, gpus, machine, native
from .lanes import LanesPeer, Parity, check_parity, measure_size
from .p2p import bench_path
from .peers import LOCAL_PEERS, check_timeout, parse_peer, start_local_peer
from .stats import ProgressFn
from . import ucx_wire
from .tcp_wire import Connection
from .verbs_wire import VerbsConnection, provenance_of_info, require_verbs

__all__ = ["bench", "BenchOptions", "Sweep", "Wire", "options", "run"]


def _require_gpu_for(path: str) -> None:
    if path_info(path).gpu:
        st = cuda_status()
        if not st["usable"]:
            raise Unavailable(f"path {path!r} needs a GPU: {st['reason']}")


#: One size measured: (row, kept samples, the wire's info for :attr:`Wire.describe`).
SizeResult = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]


@dataclass(frozen=True)
class Wire:
    """One entry of the wire table: the operations the driver needs of a wire, and nothing else.

    ``require(path)`` refuses a path that cannot run here (one line saying why); ``open(opts,
    peer, token, local_peer)`` connects (starting a local peer when ``peer`` is None) and returns
    the open link and how to name the peer; ``run(link, opts, size)`` measures one size as
    ``opts.mode`` asks; ``close(link)`` ends the link and any peer it started; ``describe(link,
    info)`` is what the wire adds to the rows' provenance. The engine's wires (tcp, verbs) are
    entries; a library wire (UCX, CUDA-aware MPI) plugs in as one more entry with its own link.
    """

    require: Callable[[str], None]
    open: Callable[["BenchOptions", "str | None", "str | None", str], "tuple[Any, str]"]
    run: Callable[[Any, "BenchOptions", int], SizeResult]
    close: Callable[[Any], None]
    describe: Callable[[Any, dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class BenchOptions:
    """The arguments of :func:`bench` once checked: sizes parsed, defaults resolved."""

    path: str
    wire: str
    sizes: tuple[int, ...]
    mode: str
    iters: int | None
    window: int | None
    warmup: int | None
    chunk: int
    depth: int
    device: int
    timeout_s: float
    keep_samples: bool
    parity: Parity = Parity()  # bidir, rate, duration, lanes, memory kinds, gbits (transfer.lanes)


def _check_path_and_wire(path: str, wire: str | None) -> str:
    """The wire ``path`` runs over: ``"none"`` for the GPU-to-GPU copies, else ``wire`` (tcp by
    default) after checking the path runs over it."""
    if path in P2P_PATHS:
        if wire not in (None, "none"):
            raise InvalidArgument(f"path {path!r} copies between GPUs of this machine and crosses no wire; "
                                  f"leave the wire unset (got {wire!r})")
        return "none"
    wire = wire or "tcp"
    if wire in _WIRES and wire not in WIRES:  # a library wire (ucx): its entry's require() checks the path
        return wire
    if wire not in WIRES:
        raise InvalidArgument(f"unknown wire {wire!r}; valid: {', '.join(WIRES)}")
    if path not in paths_over(wire):
        if path not in PATHS:
            raise InvalidArgument(f"unknown path {path!r}; valid over {wire}: {', '.join(paths_over(wire))}")
        others = [w for w in WIRES if path in paths_over(w)]
        hint = f"use --wire {others[0]}" if others else "see `gdrlab doctor`"
        raise InvalidArgument(f"path {path!r} does not run over the {wire} wire ({hint})")
    return wire


def options(path: str = "host", sizes: Any = "8:1M", iters: int | None = None, *, mode: str = "both",
            wire: str | None = None, chunk: int | None = None, depth: int | None = None, device: int = 0,
            window: int | None = None, warmup: int | None = None, timeout_s: float = 10.0,
            keep_samples: bool = False, parity: Parity | None = None) -> BenchOptions:
    """:func:`bench`'s measurement arguments, checked once (sizes parsed, defaults resolved): what
    the command line, the MPI launcher and :class:`Sweep` hand on instead of loose arguments."""
    return _options(path, sizes, iters, mode, wire, chunk, depth, device, window, warmup, timeout_s, keep_samples,
                    parity)


def _options(path: str, sizes: Any, iters: int | None, mode: str, wire: str | None, chunk: int | None,
             depth: int | None, device: int, window: int | None, warmup: int | None, timeout_s: float,
             keep_samples: bool, parity: Parity | None = None) -> BenchOptions:
    wire = _check_path_and_wire(path, wire)
    if mode not in BENCH_MODES:
        raise InvalidArgument(f"unknown mode {mode!r}; valid: {', '.join(BENCH_MODES)}")
    size_list = tuple(parse_sizes(sizes))
    if wire != "none":
        limit = int(native().MAX_DATA_BYTES)
        for s in size_list:
            if s > limit:
                raise InvalidArgument(f"size {s} exceeds the {wire} wire's maximum message of {limit} bytes (1 GiB)")
    for name, value, least in (("iters", iters, 1), ("window", window, 1), ("warmup", warmup, 0)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                  or value < least):
            raise InvalidArgument(f"{name} must be at least {least}, got {value!r}")
    if wire == "none" and (chunk is not None or depth is not None or window is not None):
        raise InvalidArgument(f"chunk, depth and window do not apply to path {path!r} (one copy at a time, "
                              "no pipeline)")
    check_timeout(timeout_s)
    parity = parity or Parity()
    check_parity(parity, path, wire, mode, iters)
    return BenchOptions(path, wire, size_list, mode, iters, window, warmup,
                        DEFAULT_CHUNK_BYTES if chunk is None else int(chunk),
                        DEFAULT_PIPELINE_DEPTH if depth is None else int(depth), int(device), float(timeout_s),
                        bool(keep_samples), parity)


def bench(path: str = "host", sizes: Any = "8:1M", iters: int | None = None, *, mode: str = "both",
          wire: str | None = None, peer: str | None = None, token: str | None = None, chunk: int | None = None,
          depth: int | None = None, device: int = 0, window: int | None = None, warmup: int | None = None,
          timeout_s: float = 10.0, progress: ProgressFn | None = None, keep_samples: bool = False,
          local_peer: str = "auto", parity: Parity | None = None) -> Any:
    """Measure ``path`` over ``wire`` at each size; one DataFrame row per size.

    Columns: :data:`gdrlab.vocab.BENCH_COLUMNS` (path, wire, size, iters, lat_min_us, lat_p50_us,
    lat_p99_us, lat_mean_us, bw_gbps, verified, chunk, depth, source). ``wire`` is ``"tcp"`` (the
    default) or ``"verbs"``; the GPU-to-GPU paths ``p2p`` and ``p2p-staged`` cross no wire (rows
    say ``"none"``) and refuse ``peer``, ``token``, ``local_peer``, ``chunk``, ``depth`` and
    ``window``. ``mode`` is ``"lat"``, ``"bw"`` or ``"both"``. With no ``peer`` a local peer is
    started and stopped: ``local_peer="process"`` (a ``gdrlab serve`` process) or ``"thread"``
    (in this process, sharing its CUDA context; see :class:`~gdrlab.transfer.peers.ThreadPeer`).
    ``"auto"`` (the default) takes a process for ``host`` and a thread for the GPU paths: on one
    GPU, two processes time-slice it between their contexts, which on an H200 added about 140 us
    to every copy of up to 16 KiB (recorded in gdrlab/data/recorded/h200-peer-context.json); two
    hosts with a GPU each, which the local peer stands in for, do not contend like that.
    ``window`` (bandwidth messages in flight) and ``warmup`` (untimed iterations) default to
    values chosen by size; ``keep_samples`` keeps every sample in ``attrs["samples"]``.
    ``timeout_s`` bounds every blocking call on a wire (local GPU copies have none to bound).
    ``progress(done, total, row)`` is called after each size. Every size ends with a verified
    exchange: no row is returned for corrupted data. ``parity`` (:class:`~gdrlab.transfer.lanes.Parity`)
    holds the perftest/OSU options: both directions, message rate, a time budget per size
    (adaptive iteration count), lanes, memory kinds, Gb/s.
    """
    opts = _options(path, sizes, iters, mode, wire, chunk, depth, device, window, warmup, timeout_s, keep_samples,
                    parity)
    return run(opts, peer=peer, token=token, local_peer=local_peer, progress=progress)


def run(opts: BenchOptions, *, peer: str | None = None, token: str | None = None, local_peer: str = "auto",
        progress: ProgressFn | None = None) -> Any:
    """:func:`bench` on checked options (:func:`options`): the one entry the command line, the MPI
    launcher and :func:`bench` itself go through."""
    path = opts.path
    if local_peer not in LOCAL_PEERS:
        raise InvalidArgument(f"local_peer must be 'auto', 'process' or 'thread', got {local_peer!r}")
    if opts.wire == "none":
        if peer is not None or token is not None or local_peer != "auto":
            raise InvalidArgument(f"peer, token and local_peer do not apply to path {path!r}: it copies "
                                  "between two GPUs of this machine")
        return _bench_p2p(opts, progress)
    _WIRES[opts.wire].require(path)
    return _bench_over_wire(opts, peer, token, local_peer, progress)


def _bench_p2p(opts: BenchOptions, progress: ProgressFn | None) -> Any:
    n = len(gpus())
    dst = (opts.device + 1) % n if n > 1 else 1
    df = bench_path(opts.path, opts.device, dst, list(opts.sizes), opts.iters, warmup=opts.warmup,
                    progress=progress, keep_samples=opts.keep_samples)
    df.insert(2, "wire", "none")
    if opts.mode == "lat":
        df["bw_gbps"] = np.nan
    elif opts.mode == "bw":
        for col in ("lat_min_us", "lat_p50_us", "lat_p99_us"):
            df[col] = np.nan
    return df


def _connect(stack: contextlib.ExitStack, cls: type[Connection], opts: BenchOptions, peer: str | None,
             token: str | None, local_peer: str) -> tuple[Connection, str]:
    """The session the sweep runs in, and how to name the peer in the provenance."""
    if peer is None:
        local, kind = start_local_peer(local_peer, path_info(opts.path).gpu, opts.device, opts.timeout_s)
        stack.enter_context(local)
        return stack.enter_context(cls("127.0.0.1", local.port, local.token, opts.timeout_s)), f"local {kind}"
    host, port = parse_peer(peer)
    tok = token if token is not None else os.environ.get("GDRLAB_TOKEN", "")
    return stack.enter_context(cls(host, port, tok, opts.timeout_s)), peer


@dataclass
class _EngineLink:
    """An engine wire's open link: the connection and what to close with it (the local peer)."""

    conn: Connection
    stack: contextlib.ExitStack
    lanes: tuple[Connection, ...] = ()  # the other lanes (--streams, --qps) beside conn
    peer: Any = None  # with lanes: the local LanesPeer (its session count), if one was started


def _engine_wire(cls: type[Connection], require: Callable[[str], None],
                 provenance_of: Callable[[dict[str, Any]], dict[str, Any]]) -> Wire:
    """The table entry of a wire the engine carries (a session with `gdrlab serve` or a local peer)."""

    def open_(opts: BenchOptions, peer: str | None, token: str | None, local_peer: str) -> tuple[_EngineLink, str]:
        stack = contextlib.ExitStack()
        if opts.parity.lanes > 1:
            return _open_lanes(stack, cls, opts, peer, token, local_peer)
        try:
            conn, name = _connect(stack, cls, opts, peer, token, local_peer)
            # Warm the connection and both processes (page faults, caches, CPU clocks) before the
            # first measured size, so that size is not the odd one out.
            conn.measure(opts.path, min(max(opts.sizes), 1 << 20), mode="lat", iters=50, warmup=20, chunk=opts.chunk,
                         depth=opts.depth, device=opts.device)
        except BaseException:
            stack.close()
            raise
        return _EngineLink(conn, stack), name

    def describe(link: _EngineLink | None, info: dict[str, Any]) -> dict[str, Any]:
        return {"peer_description": link.conn.server_description if link is not None else "", **provenance_of(info)}

    return Wire(require, open_, lambda link, opts, size: measure_size([link.conn, *link.lanes], opts, size),
                lambda link: link.stack.close(), describe)


def _open_lanes(stack: contextlib.ExitStack, cls: type[Connection], opts: BenchOptions, peer: str | None,
                token: str | None, local_peer: str) -> tuple[_EngineLink, str]:
    """``opts.parity.lanes`` sessions with one peer (a local one that serves them all when none is given)."""
    try:
        if peer is None:
            kind = local_peer if local_peer != "auto" else ("thread" if path_info(opts.path).gpu else "process")
            local = stack.enter_context(LanesPeer(kind, opts.device, opts.timeout_s, opts.parity.lanes + 1))
            host, port, tok, name = "127.0.0.1", local.port, local.token, f"local {kind} ({opts.parity.lanes} lanes)"
        else:
            host, port = parse_peer(peer)
            tok = token if token is not None else os.environ.get("GDRLAB_TOKEN", "")
            name = peer
        conns = [stack.enter_context(cls(host, port, tok, opts.timeout_s)) for _ in range(opts.parity.lanes)]
        for c in conns:
            c.measure(opts.path, min(max(opts.sizes), 1 << 20), mode="lat", iters=20, warmup=10, chunk=opts.chunk,
                      depth=opts.depth, device=opts.device)
    except BaseException:
        stack.close()
        raise
    return _EngineLink(conns[0], stack, tuple(conns[1:]), local if peer is None else None), name


#: The wire table: every wire the driver runs over, by name (the GPU-to-GPU copies cross none).
_WIRES: dict[str, Wire] = {
    "tcp": _engine_wire(Connection, _require_gpu_for, lambda info: {}),
    "verbs": _engine_wire(VerbsConnection, require_verbs, provenance_of_info),
    ucx_wire.WIRE: ucx_wire.entry(Wire, _connect, lambda conn, opts, size: measure_size([conn], opts, size)),
}


#: Seconds per size of the live widgets' sweeps (:class:`Sweep` ``duration``): the adaptive
#: iteration count of ``gdrlab bench --duration`` (bench/sweep_speed.py measures it against the
#: fixed counts).
LIVE_DURATION_S = 0.04


class Sweep:
    """One peer and one connection for a whole sweep, size after size: what a live widget needs
    (no server process per point). ``Sweep(path, ...)`` takes :func:`bench`'s arguments but no
    sizes; ``sweep(size)`` (or :meth:`measure`) connects on first use, warms up once and returns
    that size's row as a one-row DataFrame with live provenance; :meth:`close` (or leaving a
    ``with`` block) stops the peer. A local peer that went away (its idle timeout, between two
    widget runs) is started again once. ``duration`` (seconds per size, ``gdrlab bench
    --duration``): each size's iteration counts are chosen to fill that time (at least a few
    warmed-up iterations, at most the fixed counts) instead of the fixed counts; the live widgets
    use :data:`LIVE_DURATION_S`."""

    def __init__(self, path: str = "host", *, mode: str = "both", wire: str | None = None, peer: str | None = None,
                 token: str | None = None, chunk: int | None = None, depth: int | None = None, device: int = 0,
                 iters: int | None = None, window: int | None = None, warmup: int | None = None,
                 timeout_s: float = 10.0, local_peer: str = "auto", duration: float | None = None,
                 opts: BenchOptions | None = None) -> None:
        if local_peer not in LOCAL_PEERS:
            raise InvalidArgument(f"local_peer must be 'auto', 'process' or 'thread', got {local_peer!r}")
        if opts is not None and duration is not None:
            raise InvalidArgument("give duration inside opts (its parity), not beside it")
        parity = None if duration is None else Parity(duration=duration)  # checked by _options
        self.opts = opts or _options(path, [1], iters, mode, wire, chunk, depth, device, window, warmup,
                                     timeout_s, False, parity)
        if self.opts.wire == "none":
            raise InvalidArgument(f"path {self.opts.path!r} crosses no wire: use bench() for GPU-to-GPU copies")
        _WIRES[self.opts.wire].require(self.opts.path)
        self._peer, self._token, self._local_peer = peer, token, local_peer
        self._wire = _WIRES[self.opts.wire]
        self._link: Any = None
        self.peer_name = ""
        self.info: dict[str, Any] = {}

    def _open(self, first_size: int) -> Any:
        if self._link is None:
            opts = dataclasses.replace(self.opts, sizes=(first_size,))
            self._link, self.peer_name = self._wire.open(opts, self._peer, self._token, self._local_peer)
        return self._link

    def row(self, size: int, path: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """(row, kept samples) of one size; ``path`` (default: the sweep's) measures another path
        of the same wire over the same connection."""
        size = int(parse_sizes([size])[0])
        opts = self.opts
        if path is not None and path != opts.path:
            _check_path_and_wire(path, opts.wire)
            self._wire.require(path)
            opts = dataclasses.replace(opts, path=path)
        link = self._open(size)
        try:
            row, kept, self.info = self._wire.run(link, opts, size)
        except PeerClosed:
            if self._peer is not None:
                raise
            self.close()  # the local peer ended (idle timeout): once more with a new one
            row, kept, self.info = self._wire.run(self._open(size), opts, size)
        return row, kept

    def provenance(self) -> dict[str, Any]:
        """Live provenance of the rows measured so far."""
        duration = self.opts.parity.duration if self.opts.parity is not None else None
        cmd = f"gdrlab bench --path {self.opts.path} --wire {self.opts.wire}"
        what = {"what": cmd + (f" --duration {duration:g}" if duration else ""), "peer": self.peer_name}
        what.update(self._wire.describe(self._link, self.info))
        return provenance.live(what, machine())

    def measure(self, size: int) -> Any:
        import pandas as pd

        row, _ = self.row(size)
        return provenance.attach(pd.DataFrame([row]), self.provenance())

    __call__ = measure

    def close(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            self._wire.close(link)

    def __enter__(self) -> "Sweep":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _bench_over_wire(opts: BenchOptions, peer: str | None, token: str | None, local_peer: str,
                     progress: ProgressFn | None) -> Any:
    import pandas as pd

    rows: list[dict[str, Any]] = []
    samples: dict[int, dict[str, Any]] = {}
    with Sweep(peer=peer, token=token, local_peer=local_peer, opts=opts) as sweep:
        for i, size in enumerate(opts.sizes):
            row, kept = sweep.row(size)
            rows.append(row)
            if opts.keep_samples:
                samples[size] = kept
            if progress is not None:
                progress(i + 1, len(opts.sizes), row)
        prov = sweep.provenance()
    df = provenance.attach(pd.DataFrame(rows), prov)
    if opts.keep_samples:
        df.attrs["samples"] = samples
    return df
