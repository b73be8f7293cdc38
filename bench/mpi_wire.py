"""`gdrlab bench --wire mpi` on a GPU machine, beside gdrlab's own engine, in one run.

For each repetition (the two sides alternate, so drift hits both):
  * the MPI wire between two ranks of `mpirun -n 2`, GPU memory on both sides (device/device) when
    the MPI library is CUDA-aware, else the refusal it gives (recorded as such, not as a number);
  * the MPI wire with pageable host memory (what any MPI can do);
  * gdrlab's own pipelined path over tcp between two processes (the reference).
Reports the median of the repetitions at 8 B, 64 KiB and 64 MiB and the ratios MPI / gdrlab.

    python bench/mpi_wire.py OUTDIR [--reps 3] [--sizes 8,64K,64M]

Writes OUTDIR/mpi_wire.json. Needs mpirun and mpi4py; CuPy for GPU memory.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _mpirun(*args: str) -> dict:
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if mpirun is None:
        return {"error": "mpirun not found"}
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout
    flags = ["--allow-run-as-root", "--oversubscribe"] if "Open MPI" in version else []
    if "Open MPI" in version and not (shutil.which("ssh") or shutil.which("rsh")):
        # one node needs no remote shell, but Open MPI refuses to start when its agent is missing
        flags += ["--mca", "plm_rsh_agent", shutil.which("false") or "/bin/false"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    proc = subprocess.run([mpirun, *flags, "-n", "2", sys.executable, "-m", "gdrlab", "bench", "--wire", "mpi",
                           *args, "--json"], capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"error": f"rc {proc.returncode}: {proc.stderr.strip()[-400:]}"}


def _gdrlab(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "gdrlab", "bench", *args, "--json"], capture_output=True,
                          text=True, timeout=900, cwd=ROOT)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"error": f"rc {proc.returncode}: {proc.stderr.strip()[-400:]}"}


def _by_size(doc: dict) -> dict[int, dict]:
    return {r["size"]: r for r in doc.get("rows", [])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="8,64K,64M")
    a = ap.parse_args()
    out = Path(a.outdir)
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {"mpi_device": [], "mpi_pageable": [], "gdrlab_pipelined": []}
    for rep in range(a.reps):
        order = list(runs) if rep % 2 == 0 else list(reversed(runs))
        for name in order:
            log(f"rep {rep + 1}/{a.reps}: {name}")
            if name == "mpi_device":
                runs[name].append(_mpirun("--src-mem", "device", "--dst-mem", "device", "--sizes", a.sizes))
            elif name == "mpi_pageable":
                runs[name].append(_mpirun("--src-mem", "pageable", "--dst-mem", "pageable", "--sizes", a.sizes))
            else:
                runs[name].append(_gdrlab("--path", "pipelined", "--local-peer", "process", "--sizes", a.sizes))
    summary: dict = {}
    for name, docs in runs.items():
        errors = [d["error"] for d in docs if "error" in d]
        sizes = sorted({s for d in docs for s in _by_size(d)})
        rows = {}
        for s in sizes:
            got = [_by_size(d)[s] for d in docs if s in _by_size(d)]
            rows[s] = {"lat_p50_us": statistics.median(r["lat_p50_us"] for r in got),
                       "bw_gbps": statistics.median(r["bw_gbps"] for r in got),
                       "verified": all(r["verified"] for r in got), "reps": len(got)}
        summary[name] = {"rows": rows, "errors": errors,
                         "provenance": next((d.get("provenance") for d in docs if "provenance" in d), None)}
    ref = summary["gdrlab_pipelined"]["rows"]
    for name in ("mpi_device", "mpi_pageable"):
        for s, r in summary[name]["rows"].items():
            if s in ref:
                r["bw_ratio_vs_gdrlab_pipelined"] = r["bw_gbps"] / ref[s]["bw_gbps"] if ref[s]["bw_gbps"] else None
                r["lat_ratio_vs_gdrlab_pipelined"] = r["lat_p50_us"] / ref[s]["lat_p50_us"] if ref[s]["lat_p50_us"] else None
    (out / "mpi_wire.json").write_text(json.dumps(summary, indent=2, default=str))
    log(json.dumps({k: {"errors": v["errors"], "sizes": list(v["rows"])} for k, v in summary.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
