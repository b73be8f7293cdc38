"""Which mechanism makes the HCA's writes into GPU memory visible on the gdr path, against the
stand-in libcuda (tests/fake_cuda plus tests/fake_verbs/fake_cuda_dmabuf.c, whose GPUDirect RDMA
attributes 117/118 come from GDRLAB_FAKE_CUDA_* variables) and the stand-in libibverbs, which
counts cuFlushGPUDirectRDMAWrites calls and records every RDMA READ posted.

Expected, per CUDA's GPUDirect RDMA ordering model and NCCL's net_ib flush:
  ordering (118) >= OWNER (100)                 nothing
  else host flush API and HOST bit of 117       cuFlushGPUDirectRDMAWrites
  else (no API, no HOST bit, driver < 11.3)     a 1-byte RDMA READ on a QP connected to itself
  GDRLAB_/NCCL_GDR_FLUSH_DISABLE nonzero        nothing
A test runs three flushes: the client after its timed loop and after the verification message,
the server after the verification message. None of this has met a real GPU or HCA."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from standins import FAKE_SRC, FAKE_VERBS, RUN, build_fake_cuda, run_with_fake_cuda

pytestmark = pytest.mark.timeout(300)

IBV_WR_RDMA_READ = 4  # rdma-core's enum ibv_wr_opcode

READS = RUN.replace("print(json.dumps(out))", """r = (ctypes.c_longlong * 9)()
    n = ibv.fake_ibv_reads(r)
    out['reads'] = n
    out['read'] = dict(zip(['opcode', 'length', 'self', 'target_dmabuf', 'target_offset', 'local_region_length',
                            'lkey_ok', 'rkey_ok', 'qp_num'], list(r)))
    out['flushes'] = cuda.fake_cuda_flushes()
    out['host_api'] = hasattr(cuda, 'cuFlushGPUDirectRDMAWrites')
    print(json.dumps(out))""")


@pytest.fixture(scope="module")
def pre_113_stand_ins(tmp_path_factory, dmabuf_stand_ins) -> tuple[Path, str]:
    """The dma-buf stand-ins, with a libcuda that does not export cuFlushGPUDirectRDMAWrites."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("cc is needed to build the stand-in libcuda")
    d = build_fake_cuda(tmp_path_factory.mktemp("pre_113"))
    extra = FAKE_VERBS / "fake_cuda_dmabuf.c"
    mine = set(re.findall(r"^int (\w+)\(", extra.read_text(), re.MULTILINE))
    rest = d / "rest.c"
    rest.write_text("".join(line + "\n" for line in rest.read_text().splitlines()
                            if re.match(r"int (\w+)\(", line).group(1) not in mine))
    r = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-DFAKE_CUDA_NO_FLUSH_API", "-Wl,-soname,libcuda.so.1",
                        str(FAKE_SRC), str(rest), str(extra), "-o", str(d / "libcuda.so.1")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return d, dmabuf_stand_ins[1]


def _gdr(stand_ins, tmp_path, **env: str) -> dict:
    d, lib = stand_ins
    (tmp_path / "sys" / "module").mkdir(parents=True, exist_ok=True)
    clean = {"GDRLAB_GDR_FLUSH_DISABLE": "", "NCCL_GDR_FLUSH_DISABLE": ""}
    return run_with_fake_cuda(d, READS.format(path="gdr", mode=0), GDRLAB_IBVERBS_LIB=lib,
                              GDRLAB_SYSFS_ROOT=str(tmp_path / "sys"), **{**clean, **env})


@pytest.mark.parametrize("options,ordering,host,reads", [
    ("1", "0", 3, 0),     # host flush supported, writes not ordered: the CUDA call
    ("1", "100", 0, 0),   # OWNER: the GPU consumes inbound writes in order; nothing to do
    ("1", "200", 0, 0),   # ALL_DEVICES includes the owner
    ("0", "0", 0, 3),     # no host flush, no ordering: the RDMA READ
    ("0", "100", 0, 0),   # no host flush needed where writes are ordered
    ("2", "0", 0, 3),     # only the MEMOPS bit: the host call is not supported
])
def test_exactly_the_expected_flush_runs(dmabuf_stand_ins, tmp_path, options, ordering, host, reads):
    out = _gdr(dmabuf_stand_ins, tmp_path, GDRLAB_FAKE_CUDA_FLUSH_OPTIONS=options, GDRLAB_FAKE_CUDA_ORDERING=ordering)
    assert out.get("verified") is True and out["mechanism"] == "dmabuf", out
    assert (out["flushes"], out["reads"]) == (host, reads), out
    assert out["violations"] == 0 and out["qps"] == 0 and out["regions"] == 0, out


