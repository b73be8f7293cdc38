"""The verbs layer where no HCA exists: loading, the status probe and its two precise reasons,
the connection-exchange messages, the queue-pair attribute choices and the Python object model.

Expected values come from the InfiniBand/verbs definitions (ibv_qp_attr_mask bits, MTU codes,
24-bit QPN/PSN) and from the wire format written out by hand with ``struct``, not from the code
under test.
"""
from __future__ import annotations

import errno
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from gdrlab import _native
from gdrlab.errors import InvalidArgument, ProtocolError, Unavailable

V = _native.verbs
ROOT = Path(__file__).resolve().parents[2]
NO_DEVICE = "no RDMA device found (/sys/class/infiniband is empty)"
MISSING_LIB = "libibverbs.so.1 not found"


def _library_installed() -> bool:
    out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    return "libibverbs.so.1" in out


def _sysfs_empty() -> bool:
    d = Path("/sys/class/infiniband")
    return not d.exists() or not any(d.iterdir())


def _run_py(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **env), cwd=ROOT)


def _cli(*args, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gdrlab", *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **env), cwd=ROOT)


# ----------------------------------------------------------------------------------- loading
def test_import_does_not_load_libibverbs():
    r = _run_py("import gdrlab, gdrlab.verbs, gdrlab.transfer.verbs_wire, gdrlab._native\n"
                "maps = open('/proc/self/maps').read()\n"
                "print('ibverbs' in maps)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_absent_library_is_reported_by_name():
    r = _run_py("import json, gdrlab.verbs as v; print(json.dumps(v.status()))",
                GDRLAB_IBVERBS_LIB="libgdrlab-test-missing.so.0")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["library_found"] is False
    assert st["devices"] == []
    assert st["reason"].startswith(MISSING_LIB)
    assert "libgdrlab-test-missing.so.0" in st["reason"]


def test_absent_library_cli_and_api():
    r = _cli("bench", "--wire", "verbs", "--path", "gdr", "--sizes", "8", "--json",
             GDRLAB_IBVERBS_LIB="libgdrlab-test-missing.so.0")
    assert r.returncode != 0
    doc = json.loads(r.stdout)
    assert doc["error"]["type"] == "Unavailable"
    assert MISSING_LIB in doc["error"]["message"]
    r = _run_py("import gdrlab.verbs as v\ntry:\n    v.Device()\nexcept Exception as e:\n"
                "    print(type(e).__name__, e)", GDRLAB_IBVERBS_LIB="libgdrlab-test-missing.so.0")
    assert r.stdout.startswith("Unavailable " + MISSING_LIB), r.stdout + r.stderr


@pytest.fixture
def library_without_devices():
    if not _library_installed():
        pytest.skip("libibverbs.so.1 is not installed (Debian/Ubuntu: apt-get install libibverbs1)")
    if not _sysfs_empty():
        pytest.skip("this machine has RDMA devices in /sys/class/infiniband")


def test_status_with_library_and_no_device(library_without_devices):
    st = V.status()
    assert st["library_found"] is True
    assert st["devices"] == []
    assert st["reason"] == NO_DEVICE


def test_verbs_wire_reports_no_device(library_without_devices):
    from gdrlab.engine import bench
    with pytest.raises(Unavailable, match=r"no RDMA device found \(/sys/class/infiniband is empty\)"):
        bench(path="gdr", sizes="8", wire="verbs")
    r = _cli("bench", "--wire", "verbs", "--path", "host", "--sizes", "8", "--json")
    assert r.returncode != 0
    doc = json.loads(r.stdout)
    assert doc["error"]["message"].endswith(NO_DEVICE)


def test_objects_need_a_device(library_without_devices):
    import gdrlab.verbs as gv
    with pytest.raises(Unavailable, match="no RDMA device found"):
        gv.Device()
    with pytest.raises(Unavailable, match="no RDMA device found"):
        gv.registration_cost("4K", memory="host")
    assert gv.devices() == []


def test_bad_arguments_fail_before_the_device_check():
    from gdrlab.engine import bench
    import gdrlab.verbs as gv
    with pytest.raises(InvalidArgument, match="path 'gdrcopy' does not run over the verbs wire"):
        bench(path="gdrcopy", sizes="8", wire="verbs")
    with pytest.raises(InvalidArgument, match="unknown path 'warp'; valid over verbs: host, staged, shared, "
                                              "pipelined, gdr"):
        bench(path="warp", sizes="8", wire="verbs")
    with pytest.raises(InvalidArgument, match="1 GiB"):
        bench(path="host", sizes="2G", wire="verbs")
    with pytest.raises(InvalidArgument, match="mode"):
        bench(path="host", sizes="8", mode="fast", wire="verbs")
    with pytest.raises(InvalidArgument, match="memory"):
        gv.registration_cost("4K", memory="managed")


# ------------------------------------------------------------------------- connection data
GID_V4 = bytes(10) + b"\xff\xff" + bytes([192, 168, 1, 7])
GID_LL = bytes.fromhex("fe80000000000000") + bytes.fromhex("0202c9fffe000001")
GID_V6 = bytes.fromhex("20010db8000000000000000000000042")


def _conn(**kw) -> dict:
    c = {"qpn": 0x1234, "psn": 0xABCDEF, "lid": 7, "link_layer": 1, "mtu": 5, "gid": GID_LL, "gid_index": 0,
         "roce_version": 0, "traffic_class": 106, "service_level": 3, "rkey": 0xDEADBEEF, "addr": 0x7F0000001000, "length": 1 << 20}
    c.update(kw)
    return c


def _by_hand(c: dict) -> bytes:
    # magic "VRBS", version 3, then little-endian fields in the documented order.
    return (b"VRBS" + struct.pack("<BIIIBB", 3, c["qpn"], c["psn"], c["lid"], c["link_layer"], c["mtu"])
            + c["gid"] + struct.pack("<BBBBIQQ", c["gid_index"], c["roce_version"], c["traffic_class"],
                                     c["service_level"], c["rkey"], c["addr"], c["length"]))


def test_conn_info_encoding_matches_the_documented_layout():
    c = _conn()
    assert V.encode_conn_info(c) == _by_hand(c)
    assert V.decode_conn_info(_by_hand(c)) == c
    roce = _conn(link_layer=2, lid=0, gid=GID_V4, gid_index=3, mtu=3, roce_version=2)
    assert V.decode_conn_info(V.encode_conn_info(roce)) == roce


@pytest.mark.parametrize("change, message", [
    (lambda b: b"XRBS" + b[4:], "magic"),
    (lambda b: b[:4] + b"\x01" + b[5:], "version"),
    (lambda b: b[:-1], "short|need|bytes"),
    (lambda b: b + b"\x00", "trailing"),
])
def test_conn_info_rejects_malformed_bodies(change, message):
    with pytest.raises(ProtocolError, match=message):
        V.decode_conn_info(change(_by_hand(_conn())))


@pytest.mark.parametrize("field, value", [
    ("qpn", 0), ("qpn", 1 << 24), ("psn", 1 << 24), ("lid", 1 << 16), ("mtu", 0), ("mtu", 6), ("link_layer", 3),
    ("roce_version", 3), ("service_level", 16),
])
def test_conn_info_rejects_out_of_range_fields(field, value):
    c = _conn()
    c[field] = value
    raw = _by_hand(c)
    expected = {"link_layer": "link layer", "roce_version": "RoCE version",
                "service_level": "service level"}.get(field, field.upper())
    with pytest.raises(ProtocolError, match=expected):
        V.decode_conn_info(raw)


def test_connect_request_carries_spec_and_connection_data():
    spec = _native.encode_spec("pipelined", 1, 4 << 20, 100, 10, 8, 256 << 10, 4, 0, 42)
    body = V.encode_connect_request(spec, _conn())
    # Two length-prefixed parts: the tcp wire's SETUP body, then the connection data.
    (n1,) = struct.unpack_from("<I", body, 0)
    assert body[4:4 + n1] == spec
    (n2,) = struct.unpack_from("<I", body, 4 + n1)
    assert body[8 + n1:] == _by_hand(_conn()) and n2 == len(_by_hand(_conn()))
    spec2, conn2 = V.decode_connect_request(body)
    assert spec2 == spec and conn2 == _conn()
    with pytest.raises(ProtocolError):
        V.decode_connect_request(body[:-3])


# ---------------------------------------------------------------------- attribute choices
def test_path_mtu_is_the_smaller_active_mtu():
    assert V.choose_path_mtu(5, 3) == 3
    assert V.choose_path_mtu(3, 5) == 3
    assert V.choose_path_mtu(4, 4) == 4
    assert [V.mtu_bytes(m) for m in range(1, 6)] == [256, 512, 1024, 2048, 4096]
    with pytest.raises(InvalidArgument):
        V.choose_path_mtu(0, 5)
    with pytest.raises(InvalidArgument):
        V.choose_path_mtu(5, 6)


def test_gid_selection_prefers_roce_v2_ipv4_mapped():
    assert V.gid_is_ipv4_mapped(GID_V4) and not V.gid_is_ipv4_mapped(GID_LL)
    # The usual mlx5 RoCE table: 0/1 link-local v1/v2, 2/3 the interface's IPv4 address v1/v2.
    table = [(0, GID_LL, 1), (1, GID_LL, 2), (2, GID_V4, 1), (3, GID_V4, 2)]
    assert V.select_gid_index(table) == 3
    assert V.select_gid_index([(0, GID_V6, 2), (1, GID_V4, 2)]) == 1
    assert V.select_gid_index([(0, GID_LL, 2), (1, GID_V6, 2)]) == 1
    assert V.select_gid_index([(4, GID_V4, 2), (2, GID_V4, 2)]) == 2
    assert V.select_gid_index([(0, bytes(16), 2), (1, GID_LL, 1)]) == 1
    assert V.select_gid_index([(0, bytes(16), 2)]) == -1
    assert V.select_gid_index([]) == -1


# ibv_qp_attr_mask bits, from verbs.h / the IB spec's Modify QP verb.
STATE, ACCESS, PKEY, PORT, AV, PATH_MTU = 1, 8, 16, 32, 128, 256
TIMEOUT, RETRY, RNR_RETRY, RQ_PSN, MAX_RD, MIN_RNR, SQ_PSN, MAX_DEST_RD, DEST_QPN = (
    1 << 9, 1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 15, 1 << 16, 1 << 17, 1 << 20)


def test_init_attributes():
    a = V.qp_init_attrs(1)
    assert a["mask"] == STATE | PKEY | PORT | ACCESS
    assert a["qp_state"] == 1 and a["port_num"] == 1 and a["pkey_index"] == 0
    assert a["qp_access_flags"] & 2, "the peer must be allowed to RDMA WRITE"


def test_rtr_attributes_infiniband():
    remote = _conn(lid=0x21, mtu=4, qpn=0x77, psn=0x123)
    a = V.qp_rtr_attrs(1, 1, 5, 0, remote)
    assert a["mask"] == STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD | MIN_RNR
    assert a["qp_state"] == 2
    assert a["path_mtu"] == 4
    assert a["dest_qp_num"] == 0x77 and a["rq_psn"] == 0x123
    assert a["ah_attr"]["is_global"] == 0 and a["ah_attr"]["dlid"] == 0x21 and a["ah_attr"]["port_num"] == 1
    assert a["max_dest_rd_atomic"] >= 1 and a["min_rnr_timer"] > 0


def test_rtr_attributes_roce():
    remote = _conn(link_layer=2, lid=0, gid=GID_V4, mtu=3)
    a = V.qp_rtr_attrs(2, 2, 5, 3, remote)
    ah = a["ah_attr"]
    assert ah["is_global"] == 1, "RoCE packets carry a GRH"
    assert ah["dgid"] == GID_V4 and ah["sgid_index"] == 3 and ah["hop_limit"] >= 1
    assert ah["dlid"] == 0 and ah["port_num"] == 2
    assert a["path_mtu"] == 3


def test_rtr_refuses_unusable_peers():
    with pytest.raises(Unavailable, match="LID 0"):
        V.qp_rtr_attrs(1, 1, 5, 0, _conn(lid=0))
    with pytest.raises(Unavailable, match="link layers differ"):
        V.qp_rtr_attrs(1, 2, 5, 0, _conn(link_layer=1))


def test_rts_attributes():
    a = V.qp_rts_attrs(0x1234567)
    assert a["mask"] == STATE | TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | MAX_RD
    assert a["qp_state"] == 3
    assert a["sq_psn"] == 0x234567, "PSNs are 24 bits"
    assert a["retry_cnt"] == 7 and a["rnr_retry"] == 7  # 3-bit fields; rnr_retry 7 = retry forever
    assert 1 <= a["timeout"] <= 31 and a["max_rd_atomic"] >= 1


# ---------------------------------------------------------------------------- error causes
def test_error_hints_name_the_likely_cause():
    assert "nvidia_peermem" in V.verbs_hint("ibv_reg_mr", errno.EFAULT, True)
    gpu_nomem = V.verbs_hint("ibv_reg_dmabuf_mr", errno.ENOMEM, True)
    assert "BAR1" in gpu_nomem and "RLIMIT_MEMLOCK" in gpu_nomem
    assert "RLIMIT_MEMLOCK" in V.verbs_hint("ibv_reg_mr", errno.ENOMEM, False)
    assert "dma-buf" in V.verbs_hint("ibv_reg_dmabuf_mr", errno.EOPNOTSUPP, True)
    assert V.verbs_hint("ibv_reg_mr", errno.EAGAIN, False) == ""


def test_verbs_error_carries_errno():
    from gdrlab.errors import VerbsError, _from_native
    e = _from_native("VerbsError", "libibverbs: ibv_reg_mr failed: Bad address", "libibverbs", "ibv_reg_mr",
                     errno.EFAULT, "Bad address")
    assert isinstance(e, VerbsError) and e.errno == errno.EFAULT


# ------------------------------------------------------------------------ python objects
class _FakeNative:
    """Stands in for _native.verbs to check ownership order without an HCA."""

    @staticmethod
    def fork_protection() -> str:
        return "unneeded"

    def __init__(self, log):
        log_ = log

        class Context:
            def __init__(self, name):
                self.name = name or "fake0"

        class ProtectionDomain:
            def __init__(self, ctx):
                self.ctx = ctx

        class MR:
            def __init__(self, tag):
                self.tag, self.closed = tag, False
                self.lkey = self.rkey = 1
                self.mechanism, self.reg_seconds, self.dereg_seconds = "host", 1e-6, 1e-6

            def close(self):
                if not self.closed:
                    log_.append(("dereg", self.tag))
                self.closed = True

        class MemoryRegion:
            n = 0

            @staticmethod
            def register_host(pd, addr, length, access):
                MemoryRegion.n += 1
                return MR(MemoryRegion.n)

        self.Context, self.ProtectionDomain, self.MemoryRegion = Context, ProtectionDomain, MemoryRegion

    @staticmethod
    def status():
        return {"library_found": True, "reason": "", "devices": ["fake0"], "library": "fake"}


def test_parents_close_children_first(monkeypatch):
    import numpy as np
    import gdrlab.verbs as gv
    log: list = []
    fake = _FakeNative(log)
    monkeypatch.setattr(gv, "_v", lambda: fake)
    a = np.zeros(4096, dtype=np.uint8)
    with gv.Device() as dev:
        pd1 = dev.alloc_pd()
        mr1 = pd1.reg_mr(a)
        mr2 = pd1.reg_mr(a)
        mr1.close()
        assert mr1.closed and not mr2.closed
        pd2 = dev.alloc_pd()
        mr3 = pd2.reg_mr(a)
    assert log == [("dereg", 1), ("dereg", 3), ("dereg", 2)]
    assert dev.closed and pd1.closed and pd2.closed and mr2.closed and mr3.closed
    with pytest.raises(InvalidArgument, match="closed"):
        pd1.reg_mr(a)
    with pytest.raises(InvalidArgument, match="closed"):
        dev.alloc_pd()


def test_pyverbs_status_is_a_reasoned_answer():
    import gdrlab.verbs as gv
    ok, reason = gv.pyverbs_status()
    assert isinstance(ok, bool) and reason
    if not ok:
        assert "pyverbs" in reason


def test_bar1_usage_says_why_when_unmeasured():
    import gdrlab.verbs as gv
    u = gv.bar1_usage(0)
    assert set(u) == {"used_bytes", "total_bytes", "reason"}
    if u["used_bytes"] is None:
        assert u["reason"]
    else:
        assert 0 <= u["used_bytes"] <= u["total_bytes"]


def test_extension_does_not_link_libibverbs():
    import shutil
    ldd = shutil.which("ldd")
    if not ldd:
        pytest.skip("ldd is not installed")
    out = subprocess.run([ldd, _native.__file__], capture_output=True, text=True).stdout
    assert "ld-linux" in out or "libc.so" in out, out  # ldd really listed the dependencies
    assert "ibverbs" not in out, "libibverbs must be opened with dlopen at first use, not linked"
