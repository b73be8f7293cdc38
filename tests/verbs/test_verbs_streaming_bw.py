"""V6: bandwidth on the verbs wire streams as ib_write_bw does. The client posts the next window
before the last one's ACK is back (at most what the server's receive queue holds), and waits for
the ACKs still owed once, at the end. Against the stand-in libibverbs, in one run: one drain per run
instead of one per window, the sender posts many windows without polling a receive, and no
write finds the receive queue empty (a real HCA would answer that with a receiver-not-ready NAK). Timing itself is what only a
real HCA shows. Before streaming, the sender polled the ACK after every window: at most one
window of data between receives, and a drain per window."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RUN = r"""
import ctypes, json, sys, threading
from gdrlab import _native
ibv = ctypes.CDLL(_native.verbs.status()["library"])
path, size, iters, warmup, window = json.loads(sys.argv[1])
srv = _native.Server("127.0.0.1", 0, "tok", 10000)
peer = threading.Thread(target=srv.serve_one, args=(10000,))
peer.start()
client = _native.verbs.Client("127.0.0.1", srv.port, "tok", 10000)
samples, nbytes, verified, info = client.run(path, 1, size, iters, warmup, window, 16384, 3, 0, 9)
client.close()
peer.join()
print(json.dumps({"samples": len(samples), "nbytes": nbytes, "verified": verified,
                  "in_flight": info.get("bw_windows_in_flight"), "drains": info.get("bw_drains"),
                  "max_data_since_recv": ibv.fake_ibv_max_data_since_recv(),
                  "rnr": ibv.fake_ibv_rnr_arrivals(), "max_recv_wr": ibv.fake_ibv_max_recv_wr()}))
"""


def _run(fake_lib: str, path: str, size: int, iters: int, warmup: int, window: int, cuda_dir: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GDRLAB_IB", "FAKE_IBV"))}
    env["GDRLAB_IBVERBS_LIB"] = fake_lib
    if cuda_dir is not None:  # the stand-in libcuda for the GPU paths
        env["LD_LIBRARY_PATH"] = f"{cuda_dir}:{env.get('LD_LIBRARY_PATH', '')}"
    r = subprocess.run([sys.executable, "-c", RUN, json.dumps([path, size, iters, warmup, window])],
                       capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_verbs_bandwidth_streams_with_one_sync_per_run(fake_verbs_lib):
    out = _run(fake_verbs_lib, "host", 4096, 20, 4, 8)
    assert out["verified"] and out["samples"] == 20 and out["nbytes"] == 8 * 4096
    # 256 receives hold 32 windows of 8: the client may post that far ahead of the ACKs
    assert out["in_flight"] == 32 and out["max_recv_wr"] >= 256
    # one ACK wait with nothing posted behind it (the sync at the end), not one per window (24)
    assert out["drains"] == 1, out
    # the sender really posted past a window without polling the peer's ACK in between ...
    assert out["max_data_since_recv"] > 8, out
    # ... and never beyond the receives the server had posted
    assert out["rnr"] == 0, out


def test_large_windows_still_keep_two_in_flight(fake_verbs_lib):
    out = _run(fake_verbs_lib, "host", 64, 6, 2, 512)
    assert out["verified"] and out["in_flight"] == 2 and out["max_recv_wr"] >= 1024
    assert out["drains"] == 1 and out["rnr"] == 0, out


@pytest.mark.parametrize("path", ["gdr", "staged", "pipelined"])
def test_gpu_paths_stream_too(dmabuf_stand_ins, path):
    # gdr is zero copy like host; staged and pipelined pace the sender with their landing-slot
    # credits, and the window ACK no longer drains it either
    d, lib = dmabuf_stand_ins
    out = _run(lib, path, 16384, 10, 2, 4, cuda_dir=d)
    assert out["verified"] and out["in_flight"] == 64 and out["drains"] == 1 and out["rnr"] == 0, out
