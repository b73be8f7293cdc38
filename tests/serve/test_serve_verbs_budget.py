"""The server's memory budget and --device on the verbs wire (classroom-serve issue, D5/D6).

A verbs test reserves every buffer its serving side allocates from the same budget as the tcp
wire, before the HCA is opened or a byte allocated: the message buffer, both landing slots (the
staged path's bounce buffer for each), and a pipelined test's depth x chunk send slots. A request
that does not fit is refused with the budget's one line, the session goes on, and the share comes
back when the test ends, also when it fails. GPU tests run on the server's --device.

Runs on machines without GPU or HCA: the stand-in libcuda (tests/fake_cuda, one "GPU" whose
memory is host memory) and the stand-in libibverbs (tests/fake_verbs) in a fresh interpreter.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TIME_SCALE
from standins import run_with_fake_cuda

ROOT = Path(__file__).resolve().parents[2]
KiB, MiB = 1 << 10, 1 << 20

pytestmark = pytest.mark.timeout(300)


# One verbs session against an engine Server with the given limits; each request's outcome, then
# the server's log and what is still allocated once it is gone.
SESSION = """
    import ctypes, json, threading
    from gdrlab import _native, errors
    from gdrlab.engine import VerbsConnection
    limits, requests = json.loads(LIMITS), json.loads(REQUESTS)
    cuda = ctypes.CDLL("libcuda.so.1")
    srv = _native.Server("127.0.0.1", 0, "tok", 10000, **limits)
    stop = threading.Event()
    def accept():
        while not stop.is_set():
            srv.serve_for(100)
    t = threading.Thread(target=accept)
    t.start()
    runs = []
    c = None
    for req in requests:
        if req is None:  # the next requests on a new connection
            c.close()
            c = None
            continue
        if c is None:
            c = VerbsConnection("127.0.0.1", srv.port, "tok", 20)
        try:
            runs.append({"verified": bool(c.run(mode="verify", iters=0, warmup=0, **req)[2])})
        except errors.GdrlabError as e:
            runs.append({"raised": type(e).__name__, "message": str(e)})
    c.close()
    stop.set()
    t.join()
    log = srv.take_log(final=True)
    del srv
    _native.release_kept_buffers()  # freed pinned blocks kept for reuse are not leaks: unlock them first
    print(json.dumps({"runs": runs, "log": log, "pinned": _native.live_pinned_bytes(),
                      "allocs": cuda.fake_cuda_live_allocs()}))
