#!/usr/bin/env python3
"""The hostile-load probe's figures for `gdrlab serve`, repeated as a benchmark (loopback only).

Stages (each prints one line and adds rows to --json):
  sessions   64 and 128 honest sessions at once (3 verified host tests each, started together):
             verified, told "server busy", other errors; handshake p50/p99
  latency    one good client, 200 sessions in a row: connect + handshake + one verified 4 KiB
             test, p50/p99 (the reference for every other stage's times)
  guessing   wrong-token answers per second: one sequential guesser; 64 parallel guessers from
             one address; 64 parallel guessers rotating through 127.0.0.0/8
  held       honest clients beside 600 held silent sockets (bench/serve_pool.py, 300 new/s)
  stops      N stops (SIGTERM, every other one SIGINT) right after 8 concurrent clients: exit
             statuses, cores, `terminate called` and nanobind leak lines

    python bench/serve_probe.py                           # every stage, 50 stops
    python bench/serve_probe.py --stages guessing,stops --stops 10 --json results/serve-probe.json
"""
from __future__ import annotations

import argparse
import json
import secrets
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import serve_pool  # noqa: E402 - the pool benchmark's serve starter and attacker
STAGES = ("sessions", "latency", "guessing", "held", "stops")
MAGIC, VERSION, HELLO, REJECT = 0x4C524447, 1, 1, 3


def start_serve(token: str, *extra: str) -> tuple[subprocess.Popen, int]:
    return serve_pool.start_serve(token, *extra, stderr=subprocess.PIPE)  # stops read its stderr


