"""What one test costs besides its timed messages, per path and size, and what its parts cost.

A live sweep runs a few tests per size; above a few MiB what a test costs outside its timed
iterations (buffers, staging, the verification exchange) decides how long the sweep takes. Per
path and size, over one connection to a thread peer (as the sweeps), median of --reps:
  test_s      the wall time of one latency test of --iters round trips (no warm-up)
  data_s      the time of its round trips (twice the sum of its half-round-trip samples)
  fixed_s     test_s - data_s: what the test cost besides its messages
  fixed_over_data  fixed_s / data_s
and the parts, each timed alone in this process: pinned and device buffer allocate + free, the
pattern fill and check of a device message (on the GPU where the engine's kernels load, through
host memory with GDRLAB_PATTERN_KERNELS=0: run the script both ways to compare; the JSON says
which), and a host fill + check as the reference for the host route.

    python bench/test_overhead.py OUT_DIR [--paths host,staged,shared,pipelined] [--sizes 1M,8M,64M]
                                          [--iters 3] [--reps 5]

Writes OUT_DIR/test_overhead[-no-kernels].json (the suffix with GDRLAB_PATTERN_KERNELS=0)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from gdrlab import engine, provenance  # noqa: E402
from gdrlab.transfer.buffers import machine  # noqa: E402
from gdrlab.transfer.peers import ThreadPeer  # noqa: E402
from gdrlab.transfer.tcp_wire import Connection  # noqa: E402
from gdrlab.units import parse_sizes  # noqa: E402


def med(f, reps: int) -> float:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def parts(size: int, reps: int, gpu: bool) -> dict:
    nat = engine.native()
    r: dict = {}
    host = nat.Buffer("pageable", size)
    r["pageable_fill_s"] = med(lambda: host.fill_pattern(1, 0, size), reps)
    r["pageable_check_s"] = med(lambda: host.check_pattern(1, 0, size), reps)
    if not gpu:
        return r
    r["pinned_alloc_free_s"] = med(lambda: nat.Buffer("pinned", size), reps)
    r["device_alloc_free_s"] = med(lambda: nat.Buffer("device", size), reps)
    dev = nat.Buffer("device", size)
    r["device_fill_s"] = med(lambda: dev.fill_pattern(2, 0, size), reps)
    r["device_check_s"] = med(lambda: dev.check_pattern(2, 0, size), reps)
    assert dev.check_pattern(2, 0, size) == -1
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--paths", default="host,staged,shared,pipelined")
    ap.add_argument("--sizes", default="1M,8M,64M")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    sizes = [int(s) for s in parse_sizes(a.sizes.split(","))]
    st = engine.cuda_status()
    gpu = bool(st["usable"])
    paths = [p for p in a.paths.split(",") if p == "host" or gpu]
    nat = engine.native()
    kernels = gpu and bool(nat.pattern_gpu_ready(0))
    res: dict = {"iters": a.iters, "reps": a.reps, "pattern_kernels": kernels,
                 "GDRLAB_PATTERN_KERNELS": os.environ.get("GDRLAB_PATTERN_KERNELS"), "tests": {}, "parts": {}}
    for s in sizes:
        res["parts"][s] = parts(s, a.reps, gpu)
        print(f"parts {s >> 20} MiB: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in res["parts"][s].items()),
              file=sys.stderr, flush=True)
    with ThreadPeer(timeout_s=60) as peer:
        c = Connection("127.0.0.1", peer.port, peer.token, timeout_s=60)
        for p in paths:
            c.measure(p, sizes[0], mode="lat", iters=2, warmup=1)  # the path's first use (context, modules)
            res["tests"][p] = {}
            for s in sizes:
                rows = []
                for _ in range(a.reps):
                    t = time.perf_counter()
                    samples, _, ok, _ = c.measure(p, s, mode="lat", iters=a.iters, warmup=0)
                    wall = time.perf_counter() - t
                    assert ok, (p, s)
                    data = 2 * float(sum(samples))
                    rows.append((wall, data))
                test_s = statistics.median(w for w, _ in rows)
                data_s = statistics.median(d for _, d in rows)
                fixed = statistics.median(w - d for w, d in rows)
                res["tests"][p][s] = {"test_s": test_s, "data_s": data_s, "fixed_s": fixed,
                                      "fixed_over_data": fixed / data_s if data_s else None}
                print(f"{p:9s} {s >> 20:3d} MiB: test {test_s * 1e3:7.1f} ms, data {data_s * 1e3:7.1f} ms, "
                      f"fixed {fixed * 1e3:7.1f} ms", file=sys.stderr, flush=True)
        del c
    res["provenance"] = provenance.live({"what": "bench/test_overhead.py " + " ".join(sys.argv[2:])}, machine())
    a.out.mkdir(parents=True, exist_ok=True)
    name = "test_overhead" + ("-no-kernels" if os.environ.get("GDRLAB_PATTERN_KERNELS") == "0" else "") + ".json"
    (a.out / name).write_text(json.dumps(res, indent=1, default=str))
    print(a.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
