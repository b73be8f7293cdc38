"""One size of a bench over the engine's wires, with the parity options of perftest and OSU:
adaptive iteration counts (``duration``), both directions at once (``bidir``), message rate
(``rate``), memory kinds per side, and bandwidth spread over several lanes (tcp connections with
``--streams``, verbs queue pairs with ``--qps``: each lane is a session of its own, as UCX's lanes
and perftest's ``-q``), with the local multi-client peer the lanes need.
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import InvalidArgument, PeerTimeout, Unavailable
from ..vocab import MEMORY_KINDS, WIRES, path_info, wants_bandwidth, wants_latency
from .buffers import Buffer, native
from .stats import (
    GBITS_PER_GBPS,
    Adaptive,
    auto_counts,
    median_ci,
    result_columns,
    summarize,
)

__all__ = ["Parity", "check_parity", "LanesPeer", "measure_size", "lane_sizes"]

#: Adaptive runs: above this size a sample costs enough that fewer make the kept test.
SMALL_BYTES = 1 << 20
#: Adaptive runs: up to this size a probe test sizes the kept one; above it one iteration costs
#: about what the probe would, and the kept test takes the least count.
PROBE_BYTES = 4 << 20
#: Adaptive runs: timed iterations of the probe test (after one untimed).
PROBE_ITERS = 3
#: Adaptive runs: how much faster than a ping-pong's one-way time a streamed message is taken to
#: be at most, when the latency half decides whether the bandwidth half needs a probe.
STREAM_SPEEDUP = 4.0
#: The wires whose both sides the engine carries: the memory kinds follow the path there.
ENGINE_WIRES = WIRES
#: The most lanes one test spreads over (perftest's -q takes more, but a class server has 64 places).
MAX_LANES = 16


@dataclass(frozen=True)
class Parity:
    """The parity options of one bench, checked (:func:`check_parity`)."""

    bidir: bool = False
    rate: bool = False
    duration: float | None = None  # seconds per size: adaptive iteration count
    lanes: int = 1
    src_mem: str | None = None
    dst_mem: str | None = None
    gbits: bool = False


def natural_kinds(path: str) -> tuple[str, str]:
    """The memory kinds (measuring side, peer) a path moves between when nothing is asked."""
    return ("device", "device") if path_info(path).gpu else ("pageable", "pageable")


def check_parity(p: Parity, path: str, wire: str, mode: str, iters: int | None) -> None:
    """One line naming the option that does not apply, else nothing."""
    if wire == "none" and p != Parity(gbits=p.gbits, duration=p.duration):
        raise InvalidArgument(f"--bidir, --rate, --streams/--qps and --src-mem/--dst-mem need a wire; path {path!r} "
                              "copies between GPUs of this machine")
    if p.bidir and wire != "tcp":
        raise InvalidArgument(f"--bidir runs on the tcp wire only for now; the {wire} wire measures one direction")
    if (p.bidir or p.rate) and not wants_bandwidth(mode):
        raise InvalidArgument(f"--{'bidir' if p.bidir else 'rate'} measures bandwidth: use --mode bw or both, not lat")
    if p.duration is not None:
        if not (isinstance(p.duration, (int, float)) and 0 < p.duration <= 3600):
            raise InvalidArgument(f"--duration must be between 0 and 3600 seconds, got {p.duration!r}")
        if iters is not None:
            raise InvalidArgument("--duration and --iters exclude each other (as perftest's -D and -n)")
        if wire == "none":
            raise InvalidArgument(f"--duration needs a wire; path {path!r} copies between GPUs of this machine")
    if not (isinstance(p.lanes, int) and 1 <= p.lanes <= MAX_LANES):
        raise InvalidArgument(f"lanes (--streams, --qps) must be between 1 and {MAX_LANES}, got {p.lanes!r}")
    if p.lanes > 1 and not wants_bandwidth(mode):
        raise InvalidArgument("--streams/--qps spread bandwidth over lanes: use --mode bw or both, not lat")
    src, dst = natural_kinds(path)
    for flag, asked, natural in (("--src-mem", p.src_mem, src), ("--dst-mem", p.dst_mem, dst)):
        if asked is not None and asked not in MEMORY_KINDS:
            raise InvalidArgument(f"{flag} must be one of {', '.join(MEMORY_KINDS)}, got {asked!r}")
    if wire not in ENGINE_WIRES:
        return  # a library wire (ucx) checks the memory kinds it can move in its require()
    if p.src_mem is not None and p.src_mem != src and not (src == "pageable" and p.src_mem == "pinned"):
        other = "a GPU path (staged, shared, pipelined)" if p.src_mem == "device" else "--path host"
        raise InvalidArgument(f"--src-mem {p.src_mem}: path {path!r} moves {src} memory on this side; "
                              f"use {other} for {p.src_mem} memory")
    if p.dst_mem is not None and p.dst_mem != dst:
        raise InvalidArgument(f"--dst-mem {p.dst_mem}: the peer allocates {dst} memory for path {path!r} "
                              "(the serve protocol does not carry the peer's memory kind)")


def lane_sizes(size: int, lanes: int) -> list[int]:
    """A message of ``size`` bytes cut over ``lanes`` (the first lanes carry the remainder);
    never a lane of 0 bytes."""
    n = max(1, min(lanes, size))
    base, extra = divmod(size, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


# --------------------------------------------------------------------------- the local peer
class LanesPeer:
    """A local peer that serves several sessions at once (the lanes of one test): a ``gdrlab
    serve`` process (``kind="process"``) or the engine's server on threads of this process
    (``"thread"``). ``sessions`` counts the sessions it has served (thread: the server's counter;
    process: its "connected" log lines)."""

    def __init__(self, kind: str, device: int, timeout_s: float, max_clients: int) -> None:
        self.token = secrets.token_hex(16)
        self.kind = kind
        self._stop = threading.Event()
        self._log: list[str] = []
        if kind == "thread":
            self._server = native().Server("127.0.0.1", 0, self.token, int(timeout_s * 1000),
                                           max_clients=max_clients, device=device)
            self.port = int(self._server.port)
            self._thread = threading.Thread(target=self._serve, daemon=True, name="gdrlab-lanes-peer")
            self._thread.start()
            return
        env = dict(os.environ, GDRLAB_TOKEN=self.token, PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "gdrlab", "serve", "--listen", "127.0.0.1:0", "--announce", "--device",
               str(device), "--timeout", str(timeout_s), "--max-clients", str(max_clients)]
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     stdin=subprocess.DEVNULL, cwd=pkg_root)
        try:
            self.port = int(json.loads(self._announce(30.0))["port"])
        except BaseException:
            self.stop()
            raise
        self._thread = threading.Thread(target=self._read_log, daemon=True, name="gdrlab-lanes-log")
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._server.serve_for(100)
            self._log.extend(self._server.take_log())

    def _announce(self, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = b""
        while not line.endswith(b"\n"):
            if time.monotonic() > deadline:
                raise PeerTimeout(f"local peer did not start within {timeout_s:.0f} s")
            byte = self.proc.stdout.read(1)
            if not byte:
                err = self.proc.stderr.read().decode(errors="replace").strip() if self.proc.stderr else ""
                raise Unavailable(f"local peer exited before it was ready: {err or 'no message'}")
            line += byte
        return line.decode()

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self._log.append(raw.decode(errors="replace").rstrip())

    @property
    def sessions(self) -> int:
        """Sessions served so far."""
        if self.kind == "thread":
            return int(self._server.clients_served)
        return sum(1 for line in self._log if " connected" in line)

    @property
    def log(self) -> list[str]:
        return list(self._log)

    def stop(self) -> None:
        self._stop.set()
        if self.kind == "thread":
            self._thread.join(15)
            self._log.extend(self._server.take_log(True))
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if hasattr(self, "_thread"):
            self._thread.join(5)
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()

    def __enter__(self) -> "LanesPeer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# --------------------------------------------------------------------------- one size
@dataclass
class _Run:
    """What one measurement (latency or bandwidth) collected."""

    samples: list[float] = field(default_factory=list)
    nbytes: float = 0.0
    verified: bool = True
    info: dict[str, Any] = field(default_factory=dict)


def _collect(call: Callable[[int, int], tuple[Any, float, bool, dict[str, Any]]], n_fixed: int, warmup: int,
             adaptive: Adaptive | None, out: _Run, *, cost_per_sample: float = 1.0, probe: bool = True) -> None:
    """One kept test of ``call(iters, warmup)``, both for the fixed count and the adaptive one.

    Fixed: ``n_fixed`` timed iterations after ``warmup`` untimed ones.

    Adaptive (``adaptive``: the budget of this half and the least and most samples): the count of
    the kept test is chosen before it starts, then the test runs once with the same ``warmup`` as
    the fixed count. Where an iteration is cheap (``probe``) a probe test of :data:`PROBE_ITERS`
    timed iterations after one untimed one gives the time of an iteration (its median sample times
    ``cost_per_sample``: 2 for latency, whose sample is half a round trip) and the test's own
    overhead (buffers, verification); the count is what the rest of the budget holds, within
    ``least`` and ``most``. The probe's samples are dropped. Where an iteration is dear (large
    sizes) there is no probe: ``least`` iterations. So the adaptive median is the median of the
    timed iterations of one warmed-up test, as the fixed one is; never samples pooled over tests.
    (Pooling re-allocating batches, each warmed up with 2 iterations only, put every later test's
    cold first iterations into the median, and stopping as soon as the median's interval looked
    tight kept only the first samples after warm-up: both read high.)"""
    if adaptive is None:
        n = n_fixed
    elif not probe:
        n = min(adaptive.least, adaptive.most)
    else:
        t0 = time.perf_counter()
        s, _, ok, _ = call(PROBE_ITERS, 1)
        spent = time.perf_counter() - t0
        out.verified = out.verified and ok
        s = np.asarray(s, dtype=float)
        per_iter = float(np.median(s)) * cost_per_sample if s.size else 0.0
        overhead = max(0.0, spent - (PROBE_ITERS + 1) * per_iter)  # the test's own cost, paid again
        left = adaptive.budget_s - spent - overhead
        n = int(left / per_iter) - warmup if per_iter > 0 else adaptive.most
        n = max(min(adaptive.least, adaptive.most), min(n, adaptive.most))
    s, out.nbytes, ok, out.info = call(n, warmup)
    out.samples.extend(np.asarray(s, dtype=float).tolist())
    out.verified = out.verified and ok


def least_fills(budget_s: float, windows: int, window: int, lat: Any) -> bool:
    """True when ``windows`` bandwidth windows of ``window`` messages take at least ``budget_s``
    even at :data:`STREAM_SPEEDUP` times the pace of the latency half's median one-way time
    (``lat``, a :class:`Summary`; None or NaN: unknown, False).

    A streamed message can take less than a ping-pong's one-way time (the sender does not wait
    for the reply, and a path's stages overlap across messages), so the latency's pace alone would
    skip probes that could have chosen more windows; taken 4 times faster, the skip happens only
    where the least count fills the budget by a wide margin. From 1 MiB on a window is 64 MiB of
    messages whatever the size, and the probe's 4 windows were most of what a size of 1-4 MiB cost
    an adaptive sweep, to choose the least count every time."""
    p50_us = getattr(lat, "p50_us", None) if lat is not None else None
    if p50_us is None or not np.isfinite(p50_us) or p50_us <= 0:
        return False
    return windows * window * p50_us * 1e-6 / STREAM_SPEEDUP >= budget_s


def _buffers(conns: list[Any], parts: list[int], kind: str | None, device: int) -> list[Buffer | None]:
    """This side's message buffers of ``kind`` (None: the engine allocates the path's kind; a
    library wire allocates its own)."""
    if kind is None or kind == "pageable" or getattr(conns[0], "wire", "") not in ENGINE_WIRES:
        return [None] * len(parts)
    return [Buffer(n, kind, device) for n in parts]


def measure_size(conns: list[Any], opts: Any, size: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """One size over the open lanes ``conns`` (the first carries latency): latency and/or
    bandwidth as ``opts.mode`` asks, with ``opts.parity``; (row, kept samples, wire info)."""
    par: Parity = opts.parity
    lat_iters, auto_window, reps = auto_counts(size)
    n_lat, n_bw = opts.iters or lat_iters, opts.iters or reps
    window = opts.window or auto_window
    budget = par.duration
    halves = 2 if opts.mode == "both" else 1
    common = dict(chunk=opts.chunk, depth=opts.depth, device=opts.device)
    row: dict[str, Any] = {"path": opts.path, "wire": opts.wire, "size": size}
    kept: dict[str, Any] = {}
    lat_run, bw_runs = _Run(), []
    info: dict[str, Any] = {}
    lat = bw = None
    if wants_latency(opts.mode):
        wu = opts.warmup if opts.warmup is not None else max(2, min(n_lat // 10, 50))
        least = min(20 if size <= SMALL_BYTES else 5 if size <= PROBE_BYTES else 3, n_lat)
        ad = None if budget is None else Adaptive(budget / halves, least=least, most=max(n_lat, least))
        buf = _buffers(conns[:1], [size], par.src_mem, opts.device)[0]
        _collect(lambda n, w: conns[0].measure(opts.path, size, mode="lat", iters=n, warmup=w, window=1,
                                               buffer=buf, **common), n_lat, wu, ad, lat_run,
                 cost_per_sample=2.0, probe=size <= PROBE_BYTES)
        lat, info = summarize(lat_run.samples, lat_run.nbytes), lat_run.info
        kept["lat_us"] = np.asarray(lat_run.samples) * 1e6
    if wants_bandwidth(opts.mode):
        wu = opts.warmup if opts.warmup is not None else max(1, n_bw // 10)
        parts = lane_sizes(size, len(conns))
        bufs = _buffers(conns, parts, par.src_mem, opts.device)
        bw_runs = [_Run() for _ in parts]
        errors: list[BaseException] = []
        start = threading.Barrier(len(parts))

        least_bw = min(5 if size <= SMALL_BYTES else 3, n_bw)
        # The latency half just measured this size: where it shows that the least count of windows
        # already fills this half's budget, a probe could only choose that count again.
        probe_bw = (size <= PROBE_BYTES and len(parts) == 1
                    and not (budget is not None and least_fills(budget / halves, least_bw + wu, window, lat)))

        def lane(i: int) -> None:
            try:
                ad = None if budget is None else Adaptive(budget / halves, least=least_bw, most=max(n_bw, least_bw))
                if len(parts) > 1:  # no probe then: the lanes' kept tests start together
                    start.wait(opts.timeout_s)
                _collect(lambda n, w: conns[i].measure(opts.path, parts[i], mode="bw", iters=n, warmup=w,
                                                       window=window, buffer=bufs[i], both_ways=par.bidir, **common),
                         n_bw, wu, ad, bw_runs[i], probe=probe_bw)
            except BaseException as exc:  # raised below, in the caller's thread
                errors.append(exc)
                start.abort()

        if len(parts) == 1:
            lane(0)
        else:
            threads = [threading.Thread(target=lane, args=(i,), name=f"gdrlab-lane-{i}") for i in range(len(parts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        if real or errors:
            raise (real or errors)[0]
        sums = [summarize(r.samples, r.nbytes) for r in bw_runs]
        bw = sums[0]
        if len(parts) > 1:
            # Several lanes, started together (the barrier): every lane's timed bytes over the
            # slowest lane's timed loop, a bound that never counts a lane twice.
            moved = sum(r.nbytes * len(r.samples) for r in bw_runs)
            span = max(float(np.sum(r.samples)) for r in bw_runs)
            bw = type(bw)(bw.min_us, bw.p50_us, bw.p99_us, bw.mean_us, moved / span / 1e9 if span > 0 else np.nan)
        info = info or bw_runs[0].info
        kept["bw_gbps"] = bw_runs[0].nbytes / np.asarray(bw_runs[0].samples) / 1e9
        if par.rate:
            row_rate = float(sum(window / (s.p50_us * 1e-6) for s in sums))
    verified = lat_run.verified and all(r.verified for r in bw_runs)
    row["iters"] = len(bw_runs[0].samples) if opts.mode == "bw" else len(lat_run.samples)
    row.update(result_columns(lat, bw, verified, opts.path, opts.chunk, opts.depth))
    _parity_columns(row, par, opts.path, len(bw_runs) or 1, lat_run, bw_runs,
                    row_rate if par.rate and bw_runs else np.nan)
    return row, kept, info


def _parity_columns(row: dict[str, Any], par: Parity, path: str, lanes: int, lat_run: _Run, bw_runs: list[_Run],
                    rate: float) -> None:
    """The columns the parity options add (only those asked for: the plain rows keep the schema)."""
    if par.gbits:
        row["bw_gbits"] = row["bw_gbps"] * GBITS_PER_GBPS
    if par.rate:
        row["msg_rate_mps"] = rate
    if par.bidir:
        row["bidir"] = True
    if par.lanes > 1:
        row["lanes"] = lanes
    if par.src_mem is not None or par.dst_mem is not None:
        src, dst = natural_kinds(path)
        row["src_mem"], row["dst_mem"] = par.src_mem or src, par.dst_mem or dst
    if par.duration is not None:
        run = bw_runs[0] if bw_runs else lat_run
        lo, hi = median_ci(run.samples)
        p50 = float(np.median(run.samples)) if run.samples else np.nan
        row["ci_rel"] = max(p50 - lo, hi - p50) / p50 if p50 and p50 > 0 else np.nan