def stop_serve(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return -9, err.decode(errors="replace") + "\n(killed: no exit within 30 s)"
    return proc.returncode, err.decode(errors="replace")


def pct(xs: list[float], q: int) -> float | None:
    if not xs:
        return None
    if len(xs) == 1:
        return round(xs[0] * 1e3, 2)
    return round(statistics.quantiles(xs, n=100)[q - 1] * 1e3, 2)


def sessions(port: int, token: str, n: int) -> dict:
    from gdrlab import engine
    barrier = threading.Barrier(n)
    out: dict = {"verified": 0, "busy": 0, "other": {}}
    hs: list[float] = []
    lock = threading.Lock()

    def one() -> None:
        barrier.wait(60)
        t = time.monotonic()
        try:
            with engine.Connection("127.0.0.1", port, token, timeout_s=10) as c:
                took = time.monotonic() - t
                ok = all(c.run("host", size, iters=5, warmup=0)[2] for size in (8, 4096, 65536))
            with lock:
                hs.append(took)
                out["verified"] += ok
        except Exception as exc:  # noqa: BLE001 - counted by kind
            key = "busy" if "server busy" in str(exc) else f"{type(exc).__name__}: {str(exc)[:80]}"
            with lock:
                if key == "busy":
                    out["busy"] += 1
                else:
                    out["other"][key] = out["other"].get(key, 0) + 1

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return {"clients": n, **out, "handshake_p50_ms": pct(hs, 50), "handshake_p99_ms": pct(hs, 99)}


def latency(port: int, token: str, n: int = 200) -> dict:
    from gdrlab import engine
    times = []
    for _ in range(n):
        t = time.monotonic()
        with engine.Connection("127.0.0.1", port, token, timeout_s=10) as c:
            assert c.run("host", 4096, iters=1, warmup=0)[2]
        times.append(time.monotonic() - t)
    return {"sessions": n, "p50_ms": pct(times, 50), "p99_ms": pct(times, 99)}


def _guess(port: int, source: str, token: bytes) -> bool:
    """One HELLO; True when it was answered REJECT."""
    body = struct.pack("<I", 1) + struct.pack("<I", len(token)) + token
    with socket.socket() as s:
        s.bind((source, 0))
        s.settimeout(15)
        s.connect(("127.0.0.1", port))
        s.sendall(struct.pack("<IHHII", MAGIC, VERSION, HELLO, 0, len(body)) + body)
        head = s.recv(16, socket.MSG_WAITALL)
        return len(head) == 16 and struct.unpack("<IHHII", head)[2] == REJECT


def guessing(port: int, threads: int, rotate: bool, seconds: float) -> dict:
    end = time.monotonic() + seconds
    counts = [0] * threads

    def loop(i: int) -> None:
        n = 0
        while time.monotonic() < end:
            n += 1
            src = f"127.{1 + i}.{n // 250 % 250}.{1 + n % 250}" if rotate else "127.0.0.1"
            try:
                counts[i] += _guess(port, src, secrets.token_hex(4).encode())
            except OSError:
                pass

    ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join(seconds + 60)
    took = time.monotonic() - t0
    return {"guessers": threads, "rotating": rotate, "answers": sum(counts),
            "per_s": round(sum(counts) / took, 2)}


def held(port: int, token: str, seconds: float) -> dict:
    atk = subprocess.Popen([sys.executable, str(ROOT / "bench" / "serve_pool.py"), "--attack", str(port), "600", "300",
                            str(seconds + 2), "127.0.0.1"], stdout=subprocess.PIPE)
    time.sleep(1.0)  # its sockets are open before the honest loop starts
    res = serve_pool.honest_loop(port, token, seconds)
    atk.communicate(timeout=60)
    return {"held": 600, "rate_per_s": 300, **res}


def stops(n: int) -> dict:
    from gdrlab import engine
    statuses: dict[str, int] = {}
    bad: list[str] = []
    for i in range(n):
        token = secrets.token_hex(8)
        proc, port = start_serve(token, "--timeout", "5")
        stop = threading.Event()

        def client() -> None:
            try:
                with engine.Connection("127.0.0.1", port, token, timeout_s=10) as c:
                    while not stop.is_set():
                        c.run("host", 65536, iters=10, warmup=0)
            except Exception:  # noqa: BLE001 - the server stops under it
                pass

        ts = [threading.Thread(target=client) for _ in range(8)]
        for t in ts:
            t.start()
        time.sleep(0.3)  # the clients are mid-test
        sig = signal.SIGINT if i % 2 else signal.SIGTERM
        rc, err = stop_serve(proc, sig)
        stop.set()
        for t in ts:
            t.join(30)
        statuses[str(rc)] = statuses.get(str(rc), 0) + 1
        if rc != 128 + sig or "terminate called" in err or "leaked" in err or Path("core").exists():
            bad.append(f"stop {i}: rc {rc}: {err.strip().splitlines()[-1:] if err.strip() else ''}")
    return {"stops": n, "exit_statuses": statuses, "unclean": bad}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--stages", default=",".join(STAGES), help=f"comma list of {', '.join(STAGES)}")
    ap.add_argument("--stops", type=int, default=50, help="stops in the stops stage (default 50)")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of the guessing and held stages (default 10)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()
    stages = [s for s in args.stages.split(",") if s]
    unknown = set(stages) - set(STAGES)
    if unknown:
        ap.error(f"unknown stage(s): {', '.join(sorted(unknown))}")
    rows: list[dict] = []

    def report(stage: str, row: dict) -> None:
        rows.append({"stage": stage, **row})
        print(f"{stage}: {json.dumps(row)}", flush=True)

    token = secrets.token_hex(16)
    if any(s in stages for s in ("sessions", "latency", "guessing", "held")):
        proc, port = start_serve(token, "--max-clients", "64")
        try:
            if "latency" in stages:
                report("latency", latency(port, token))
            if "sessions" in stages:
                for n in (64, 128):
                    report("sessions", sessions(port, token, n))
            if "held" in stages:
                report("held", held(port, token, args.seconds))
        finally:
            stop_serve(proc)
        if "guessing" in stages:  # a fresh server per case: each starts with no failures on record
            for threads, rotate in ((1, False), (64, False), (64, True)):
                proc, port = start_serve(token)
                try:
                    report("guessing", guessing(port, threads, rotate, args.seconds))
                finally:
                    stop_serve(proc)
    if "stops" in stages:
        report("stops", stops(args.stops))
    serve_pool.write_results(args.json, "serve hostile-load probe", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
