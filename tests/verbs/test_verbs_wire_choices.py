"""The verbs wire's per-connection choices, against the stand-in libibverbs: the server adopts
the client's traffic class and SL (V5, as NCCL's passive side), the receive queue holds a whole
window (V15), the server opens its HCAs once, not for every test (V17), and the Python default
access matches the engine's, without REMOTE_READ (V18). Each test failed before its fix."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TESTS = r"""
import ctypes, json, sys, threading
from gdrlab import _native
ibv = ctypes.CDLL(_native.verbs.status()["library"])
runs = json.loads(sys.argv[1])
srv = _native.Server("127.0.0.1", 0, "tok", 10000)
peer = threading.Thread(target=srv.serve_one, args=(10000,))
peer.start()
client = _native.verbs.Client("127.0.0.1", srv.port, "tok", 10000)  # reads its TC/SL now
import os
for name in json.loads(sys.argv[2]):  # what only the client had: the server reads at CONNECT
    os.environ.pop(name)
out = {"opens": [], "infos": []}
for path, mode, size, window in runs:
    before = ibv.fake_ibv_device_opens()
    samples, _, verified, info = client.run(path, mode, size, 3, 1, window, 16384, 3, 0, 9)
    out["opens"].append(ibv.fake_ibv_device_opens() - before)
    out["infos"].append({k: info[k] for k in ("traffic_class", "service_level", "peer_traffic_class",
                                              "peer_service_level")})
client.close()
peer.join()
log = (ctypes.c_int * 64)()
n = ibv.fake_ibv_rtr_log(log, 32)
out["rtr"] = [[log[2 * i], log[2 * i + 1]] for i in range(min(n, 32))]
out["max_recv_wr"] = ibv.fake_ibv_max_recv_wr()
print(json.dumps(out))
"""


def _run(fake_lib: str, runs: list, client_only: tuple[str, ...] = (), **env: str) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GDRLAB_IB", "FAKE_IBV"))}
    e.update(GDRLAB_IBVERBS_LIB=fake_lib, **env)
    r = subprocess.run([sys.executable, "-c", TESTS, json.dumps(runs), json.dumps(list(client_only))], capture_output=True, text=True, timeout=240,
                       cwd=ROOT, env=e)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_server_half_rides_the_clients_traffic_class(fake_verbs_lib):
    # The client reads GDRLAB_IB_TC/SL when it is made; the variables are then removed, so the
    # server (same process, reading at CONNECT) has none and must adopt the connection data's.
    out = _run(fake_verbs_lib, [["host", 0, 64, 1]], ("GDRLAB_IB_TC", "GDRLAB_IB_SL"), FAKE_IBV_LINK="roce",
               GDRLAB_IB_TC="106", GDRLAB_IB_SL="3")
    assert out["rtr"] == [[106, 3], [106, 3]], out["rtr"]  # the server's RTR first, then the client's
    assert out["infos"][0] == {"traffic_class": 106, "service_level": 3, "peer_traffic_class": 106,
                               "peer_service_level": 3}


def test_connection_data_carries_tc_and_sl():
    from gdrlab import _native
    V = _native.verbs
    c = {"qpn": 0x1234, "psn": 1, "lid": 7, "link_layer": 2, "mtu": 5, "gid": bytes(16), "gid_index": 3,
         "roce_version": 2, "traffic_class": 106, "service_level": 3, "rkey": 1, "addr": 2, "length": 3}
    assert V.decode_conn_info(V.encode_conn_info(c)) == c


def test_receive_queue_holds_the_window(fake_verbs_lib):
    out = _run(fake_verbs_lib, [["host", 1, 8, 1024]])
    assert out["max_recv_wr"] >= 1024  # 256 before: a 1024-message window met RNR NAKs


def test_server_opens_its_hca_once_per_session(fake_verbs_lib):
    runs = [["host", 0, 64, 1]] * 4
    out = _run(fake_verbs_lib, runs, FAKE_IBV_DEVICES="4")
    # first test: the client and the server each rank 4 devices; later tests open nothing
    assert out["opens"][0] == 8 and out["opens"][1:] == [0, 0, 0], out["opens"]


def test_python_default_access_has_no_remote_read():
    from gdrlab import _native, verbs
    assert verbs.ACCESS_DEFAULT == _native.verbs.DEFAULT_ACCESS
    assert not verbs.ACCESS_DEFAULT & _native.verbs.CONSTANTS["IBV_ACCESS_REMOTE_READ"]


def test_lab_registration_is_not_remote_readable(fake_verbs_lib):
    code = ("import ctypes, json, numpy as np; from gdrlab import verbs\n"
            "ibv = ctypes.CDLL(verbs.status()['library'])\n"
            "with verbs.Device() as d, d.alloc_pd() as pd:\n"
            "    mr = pd.reg_mr(np.zeros(4096, np.uint8))\n"
            "    print(json.dumps({'readable': ibv.fake_ibv_mr_count_with_access(4)}))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, GDRLAB_IBVERBS_LIB=fake_verbs_lib))
    assert json.loads(r.stdout)["readable"] == 0, r.stderr
    assert ctypes is not None


TWO_SUBNETS = "2 ::ffff:10.0.0.1,2 ::ffff:10.1.0.1"  # one port, two RoCE v2 addresses in two subnets

SUBNET_RUN = r"""
import ctypes, json, os, threading
from gdrlab import _native
ibv = ctypes.CDLL(_native.verbs.status()["library"])
srv = _native.Server("127.0.0.1", 0, "tok", 10000)
t = threading.Thread(target=srv.serve_one, args=(10000,))
t.start()
c = _native.verbs.Client("127.0.0.1", srv.port, "tok", 10000)  # reads GDRLAB_IB_GID_INDEX now
os.environ.pop("GDRLAB_IB_GID_INDEX")  # the server (reading at CONNECT) chooses by itself
_, _, _, info = c.run("host", 0, 64, 3, 1, 1, 16384, 3, 0, 9)
c.close()
t.join()
print(json.dumps({"client": info["gid_index"], "server": ibv.fake_ibv_rtr_sgid(0)}))
"""


def test_server_takes_the_gid_in_the_clients_subnet(fake_verbs_lib):
    # V14: the client uses 10.1.0.1 (index 1); before, the server took its lowest v2 IPv4 GID,
    # 10.0.0.1, another subnet (RTR ETIMEDOUT on a real fabric).
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GDRLAB_IB", "FAKE_IBV"))}
    e.update(GDRLAB_IBVERBS_LIB=fake_verbs_lib, FAKE_IBV_LINK="roce", FAKE_IBV_GIDS=TWO_SUBNETS, GDRLAB_IB_GID_INDEX="1")
    r = subprocess.run([sys.executable, "-c", SUBNET_RUN], capture_output=True, text=True, timeout=120, env=e)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"client": 1, "server": 1}


def test_select_gid_index_prefers_the_peers_subnet():
    from gdrlab import _native
    V = _native.verbs
    a, b = bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1]), bytes(10) + b"\xff\xff" + bytes([10, 1, 0, 1])
    peer = bytes(10) + b"\xff\xff" + bytes([10, 1, 0, 9])
    assert V.select_gid_index([(0, a, 2), (1, b, 2)]) == 0
    assert V.select_gid_index([(0, a, 2), (1, b, 2)], peer_gid=peer) == 1
    # the class still comes first: a v1 GID in the peer's subnet does not beat a v2 one
    assert V.select_gid_index([(0, a, 2), (1, b, 1)], peer_gid=peer) == 0
