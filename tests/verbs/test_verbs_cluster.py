"""What a real cluster does that a single bare-metal InfiniBand port does not: RoCE GID tables
whose types only the library reports, ports that require a GRH, partitions (P_Keys), traffic
class and service level, the legacy nv_peer_mem module, and the errno each kernel gives for
dma-buf. Run against the stand-in libibverbs (tests/fake_verbs), whose port is configured through
FAKE_IBV_* variables; what real hardware does with these values only a cluster run can show."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gdrlab import _native

ROOT = Path(__file__).resolve().parents[2]
V = _native.verbs
pytestmark = pytest.mark.timeout(300)

RUN_HOST = r"""
import ctypes, json, threading
from gdrlab import _native, errors
ibv = ctypes.CDLL(_native.verbs.status()["library"])
srv = _native.Server("127.0.0.1", 0, "tok", 10000)
peer = threading.Thread(target=srv.serve_one, args=(10000,))
peer.start()
client = _native.verbs.Client("127.0.0.1", srv.port, "tok", 10000)
out = {}
try:
    samples, _, verified, info = client.run("host", 0, 4096, 3, 1, 2, 16384, 3, 0, 9)
    out.update(verified=verified, gid_index=info["gid_index"], link_layer=info["link_layer"], device=info["device"])
except errors.GdrlabError as e:
    out.update(raised=type(e).__name__, call=e.call, message=str(e))