"""


def _session(stand_ins, limits: dict, requests: list[dict], **env: str) -> dict:
    d, lib = stand_ins
    script = SESSION.replace("LIMITS", repr(json.dumps(limits))).replace("REQUESTS", repr(json.dumps(requests)))
    return run_with_fake_cuda(d, script, GDRLAB_IBVERBS_LIB=lib, **env)


def _refused(run: dict, needs: str, budget: str) -> bool:
    return (run.get("raised") == "Unavailable" and f"refused: session needs {needs}" in run["message"]
            and f"server budget {budget}" in run["message"])


def test_host_request_over_the_budget_is_refused_naming_it_and_the_session_goes_on(stand_ins):
    out = _session(stand_ins, {"max_host_bytes": 1 * MiB},
                   [{"path": "host", "size": 2 * MiB}, {"path": "host", "size": 1 * MiB}])
    refused, after = out["runs"]
    assert _refused(refused, "2.0 MiB host memory", "1.0 MiB (--max-pinned)"), refused
    assert after == {"verified": True}, out


def test_both_landing_slots_are_counted(stand_ins):
    """shared: two pinned landing slots of the message; staged: a pinned bounce buffer and a
    pageable landing buffer, each two slots. One byte over the budget is refused, exactly the
    budget is served."""
    out = _session(stand_ins, {"max_host_bytes": 1 * MiB}, [
        {"path": "shared", "size": 512 * KiB + 1},
        {"path": "shared", "size": 512 * KiB},
        {"path": "staged", "size": 256 * KiB + 1},
        {"path": "staged", "size": 256 * KiB},
    ])
    shared_over, shared_fits, staged_over, staged_fits = out["runs"]
    # Two bytes over would read "needs 1.0 MiB, budget 1.0 MiB": rounding hides why, so bytes (probe E14)
    assert _refused(shared_over, "1048578 bytes host memory", "1048576 bytes (--max-pinned)"), shared_over
    assert _refused(staged_over, "1048580 bytes host memory", "1048576 bytes (--max-pinned)"), staged_over
    assert shared_fits == staged_fits == {"verified": True}, out
    assert out["pinned"] == 0 and out["allocs"] == 0, out


def test_pipelined_depth_times_chunk_is_bounded_by_the_budget(stand_ins):
    # 2 landing slots of 1 MiB + 64 send slots of 64 KiB = 6 MiB; with depth 2 it is 2.125 MiB
    out = _session(stand_ins, {"max_host_bytes": 4 * MiB}, [
        {"path": "pipelined", "size": 1 * MiB, "chunk": 64 * KiB, "depth": 64},
        {"path": "pipelined", "size": 1 * MiB, "chunk": 64 * KiB, "depth": 2},
    ])
    deep, shallow = out["runs"]
    assert _refused(deep, "6.0 MiB host memory", "4.0 MiB (--max-pinned)"), deep
    assert shallow == {"verified": True}, out


def test_gpu_budget_names_its_flag(stand_ins):
    out = _session(stand_ins, {"max_gpu_bytes": 1 * MiB},
                   [{"path": "shared", "size": 2 * MiB}, {"path": "shared", "size": 1 * MiB}])
    refused, fits = out["runs"]
    assert _refused(refused, "2.0 MiB GPU memory", "1.0 MiB (--max-gpu-mem)"), refused
    assert fits == {"verified": True}, out


def test_finished_and_failed_tests_give_their_share_back(stand_ins):
    """Each request needs most of the budget, so it is served only if every earlier test, the
    one whose serving side failed after its reservation included, gave its share back. The
    stand-in's first cuStreamCreate (the client's endpoint) succeeds, every later one fails: the
    server's staged endpoint fails after its buffers were allocated and registered, which ends
    that session."""
    out = _session(stand_ins, {"max_host_bytes": 1 * MiB, "max_gpu_bytes": 1 * MiB}, [
        {"path": "staged", "size": 256 * KiB},
        None,  # a CUDA error ends the session: the client connects again
        {"path": "host", "size": 768 * KiB},
        {"path": "host", "size": 768 * KiB},
        {"path": "host", "size": 1 * MiB},
    ], GDRLAB_FAKE_CUDA_FAIL="cuStreamCreate", GDRLAB_FAKE_CUDA_FAIL_AFTER="1")
    failed, *rest = out["runs"]
    assert failed.get("raised") == "CudaError" and "cuStreamCreate" in failed["message"], failed
    assert rest == [{"verified": True}] * 3, out
    assert out["pinned"] == 0 and out["allocs"] == 0, out


def test_gpu_tests_run_on_the_servers_device(stand_ins):
    """The stand-in has one GPU, 0. A server on --device 5 refuses the client's GPU test although
    the client asked for device 0 (it picks no GPU of the server), and still serves host tests;
    a server on device 0 serves it."""
    bad = _session(stand_ins, {"device": 5}, [{"path": "shared", "size": 4 * KiB, "device": 0},
                                              {"path": "host", "size": 4 * KiB}])
    refused, host = bad["runs"]
    assert refused.get("raised") == "Unavailable" and "GPU 5 does not exist" in refused["message"], refused
    assert host == {"verified": True}, bad
    good = _session(stand_ins, {"device": 0}, [{"path": "shared", "size": 4 * KiB, "device": 0}])
    assert good["runs"] == [{"verified": True}], good


def test_serve_refuses_a_device_this_machine_does_not_have(stand_ins):
    d, _ = stand_ins
    env = dict(os.environ, LD_LIBRARY_PATH=f"{d}:{os.environ.get('LD_LIBRARY_PATH', '')}", GDRLAB_TOKEN="")
    try:
        r = subprocess.run([sys.executable, "-m", "gdrlab", "serve", "--listen", "127.0.0.1:0", "--once",
                            "--device", "3"], capture_output=True, text=True, env=env, cwd=ROOT,
                           timeout=30 * TIME_SCALE, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("serve --device 3 started serving on a machine with one GPU")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1 and "--device 3: this machine has 1 GPU(s)" in lines[0], lines


# --------------------------------------------------------------------------- GPU and HCA (run by the lead)
@pytest.mark.gpu
@pytest.mark.rdma
def test_pipelined_depth_times_chunk_is_bounded_on_real_hardware():
    """The same bound with the real libcuda and libibverbs (both ends on this machine's HCA)."""
    import threading

    from gdrlab.engine import VerbsConnection, native
    from gdrlab.errors import Unavailable

    srv = native().Server("127.0.0.1", 0, "tok", 10000, max_host_bytes=4 * MiB)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            srv.serve_for(100)

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        with VerbsConnection("127.0.0.1", srv.port, "tok", 20) as c:
            with pytest.raises(Unavailable, match=r"needs 6\.0 MiB host memory, server budget 4\.0 MiB \(--max-pinned\)"):
                c.run("pipelined", 1 * MiB, mode="verify", iters=0, warmup=0, chunk=64 * KiB, depth=64)
            assert c.run("pipelined", 1 * MiB, mode="verify", iters=0, warmup=0, chunk=64 * KiB, depth=2)[2]
    finally:
        stop.set()
        t.join(10)
