#!/usr/bin/env python3
"""Honest clients beside a handshake-pool attack on `gdrlab serve` (loopback only).

An attacker process keeps `--held` unauthenticated sockets open that never send a byte, and
reopens the ones the server closes at up to R new connections a second; beside it, honest
clients loop: connect, authenticate, one verified 4 KiB host test, close. Reported per rate:
honest attempts served / made, their time to a verified test (p50, p99), and how the others
failed. The reference is the same honest loop in the same run with no attacker.

    python bench/serve_pool.py                       # rates 120, 300, 1000/s, 10 s each
    python bench/serve_pool.py --rates 300 --seconds 5 --json results/serve-pool.json

Two placements of the attacker: on the honest clients' own address (127.0.0.1, the case where
one host, or a NAT shared with learners, attacks) and spread over 127.0.0.2-127.0.0.9 (more
sockets than the pool has places, from addresses other than the learners').
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import selectors
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def attacker(port: int, held: int, rate: float, seconds: float, sources: list[str]) -> None:
    """Hold `held` silent sockets; reopen closed ones at up to `rate` per second."""
    sel = selectors.DefaultSelector()
    open_n, opened, i = 0, 0, 0
    end = time.monotonic() + seconds
    allowance, last = 0.0, time.monotonic()
    while time.monotonic() < end:
        now = time.monotonic()
        allowance = min(allowance + (now - last) * rate, max(rate / 10, 1.0))
        last = now
        while open_n < held and (opened < held or allowance >= 1):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.bind((sources[i % len(sources)], 0))
                s.connect_ex(("127.0.0.1", port))
            except OSError:
                s.close()
                break
            i += 1
            sel.register(s, selectors.EVENT_READ)
            open_n += 1
            if opened >= held:
                allowance -= 1
            opened += 1
        for key, _ in sel.select(timeout=0.005):
            s = key.fileobj
            try:
                s.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                pass
            sel.unregister(s)  # answered ("server busy", a timeout) or closed: let it go, reopen later
            s.close()
            open_n -= 1
    print(json.dumps({"opened": opened}), flush=True)


def honest_loop(port: int, token: str, seconds: float) -> dict:
    from gdrlab import engine
    times, failures = [], {}
    end = time.monotonic() + seconds
    attempts = 0
    while time.monotonic() < end:
        attempts += 1
        t = time.monotonic()
        try:
            with engine.Connection("127.0.0.1", port, token, timeout_s=10) as c:
                if not c.run("host", 4096, iters=1, warmup=0)[2]:
                    raise RuntimeError("not verified")
            times.append(time.monotonic() - t)
        except Exception as exc:  # noqa: BLE001 - counted by kind
            key = f"{type(exc).__name__}: {str(exc)[:80]}"
            failures[key] = failures.get(key, 0) + 1
    q = statistics.quantiles(times, n=100) if len(times) >= 2 else times * 99
    return {"attempts": attempts, "served": len(times),
            "p50_ms": round(statistics.median(times) * 1e3, 2) if times else None,
            "p99_ms": round(q[98] * 1e3, 2) if times else None, "failures": failures}


def start_serve(token: str, *extra: str, stderr: int = subprocess.DEVNULL) -> tuple[subprocess.Popen, int]:
    """`gdrlab serve` on 127.0.0.1, a free port, with `extra` flags: (process, port)."""
    env = dict(os.environ, GDRLAB_TOKEN=token, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "gdrlab", "serve", "--listen", "127.0.0.1:0", "--announce", *extra],
                            stdout=subprocess.PIPE, stderr=stderr, env=env)
    port = json.loads(proc.stdout.readline())["port"]
    return proc, port


def write_results(path: Path | None, benchmark: str, rows: list) -> None:
    """The benchmark's JSON document (loopback, cores, UTC date, rows) into ``path``, if given."""
    if path is None:
        return
    doc = {"benchmark": benchmark, "loopback": True, "cores": os.cpu_count(),
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="120,300,1000", help="attacker's new connections per second (comma list)")
    ap.add_argument("--held", type=int, default=600, help="silent sockets the attacker keeps open (default 600)")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each run (default 10)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--attack", nargs=5, metavar=("PORT", "HELD", "RATE", "SECONDS", "SOURCES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.attack:
        port, held, rate, seconds, sources = args.attack
        attacker(int(port), int(held), float(rate), float(seconds), sources.split(","))
        return 0
    token = secrets.token_hex(16)
    proc, port = start_serve(token)
    rows = []
    try:
        ref = honest_loop(port, token, args.seconds)
        rows.append({"attacker": "none (reference)", "rate_per_s": 0, **ref})
        print(f"reference: {ref['served']}/{ref['attempts']} served, p50 {ref['p50_ms']} ms, p99 {ref['p99_ms']} ms",
              flush=True)
        placements = {"same address as the learners (127.0.0.1)": ["127.0.0.1"],
                      "8 other addresses (127.0.0.2-9)": [f"127.0.0.{i}" for i in range(2, 10)]}
        for where, sources in placements.items():
            for rate in [float(r) for r in args.rates.split(",")]:
                atk = subprocess.Popen([sys.executable, __file__, "--attack", str(port), str(args.held), str(rate),
                                        str(args.seconds + 2), ",".join(sources)], stdout=subprocess.PIPE)
                time.sleep(1.0)  # the attacker's sockets are open before the honest loop starts
                res = honest_loop(port, token, args.seconds)
                out, _ = atk.communicate(timeout=60)
                opened = json.loads(out.decode().strip().splitlines()[-1])["opened"]
                rows.append({"attacker": where, "rate_per_s": rate, "held": args.held, "attacker_opened": opened, **res})
                print(f"{where}, {rate:.0f}/s ({opened} opened): {res['served']}/{res['attempts']} served, "
                      f"p50 {res['p50_ms']} ms, p99 {res['p99_ms']} ms, failures {res['failures']}", flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    write_results(args.json, "serve handshake pool under attack", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
