"""8-byte host latency over the tcp wire on loopback, for comparing engine builds in one run.

Each build (a compiled gdrlab._native .so) gets a server process of its own; every repetition
starts one client process per build, in alternating order (so drift hits both alike), which runs
one latency test (`iters` round trips after `warmup`) and reports the median one-way latency.
The figure per build is the median of those medians.

    python bench/host_latency.py --build before=/tmp/old/_native...so --build after=.venv/.../_native...so \
        [--reps 11] [--iters 20000] [--size 8] [--json out.json]

With no --build, the installed engine is measured alone. NAME=CLIENT_SO,SERVER_SO runs the client
of one build against the server of another (to see one side's share of a difference).
--spin 0,50 measures every build once per spin budget (GDRLAB_SPIN_US for both sides; 0: every
receive blocks at once), interleaved in the same run: the comparison the engine's default rests on.
Each figure is reported as the median over repetitions of the test's p50 and of its p99.
"""
from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import threading


def load(so: str | None):
    if not so:
        from gdrlab import engine
        return engine.native()
    loader = importlib.machinery.ExtensionFileLoader("gdrlab._native", so)
    spec = importlib.util.spec_from_file_location("gdrlab._native", so, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def serve(so: str | None) -> None:
    nat = load(so)
    server = nat.Server("127.0.0.1", 0, "bench", 10000)
    print(server.port, flush=True)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    while not stop.is_set():
        server.serve_for(200)
    server.stop(2000)


def client(so: str | None, port: int, size: int, iters: int, warmup: int) -> None:
    nat = load(so)
    c = nat.Client("127.0.0.1", port, "bench", 10000)
    out = c.run("host", 0, size, iters, warmup, 1, 0, 0, 0, 12345)
    c.close()
    assert out[2], "not verified"
    lat = sorted(out[0])
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    print(json.dumps({"p50_us": statistics.median(lat) * 1e6, "p99_us": p99 * 1e6}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="append", default=[], metavar="NAME=SO")
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--size", type=int, default=8)
    ap.add_argument("--json", default=None)
    ap.add_argument("--spin", default=None, metavar="US[,US...]",
                    help="spin budgets to compare (GDRLAB_SPIN_US on both sides), e.g. 0,50")
    ap.add_argument("--role", choices=("serve", "client"), help=argparse.SUPPRESS)
    ap.add_argument("--so", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "serve":
        serve(a.so)
        return 0
    if a.role == "client":
        client(a.so, a.port, a.size, a.iters, a.warmup)
        return 0
    builds = [b.split("=", 1) for b in a.build] or [["installed", ""]]
    me = [sys.executable, __file__]
    builds = [[name, so.split(",")[0]] for name, so in builds]
    serve_so = {name: (so.split(",") + [so])[1] for name, so in (b.split("=", 1) for b in a.build)} or {"installed": ""}
    spins = [s.strip() for s in a.spin.split(",")] if a.spin else [None]
    if any(s is not None and not s.isdecimal() for s in spins):
        ap.error(f"--spin takes microseconds separated by commas, got {a.spin!r}")
    env_of: dict[str, dict[str, str]] = {}
    variants = []
    for name, so in builds:
        for spin in spins:
            vname = name if spin is None else f"{name} spin={spin}"
            env = dict(os.environ)
            if spin is not None:
                env["GDRLAB_SPIN_US"] = spin
            env_of[vname] = env
            serve_so[vname] = serve_so[name]
            variants.append([vname, so])
    builds = variants
    servers = {}
    for name, _so in builds:
        p = subprocess.Popen([*me, "--role", "serve", "--so", serve_so[name]], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env_of[name])
        servers[name] = (p, int(p.stdout.readline()))
    res: dict[str, list[float]] = {name: [] for name, _ in builds}
    res99: dict[str, list[float]] = {name: [] for name, _ in builds}
    try:
        for r in range(a.reps):
            order = builds if r % 2 == 0 else builds[::-1]
            for name, so in order:
                out = subprocess.run([*me, "--role", "client", "--so", so, "--port", str(servers[name][1]),
                                      "--size", str(a.size), "--iters", str(a.iters), "--warmup", str(a.warmup)],
                                     check=True, capture_output=True, text=True, env=env_of[name]).stdout
                res[name].append(json.loads(out)["p50_us"])
                res99[name].append(json.loads(out)["p99_us"])
            print(f"[{r + 1}/{a.reps}] " + ", ".join(f"{n} {res[n][-1]:.2f} us" for n, _ in builds),
                  file=sys.stderr, flush=True)
    finally:
        for p, _ in servers.values():
            p.stdin.close()
            p.wait(30)
    doc = {"builds": {name: {"client": so, "server": serve_so[name]} for name, so in builds},
           "spin_us": {n: env_of[n].get("GDRLAB_SPIN_US", "50 (default)") for n, _ in builds},
           "size": a.size, "iters": a.iters, "warmup": a.warmup, "reps": a.reps,
           "p50_us": res, "p99_us": res99, "median_of_p50_us": {n: statistics.median(v) for n, v in res.items()},
           "median_of_p99_us": {n: statistics.median(v) for n, v in res99.items()}}
    print(json.dumps(doc, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
