"""The verbs wire end to end against a stand-in libibverbs (tests/fake_verbs/fake_ibverbs.cc).

The stand-in is loaded through GDRLAB_IBVERBS_LIB exactly as the real library would be, and its
"HCA" copies memory inside one process. It enforces the queue-pair state machine's attribute masks,
posting rules and lkey/rkey bounds, so these tests run the engine's real loader, connection
exchange, QP transitions, RDMA WRITE WITH IMM loops, ACKs and verification for the host path. They
say nothing about timing or about GPU memory, which only a real HCA can show.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH_COLUMNS = ["path", "wire", "size", "iters", "lat_min_us", "lat_p50_us", "lat_p99_us", "lat_mean_us", "bw_gbps",
                 "verified", "chunk", "depth", "source"]

SERVE_AND_BENCH = r"""
import json, sys, threading
from gdrlab import _native
from gdrlab.engine import bench
srv = _native.Server("127.0.0.1", 0, "tok", 10000)
served = []
t = threading.Thread(target=lambda: served.append(srv.serve_one(20000)))
t.start()
try:
    df = bench(path=sys.argv[1], sizes=sys.argv[2], iters=int(sys.argv[3]), mode=sys.argv[4], wire="verbs",
               peer=f"127.0.0.1:{srv.port}", token="tok", timeout_s=20)
    print(json.dumps({"columns": list(df.columns), "rows": df.to_dict(orient="records"),
                      "provenance": df.attrs["provenance"]}, default=str))
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e), "errno": getattr(e, "errno", None)}))
t.join()
"""


@pytest.fixture
def fake_lib(fake_verbs_lib: str) -> str:
    return fake_verbs_lib


def _py(fake_lib: str, code: str, *args: str, **env) -> dict:
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=240, cwd=ROOT,
                       env=dict(os.environ, GDRLAB_IBVERBS_LIB=fake_lib, **env))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_host_path_over_the_verbs_wire(fake_lib):
    doc = _py(fake_lib, SERVE_AND_BENCH, "host", "8,4K,64K,1M", "10", "both")
    assert "error" not in doc, doc
    assert doc["columns"] == BENCH_COLUMNS
    rows = doc["rows"]
    assert [r["size"] for r in rows] == [8, 4096, 65536, 1 << 20]
    assert all(r["verified"] is True and r["wire"] == "verbs" and r["path"] == "host" for r in rows)
    assert all(r["lat_p50_us"] > 0 and r["bw_gbps"] > 0 for r in rows)
    prov = doc["provenance"]
    assert prov["kind"] == "live"
    assert prov["hca"] == "fake0" and prov["link_layer"] == "InfiniBand"
    assert prov["registration"] == "host" and prov["peer_registration"] == "host"
    assert prov["path_mtu_bytes"] == 4096


@pytest.mark.timeout(300)
def test_bandwidth_only_wraps_the_send_queue(fake_lib):
    # 8-byte messages with the automatic window (64) and many repetitions post far more writes
    # than the send queue holds: selective signaling must retire them.
    doc = _py(fake_lib, SERVE_AND_BENCH, "host", "8", "200", "bw")
    assert "error" not in doc, doc
    (row,) = doc["rows"]
    assert row["verified"] is True and row["iters"] == 200


def test_corruption_is_caught(fake_lib):
    doc = _py(fake_lib, SERVE_AND_BENCH, "host", "4K", "3", "lat", FAKE_IBV_CORRUPT="1")
    assert doc.get("error") == "VerifyError", doc
    assert "first differing byte at offset 2048" in doc["message"]


def test_gpu_paths_need_a_gpu(fake_lib):
    from gdrlab.engine import cuda_status
    if cuda_status()["usable"]:
        pytest.skip("a GPU is present: this checks the message on machines without one")
    code = ("import json\nfrom gdrlab.engine import bench\ntry:\n"
            "    bench(path='gdr', sizes='8', peer='127.0.0.1:9', wire='verbs')\n"
            "except Exception as e:\n    print(json.dumps({'error': type(e).__name__, 'message': str(e)}))\n")
    doc = _py(fake_lib, code)
    assert doc["error"] == "Unavailable" and "needs a GPU" in doc["message"]


REGISTRATION = r"""
import json, errno
import numpy as np
import gdrlab.verbs as gv
from gdrlab.errors import VerbsError, Unavailable
out = {}
out["status"] = gv.status()
out["peer_memory"] = gv.peer_memory_status()
with gv.Device() as dev:
    out["name"] = dev.name
    out["ports"] = dev.info["ports"]
    out["active_port"] = dev.active_port()
    with dev.alloc_pd() as pd:
        a = np.zeros(8192, dtype=np.uint8)
        with pd.reg_mr(a) as mr:
            import ctypes
            fake = ctypes.CDLL(gv.status()["library"])
            out["relaxed_ordering_regions"] = fake.fake_ibv_mr_count_with_access(1 << 20)
            out["mr"] = {"lkey": mr.lkey, "rkey": mr.rkey, "length": mr.length, "mechanism": mr.mechanism,
                         "address_ok": mr.address == a.ctypes.data, "reg_us": mr.reg_us}
        out["closed"] = mr.closed
        try:
            pd.reg_mr(np.zeros(1 << 20, dtype=np.uint8))
        except VerbsError as e:
            out["enomem"] = {"errno": e.errno, "message": str(e)}