def test_the_read_is_one_byte_of_the_gpu_buffer_on_a_self_connected_queue_pair(dmabuf_stand_ins, tmp_path):
    out = _gdr(dmabuf_stand_ins, tmp_path, GDRLAB_FAKE_CUDA_FLUSH_OPTIONS="0", GDRLAB_FAKE_CUDA_ORDERING="0")
    assert out.get("verified") is True and out["reads"] == 3, out
    read = out["read"]
    assert read["opcode"] == IBV_WR_RDMA_READ and read["length"] == 1, read
    assert read["self"] == 1, "the flush READ must go to the posting QP itself, never to the peer"
    # rkey: the dma-buf (GPU) region the peer wrote, read at its first byte; lkey: a small host word.
    assert read["rkey_ok"] == 1 and read["target_dmabuf"] == 1 and read["target_offset"] == 0, read
    assert read["lkey_ok"] == 1 and read["local_region_length"] == 8, read


def test_driver_before_cuda_11_3_uses_the_read(pre_113_stand_ins, tmp_path):
    # No cuFlushGPUDirectRDMAWrites symbol and attributes 117/118 refused: only the READ is left.
    out = _gdr(pre_113_stand_ins, tmp_path, GDRLAB_FAKE_CUDA_ATTRS_UNKNOWN="1")
    assert out.get("verified") is True, out
    assert out["host_api"] is False and out["reads"] == 3, out


def test_missing_host_api_with_the_host_bit_still_reads(pre_113_stand_ins, tmp_path):
    out = _gdr(pre_113_stand_ins, tmp_path, GDRLAB_FAKE_CUDA_FLUSH_OPTIONS="1", GDRLAB_FAKE_CUDA_ORDERING="0")
    assert out.get("verified") is True and out["host_api"] is False and out["reads"] == 3, out


def test_unknown_attributes_with_the_api_present_read(dmabuf_stand_ins, tmp_path):
    out = _gdr(dmabuf_stand_ins, tmp_path, GDRLAB_FAKE_CUDA_ATTRS_UNKNOWN="1")
    assert out.get("verified") is True and (out["flushes"], out["reads"]) == (0, 3), out


@pytest.mark.parametrize("env,reads", [({"NCCL_GDR_FLUSH_DISABLE": "1"}, 0), ({"GDRLAB_GDR_FLUSH_DISABLE": "1"}, 0),
                                       ({"GDRLAB_GDR_FLUSH_DISABLE": "0", "NCCL_GDR_FLUSH_DISABLE": "1"}, 3),
                                       ({"NCCL_GDR_FLUSH_DISABLE": "0"}, 3)])
def test_flush_disable_follows_nccl(dmabuf_stand_ins, tmp_path, env, reads):
    out = _gdr(dmabuf_stand_ins, tmp_path, GDRLAB_FAKE_CUDA_FLUSH_OPTIONS="0", GDRLAB_FAKE_CUDA_ORDERING="0", **env)
    assert out.get("verified") is True and out["reads"] == reads, out


def test_flush_disable_also_skips_the_host_call(dmabuf_stand_ins, tmp_path):
    out = _gdr(dmabuf_stand_ins, tmp_path, GDRLAB_FAKE_CUDA_FLUSH_OPTIONS="1", GDRLAB_FAKE_CUDA_ORDERING="0",
               NCCL_GDR_FLUSH_DISABLE="1")
    assert out.get("verified") is True and (out["flushes"], out["reads"]) == (0, 0), out


def test_bad_flush_disable_value_names_the_variable(dmabuf_stand_ins, tmp_path):
    out = _gdr(dmabuf_stand_ins, tmp_path, NCCL_GDR_FLUSH_DISABLE="yes")
    assert out.get("raised") == "InvalidArgument" and "NCCL_GDR_FLUSH_DISABLE='yes'" in out["message"], out


def test_failed_read_completion_is_a_clear_error(dmabuf_stand_ins, tmp_path):
    # The second READ is the server's, after the verification message: its error ends that test on
    # the server and reaches the client as the test's error (a failure on the client's side would
    # leave the server waiting out its 30 s queue-pair timeout).
    out = _gdr(dmabuf_stand_ins, tmp_path, GDRLAB_FAKE_CUDA_FLUSH_OPTIONS="0", GDRLAB_FAKE_CUDA_ORDERING="0",
               FAKE_IBV_FAIL_READ="2")
    assert out.get("raised") == "VerbsError", out
    assert out["message"].startswith("peer: libibverbs: ibv_poll_cq failed: "), out
    assert "(code 10)" in out["message"], "IBV_WC_REM_ACCESS_ERR, the completion status the stand-in gave"
    assert "RDMA READ that makes the peer's writes visible in GPU memory failed" in out["message"], out
    assert "NCCL_GDR_FLUSH_DISABLE" in out["message"], out
    assert out["reads"] == 2 and out["violations"] == 0 and out["qps"] == 0 and out["regions"] == 0, out


