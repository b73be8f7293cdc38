"""Copy engines vs the SM copy kernel vs the raw driver copy, on one GPU, in one run.

At one size (64 MiB) for h2d, d2h, d2d (inside the GPU) and bidir (h2d and d2h at once, bytes of
both counted), each repetition measures, in turn:
  raw  bench/raw_copy.cpp: cuMemcpy*Async + cuStreamSynchronize straight on the driver (host clock)
  ce   gdrlab's copy run with the copy engines  (gdrlab copy --engine ce)
  sm   gdrlab's copy run with the SM copy kernel (gdrlab copy --engine sm)
gdrlab's runs give host-clock and CUDA-event GB/s; the ratios use the host clock on both sides
(the raw reference has no events). Every gdrlab copy is verified outside the timed window (check
every sample), as the command does. Medians over the repetitions; the sides alternate inside each
repetition so drift hits all of them.

    python bench/copy_engines.py OUTDIR [--reps 5] [--iters 30] [--size 64M] [--raw-copy ./raw_copy]

Writes OUTDIR/copy_engines.json. Without --raw-copy, bench/raw_copy.cpp is compiled with g++ against
$CUDA_HOME (default /usr/local/cuda).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from gdrlab import provenance
from gdrlab.transfer import copies
from gdrlab.transfer.buffers import cuda_status, machine
from gdrlab.units import parse_sizes

CASES = ("h2d", "d2h", "d2d", "bidir")
#: the raw reference's key and how many bytes one of its samples moves, per size
RAW_KEYS = {"h2d": ("h2d_s", 1), "d2h": ("d2h_s", 1), "d2d": ("d2d_s", 1), "bidir": ("bidir_s", 2)}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_raw(out: Path) -> str:
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    exe = out / "raw_copy"
    src = Path(__file__).with_name("raw_copy.cpp")
    subprocess.run(["g++", "-O2", "-std=c++17", str(src), f"-I{cuda_home}/include", f"-L{cuda_home}/lib64/stubs",
                    "-lcuda", "-o", str(exe)], check=True)
    return str(exe)


def legs_for(case: str) -> list:
    if case == "bidir":
        return copies.copy_legs("h2d", bidir=True)
    return copies.copy_legs(case)


def gdrlab_gbps(case: str, engine: str, size: int, iters: int) -> tuple[float, float]:
    row = copies.run_legs(legs_for(case), [size], iters, engine=engine, warmup=5)[0]
    return float(row["host_bw_gbps"]), float(row["event_bw_gbps"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="output folder (created)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30, help="timed copies per measurement")
    ap.add_argument("--size", default="64M")
    ap.add_argument("--raw-copy", default=None, help="a compiled bench/raw_copy.cpp (default: build it)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    st = cuda_status()
    if not st["usable"]:
        log(f"copy_engines: no usable GPU: {st['reason']}")
        return 2
    (size,) = parse_sizes(a.size)
    raw_exe = a.raw_copy or build_raw(out)
    samples: dict = {c: {k: [] for k in ("raw", "ce_host", "ce_event", "sm_host", "sm_event")} for c in CASES}
    for rep in range(a.reps):
        raw = json.loads(subprocess.run([raw_exe, str(size), str(a.iters), "200"], check=True, capture_output=True,
                                        text=True).stdout)
        for case in CASES:
            key, mult = RAW_KEYS[case]
            samples[case]["raw"].append(mult * size / raw[key] / 1e9)
            for engine in copies.ENGINES:
                host, event = gdrlab_gbps(case, engine, size, a.iters)
                samples[case][f"{engine}_host"].append(host)
                samples[case][f"{engine}_event"].append(event)
            s = samples[case]
            log(f"[{rep + 1}/{a.reps}] {case:5s} raw {s['raw'][-1]:7.2f}  ce {s['ce_host'][-1]:7.2f} "
                f"(event {s['ce_event'][-1]:7.2f})  sm {s['sm_host'][-1]:7.2f} (event {s['sm_event'][-1]:7.2f}) GB/s")
    result: dict = {"size": size, "reps": a.reps, "iters": a.iters, "unit": "GB/s (1e9 B/s)",
                    "timing": "ratios on the host clock (raw has no events); *_event: CUDA events around each copy",
                    "sm_kernel": {k: v for k, v in copies.sm_kernel().items() if k != "ptx"}, "cases": {}}
    for case in CASES:
        s = samples[case]
        med = {k: statistics.median(v) for k, v in s.items()}
        result["cases"][case] = {
            "samples": s, "median": med,
            "ratio": {"ce_vs_raw": med["ce_host"] / med["raw"], "sm_vs_raw": med["sm_host"] / med["raw"],
                      "sm_vs_ce": med["sm_host"] / med["ce_host"],
                      "sm_vs_ce_event": med["sm_event"] / med["ce_event"]},
            "nvbandwidth": {e: copies.nvbandwidth_testcase("h2d" if case == "bidir" else case, "one-to-one", e,
                                                           bidir=case == "bidir", same_gpu=case == "d2d")
                            for e in copies.ENGINES},
        }
    result["provenance"] = provenance.live({"what": "bench/copy_engines.py"}, machine())
    (out / "copy_engines.json").write_text(json.dumps(result, indent=2, default=str))
    log(f"{'case':6s} {'raw':>8s} {'ce':>8s} {'sm':>8s} {'ce/raw':>7s} {'sm/raw':>7s} {'sm/ce':>7s}")
    for case, r in result["cases"].items():
        m, q = r["median"], r["ratio"]
        log(f"{case:6s} {m['raw']:8.2f} {m['ce_host']:8.2f} {m['sm_host']:8.2f} {q['ce_vs_raw']:7.3f} "
            f"{q['sm_vs_raw']:7.3f} {q['sm_vs_ce']:7.3f}")
    log(f"wrote {out / 'copy_engines.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
