"""The warning a GPU-path run prints when its HCA is reached from the GPU only through the CPU
(nvidia-smi's PHB, NODE or SYS), in a stand-in sysfs tree (GDRLAB_SYSFS_ROOT) with the stand-in
libcuda reporting the GPU's PCI address and the stand-in libibverbs listing the HCAs. What NCCL
would do follows its NCCL_NET_GDR_LEVEL rule (src/graph/paths.cc, ncclTopoCheckGdr: GPUDirect
RDMA only where the path type is at most the level, PXB by default)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from standins import RUN

from gdrlab import _native

pytestmark = pytest.mark.timeout(300)
V = _native.verbs
GPU_BUS = "0000:82:00.0"


def _tree(root: Path, *, hca_numa: int | None, gpu_numa: int | None, numa_nodes: int = 2,
          hca_under: str = "other_bridge") -> None:
    """The GPU below a PCIe switch of host bridge pci0000:80; fake0 under another host bridge
    (pci0000:00), under another root port of pci0000:80 ("other_port"), or beside the GPU on its
    switch ("switch")."""
    switch = root / "devices" / "pci0000:80" / "0000:80:01.0" / "0000:81:00.0"
    gpu = switch / "0000:82:00.0"
    hca = {"other_bridge": root / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:01:00.0",
           "other_port": root / "devices" / "pci0000:80" / "0000:80:03.0" / "0000:83:00.0",
           "switch": switch / "0000:82:01.0"}[hca_under]
    for d, numa in ((gpu, gpu_numa), (hca, hca_numa)):
        d.mkdir(parents=True)
        if numa is not None:
            (d / "numa_node").write_text(f"{numa}\n")
    (root / "class" / "infiniband" / "fake0").mkdir(parents=True)
    (root / "class" / "infiniband" / "fake0" / "device").symlink_to(hca)
    (root / "bus" / "pci" / "devices").mkdir(parents=True)
    (root / "bus" / "pci" / "devices" / GPU_BUS).symlink_to(gpu)
    for n in range(numa_nodes):
        (root / "devices" / "system" / "node" / f"node{n}").mkdir(parents=True)


def _run(stand_ins, root: Path, path: str = "staged", **env: str) -> tuple[dict, list[str]]:
    d, lib = stand_ins
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GDRLAB_IB", "FAKE_IBV"))}
    e.update(LD_LIBRARY_PATH=f"{d}:{e.get('LD_LIBRARY_PATH', '')}", GDRLAB_IBVERBS_LIB=lib,
             GDRLAB_SYSFS_ROOT=str(root), GDRLAB_FAKE_CUDA_BUS_ID=GPU_BUS, **env)
    script = RUN.format(path=path, mode=0).replace(
        'mechanism=info["mechanism"]', 'mechanism=info["mechanism"], device=info["device"]')
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=e,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("gdrlab: warning: HCA")]
    return json.loads(r.stdout.strip().splitlines()[-1]), warnings


def test_hca_across_numa_nodes_warns_once_naming_both_devices(dmabuf_stand_ins, tmp_path):
    _tree(tmp_path, gpu_numa=1, hca_numa=0)
    out, warnings = _run(dmabuf_stand_ins, tmp_path)
    assert out.get("verified") is True and out["device"] == "fake0", out
    # Client and server open the HCA in this one process: one line, not two.
    assert len(warnings) == 1, warnings
    (w,) = warnings
    assert w.startswith(f"gdrlab: warning: HCA fake0 is SYS from GPU 0 ({GPU_BUS}): "
                        "across the link between NUMA nodes 1 and 0;"), w
    assert ("NCCL at its default NCCL_NET_GDR_LEVEL (P2C from NCCL 2.29.2, PXB before) would not use GPUDirect RDMA "
            "for this pair") in w, w


def test_hca_on_another_host_bridge_of_the_same_node_is_node(dmabuf_stand_ins, tmp_path):
    _tree(tmp_path, gpu_numa=0, hca_numa=0)
    _, (w,) = _run(dmabuf_stand_ins, tmp_path)
    assert " is NODE from GPU 0 " in w and "between two host bridges of NUMA node 0" in w, w
    assert "(a NODE path is PHB to NCCL)" in w and "would not use" in w, w


@pytest.mark.parametrize("nodes,code", [(1, "NODE"), (2, "SYS")])
def test_unknown_numa_nodes(dmabuf_stand_ins, tmp_path, nodes, code):
    # numa_node unreadable: one NUMA node on the machine settles it; with several, SYS is assumed.
    _tree(tmp_path, gpu_numa=None, hca_numa=None, numa_nodes=nodes)
    _, (w,) = _run(dmabuf_stand_ins, tmp_path)
    assert f" is {code} from GPU 0 " in w, w


def test_hca_on_another_root_port_is_phb(dmabuf_stand_ins, tmp_path):
    _tree(tmp_path, gpu_numa=0, hca_numa=0, hca_under="other_port")
    _, (w,) = _run(dmabuf_stand_ins, tmp_path)
    assert " is PHB from GPU 0 " in w and "through the CPU's PCIe host bridge pci0000:80" in w, w


def test_hca_behind_the_gpus_switch_is_quiet(dmabuf_stand_ins, tmp_path):
    _tree(tmp_path, gpu_numa=0, hca_numa=0, hca_under="switch")
    out, warnings = _run(dmabuf_stand_ins, tmp_path)
    assert out.get("verified") is True and warnings == [], warnings


def test_host_path_touches_no_gpu_memory_and_does_not_warn(dmabuf_stand_ins, tmp_path):
    _tree(tmp_path, gpu_numa=1, hca_numa=0)
    out, warnings = _run(dmabuf_stand_ins, tmp_path, path="host")
    assert out.get("verified") is True and warnings == [], warnings


def test_host_path_runs_on_the_hca_gdr_uses(dmabuf_stand_ins, tmp_path):
    # V4: fake0 (listed first) sits across the CPU, fake1 beside the GPU on its switch. Before the fix
    # the host path took the first listed device and gdr the nearest: two NICs in one comparison.
    _tree(tmp_path, gpu_numa=0, hca_numa=0)
    near = tmp_path / "devices/pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:01.0"
    near.mkdir()
    (tmp_path / "class/infiniband/fake1").mkdir()
    (tmp_path / "class/infiniband/fake1/device").symlink_to(near)
    devices = {p: _run(dmabuf_stand_ins, tmp_path, path=p, FAKE_IBV_DEVICES="2")[0]["device"]
               for p in ("host", "gdr", "staged")}
    assert devices == {"host": "fake1", "gdr": "fake1", "staged": "fake1"}, devices


def test_named_hca_far_from_the_gpu_warns_too(dmabuf_stand_ins, tmp_path):
    _tree(tmp_path, gpu_numa=1, hca_numa=0)
    _, warnings = _run(dmabuf_stand_ins, tmp_path, GDRLAB_IB_DEV="fake0")
    assert len(warnings) == 1 and " is SYS " in warnings[0], warnings


@pytest.mark.parametrize("level,code,verdict", [
    ("SYS", "SYS", "with NCCL_NET_GDR_LEVEL=SYS would use GPUDirect RDMA"),
    ("PHB", "NODE", "with NCCL_NET_GDR_LEVEL=PHB would use GPUDirect RDMA"),
    ("PHB", "SYS", "with NCCL_NET_GDR_LEVEL=PHB would not use GPUDirect RDMA"),
    ("3", "PHB", "with NCCL_NET_GDR_LEVEL=3 (PHB) would use"),
    ("2", "PHB", "with NCCL_NET_GDR_LEVEL=2 (PXB) would not use"),
    ("9", "SYS", "with NCCL_NET_GDR_LEVEL=9 (SYS) would use"),
    ("0x3", "PHB", "with NCCL_NET_GDR_LEVEL=0x3 (PHB) would use"),
    # NCCL compares names case-sensitively and ignores what it does not know (default PXB).
    ("sys", "SYS", "ignoring NCCL_NET_GDR_LEVEL='sys' (not a level it knows) and at its default NCCL_NET_GDR_LEVEL "
                   "(P2C from NCCL 2.29.2, PXB before) would not use"),
    ("far", "PHB", "ignoring NCCL_NET_GDR_LEVEL='far'"),
])
def test_what_nccl_would_do_follows_its_gdr_level(level, code, verdict, monkeypatch):
    monkeypatch.setenv("NCCL_NET_GDR_LEVEL", level)
    assert verdict in V.nccl_gdr_verdict(code)


def test_paths_that_meet_below_a_root_port_are_not_classified():
    sw = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"
    assert V.cpu_crossing_code(sw + "/0000:82:00.0", sw + "/0000:82:01.0")[0] == ""
    assert V.cpu_crossing_code(sw + "/0000:82:00.0", "/sys/devices/pci0000:80/0000:80:03.0/0000:83:00.0")[0] == "PHB"
    assert V.cpu_crossing_code("", sw) == ("", "")


@pytest.mark.parametrize("build,pairs,codes", [
    ("gpu_nic_same_switch", [("GPU0", "mlx5_0"), ("GPU1", "mlx5_0")], ["PIX", "PHB"]),
    ("gpu_nic_two_sockets", [("GPU0", "mlx5_0"), ("GPU0", "mlx5_1")], ["SYS", "NODE"]),
])
def test_engine_and_topology_agree_on_the_code(tmp_path, monkeypatch, build, pairs, codes):
    # The engine's classification (C++, for the warning) against gdrlab.topology's pcie_code on the
    # same synthetic machines (tests/sysfs_builder.py): equal where the path crosses the CPU, and
    # "" from the engine where topology says PIX or PXB.
    import sysfs_builder

    from gdrlab.topology import from_sysfs
    getattr(sysfs_builder, build)(tmp_path)
    monkeypatch.setenv("GDRLAB_SYSFS_ROOT", str(tmp_path / "sys"))
    topo = from_sysfs(tmp_path)
    assert [topo.pcie_code(g, n)[0] for g, n in pairs] == codes  # the cases this test is about
    for gpu, nic in pairs:
        expected = topo.pcie_code(gpu, nic)[0]
        gpu_path = (tmp_path / "sys" / "bus" / "pci" / "devices" / topo.device(gpu)["pci_bus_id"]).resolve()
        nic_path = (tmp_path / "sys" / "class" / "infiniband" / nic / "device").resolve()
        code, why = V.cpu_crossing_code(str(gpu_path), str(nic_path))
        assert code == ("" if expected in ("PIX", "PXB") else expected), (gpu, nic, expected, code, why)


@pytest.mark.parametrize("code", ["PIX", "PXB", "PHB", "NODE", "SYS"])
@pytest.mark.parametrize("level", [None, "LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS",
                                   "0", "1", "2", "3", "4", "9", "0x2"])
def test_the_engine_warning_agrees_with_the_nccl_table(code, level, monkeypatch):
    """The engine's warning (C++, where no NCCL version is known) decides as gdrlab.topology's
    verdict from the NCCL version table does for the newest NCCL and, at the default level, for
    every NCCL version the table knows (PXB before 2.29.2, P2C from it)."""
    from gdrlab.nccl import versions
    from gdrlab.topology._topo import gdr_verdict

    if level is None:
        monkeypatch.delenv("NCCL_NET_GDR_LEVEL", raising=False)
        monkeypatch.delenv("GDRLAB_NET_GDR_LEVEL", raising=False)
    else:
        monkeypatch.setenv("NCCL_NET_GDR_LEVEL", level)
    engine_uses = " would use GPUDirect RDMA" in V.nccl_gdr_verdict(code)
    assert engine_uses == gdr_verdict("GPU0", "mlx5_0", code, "test", level)["use_gdr"]
    if level is None:
        for v in versions.known_versions():
            assert engine_uses == gdr_verdict("GPU0", "mlx5_0", code, "test", None, v)["use_gdr"], v