client.close()
peer.join()
attrs = (ctypes.c_int * 6)()
ibv.fake_ibv_last_attrs(attrs)
out["attrs"] = dict(zip(["pkey_index", "is_global", "sgid_index", "traffic_class", "sl", "hop_limit"], attrs))
out["fork_inits"] = ibv.fake_ibv_fork_inits()
print(json.dumps(out))
"""


def _run(lib: str, code: str, **env: str) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GDRLAB_IB", "NCCL_IB", "FAKE_IBV", "GDRLAB_SYSFS"))}
    e.update(GDRLAB_IBVERBS_LIB=lib, **env)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=ROOT, env=e)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def empty_sysfs(tmp_path: Path) -> str:
    # A container's view: no gid_attrs/types, no peer-memory module.
    return str(tmp_path)


# ---------------------------------------------------------------------------- RoCE GID choice
def test_roce_picks_the_v2_ipv4_gid_from_the_library_table(fake_verbs_lib, empty_sysfs):
    out = _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_LINK="roce", GDRLAB_SYSFS_ROOT=empty_sysfs)
    assert out.get("verified") is True, out
    # Entry 3 is ::ffff:10.0.0.1 typed RoCE v2 by _ibv_query_gid_table; entry 2 is its v1 twin.
    assert out["gid_index"] == 3 and out["link_layer"] == "RoCE"
    assert out["attrs"]["is_global"] == 1 and out["attrs"]["sgid_index"] == 3 and out["attrs"]["hop_limit"] == 255


def test_roce_without_table_or_sysfs_types_takes_the_later_twin(fake_verbs_lib, empty_sysfs):
    # Older rdma-core (no _ibv_query_gid_table) in a container (no sysfs types): every type is
    # unknown. mlx5 lists each address as v1 then v2, so the later index of a tie is the v2 one.
    out = _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_LINK="roce", FAKE_IBV_NO_GID_TABLE="1",
               GDRLAB_SYSFS_ROOT=empty_sysfs)
    assert out.get("verified") is True, out
    assert out["gid_index"] == 3


def test_roce_versions_that_differ_are_refused_before_the_first_write():
    v4 = bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1])
    with pytest.raises(Exception, match="RoCE versions differ: this side's GID .index 2. is RoCE v1"):
        V.qp_rtr_attrs(1, 2, 5, 2, _conn(v4, 2, 2), local_roce_version=1)
    for mine, peer in ((2, 2), (0, 2), (2, 0)):  # equal, or one side cannot tell
        assert V.qp_rtr_attrs(1, 2, 5, 3, _conn(v4, 2, peer), local_roce_version=mine)["ah_attr"]["is_global"] == 1


def test_gid_tie_break_depends_on_whether_the_type_is_known():
    v4 = bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1])
    assert V.select_gid_index([(2, v4, 0), (3, v4, 0)]) == 3
    assert V.select_gid_index([(3, v4, 0), (2, v4, 0)]) == 3
    assert V.select_gid_index([(2, v4, 2), (3, v4, 2)]) == 2


# A RoCE port as a routed cluster shows it: link-local, two IPv4 subnets and a global IPv6
# address, each as a RoCE v1 and a v2 entry, then an empty slot.
CLUSTER_GIDS = ",".join(["1 fe80::11", "2 fe80::11", "1 ::ffff:10.0.0.1", "2 ::ffff:10.0.0.1", "1 ::ffff:192.168.7.5",
                         "2 ::ffff:192.168.7.5", "1 fd00:1::5", "2 fd00:1::5", "2 ::"])


@pytest.mark.parametrize("env,index", [
    ({}, 3),                                                          # v2, IPv4, the lower of two subnets
    ({"NCCL_IB_ADDR_RANGE": "192.168.0.0/16"}, 5),
    ({"GDRLAB_IB_ADDR_RANGE": "10.0.0.0/8", "NCCL_IB_ADDR_RANGE": "192.168.0.0/16"}, 3),
    ({"NCCL_IB_ADDR_FAMILY": "AF_INET6"}, 7),                          # v2, global, not fe80::
    ({"NCCL_IB_ADDR_FAMILY": "AF_INET6", "NCCL_IB_ROCE_VERSION_NUM": "1"}, 6),
    ({"NCCL_IB_ADDR_RANGE": "fd00::/16"}, 7),
    ({"NCCL_IB_ROCE_VERSION_NUM": "1"}, 2),
    ({"GDRLAB_IB_ROCE_VERSION_NUM": "2", "NCCL_IB_ROCE_VERSION_NUM": "1"}, 3),
    ({"NCCL_IB_GID_INDEX": "4"}, 4),                                  # explicit: taken as given
    ({"NCCL_IB_GID_INDEX": "-1"}, 3),                                 # NCCL's default: choose, as if unset
    ({"NCCL_IB_GID_INDEX": "-1", "NCCL_IB_ADDR_RANGE": "192.168.0.0/16"}, 5),
])
def test_roce_gid_knobs_choose_the_entry(fake_verbs_lib, empty_sysfs, env, index):
    out = _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_LINK="roce", FAKE_IBV_GIDS=CLUSTER_GIDS, GDRLAB_SYSFS_ROOT=empty_sysfs,
               **env)
    assert out.get("verified") is True, out
    assert out["gid_index"] == index and out["attrs"]["sgid_index"] == index, out


def test_ipv6_only_port_takes_the_global_v2_entry(fake_verbs_lib, empty_sysfs):
    out = _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_LINK="roce", GDRLAB_SYSFS_ROOT=empty_sysfs,
               FAKE_IBV_GIDS="1 fe80::11,2 fe80::11,1 fd00:1::5,2 fd00:1::5")
    assert out.get("verified") is True and out["gid_index"] == 3, out


@pytest.mark.parametrize("env,kind,text", [
    ({"NCCL_IB_ADDR_RANGE": "172.16.0.0/12"}, "Unavailable", "has no GID with NCCL_IB_ADDR_RANGE=172.16.0.0/12 (its GIDs: "
                                                             "0 fe80::11 v1, 1 fe80::11 v2, 2 ::ffff:10.0.0.1 v1"),
    ({"NCCL_IB_ADDR_FAMILY": "INET6"}, "InvalidArgument", "NCCL_IB_ADDR_FAMILY='INET6': valid values are AF_INET"),
    ({"NCCL_IB_ADDR_FAMILY": "AF_INET", "GDRLAB_IB_ADDR_RANGE": "fd00::/8"}, "InvalidArgument",
     "GDRLAB_IB_ADDR_RANGE='fd00::/8': an IPv6 range, but NCCL_IB_ADDR_FAMILY asks for AF_INET"),
    ({"NCCL_IB_ADDR_RANGE": "10.0.0.0"}, "InvalidArgument", "expected address/prefix-length"),
    ({"NCCL_IB_ADDR_RANGE": "10.0.0.0/33"}, "InvalidArgument", "prefix length 33 is too long for IPv4"),
    ({"GDRLAB_IB_ROCE_VERSION_NUM": "3"}, "InvalidArgument", "GDRLAB_IB_ROCE_VERSION_NUM='3': the RoCE version is 1 or 2"),
])
def test_roce_gid_knobs_refuse_with_one_line(fake_verbs_lib, empty_sysfs, env, kind, text):
    out = _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_LINK="roce", FAKE_IBV_GIDS=CLUSTER_GIDS, GDRLAB_SYSFS_ROOT=empty_sysfs,
               **env)
    assert out.get("raised") == kind and text in out["message"] and "\n" not in out["message"], out


def test_gid_knobs_do_not_touch_infiniband(fake_verbs_lib):
    # On InfiniBand the port GID is index 0 whatever the RoCE knobs say.
    out = _run(fake_verbs_lib, RUN_HOST, NCCL_IB_ADDR_FAMILY="AF_INET6", NCCL_IB_ADDR_RANGE="fd00::/8")
    assert out.get("verified") is True and out["gid_index"] == 0, out


def _gid(text: str) -> bytes:
    import ipaddress
    return ipaddress.IPv6Address(text).packed


def test_gid_range_compares_bits_not_bytes():
    table = [(2, _gid("::ffff:10.1.0.1"), 2), (3, _gid("::ffff:10.200.0.1"), 2)]
    assert V.select_gid_index(table, addr_range="10.0.0.0/9") == 2     # 10.1 is in 10.0-10.127
    assert V.select_gid_index(table, addr_range="10.128.0.0/9") == 3
    assert V.select_gid_index(table, addr_range="10.0.0.0/8") == 2      # both: the lower index
    assert V.select_gid_index(table, addr_range="11.0.0.0/8") == -1
    assert V.select_gid_index(table, addr_range="0.0.0.0/0") == 2
    v6 = [(0, _gid("fd00:1:2::5"), 2), (1, _gid("fd00:1:3::5"), 2)]
    assert V.select_gid_index(v6, addr_range="fd00:1:3::/48") == 1
    assert V.select_gid_index(v6, addr_range="fd00:1:2::/47") == 0     # /47 holds :2 and :3


def test_unconfigured_and_multicast_gids_follow_nccl():
    # fe80:: with nothing after the prefix is an unfilled slot (NCCL's configuredGid): never chosen.
    assert V.select_gid_index([(0, _gid("fe80::"), 2)]) == -1
    # The IPv4-mapped multicast form counts as IPv4, as in NCCL's getGidAddrFamily.
    mc = (1, _gid("ff0e::ffff:239.1.1.1"), 2)
    assert V.select_gid_index([mc], family="AF_INET") == 1
    assert V.select_gid_index([mc], family="AF_INET6") == -1


def test_version_knob_is_a_requirement_but_unknown_types_pass():
    v4 = _gid("::ffff:10.0.0.1")
    assert V.select_gid_index([(2, v4, 1), (3, v4, 2)], roce_version="1") == 2
    assert V.select_gid_index([(3, v4, 2)], roce_version="1") == -1
    assert V.select_gid_index([(2, v4, 0), (3, v4, 0)], roce_version="1") == 3  # types unknown: the tie rule


def test_traffic_class_and_service_level_reach_the_address_vector(fake_verbs_lib, empty_sysfs):
    out = _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_LINK="roce", GDRLAB_SYSFS_ROOT=empty_sysfs,
               GDRLAB_IB_TC="106", NCCL_IB_SL="3")
    assert out.get("verified") is True, out
    assert (out["attrs"]["traffic_class"], out["attrs"]["sl"]) == (106, 3)


def test_gdrlab_names_win_over_nccl_names_and_bad_values_name_the_variable(fake_verbs_lib):
    out = _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_LINK="roce", GDRLAB_IB_TC="96", NCCL_IB_TC="106")
    assert out["attrs"]["traffic_class"] == 96, out
    code = "from gdrlab import _native, errors\ntry:\n    _native.verbs.Client('127.0.0.1', 9, 't', 1000)\n" \
           "except errors.GdrlabError as e:\n    import json; print(json.dumps({'m': str(e)}))\n"
    assert "NCCL_IB_SL='16'" in _run(fake_verbs_lib, code, NCCL_IB_SL="16")["m"]


# ------------------------------------------------------------------------------- InfiniBand GRH
def test_port_that_requires_a_grh_gets_one(fake_verbs_lib):
    out = _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_GRH_REQUIRED="1")
    assert out.get("verified") is True, out
    assert out["attrs"]["is_global"] == 1 and out["attrs"]["sgid_index"] == 0


def test_plain_infiniband_stays_without_grh(fake_verbs_lib):
    out = _run(fake_verbs_lib, RUN_HOST)
    assert out.get("verified") is True and out["attrs"]["is_global"] == 0, out


def _conn(gid: bytes, link_layer: int = 1, roce_version: int = 0) -> dict:
    return {"qpn": 0x123, "psn": 7, "lid": 5, "link_layer": link_layer, "mtu": 5, "gid": gid, "gid_index": 3,
            "roce_version": roce_version, "rkey": 1, "addr": 2, "length": 3}


def test_grh_on_infiniband_when_required_or_across_subnets():
    mine = bytes.fromhex("fe80000000000000") + bytes(7) + b"\x01"
    same = bytes.fromhex("fe80000000000000") + bytes(7) + b"\x02"
    other = bytes.fromhex("fec0000000000001") + bytes(7) + b"\x02"
    assert V.qp_rtr_attrs(1, 1, 5, 0, _conn(same), local_gid=mine)["ah_attr"]["is_global"] == 0
    a = V.qp_rtr_attrs(1, 1, 5, 0, _conn(other), local_gid=mine, traffic_class=8, service_level=2)["ah_attr"]
    assert (a["is_global"], a["dgid"], a["dlid"], a["hop_limit"], a["traffic_class"], a["sl"]) == (1, other, 5, 255, 8, 2)
    assert V.qp_rtr_attrs(1, 1, 5, 0, _conn(same), grh_required=True)["ah_attr"]["is_global"] == 1
    with pytest.raises(Exception, match="service level 16"):
        V.qp_rtr_attrs(1, 1, 5, 0, _conn(same), service_level=16)


# ------------------------------------------------------------------------------------ P_Keys
def test_pkey_value_is_resolved_to_its_index(fake_verbs_lib):
    out = _run(fake_verbs_lib, RUN_HOST, GDRLAB_IB_PKEY="0x8001")
    assert out.get("verified") is True and out["attrs"]["pkey_index"] == 1, out


def test_unknown_pkey_and_index_past_the_table_are_refused(fake_verbs_lib):
    out = _run(fake_verbs_lib, RUN_HOST, GDRLAB_IB_PKEY="0x8002")
    assert out.get("raised") == "Unavailable" and "P_Key 0x8002" in out["message"], out
    out = _run(fake_verbs_lib, RUN_HOST, NCCL_IB_PKEY="5")
    assert out.get("raised") == "InvalidArgument" and "P_Key index 5" in out["message"], out


# ------------------------------------------------------------------------------------- fork
def test_fork_protection_before_the_first_registration(fake_verbs_lib):
    assert _run(fake_verbs_lib, RUN_HOST)["fork_inits"] == 1
    assert _run(fake_verbs_lib, RUN_HOST, GDRLAB_IB_FORK_INIT="0")["fork_inits"] == 0


# ------------------------------------------------------------------------- dma-buf and hints
@pytest.mark.parametrize("err,fallback", [(errno.EPROTONOSUPPORT, True), (errno.ENOTTY, True),
                                          (errno.EOPNOTSUPP, True), (errno.ENOSYS, True), (errno.EINVAL, False),
                                          (errno.EFAULT, False), (errno.EBADF, False), (errno.ENOMEM, False)])
def test_dmabuf_errnos_that_mean_no_support(err, fallback):
    assert V.dmabuf_errno_means_unsupported(err) is fallback


HINTS = r"""
import errno, json
from gdrlab import _native
h = _native.verbs.verbs_hint
print(json.dumps({"efault": h("ibv_reg_mr", errno.EFAULT, True),
                  "proto": h("ibv_reg_dmabuf_mr", errno.EPROTONOSUPPORT, True),
                  "enoent": h("ibv_open_device", errno.ENOENT, False),
                  "neigh": h("ibv_modify_qp", errno.ETIMEDOUT, False),
                  "peer": _native.verbs.peermem_loaded()}))
