"""How fast a live sweep runs, and whether the fast one measures the same thing.

Measured in one run, median of --reps repetitions, the two methods alternating (which runs first
alternates by rep; an even --reps weighs both orders alike) so drift hits both:
  1. the sweep over --paths and --sizes with the fixed iteration counts (`gdrlab bench` without
     --duration; one connection per path) against the adaptive sweep (a time budget per size; one
     connection for every path): seconds per path and for the GPU paths together, and per size the
     ratio of the adaptive p50 (latency and bandwidth) to the fixed one. The adaptive p50 is the
     median of the timed iterations of one warmed-up test per size and half (latency, bandwidth),
     its count chosen from a short probe test whose samples are dropped (gdrlab.transfer.lanes,
     _collect), as the fixed p50 is the median of one test's timed iterations. Per size also, from
     the fixed run's own samples in time order, the p50 of its first 20 latency samples (first 5
     bandwidth windows) over the p50 of all of them: above 1, a test's early samples after warm-up
     read slow, which a short test would take for the size's value (position effect);
  2. the host path at 64 MiB with --streams 1,2,4 (a `gdrlab serve` process as the peer) against a
     plain socket loop between two processes (bench/socket_loop.c, or socket_loop.py without a C
     compiler) carrying the same bytes over as many connections at once.

    python bench/sweep_speed.py OUT_DIR [--paths host,staged,shared,pipelined] [--sizes 8:64M]
                                [--reps 4] [--budget 0.04] [--streams 1,2,4|none]

Both sweeps serve from a thread peer for every path (GPU paths need it; host takes it too so the
two methods differ only in how they count iterations and connect). Writes OUT_DIR/sweep_speed.json
(seconds and iterations per size for both methods too). Paths this machine cannot run are listed
with the reason.
Targets (issue: fast live sweeps): the staged+shared+pipelined adaptive sweep <= 6 s on an H200,
every size's adaptive p50 within 5 % of the fixed one.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from gdrlab import provenance  # noqa: E402
from gdrlab.errors import GdrlabError  # noqa: E402
from gdrlab.transfer.buffers import machine  # noqa: E402
from gdrlab.transfer.driver import LIVE_DURATION_S, Sweep, bench, options  # noqa: E402
from gdrlab.transfer.lanes import Parity, lane_sizes  # noqa: E402
from gdrlab.units import parse_size, parse_sizes  # noqa: E402

GPU_SWEEP = ("staged", "shared", "pipelined")
TOLERANCE = 0.05
TARGET_S = 6.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


HEAD_LAT, HEAD_BW = 20, 5  # the early samples the position check compares with the whole test


def _head_ratio(samples, k: int) -> float | None:
    """p50 of the first ``k`` samples over the p50 of all (None when there are too few)."""
    s = [float(x) for x in samples]
    if len(s) < 2 * k:
        return None
    whole = statistics.median(s)
    return statistics.median(s[:k]) / whole if whole else None


def _sweep(paths: list[str], sizes: list[int], budget: float | None) -> tuple[dict, dict]:
    """({path: seconds}, {path: {size: row}}). Fixed (budget None): one Sweep (peer and
    connection) per path, as `gdrlab bench` runs; adaptive: one Sweep, one connection, for every
    path. A path's seconds include opening its connection where it opens one."""
    secs: dict[str, float] = {}
    rows: dict[str, dict[int, dict]] = {}

    def timed(sweep: Sweep, p: str, s: int) -> dict:
        t = time.perf_counter()
        got, kept = sweep.row(s, path=p)
        row = dict(got)
        row["seconds"] = time.perf_counter() - t  # the first size of a connection includes opening it
        row["lat_head_ratio"] = _head_ratio(kept.get("lat_us", []), HEAD_LAT)
        # bandwidth samples are GB/s: invert so that above 1 reads "slower" as for latency
        bw_head = _head_ratio(kept.get("bw_gbps", []), HEAD_BW)
        row["bw_head_ratio"] = 1 / bw_head if bw_head else None
        return row

    if budget is None:
        for p in paths:
            t0 = time.perf_counter()
            with Sweep(p, local_peer="thread") as sweep:
                rows[p] = {s: timed(sweep, p, s) for s in sizes}
            secs[p] = time.perf_counter() - t0
        return secs, rows
    with Sweep(opts=options(paths[0], [1], parity=Parity(duration=budget)), local_peer="thread") as sweep:
        for p in paths:
            t0 = time.perf_counter()
            rows[p] = {s: timed(sweep, p, s) for s in sizes}
            secs[p] = time.perf_counter() - t0
    return secs, rows


