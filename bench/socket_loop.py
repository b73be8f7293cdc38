"""Reference for bench_engine.py: a plain socket loop between two processes, with the same
message pattern as `gdrlab bench --mode bw` (send `window` messages of `size` bytes, wait for a
one-byte acknowledgement). No framing, no verification: the ceiling for the tcp wire.

    python bench/socket_loop.py --size 64M --reps 8   ->  {"gbps": [...], "median_gbps": ...}
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import statistics
import time


def _server(port_q, size: int, window: int, reps: int) -> None:
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    port_q.put(ls.getsockname()[1])
    conn, _ = ls.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(size)
    view = memoryview(buf)
    for _ in range(reps * window):
        got = 0
        while got < size:
            n = conn.recv_into(view[got:], size - got)
            if n == 0:
                return
            got += n
        if (_ + 1) % window == 0:
            conn.sendall(b"A")
    conn.close()
    ls.close()


def measure(size: int, window: int = 1, reps: int = 8, warmup: int = 2) -> list[float]:
    q: mp.Queue = mp.Queue()
    proc = mp.Process(target=_server, args=(q, size, window, reps + warmup))
    proc.start()
    port = q.get(timeout=30)
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = bytearray(size)
    out = []
    for i in range(reps + warmup):
        t0 = time.perf_counter()
        for _ in range(window):
            s.sendall(payload)
        if s.recv(1) != b"A":
            raise RuntimeError("server went away")
        dt = time.perf_counter() - t0
        if i >= warmup:
            out.append(size * window / dt / 1e9)
    s.close()
    proc.join(30)
    return out


def main() -> None:
    import sys
    sys.path.insert(0, ".")
    from gdrlab.units import parse_size

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", default="64M")
    ap.add_argument("--window", type=int, default=1)
    ap.add_argument("--reps", type=int, default=8)
    a = ap.parse_args()
    g = measure(parse_size(a.size), a.window, a.reps)
    print(json.dumps({"size": parse_size(a.size), "window": a.window, "gbps": g, "median_gbps": statistics.median(g)}))


if __name__ == "__main__":
    main()
