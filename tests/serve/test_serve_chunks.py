"""A pipelined chunk is at least 4 KiB, or the whole message (serve probe E10): a 1-byte chunk
made the serving side do one receive, one copy and one event per byte (7.7 s of its CPU per
4 MiB against one cheap send). Both wires share the check; the stand-in libcuda stands in for
the GPU, so this runs on any machine."""
from __future__ import annotations

import pytest

from standins import run_with_fake_cuda

pytestmark = pytest.mark.timeout(300)

SESSION = """
    import json, threading
    from gdrlab import _native, errors
    from gdrlab.engine import Connection, VerbsConnection
    srv = _native.Server("127.0.0.1", 0, "tok", 10000)
    stop = threading.Event()
    def accept():
        while not stop.is_set():
            srv.serve_for(100)
    t = threading.Thread(target=accept)
    t.start()
    out = {}
    for wire, make in (("tcp", Connection), ("verbs", VerbsConnection)):
        with make("127.0.0.1", srv.port, "tok", 20) as c:
            for size, chunk in ((4 << 20, 1), (1 << 20, 4095), (1 << 20, 4096), (100, 1), (100, 100), (100, 4096)):
                try:
                    kw = dict(mode="verify", iters=0, warmup=0, chunk=chunk)
                    r = c.run("pipelined", size, **kw) if wire == "tcp" else c.run(path="pipelined", size=size, **kw)
                    out[f"{wire} {size} {chunk}"] = "verified" if r[2] else "not verified"
                except errors.GdrlabError as e:
                    out[f"{wire} {size} {chunk}"] = type(e).__name__ + ": " + str(e)
    stop.set()
    t.join()
    print(json.dumps(out))
"""


def test_a_chunk_below_4_kib_is_refused_unless_it_is_the_whole_message(stand_ins):
    d, lib = stand_ins
    out = run_with_fake_cuda(d, SESSION, GDRLAB_IBVERBS_LIB=lib)
    for wire in ("tcp", "verbs"):
        for size, chunk in ((4 << 20, 1), (1 << 20, 4095), (100, 1)):
            said = out[f"{wire} {size} {chunk}"]
            assert said.startswith("InvalidArgument") and "at least 4096 bytes (or the whole message)" in said, out
            assert f"got {chunk}" in said, out
        for size, chunk in ((1 << 20, 4096), (100, 100), (100, 4096)):  # 4096 on 100 B: clamped to the message
            assert out[f"{wire} {size} {chunk}"] == "verified", out