def _interleaved(paths: list[str], sizes: list[int], budget: float, first_fixed: bool) -> tuple[dict, dict]:
    """({path: {size: fixed row}}, {path: {size: adaptive row}}) measured size by size on one
    connection, the two methods back to back (the fixed one first when ``first_fixed``)."""
    fixed_opts = options(paths[0], [1])
    adaptive_opts = options(paths[0], [1], parity=Parity(duration=budget))
    fixed: dict[str, dict[int, dict]] = {}
    adaptive: dict[str, dict[int, dict]] = {}
    with Sweep(opts=fixed_opts, local_peer="thread") as sweep:
        for p in paths:
            fixed[p], adaptive[p] = {}, {}
            for s in sizes:
                pair = [(fixed_opts, fixed), (adaptive_opts, adaptive)]
                for o, into in (pair if first_fixed else pair[::-1]):
                    sweep.opts = o
                    t = time.perf_counter()
                    got, _ = sweep.row(s, path=p)
                    into[p][s] = dict(got, seconds=time.perf_counter() - t, lat_head_ratio=None, bw_head_ratio=None)
    return fixed, adaptive


def _ratios(fixed: list[dict], adaptive: list[dict], paths: list[str], sizes: list[int]) -> dict:
    out: dict[str, list[dict]] = {}
    for p in paths:
        out[p] = []
        for s in sizes:
            r: dict = {"size": s}
            for col in ("lat_p50_us", "bw_gbps"):
                f = statistics.median(run[p][s][col] for run in fixed)
                a = statistics.median(run[p][s][col] for run in adaptive)
                r[f"{col}_fixed"], r[f"{col}_adaptive"] = f, a
                r[f"{col}_ratio"] = a / f if f else None
                # The fixed method against itself: its p50s over the reps, largest over smallest,
                # minus 1 (how far two runs of the reference alone differ at this size).
                reps = [run[p][s][col] for run in fixed if run[p][s][col]]
                r[f"{col}_fixed_spread"] = max(reps) / min(reps) - 1 if len(reps) > 1 else None
            r["iters_fixed"] = fixed[0][p][s]["iters"]
            r["iters_adaptive"] = statistics.median(run[p][s]["iters"] for run in adaptive)
            r["seconds_fixed"] = statistics.median(run[p][s]["seconds"] for run in fixed)
            r["seconds_adaptive"] = statistics.median(run[p][s]["seconds"] for run in adaptive)
            for col in ("lat_head_ratio", "bw_head_ratio"):
                got = [run[p][s][col] for run in fixed if run[p][s][col] is not None]
                r[f"fixed_{col}"] = statistics.median(got) if got else None
            out[p].append(r)
    return out


def _outside(ratios: dict, paths: list[str]) -> dict:
    """How many (path, size, column) p50s of the adaptive sweep are more than TOLERANCE from the
    fixed one, and how many of those also differ less than the fixed method's own reps do."""
    cells = [(r[f"{c}_ratio"], r[f"{c}_fixed_spread"]) for p in paths for r in ratios[p]
             for c in ("lat_p50_us", "bw_gbps") if r[f"{c}_ratio"] is not None]
    outside = [(x, sp) for x, sp in cells if abs(x - 1) > TOLERANCE]
    return {"p50s_compared": len(cells), "p50s_outside_tolerance": len(outside),
            "outside_but_within_fixed_spread": sum(1 for x, sp in outside if sp is not None and abs(x - 1) <= sp),
            "fixed_spread_median": statistics.median(sp for _, sp in cells if sp is not None)
            if any(sp is not None for _, sp in cells) else None}