def test_host_paths_never_flush(dmabuf_stand_ins, tmp_path):
    d, lib = dmabuf_stand_ins
    out = run_with_fake_cuda(d, READS.format(path="shared", mode=0), GDRLAB_IBVERBS_LIB=lib,
                             GDRLAB_FAKE_CUDA_FLUSH_OPTIONS="0", GDRLAB_FAKE_CUDA_ORDERING="0")
    assert out.get("verified") is True and (out["flushes"], out["reads"]) == (0, 0), out


STATUS = """
    import json, gdrlab.verbs as gv
    st = gv.peer_memory_status()
    print(json.dumps([st["gpu_flush"], st["gpu_flush_reason"]]))
"""


@pytest.mark.parametrize("env,flush", [
    ({"GDRLAB_FAKE_CUDA_FLUSH_OPTIONS": "1", "GDRLAB_FAKE_CUDA_ORDERING": "100"}, "none"),
    ({"GDRLAB_FAKE_CUDA_FLUSH_OPTIONS": "1", "GDRLAB_FAKE_CUDA_ORDERING": "0"}, "cuFlushGPUDirectRDMAWrites"),
    ({"GDRLAB_FAKE_CUDA_FLUSH_OPTIONS": "0", "GDRLAB_FAKE_CUDA_ORDERING": "0"}, "rdma-read"),
    ({"GDRLAB_FAKE_CUDA_ATTRS_UNKNOWN": "1"}, "rdma-read"),
    ({"GDRLAB_FAKE_CUDA_FLUSH_OPTIONS": "0", "GDRLAB_FAKE_CUDA_ORDERING": "0", "NCCL_GDR_FLUSH_DISABLE": "1"}, "none"),
    # V12: a GH200-like C2C GPU reports OWNER ordering, yet NCCL forces its flush there
    ({"GDRLAB_FAKE_CUDA_FLUSH_OPTIONS": "1", "GDRLAB_FAKE_CUDA_ORDERING": "100", "GDRLAB_FAKE_CUDA_C2C": "1"},
     "rdma-read"),
    ({"GDRLAB_FAKE_CUDA_FLUSH_OPTIONS": "1", "GDRLAB_FAKE_CUDA_ORDERING": "100", "GDRLAB_GDR_FORCE_FLUSH": "1"},
     "rdma-read"),
    ({"GDRLAB_FAKE_CUDA_C2C": "1", "NCCL_GDR_FLUSH_DISABLE": "1"}, "none"),
])
def test_status_says_which_flush_gdr_will_use(dmabuf_stand_ins, env, flush):
    d, lib = dmabuf_stand_ins
    clean = {"GDRLAB_GDR_FLUSH_DISABLE": "", "NCCL_GDR_FLUSH_DISABLE": ""}
    assert run_with_fake_cuda(d, STATUS, GDRLAB_IBVERBS_LIB=lib, **{**clean, **env}) == [flush, ""]


def test_status_reports_a_bad_flush_setting_without_raising(dmabuf_stand_ins):
    d, lib = dmabuf_stand_ins
    flush, reason = run_with_fake_cuda(d, STATUS, GDRLAB_IBVERBS_LIB=lib, GDRLAB_GDR_FLUSH_DISABLE="on",
                                       NCCL_GDR_FLUSH_DISABLE="")
    assert flush is None and "GDRLAB_GDR_FLUSH_DISABLE='on' is not an integer" in reason


@pytest.mark.parametrize("env", [{"FAKE_IBV_LINK": "roce"}, {"FAKE_IBV_GRH_REQUIRED": "1"},
                                 {"FAKE_IBV_LINK": "roce", "NCCL_IB_ADDR_FAMILY": "AF_INET6"}])
def test_the_loopback_queue_pair_is_addressed_like_the_data_one(dmabuf_stand_ins, tmp_path, env):
    # RoCE: a GRH with its own GID at the data QP's GID index; a port that requires a GRH gets one.
    out = _gdr(dmabuf_stand_ins, tmp_path, GDRLAB_FAKE_CUDA_FLUSH_OPTIONS="0", GDRLAB_FAKE_CUDA_ORDERING="0", **env)
    assert out.get("verified") is True and out["reads"] == 3 and out["read"]["self"] == 1, out


def test_c2c_gpu_flushes_with_the_read_although_it_reports_owner_ordering(dmabuf_stand_ins, tmp_path):
    # V12: before, attribute 118 = OWNER meant no flush at all, where NCCL forces one (C2C).
    out = _gdr(dmabuf_stand_ins, tmp_path, GDRLAB_FAKE_CUDA_FLUSH_OPTIONS="1", GDRLAB_FAKE_CUDA_ORDERING="100",
               GDRLAB_FAKE_CUDA_C2C="1")
    assert out.get("verified") is True and out["reads"] > 0 and out["flushes"] == 0, out