try:
    gv.Device("mlx5_9")
except Unavailable as e:
    out["missing_device"] = str(e)
df = gv.registration_cost("4K,64K", memory="host", repeats=3)
out["cost"] = df.to_dict(orient="records")
out["cost_prov"] = df.attrs["provenance"]
print(json.dumps(out, default=str))
"""


def test_registration_objects(fake_lib):
    out = _py(fake_lib, REGISTRATION, FAKE_IBV_MAX_MR=str(512 * 1024))
    assert out["status"] == {"library_found": True, "reason": "", "devices": ["fake0"], "library": fake_lib}
    assert out["name"] == "fake0" and out["active_port"] == 1
    assert out["ports"][0]["state"] == 4 and out["ports"][0]["active_mtu"] == 5
    mr = out["mr"]
    assert mr["mechanism"] == "host" and mr["length"] == 8192 and mr["address_ok"]
    assert mr["lkey"] != mr["rkey"] and mr["reg_us"] > 0
    assert out["closed"] is True
    # ibv_reg_mr_iova2 (IBVERBS_1.8) was found by version and used to ask for relaxed ordering.
    assert out["relaxed_ordering_regions"] == 1
    # The stand-in exports no IBVERBS_1.12: the optional symbol is missing, the rest works.
    assert out["peer_memory"]["reg_dmabuf_mr"] is False
    assert "IBVERBS_1.12" in out["peer_memory"]["reg_dmabuf_mr_reason"]
    assert out["enomem"]["errno"] == 12
    assert "RLIMIT_MEMLOCK" in out["enomem"]["message"] and "ibv_reg_mr" in out["enomem"]["message"]
    assert "mlx5_9" in out["missing_device"] and "fake0" in out["missing_device"]
    cost = out["cost"]
    assert [r["size"] for r in cost] == [4096, 65536]
    assert all(r["mechanism"] == "host" and r["repeats"] == 3 and r["reg_us_p50"] > 0 for r in cost)
    assert out["cost_prov"]["hca"] == "fake0"


SERVER_REFUSES = r"""
import json, os, threading
from gdrlab import _native
from gdrlab.engine import VerbsConnection
srv = _native.Server("127.0.0.1", 0, "tok", 10000)
served = []
t = threading.Thread(target=lambda: served.append(srv.serve_one(20000)))
t.start()
out = {}
with VerbsConnection("127.0.0.1", srv.port, "tok", 10) as c:
    os.environ["GDRLAB_IB_GID_INDEX"] = "999"  # read by the server for this test only
    try:
        c.run("host", 64, mode="verify", iters=0, warmup=0)
    except Exception as e:
        out["refused"] = {"type": type(e).__name__, "message": str(e)}
    del os.environ["GDRLAB_IB_GID_INDEX"]
    s, nbytes, ok, info = c.run("host", 64, mode="lat", iters=5, warmup=1)
    out["after"] = {"ok": ok, "samples": len(s), "bytes": nbytes}
t.join()
out["served"] = served
print(json.dumps(out))
"""


def test_a_test_the_server_cannot_set_up_leaves_the_session_usable(fake_lib):
    out = _py(fake_lib, SERVER_REFUSES)
    assert out["refused"]["type"] == "InvalidArgument"
    assert "GDRLAB_IB_GID_INDEX='999'" in out["refused"]["message"]
    assert out["after"] == {"ok": True, "samples": 5, "bytes": 64.0}
    assert out["served"] == [[True, ""]]


def test_relaxed_ordering_can_be_turned_off(fake_lib):
    code = ("import ctypes, json, numpy as np, gdrlab.verbs as gv\n"
            "with gv.Device() as d, d.alloc_pd() as pd, pd.reg_mr(np.zeros(4096, np.uint8)):\n"
            "    f = ctypes.CDLL(gv.status()['library'])\n"
            "    print(json.dumps([f.fake_ibv_mr_count_with_access(1 << 20), f.fake_ibv_mr_count_with_access(2)]))\n")
    assert _py(fake_lib, code, GDRLAB_IB_RELAXED_ORDERING="0") == [0, 1]