def _socket_loop(size: int, streams: int, reps: int) -> float:
    """Plain socket loops, `streams` of them at once each carrying its share of `size`: every
    loop's bytes over the slowest loop's time (as gdrlab counts its lanes), GB/s."""
    parts = lane_sizes(size, streams)
    exe = _compile_socket_loop()

    def one(part: int) -> tuple[float, float]:
        if exe:
            out = subprocess.run([exe, str(part), str(reps)], capture_output=True, text=True, timeout=300, check=True)
            g = json.loads(out.stdout)["gbps"]
        else:
            import socket_loop
            g = socket_loop.measure(part, 1, reps)
        return part * len(g), sum(part / (x * 1e9) for x in g)

    with ThreadPoolExecutor(streams) as ex:
        res = list(ex.map(one, parts))
    return sum(b for b, _ in res) / max(t for _, t in res) / 1e9


_EXE: list[str] = []


def _compile_socket_loop() -> str:
    if _EXE:
        return _EXE[0]
    cc = shutil.which("cc") or shutil.which("gcc")
    exe = ""
    if cc:
        exe = os.path.join(tempfile.mkdtemp(prefix="socket_loop"), "socket_loop")
        if subprocess.run([cc, "-O2", str(HERE / "socket_loop.c"), "-o", exe]).returncode != 0:
            exe = ""
    _EXE.append(exe)
    return exe


def _streams(size: int, counts: list[int], reps: int) -> dict:
    out: dict[str, dict] = {}
    for n in counts:
        g, ref = [], []
        for _ in range(reps):  # alternate, so drift hits both
            df = bench("host", [size], mode="bw", local_peer="process", parity=Parity(lanes=n))
            g.append(float(df["bw_gbps"].iloc[0]))
            ref.append(_socket_loop(size, n, 8))
        out[str(n)] = {"gdrlab_gbps": statistics.median(g), "socket_loop_gbps": statistics.median(ref),
                       "ratio": statistics.median(g) / statistics.median(ref), "gdrlab_all": g, "socket_loop_all": ref}
        log(f"host {size >> 20} MiB, {n} stream(s): gdrlab {out[str(n)]['gdrlab_gbps']:.2f} GB/s, "
            f"socket loop {out[str(n)]['socket_loop_gbps']:.2f} GB/s")
    return out


