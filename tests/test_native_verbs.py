"""The verbs wire's GPU paths and teardown on a machine without GPU or HCA: the stand-in libcuda
(tests/fake_cuda) and the stand-in libibverbs (tests/fake_verbs) together. The fake HCA counts
teardown steps taken out of order (a memory region or protection domain released while a queue
pair of that domain lives, a completion queue destroyed under a queue pair)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from test_native_cuda import build_fake_cuda, run_with_fake_cuda

ROOT = Path(__file__).resolve().parents[1]
FAKE_VERBS = ROOT / "tests" / "fake_verbs"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> tuple[Path, str]:
    gxx = shutil.which("g++")
    if not gxx:
        pytest.skip("g++ is not installed: cannot build the stand-in libibverbs")
    d = build_fake_cuda(tmp_path_factory.mktemp("stand_ins"))
    lib = d / "libfakeibverbs.so"
    r = subprocess.run([gxx, "-std=c++17", "-shared", "-fPIC", "-O1", f"-I{ROOT / 'native' / 'src'}",
                        str(FAKE_VERBS / "fake_ibverbs.cc"), f"-Wl,--version-script={FAKE_VERBS / 'fake_ibverbs.map'}",
                        "-o", str(lib)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return d, str(lib)


RUN = """
    import ctypes, json, sys, threading
    from gdrlab import _native, errors
    cuda, ibv = ctypes.CDLL("libcuda.so.1"), ctypes.CDLL(_native.verbs.status()["library"])
    path = sys.argv[1] if len(sys.argv) > 1 else "{path}"
    srv = _native.Server("127.0.0.1", 0, "tok", 10000)
    peer = threading.Thread(target=srv.serve_one, args=(10000,))
    peer.start()
    client = _native.verbs.Client("127.0.0.1", srv.port, "tok", 10000)
    out = {{}}
    try:
        samples, _, verified, info = client.run(path, {mode}, 100003, 3, 1, 2, 16384, 3, 0, 9)
        out.update(samples=len(samples), verified=verified, mechanism=info["mechanism"])
    except errors.GdrlabError as e:
        out.update(raised=type(e).__name__, call=e.call, message=str(e))
    client.close()
    peer.join()
    out.update(violations=ibv.fake_ibv_order_violations(), qps=ibv.fake_ibv_live_qps(),
               streams=cuda.fake_cuda_live_streams(), events=cuda.fake_cuda_live_events(),
               allocs=cuda.fake_cuda_live_allocs(), pinned=_native.live_pinned_bytes(),
               regions=ibv.fake_ibv_mr_count_with_access(0))
    print(json.dumps(out))
"""


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("path", ["host", "staged", "shared", "pipelined"])
def test_paths_verify_and_tear_down_queue_pair_first(stand_ins, path, mode):
    d, lib = stand_ins
    out = run_with_fake_cuda(d, RUN.format(path=path, mode=mode), GDRLAB_IBVERBS_LIB=lib)
    assert out.get("verified") is True and out["samples"] == 3, out
    assert out["violations"] == 0, "a region, CQ or PD was released while its queue pair lived"
    assert (out["qps"], out["streams"], out["events"], out["allocs"], out["pinned"], out["regions"]) == (0,) * 6, out


@pytest.mark.parametrize("path,call,after", [("staged", "cuStreamCreate", 0), ("pipelined", "cuEventCreate", 1)])
def test_endpoint_failing_after_registration_releases_everything(stand_ins, path, call, after):
    # The client's endpoint has its queue pair, buffers and registered regions when the CUDA call fails.
    d, lib = stand_ins
    out = run_with_fake_cuda(d, RUN.format(path=path, mode=0), GDRLAB_IBVERBS_LIB=lib,
                             GDRLAB_FAKE_CUDA_FAIL=call, GDRLAB_FAKE_CUDA_FAIL_AFTER=str(after))
    assert out.get("raised") == "CudaError" and out["call"] == call, out
    assert out["violations"] == 0, out
    assert (out["qps"], out["streams"], out["events"], out["allocs"], out["pinned"], out["regions"]) == (0,) * 6, out


def test_failed_receive_post_destroys_the_new_queue_pair(stand_ins):
    # The client's queue pair is made, then 256 receives are posted; the 11th post fails.
    d, lib = stand_ins
    out = run_with_fake_cuda(d, RUN.format(path="host", mode=0), GDRLAB_IBVERBS_LIB=lib, FAKE_IBV_FAIL_RECV_AFTER="10")
    assert out.get("raised") == "VerbsError" and out["call"] == "ibv_post_recv", out
    assert out["qps"] == 0 and out["violations"] == 0, out
