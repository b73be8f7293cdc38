"""The verbs types the engine declares itself (native/src/verbs/abi.h) against rdma-core's
<infiniband/verbs.h>: every size, field offset and enum value, compiled side by side with g++.

A wrong offset here would make the engine pass garbage to a real HCA on a cluster this project
cannot test on, so the check is exact. Skips with the reason where the header or g++ is absent.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "native" / "src"
HEADER = Path("/usr/include/infiniband/verbs.h")

# (struct, [fields]) whose offsets must match; sizes are compared for each struct too, except
# ibv_port_attr, where the engine keeps spare room after the last field (see verbs/abi.h).
FIELDS = {
    "ibv_device_attr": ["fw_ver", "node_guid", "sys_image_guid", "max_mr_size", "page_size_cap", "vendor_id",
                        "vendor_part_id", "hw_ver", "max_qp", "max_qp_wr", "device_cap_flags", "max_sge",
                        "max_cqe", "max_mr", "max_pd", "atomic_cap", "max_srq_sge", "max_pkeys",
                        "local_ca_ack_delay", "phys_port_cnt"],
    "ibv_port_attr": ["state", "max_mtu", "active_mtu", "gid_tbl_len", "port_cap_flags", "max_msg_sz",
                      "pkey_tbl_len", "lid", "sm_lid", "lmc", "active_width", "active_speed", "phys_state",
                      "link_layer", "flags", "port_cap_flags2"],
    "ibv_device": ["node_type", "transport_type", "name", "dev_name", "dev_path", "ibdev_path"],
    "ibv_context_ops": ["poll_cq", "req_notify_cq", "post_srq_recv", "post_send", "post_recv",
                        "_compat_async_event"],
    "ibv_context": ["device", "ops", "cmd_fd", "async_fd", "num_comp_vectors", "mutex", "abi_compat"],
    "ibv_pd": ["context", "handle"],
    "ibv_mr": ["context", "pd", "addr", "length", "handle", "lkey", "rkey"],
    "ibv_cq": ["context", "channel", "cq_context", "handle", "cqe", "mutex", "cond", "comp_events_completed",
               "async_events_completed"],
    "ibv_qp_cap": ["max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data"],
    "ibv_qp_init_attr": ["qp_context", "send_cq", "recv_cq", "srq", "cap", "qp_type", "sq_sig_all"],
    "ibv_qp": ["context", "qp_context", "pd", "send_cq", "recv_cq", "srq", "handle", "qp_num", "state", "qp_type",
               "mutex", "cond", "events_completed"],
    "ibv_global_route": ["dgid", "flow_label", "sgid_index", "hop_limit", "traffic_class"],
    "ibv_ah_attr": ["grh", "dlid", "sl", "src_path_bits", "static_rate", "is_global", "port_num"],
    "ibv_qp_attr": ["qp_state", "cur_qp_state", "path_mtu", "path_mig_state", "qkey", "rq_psn", "sq_psn",
                    "dest_qp_num", "qp_access_flags", "cap", "ah_attr", "alt_ah_attr", "pkey_index",
                    "alt_pkey_index", "en_sqd_async_notify", "sq_draining", "max_rd_atomic", "max_dest_rd_atomic",
                    "min_rnr_timer", "port_num", "timeout", "retry_cnt", "rnr_retry", "alt_port_num", "alt_timeout",
                    "rate_limit"],
    "ibv_sge": ["addr", "length", "lkey"],
    "ibv_gid_entry": ["gid", "gid_index", "port_num", "gid_type", "ndev_ifindex"],
    "ibv_send_wr": ["wr_id", "next", "sg_list", "num_sge", "opcode", "send_flags", "imm_data", "wr.rdma.remote_addr",
                    "wr.rdma.rkey", "wr.ud.remote_qpn", "qp_type.xrc.remote_srqn", "bind_mw.bind_info", "tso.mss"],
    "ibv_recv_wr": ["wr_id", "next", "sg_list", "num_sge"],
    "ibv_wc": ["wr_id", "status", "opcode", "vendor_err", "byte_len", "imm_data", "qp_num", "src_qp", "wc_flags",
               "pkey_index", "slid", "sl", "dlid_path_bits"],
}
SIZE_ALSO = {"ibv_gid": True}


def _enum_names() -> list[str]:
    text = (SRC / "verbs" / "abi.h").read_text()
    body = text[text.index("// ---------------------------------------------------------------------------------------- enums"):
                text.index("// -------------------------------------------------------------------------------------- structs")]
    body = re.sub(r"//[^\n]*", "", body)  # names in comments are not declarations
    names = re.findall(r"\b(IBV_[A-Z0-9_]+)\b", body)
    return sorted(set(n for n in names if n not in ("IBV_SYSFS_NAME_MAX", "IBV_SYSFS_PATH_MAX")))


def _program() -> str:
    lines = ['#include <infiniband/verbs.h>', '#include "verbs/abi.h"', "#include <cstdio>", "#include <cstddef>",
             "#include <utility>",
             "namespace g = gdrlab::ibv;", "int main() {"]
    for struct, fields in FIELDS.items():
        lines.append(f'  std::printf("size {struct} %zu %zu\\n", sizeof(::{struct}), sizeof(g::{struct}));')
        for f in fields:
            lines.append(f'  std::printf("offset {struct}.{f} %zu %zu\\n", offsetof(::{struct}, {f}), '
                         f'offsetof(g::{struct}, {f}));')
            lines.append(f'  std::printf("fsize {struct}.{f} %zu %zu\\n", sizeof(std::declval<::{struct}&>().{f}), '
                         f'sizeof(std::declval<g::{struct}&>().{f}));')
    lines.append('  std::printf("size ibv_gid %zu %zu\\n", sizeof(::ibv_gid), sizeof(g::ibv_gid));')
    lines.append('  std::printf("offset ibv_port_attr.END %zu %zu\\n", offsetof(::ibv_port_attr, port_cap_flags2) + 2, '
                 'offsetof(g::ibv_port_attr, port_cap_flags2) + 2);')
    for name in _enum_names():
        lines.append(f'  std::printf("enum {name} %lld %lld\\n", (long long)::{name}, (long long)g::{name});')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def abi_rows(tmp_path_factory):
    if not HEADER.exists():
        pytest.skip("rdma-core's <infiniband/verbs.h> is not installed (Debian/Ubuntu: apt-get install libibverbs-dev)")
    gxx = shutil.which("g++")
    if not gxx:
        pytest.skip("g++ is not installed")
    d = tmp_path_factory.mktemp("abi")
    src = d / "abi.cc"
    src.write_text(_program())
    exe = d / "abi"
    r = subprocess.run([gxx, "-std=c++17", "-Wno-invalid-offsetof", f"-I{SRC}", str(src), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, "the declared ABI does not compile next to verbs.h:\n" + r.stderr[-4000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in out.splitlines()]
    return [(kind, name, int(theirs), int(ours)) for kind, name, theirs, ours in rows]


def test_struct_sizes_match(abi_rows):
    bad = [(n, t, o) for k, n, t, o in abi_rows if k == "size" and n != "ibv_port_attr" and t != o]
    assert not bad, f"sizeof differs (name, verbs.h, ours): {bad}"


def test_port_attr_is_large_enough(abi_rows):
    # The engine's ibv_port_attr must hold at least what this rdma-core writes.
    (t, o), = [(t, o) for k, n, t, o in abi_rows if k == "size" and n == "ibv_port_attr"]
    assert o >= t


def test_field_offsets_match(abi_rows):
    offsets = [r for r in abi_rows if r[0] == "offset"]
    assert len(offsets) > 150
    bad = [(n, t, o) for k, n, t, o in offsets if t != o]
    assert not bad, f"offsets differ (field, verbs.h, ours): {bad}"


def test_field_sizes_match(abi_rows):
    sizes = [r for r in abi_rows if r[0] == "fsize"]
    assert len(sizes) > 150
    bad = [(n, t, o) for k, n, t, o in sizes if t != o]
    assert not bad, f"field sizes differ (field, verbs.h, ours): {bad}"


def test_enum_values_match(abi_rows):
    enums = [r for r in abi_rows if r[0] == "enum"]
    assert len(enums) > 80
    bad = [(n, t, o) for k, n, t, o in enums if t != o]
    assert not bad, f"enum values differ (name, verbs.h, ours): {bad}"


def test_documented_values_by_hand():
    # Independent of both headers: values from the InfiniBand spec / verbs man pages.
    from gdrlab import _native
    c = _native.verbs.CONSTANTS
    assert [c[f"IBV_MTU_{n}"] for n in (256, 512, 1024, 2048, 4096)] == [1, 2, 3, 4, 5]
    assert (c["IBV_QPS_RESET"], c["IBV_QPS_INIT"], c["IBV_QPS_RTR"], c["IBV_QPS_RTS"]) == (0, 1, 2, 3)
    assert c["IBV_QP_STATE"] == 1 and c["IBV_QP_AV"] == 128 and c["IBV_QP_DEST_QPN"] == 1 << 20
    assert c["IBV_PORT_ACTIVE"] == 4 and c["IBV_LINK_LAYER_ETHERNET"] == 2


def _symbol_list():
    text = (SRC / "verbs" / "api.h").read_text()
    return re.findall(r'(REQ|OPT)\(\w+, "(ibv_\w+)", "(IBVERBS_[0-9.]+)"', text)


def test_symbol_versions_exist_in_installed_library():
    lib = ctypes.util.find_library("ibverbs")
    if not lib:
        pytest.skip("libibverbs is not installed (Debian/Ubuntu: apt-get install libibverbs1)")
    handle = ctypes.CDLL("libibverbs.so.1")
    libc = ctypes.CDLL(None)
    dlvsym = libc.dlvsym
    dlvsym.restype = ctypes.c_void_p
    dlvsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    symbols = _symbol_list()
    assert len(symbols) >= 20
    missing = [(s, v) for kind, s, v in symbols
               if kind == "REQ" and not dlvsym(handle._handle, s.encode(), v.encode())]
    assert not missing, f"required symbols not exported at the declared version: {missing}"
    # Optional ones must at least be named with the version rdma-core introduced them in.
    versions = {s: v for _, s, v in symbols}
    assert versions["ibv_reg_dmabuf_mr"] == "IBVERBS_1.12"
    assert versions["ibv_reg_mr_iova2"] == "IBVERBS_1.8"


def test_engine_build_needs_no_rdma_headers():
    # The engine's own sources never include rdma-core headers: the build works without them.
    for f in list((SRC / "verbs").glob("*")) + [ROOT / "native" / "bind" / "verbs.cc"]:
        assert "#include <infiniband/" not in f.read_text(), f"{f.name} includes an rdma-core header"
    assert os.path.exists(SRC / "verbs" / "abi.h")