def _runnable(paths: list[str]) -> tuple[list[str], dict[str, str]]:
    ok, skipped = [], {}
    for p in paths:
        try:
            bench(p, [8], iters=2, local_peer="thread")
            ok.append(p)
        except GdrlabError as exc:
            skipped[p] = str(exc)
            log(f"{p}: not measured here: {exc}")
    return ok, skipped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="folder for sweep_speed.json")
    ap.add_argument("--paths", default="host,staged,shared,pipelined")
    ap.add_argument("--sizes", default="8:64M")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--budget", type=float, default=LIVE_DURATION_S,
                    help="adaptive: seconds per size (latency and bandwidth halves share it; default: the "
                         "live widgets' engine.LIVE_DURATION_S); sizes above 4 MiB take the least count instead")
    ap.add_argument("--streams", default="1,2,4", help="host 64 MiB stream counts, or 'none' to skip that part")
    ap.add_argument("--stream-size", default="64M")
    ap.add_argument("--no-interleaved", dest="interleaved", action="store_false",
                    help="skip the size-by-size comparison of the two methods on one connection")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = parse_sizes(a.sizes)
    paths, skipped = _runnable([p for p in a.paths.split(",") if p])
    doc: dict = {"sizes": sizes, "paths": paths, "not_measured": skipped, "reps": a.reps, "budget_s": a.budget,
                 "tolerance": TOLERANCE}
    if paths:
        fixed_s, adaptive_s, fixed_rows, adaptive_rows = [], [], [], []
        pair_rows: list[tuple[dict, dict]] = []
        for i in range(a.reps):
            for budget in ((None, a.budget) if i % 2 == 0 else (a.budget, None)):  # the order alternates
                s, r = _sweep(paths, sizes, budget)
                (fixed_s if budget is None else adaptive_s).append(s)
                (fixed_rows if budget is None else adaptive_rows).append(r)
            log(f"rep {i + 1}: fixed {sum(fixed_s[-1].values()):.2f} s, adaptive {sum(adaptive_s[-1].values()):.2f} s")
            if a.interleaved:
                pair_rows.append(_interleaved(paths, sizes, a.budget, first_fixed=i % 2 == 0))
        gpu = [p for p in GPU_SWEEP if p in paths]
        per_path = {p: {"fixed_s": statistics.median(x[p] for x in fixed_s),
                        "adaptive_s": statistics.median(x[p] for x in adaptive_s)} for p in paths}
        ratios = _ratios(fixed_rows, adaptive_rows, paths, sizes)
        worst = max((abs(r[f"{c}_ratio"] - 1), p, r["size"], c) for p in paths for r in ratios[p]
                    for c in ("lat_p50_us", "bw_gbps") if r[f"{c}_ratio"] is not None)
        doc["sweep"] = {
            "per_path": per_path,
            "all_paths_fixed_s": statistics.median(sum(x.values()) for x in fixed_s),
            "all_paths_adaptive_s": statistics.median(sum(x.values()) for x in adaptive_s),
            "gpu_paths": gpu,
            "gpu_paths_fixed_s": statistics.median(sum(x[p] for p in gpu) for x in fixed_s) if gpu else None,
            "gpu_paths_adaptive_s": statistics.median(sum(x[p] for p in gpu) for x in adaptive_s) if gpu else None,
            "worst_p50_deviation": {"ratio_minus_1": worst[0], "path": worst[1], "size": worst[2], "column": worst[3]},
            "all_within_tolerance": worst[0] <= TOLERANCE,
            **_outside(ratios, paths),
            "gpu_sweep_within_target": (statistics.median(sum(x[p] for p in gpu) for x in adaptive_s) <= TARGET_S
                                        if len(gpu) == len(GPU_SWEEP) else None),
        }
        doc["per_size"] = ratios
        if pair_rows:
            pairs = _ratios([f for f, _ in pair_rows], [ad for _, ad in pair_rows], paths, sizes)
            pworst = max((abs(r[f"{c}_ratio"] - 1), p, r["size"], c) for p in paths for r in pairs[p]
                         for c in ("lat_p50_us", "bw_gbps") if r[f"{c}_ratio"] is not None)
            doc["interleaved"] = {
                "what": "per size, the fixed and the adaptive measurement back to back on one connection (the "
                        "order alternating by rep): the method's own difference, without drift between two sweeps",
                "worst_p50_deviation": {"ratio_minus_1": pworst[0], "path": pworst[1], "size": pworst[2],
                                        "column": pworst[3]},
                "all_within_tolerance": pworst[0] <= TOLERANCE,
                "per_size": pairs}
        heads = {p: [r["fixed_lat_head_ratio"] for r in ratios[p] if r["fixed_lat_head_ratio"] is not None]
                 for p in paths}
        doc["position_effect"] = {
            "what": f"fixed run: p50 of the first {HEAD_LAT} latency samples of a test over the p50 of all, "
                    "median over sizes and reps (per size: per_size[].fixed_lat_head_ratio)",
            "by_path": {p: statistics.median(h) if h else None for p, h in heads.items()}}
    if a.streams == "none":
        doc["host_streams"] = None
    else:
        doc["host_streams"] = {"size": parse_size(a.stream_size),
                               "by_streams": _streams(parse_size(a.stream_size),
                                                      [int(x) for x in a.streams.split(",")], a.reps),
                               "reference": "bench/socket_loop.c (socket_loop.py without a C compiler), as many "
                                            "loops at once as streams"}
    doc["provenance"] = provenance.live({"what": "bench/sweep_speed.py " + " ".join(sys.argv[1:])}, machine())
    (out / "sweep_speed.json").write_text(json.dumps(doc, indent=1, default=float))
    log(f"wrote {out / 'sweep_speed.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
