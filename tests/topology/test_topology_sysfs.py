"""Topology from synthetic sysfs trees (tests/sysfs_builder.py) and from this machine's /sys.

Expected codes, by hand from the trees the builder lays out:
- same switch: GPU0 (03:00.0) and mlx5_0 (04:00.0) sit below downstream ports 02:08.0 and
  02:10.0 of one PLX switch (upstream port 01:00.0): one switch -> PIX. GPU1 (05:00.0) has its
  own root port 00:02.0; it meets the others only at host bridge pci0000:00 -> PHB.
- two sockets: GPU0 (17:00.0, pci0000:16, NUMA 0); mlx5_0 (98:00.0, pci0000:97, NUMA 1) -> SYS;
  mlx5_1 (3b:00.0, pci0000:3a, NUMA 0): another host bridge of the same node -> NODE.
"""
from __future__ import annotations

import pytest

from gdrlab.topology import from_sysfs
from sysfs_builder import gpu_nic_same_switch, gpu_nic_two_sockets


def test_same_switch(tmp_path):
    gpu_nic_same_switch(tmp_path)
    t = from_sysfs(tmp_path)
    assert t.provenance == "recorded"
    assert [(d["name"], d["pci_bus_id"]) for d in t.devices] == [
        ("GPU0", "0000:03:00.0"), ("GPU1", "0000:05:00.0"), ("mlx5_0", "0000:04:00.0")]
    m = t.matrix()
    assert m["GPU0"] == {"GPU0": "X", "GPU1": "PHB", "mlx5_0": "PIX"}
    assert m["GPU1"]["mlx5_0"] == "PHB"
    assert t.nearest_nic("GPU0") == "mlx5_0"
    assert t.gdr_decision("GPU0", "mlx5_0")["use_gdr"] is True
    assert t.gdr_decision("GPU1", "mlx5_0")["use_gdr"] is False
    assert t.gdr_decision("GPU1", "mlx5_0", "PHB")["use_gdr"] is True
    b = t.numa_binding("GPU0")
    assert (b["numa_node"], b["cpus"], b["numactl"]) == (0, "0-15", "numactl --cpunodebind=0 --membind=0")
    assert t.devices[0]["socket"] == 0


def test_two_sockets(tmp_path):
    gpu_nic_two_sockets(tmp_path)
    t = from_sysfs(tmp_path)
    assert t.gpus == ["GPU0"] and t.nics == ["mlx5_0", "mlx5_1"]
    m = t.matrix()
    assert m["GPU0"]["mlx5_0"] == "SYS"
    assert m["GPU0"]["mlx5_1"] == "NODE"
    assert m["mlx5_0"]["mlx5_1"] == "SYS"
    assert t.nearest_nic("GPU0") == "mlx5_1"
    d = t.gdr_decision("GPU0", "mlx5_1")
    assert d["use_gdr"] is False and d["nccl_path"] == "PHB"  # NCCL has no NODE: it is PHB there
    assert t.gdr_decision("GPU0", "mlx5_1", "PHB")["use_gdr"] is True
    assert t.gdr_decision("GPU0", "mlx5_0", "PHB")["use_gdr"] is False
    assert t.gdr_decision("GPU0", "mlx5_0", "SYS")["use_gdr"] is True
    assert t.numa_binding("GPU0")["numactl"] == "numactl --cpunodebind=0 --membind=0"
    assert t.device("mlx5_0")["socket"] == 1


def test_nvlinks_given_by_caller(tmp_path):
    gpu_nic_same_switch(tmp_path)
    t = from_sysfs(tmp_path, nvlinks={("0000:03:00.0", "0000:05:00.0"): 4})
    assert t.matrix()["GPU0"]["GPU1"] == "NV4"
    assert t.pcie_matrix()["GPU0"]["GPU1"] == "PHB"


def test_single_numa_node_reporting_minus_one(tmp_path):
    # KVM guests often give numa_node -1 everywhere while the machine has one node:
    # nothing is ambiguous then, the device is on node 0.
    from sysfs_builder import GPU_CLASS, NVIDIA, SysfsTree
    t = SysfsTree(tmp_path)
    t.numa_node(0, "0-15")
    t.pci("0000:00:05.0", "pci0000:00", cls=GPU_CLASS, vendor=NVIDIA)
    topo = from_sysfs(tmp_path)
    d = topo.device("GPU0")
    assert d["numa_node"] == 0 and d["numa_inferred"] is True


def test_missing_root_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        from_sysfs(tmp_path / "nope")


def test_empty_tree_is_an_honest_empty_topology(tmp_path):
    (tmp_path / "sys").mkdir()
    t = from_sysfs(tmp_path)
    assert t.devices == [] and t.matrix() == {} and t.to_json()["nearest_nic"] == {}


def test_live_sysfs_reads_without_error():
    # Whatever this machine has, reading it works and every GPU found is an NVIDIA PCI function.
    t = from_sysfs("/")
    assert t.provenance == "live" and "live sysfs of host" in t.source
    for d in t.devices:
        assert d["pci_bus_id"]
    m = t.matrix()
    for a in m:
        assert m[a][a] == "X"


def test_figure_of_two_socket_tree(tmp_path):
    pytest.importorskip("plotly")
    from gdrlab.topology import figure
    gpu_nic_two_sockets(tmp_path)
    t = from_sysfs(tmp_path)
    fig = figure(t, highlight=("GPU0", "mlx5_0"))
    assert "recorded sysfs tree" in fig.layout.title.text and "GPU0 to mlx5_0: SYS" in fig.layout.title.text
    kinds = {tr.name: len(tr.x) for tr in fig.data}
    assert kinds["package"] == 2 and kinds["hostbridge"] == 3 and kinds["nic"] == 2
    # GPU0 - root port - host bridge - socket 0 - machine - socket 1 - host bridge - root port - mlx5_0
    assert kinds["highlighted path"] == 8 * 3
    with pytest.raises(ValueError, match="no device named"):
        figure(t, highlight=("GPU0", "mlx5_9"))


def test_capture_script_round_trip(tmp_path):
    # bench/capture_sysfs.py copies a tree that reads back the same, and leaves binaries behind
    import subprocess
    import sys
    from pathlib import Path
    src, out = tmp_path / "src", tmp_path / "copy"
    t = gpu_nic_same_switch(src)
    (t.dirs["0000:03:00.0"] / "resource0").write_bytes(b"\0" * 16)
    (t.dirs["0000:03:00.0"] / "config").write_bytes(b"\xde\x10\x35\x23")
    script = Path(__file__).resolve().parents[2] / "bench" / "capture_sysfs.py"
    p = subprocess.run([sys.executable, str(script), str(out), "--root", str(src)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert not list(out.rglob("resource0")) and not list(out.rglob("config"))
    a, b = from_sysfs(src), from_sysfs(out)
    assert a.matrix() == b.matrix() and [d["pci_bus_id"] for d in a.devices] == [d["pci_bus_id"] for d in b.devices]
    assert b.matrix()["GPU0"]["mlx5_0"] == "PIX"
    p = subprocess.run([sys.executable, str(script), str(out), "--root", str(tmp_path / "none")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "does not exist" in p.stderr
