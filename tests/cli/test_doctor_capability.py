"""V8: one capability probe (gdrlab.hw.capability) for engine, doctor and labs. Before it, the
doctor counted only nvidia_peermem and judged dma-buf by the kernel release, so an old MLNX_OFED
node (nv_peer_mem, or a dma-buf backport on a 5.4 kernel) was told gdr is impossible while the
engine ran it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sysfs_builder import gpu_nic_two_sockets
from gdrlab.hw import path_availability, peer_memory
from gdrlab.hw.capability import PEERMEM_PROBES, gdr_capability, peer_memory_client


def _tree(tmp_path, probe_dir: str | None):
    t = gpu_nic_two_sockets(tmp_path)  # kernel 5.4, nvidia_peermem loaded
    (tmp_path / "sys/module/nvidia_peermem/version").unlink()
    (tmp_path / "sys/module/nvidia_peermem").rmdir()
    if probe_dir:
        (tmp_path / probe_dir).mkdir(parents=True)
        (tmp_path / probe_dir / "version").write_text("1.3\n")
    return t


def _report(tmp_path) -> dict:
    gpu = {"index": 0, "cuda_usable": True, "gdr_supported": True, "dmabuf_supported": True}
    return {"cuda": {"usable": True, "driver_version": 12040}, "gpus": [gpu],
            "libraries": {"libibverbs.so.1": {"found": True, "has_ibv_reg_dmabuf_mr": True}},
            "rdma_devices": [{"name": "mlx5_1", "active": True, "ports": []}],
            "peer_memory": peer_memory(tmp_path, [gpu], {"libibverbs.so.1": {"found": True}})}


@pytest.mark.parametrize("probe_dir", ["sys/module/nv_peer_mem", "sys/kernel/mm/memory_peers/nv_mem",
                                       "sys/kernel/mm/memory_peers/nv_mem_nc"])
def test_legacy_peer_memory_makes_gdr_available(tmp_path, probe_dir):
    _tree(tmp_path, probe_dir)
    report = _report(tmp_path)
    gdr = path_availability(report)["gdr"]
    assert gdr["available"] is True, gdr
    assert probe_dir.rsplit("/", 1)[1] in gdr["reason"]


def test_no_client_on_an_old_kernel_is_still_refused(tmp_path):
    _tree(tmp_path, None)
    gdr = path_availability(_report(tmp_path))["gdr"]
    assert gdr["available"] is False and "older than 5.12" in gdr["reason"]


def test_the_probe_sees_a_backport_the_kernel_release_hides(tmp_path):
    _tree(tmp_path, None)
    cap = gdr_capability(tmp_path, probe={"supported": True, "errno": 9, "reason": "answered EBADF"})
    assert cap["dmabuf"] == {"usable": True, "source": "probe", "reason": "answered EBADF"}
    assert cap["available"] and cap["via"] == "dma-buf"
    cap = gdr_capability(tmp_path, probe={"supported": False, "errno": 93, "reason": "answered EPROTONOSUPPORT"})
    assert not cap["available"] and "EPROTONOSUPPORT" in cap["reason"]


@pytest.mark.parametrize("probe", [None] + [d for _, d, _ in PEERMEM_PROBES])
def test_python_and_engine_read_the_same_places(tmp_path, probe):
    _tree(tmp_path, probe)
    mine = peer_memory_client(tmp_path)
    code = "import json; from gdrlab import _native; print(json.dumps(_native.verbs.peermem_loaded()))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, GDRLAB_SYSFS_ROOT=str(tmp_path / "sys")))
    loaded, text = json.loads(r.stdout)
    assert loaded == mine["loaded"]
    if loaded:
        assert text.split()[0] == mine["module"]


PROBE = "import json; from gdrlab.hw.capability import dmabuf_probe; print(json.dumps(dmabuf_probe()))"


@pytest.mark.parametrize("answer,supported", [(None, True), ("EPROTONOSUPPORT", False), ("EOPNOTSUPP", False)])
def test_dmabuf_probe_against_the_stand_in(dmabuf_stand_ins, answer, supported):
    _, lib = dmabuf_stand_ins
    env = dict(os.environ, GDRLAB_IBVERBS_LIB=lib)
    if answer:
        env["FAKE_IBV_DMABUF_ERRNO"] = answer
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, env=env)
    doc = json.loads(r.stdout)
    assert doc["supported"] is supported, doc
    assert ("EBADF" if supported else answer) in doc["reason"]


def test_dmabuf_probe_without_the_symbol(fake_verbs_lib):
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, GDRLAB_IBVERBS_LIB=fake_verbs_lib))
    doc = json.loads(r.stdout)
    assert doc["supported"] is False and "rdma-core older than v34" in doc["reason"]


@pytest.mark.parametrize("node_type,vendor,kind", [("7: unspecified", 0x1D0F, "EFA"), ("4: RNIC", 0x8086, "iWARP")])
def test_doctor_does_not_offer_gdr_on_efa_or_iwarp(tmp_path, node_type, vendor, kind):
    # V3: before, any listed RDMA device made the verbs wire "available"
    from sysfs_builder import GPU_CLASS, NIC_CLASS, NVIDIA, SysfsTree
    t = SysfsTree(tmp_path)
    t.kernel("6.8.0")
    t.pci("0000:10:00.0", "pci0000:10", cls=GPU_CLASS, vendor=NVIDIA, numa=0)
    t.pci("0000:20:00.0", "pci0000:10", cls=NIC_CLASS, vendor=vendor, numa=0)
    t.rdma("rdmap32s0" if kind == "EFA" else "irdma0", "0000:20:00.0", link_layer="Ethernet")
    dev = next((tmp_path / "sys/class/infiniband").iterdir())
    (dev / "node_type").write_text(node_type + "\n")
    report = _report(tmp_path)
    from gdrlab.hw import rdma_devices
    report["rdma_devices"] = rdma_devices(tmp_path)
    gdr = path_availability(report)["gdr"]
    assert gdr["available"] is False and f"is {kind}: no RC queue pairs" in gdr["reason"]
    assert report["rdma_devices"][0]["no_rc_kind"] == kind
