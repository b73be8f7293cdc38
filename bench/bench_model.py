"""How fast the model redraws and fits: the budgets a slider and a lab need.

Budgets: predicting 30 sizes for every path of one profile <= 20 ms (a slider redraw);
fitting h200-lab to the recorded files <= 2 s. Run: python bench/bench_model.py [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from gdrlab import model
from gdrlab.model import calibrate_h200

SIZES = np.geomspace(8, 256 << 20, 30).round()


def _median_s(fn, repeat: int) -> float:
    fn()  # warm caches (profile loading, imports)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args(argv)
    results = {}
    for name in model.profiles():
        prof = model.get_profile(name)
        paths = model.available_paths(prof)
        df_s = _median_s(lambda: model.predict_all(prof, SIZES), args.repeat)
        core_s = _median_s(lambda: [model.latency_us(prof, p, SIZES) for p in paths], args.repeat)
        slider_s = _median_s(lambda: [model.latency_us(name, p, SIZES, p2p_read_gbps=0.8) for p in paths],
                             args.repeat)
        # The exact pipeline schedule's worst case: 4 KiB chunks (65536 of them at 256 MiB), 16 buffers.
        pipe_s = _median_s(lambda: model.latency_us(prof, "pipelined", SIZES, chunk=4096, depth=16), args.repeat)
        results[name] = {"paths": len(paths), "predict_all_ms": df_s * 1e3, "latency_us_all_paths_ms": core_s * 1e3,
                         "latency_us_with_override_ms": slider_s * 1e3, "pipelined_4k_chunks_depth16_ms": pipe_s * 1e3}
    fit_s = _median_s(calibrate_h200.build_h200_lab, 5)
    worst = max(max(r["predict_all_ms"], r["pipelined_4k_chunks_depth16_ms"]) for r in results.values())
    doc = {"sizes": len(SIZES), "profiles": results, "fit_h200_lab_s": fit_s,
           "budget": {"predict_all_ms": 20.0, "fit_s": 2.0},
           "ok": worst <= 20.0 and fit_s <= 2.0}
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        for name, r in results.items():
            print(f"{name:<16} {r['paths']} paths x {len(SIZES)} sizes: predict_all {r['predict_all_ms']:.2f} ms, "
                  f"latency_us {r['latency_us_all_paths_ms']:.2f} ms, with override "
                  f"{r['latency_us_with_override_ms']:.2f} ms, pipelined 4K chunks x16 buffers "
                  f"{r['pipelined_4k_chunks_depth16_ms']:.2f} ms (budget 20 ms)")
        print(f"fit h200-lab: {fit_s:.3f} s (budget 2 s)")
        print("OK" if doc["ok"] else "OVER BUDGET")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