"""


def test_hints_follow_what_is_loaded(fake_verbs_lib, tmp_path):
    (tmp_path / "module" / "nv_peer_mem").mkdir(parents=True)
    (tmp_path / "module" / "nv_peer_mem" / "version").write_text("1.3-0\n")
    loaded = _run(fake_verbs_lib, HINTS, GDRLAB_SYSFS_ROOT=str(tmp_path))
    assert loaded["peer"] == [True, "nv_peer_mem 1.3-0"]
    assert "64 KiB" in loaded["efault"] and "modprobe" not in loaded["efault"]
    bare = _run(fake_verbs_lib, HINTS, GDRLAB_SYSFS_ROOT=str(tmp_path / "none"))
    assert bare["peer"][0] is False and "modprobe nvidia_peermem" in bare["efault"]
    assert "5.12" in bare["proto"] and "/dev/infiniband" in bare["enoent"] and "subnets" in bare["neigh"]


# ------------------------------------------------------------------------------------- CLI
def _cli(lib: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GDRLAB_IB", "NCCL_IB", "FAKE_IBV"))}
    e.update(GDRLAB_IBVERBS_LIB=lib, **env)
    return subprocess.run([sys.executable, "-m", "gdrlab", "bench", "--wire", "verbs", "--path", "host", "--sizes", "64",
                           "--local-peer", "thread", "--mode", "lat", "--iters", "3", *args],
                          capture_output=True, text=True, timeout=240, cwd=ROOT, env=e)


def test_bench_flags_set_traffic_class_and_service_level(fake_verbs_lib):
    r = _cli(fake_verbs_lib, "--tclass", "106", "--sl", "2", "--json", FAKE_IBV_LINK="roce")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["provenance"]["ib_link_options"] == {"tclass": 106, "sl": 2, "pkey_index": 0}, doc["provenance"]
    assert all(row["verified"] is True for row in doc["rows"])


def test_bench_flag_out_of_range_is_one_line_naming_it(fake_verbs_lib):
    r = _cli(fake_verbs_lib, "--sl", "16")
    assert r.returncode != 0
    assert "--sl 16" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


# ------------------------------------------------------------------------------- HCA choice
@pytest.mark.parametrize("spec,device,port,allowed", [
    ("mlx5", "mlx5_0", 1, True), ("mlx5_0:1", "mlx5_0", 1, True), ("mlx5_0:1", "mlx5_0", 2, False),
    ("mlx5_1", "mlx5_10", 1, True), ("=mlx5_1", "mlx5_10", 1, False), ("=mlx5_1", "mlx5_1", 1, True),
    ("^mlx5_1", "mlx5_1", 1, False), ("^mlx5_1", "mlx5_0", 1, True), ("^=mlx5_1", "mlx5_10", 1, True),
    ("mlx5_0,mlx5_2:2", "mlx5_2", 2, True), ("mlx5_0,mlx5_2:2", "mlx5_2", 1, False), ("", "anything", 1, True)])
def test_hca_filter_follows_nccl_ib_hca_syntax(spec, device, port, allowed):
    assert V.hca_allowed(spec, device, port) is allowed


def test_bad_hca_filter_names_the_variable():
    with pytest.raises(Exception, match="GDRLAB_IB_HCA='mlx5_0:x'"):
        V.hca_allowed("mlx5_0:x", "mlx5_0", 1)


def test_pci_hops_count_both_sides_below_the_common_switch():
    sw = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"
    assert V.pci_hops(sw + "/0000:82:00.0", sw + "/0000:82:01.0") == 2
    assert V.pci_hops(sw + "/0000:82:00.0", "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0") == 4 + 3
    assert V.pci_hops("", sw) == -1


def test_hca_filter_picks_among_devices(fake_verbs_lib):
    assert _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_DEVICES="3")["device"] == "fake0"
    assert _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_DEVICES="3", GDRLAB_IB_HCA="^fake0,fake1")["device"] == "fake2"
    assert _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_DEVICES="3", NCCL_IB_HCA="=fake1:1")["device"] == "fake1"
    out = _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_DEVICES="3", GDRLAB_IB_HCA="fake1:2")
    assert out.get("raised") == "Unavailable" and "GDRLAB_IB_HCA" in out["message"], out


STATUS = "import json, gdrlab.verbs as gv\nprint(json.dumps(gv.peer_memory_status()))\n"


@pytest.mark.parametrize("module,nvidia", [("nvidia_peermem", True), ("nv_peer_mem", False)])
def test_peer_memory_status_names_the_module(fake_verbs_lib, tmp_path, module, nvidia):
    (tmp_path / "module" / module).mkdir(parents=True)
    (tmp_path / "module" / module / "version").write_text("1.2\n")
    st = _run(fake_verbs_lib, STATUS, GDRLAB_SYSFS_ROOT=str(tmp_path))
    assert st["peer_memory_loaded"] is True and st["peer_memory_module"] == f"{module} 1.2"
    assert st["nvidia_peermem_loaded"] is nvidia and st["nvidia_peermem_version"] == ("1.2" if nvidia else None)


def test_port_rate_comes_from_sysfs_where_the_speed_code_cannot_say_xdr(fake_verbs_lib, tmp_path):
    # The IBVERBS_1.1 port query has no code for XDR (active_speed 0 there); sysfs's rate has it.
    rate = tmp_path / "class" / "infiniband" / "fake0" / "ports" / "1" / "rate"
    rate.parent.mkdir(parents=True)
    rate.write_text("800 Gb/sec (4X XDR)\n")
    code = "import json, gdrlab.verbs as gv\nwith gv.Device() as d:\n    print(json.dumps(d.info['ports'][0]))\n"
    port = _run(fake_verbs_lib, code, GDRLAB_SYSFS_ROOT=str(tmp_path))
    assert port["rate"] == "800 Gb/sec (4X XDR)" and port["active_speed"] == 0, port
    assert _run(fake_verbs_lib, code, GDRLAB_SYSFS_ROOT=str(tmp_path / "none"))["rate"] == ""
