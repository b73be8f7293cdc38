"""Engine benchmarks, each reported as a ratio against a reference measured in the same run,
median of several repetitions (the two sides alternate so drift hits both equally).

  1. pinned H2D / D2H at 64 MiB through gdrlab.copy_bench vs raw cuMemcpyAsync+sync (raw_copy)
  2. 8-byte D2H latency p50 through the engine vs the raw driver call: overhead in us
  3. pipelined GPU->tcp->GPU at 64 MiB vs min(D2H, plain socket loop, H2D); pipelined / staged
  4. host over tcp at 64 MiB vs a plain socket loop between two processes (CPU only)

    python bench/bench_engine.py --out results/engine.json [--raw-copy ./raw_copy] [--reps 5] [--cpu-only]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import socket_loop  # noqa: E402

import gdrlab  # noqa: E402
from gdrlab import engine, provenance  # noqa: E402

MiB = 1 << 20


def med(xs):
    return statistics.median(xs)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def engine_bw(path: str, size: int, iters: int = 8) -> float:
    df = gdrlab.bench(path=path, sizes=[size], iters=iters, mode="bw")
    return float(df["bw_gbps"].iloc[0])


def c_socket_loop(size: int, reps: int = 8) -> float:
    """Median GB/s of the C reference (bench/socket_loop.c), compiled on first use."""
    exe = Path("/tmp/gdrlab-socket-loop")
    if not exe.exists():
        subprocess.run(["cc", "-O2", str(Path(__file__).with_name("socket_loop.c")), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe), str(size), str(reps)], check=True, capture_output=True, text=True).stdout
    return med(json.loads(out)["gbps"])


def bench_host_vs_socket(reps: int) -> dict:
    eng, ref_c, ref_py = [], [], []
    for r in range(reps):
        eng.append(engine_bw("host", 64 * MiB))
        ref_c.append(c_socket_loop(64 * MiB))
        ref_py.append(med(socket_loop.measure(64 * MiB, 1, 8)))
        log(f"[host tcp {r + 1}/{reps}] engine {eng[-1]:.2f} GB/s, C socket loop {ref_c[-1]:.2f}, "
            f"Python socket loop {ref_py[-1]:.2f} GB/s")
    return {"engine_gbps": eng, "c_socket_loop_gbps": ref_c, "python_socket_loop_gbps": ref_py,
            "ratio": med(eng) / med(ref_c), "ratio_vs_python": med(eng) / med(ref_py), "target": ">= 0.85"}


def bench_copies(reps: int, raw_copy: str) -> dict:
    out = {"h2d": {"engine_gbps": [], "raw_gbps": []}, "d2h": {"engine_gbps": [], "raw_gbps": []},
           "d2h_8b": {"engine_us": [], "raw_us": []}}
    for r in range(reps):
        raw = json.loads(subprocess.run([raw_copy, str(64 * MiB), "50", "2000"], check=True, capture_output=True,
                                        text=True).stdout)
        for d in ("h2d", "d2h"):
            df = gdrlab.copy_bench(d, [64 * MiB], iters=50, memory="pinned")
            out[d]["engine_gbps"].append(float(df["bw_gbps"].iloc[0]))
            out[d]["raw_gbps"].append(64 * MiB / raw[f"{d}_s"] / 1e9)
        df8 = gdrlab.copy_bench("d2h", [8], iters=2000, memory="pinned")
        out["d2h_8b"]["engine_us"].append(float(df8["lat_p50_us"].iloc[0]))
        out["d2h_8b"]["raw_us"].append(raw["d2h_8b_s"] * 1e6)
        log(f"[copies {r + 1}/{reps}] h2d {out['h2d']['engine_gbps'][-1]:.2f}/{out['h2d']['raw_gbps'][-1]:.2f} "
            f"d2h {out['d2h']['engine_gbps'][-1]:.2f}/{out['d2h']['raw_gbps'][-1]:.2f} GB/s, "
            f"8B d2h {out['d2h_8b']['engine_us'][-1]:.2f}/{out['d2h_8b']['raw_us'][-1]:.2f} us")
    for d in ("h2d", "d2h"):
        out[d]["ratio"] = med(out[d]["engine_gbps"]) / med(out[d]["raw_gbps"])
        out[d]["target"] = ">= 0.97"
    out["d2h_8b"]["overhead_us"] = med(out["d2h_8b"]["engine_us"]) - med(out["d2h_8b"]["raw_us"])
    out["d2h_8b"]["target"] = "<= 1 us"
    return out


def bench_pipelined(reps: int) -> dict:
    pipe, staged, sock, d2h, h2d = [], [], [], [], []
    for r in range(reps):
        pipe.append(engine_bw("pipelined", 64 * MiB))
        staged.append(engine_bw("staged", 64 * MiB))
        sock.append(c_socket_loop(64 * MiB))
        d2h.append(float(gdrlab.copy_bench("d2h", [64 * MiB], iters=20)["bw_gbps"].iloc[0]))
        h2d.append(float(gdrlab.copy_bench("h2d", [64 * MiB], iters=20)["bw_gbps"].iloc[0]))
        log(f"[pipelined {r + 1}/{reps}] pipelined {pipe[-1]:.2f}, staged {staged[-1]:.2f}, socket {sock[-1]:.2f}, "
            f"d2h {d2h[-1]:.1f}, h2d {h2d[-1]:.1f} GB/s")
    bound = min(med(d2h), med(sock), med(h2d))
    return {"pipelined_gbps": pipe, "staged_gbps": staged, "socket_loop_gbps": sock, "d2h_gbps": d2h, "h2d_gbps": h2d,
            "ratio_vs_bound": med(pipe) / bound, "bound_gbps": bound, "target_vs_bound": ">= 0.85",
            "ratio_vs_staged": med(pipe) / med(staged), "target_vs_staged": ">= 1.5"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--raw-copy", default=None, help="path to the compiled raw_copy reference")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cpu-only", action="store_true")
    a = ap.parse_args()
    t0 = time.time()
    res = {"provenance": provenance.live({"what": "bench/bench_engine.py", "reps": a.reps}, engine.machine())}
    res["host_tcp_vs_socket_loop"] = bench_host_vs_socket(a.reps)
    if not a.cpu_only:
        if not a.raw_copy:
            ap.error("--raw-copy is required unless --cpu-only")
        res["copies_vs_raw_driver"] = bench_copies(a.reps, a.raw_copy)
        res["pipelined_vs_bound"] = bench_pipelined(a.reps)
    res["elapsed_s"] = time.time() - t0
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2))
    summary = {"host_tcp_ratio": res["host_tcp_vs_socket_loop"]["ratio"]}
    if not a.cpu_only:
        c = res["copies_vs_raw_driver"]
        p = res["pipelined_vs_bound"]
        summary.update({"h2d_ratio": c["h2d"]["ratio"], "d2h_ratio": c["d2h"]["ratio"],
                        "d2h_8b_overhead_us": c["d2h_8b"]["overhead_us"],
                        "pipelined_vs_bound": p["ratio_vs_bound"], "pipelined_vs_staged": p["ratio_vs_staged"]})
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
