"""Topology from the three recorded hwloc XMLs, against matrices read off the XML trees by hand.

How the expected tables were made (by reading the XML, not by running gdrlab):

Xeon X9DRG-HF (32em64t-2n8c2t-pci-normalio.xml). NVIDIA GPUs (vendor 10de, class 0302), in bus
order: 0000:03:00.0 (GPU0), 0000:83:00.0 (GPU1), 0000:84:00.0 (GPU2). The RDMA device mlx5_0
(OSDev osdev_type 48 = network|openfabrics) sits on PCIDev 0000:04:00.0, a ConnectX-4.
- GPU0 is below host bridge 0000:[00-05] in Package 0 (nodeset 0x1, NUMA 0); GPU1, GPU2 and
  mlx5_0 are below host bridge 0000:[80-84] in Package 1 (NUMA 1). GPU0 to anything: SYS.
- GPU1 (root port 80:02.0) to GPU2 (root port 80:03.0): they meet at the host bridge: PHB.
- GPU2 and mlx5_0 are both children of root port 80:03.0: one bridge, no switch: PIX.
  (Real PCIe links are point to point; this hwloc test file puts two devices below one root
  port, which still reads as "at most a single PCIe bridge".)
- NUMA 0 cpuset 0x00ff00ff -> CPUs 0-7,16-23; NUMA 1 cpuset 0xff00ff00 -> 8-15,24-31.

NVIDIA DGX-2H (nvidiaDGX2.xml). Host bridges 0000:[2b-3b] and 0000:[4e-67] in Package 0,
0000:[ae-c7] and 0000:[d7-e7] in Package 1, four GPUs each. Below host bridge [2b-3b]:
root port 2b:00.0 -> PLX 2c:00.0 (switch A upstream) -> 2d:04.0 (A downstream) -> 32:00.0
(switch B upstream) -> 33:00.0 / 33:10.0 (B downstream) -> GPU0 34:00.0 / GPU1 36:00.0.
- GPU0-GPU1: 33:00.0, 32:00.0, 33:10.0 are all switch B: one switch: PIX.
- GPU0-GPU2 (39:00.0 below switch C 37:00.0/38:00.0, reached via A's 2d:0c.0): switches B, A, C:
  PXB. The other host bridges repeat this shape (4e: 4f/50/55/56, ae: af/b0/b5/b6, d7: d8/d9/de/df).
- GPU0-GPU4: different host bridges of Package 0: NODE. GPU0-GPU8: Package 0 to 1: SYS.
- NVLinkBandwidth: every GPU has 25000 MB/s to each of 6 NVSwitches (one NVLink 2 link each,
  hwloc counts 25000 MB/s per link for NVLink 2-4). NVML does not report the trunks that join
  the two baseboards' switches, so from the XML: all 16 GPUs reach the NVSwitch fabric with
  6 links -> NV6 everywhere, which is what `nvidia-smi topo -m` prints on a DGX-2.

IBM POWER8 Minsky (power8gpudistances.xml). Four P100 each alone below its own host bridge
(domains 0002, 0003 in Package 0 / NUMA 0; 000a, 000b in Package 1 / NUMA 1).
- GPU0-GPU1: two host bridges, same NUMA node: NODE; GPU0-GPU2: SYS.
- NVLinkBandwidth 40000 MB/s GPU0-GPU1 and GPU2-GPU3; P100 is NVLink 1 at 20000 MB/s per
  link: 2 links -> NV2. The 40000 to "Package" entries are GPU-to-CPU NVLinks, not GPU pairs.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from gdrlab.topology import PciTreeWarning, from_hwloc, recorded_machines

DATA = Path(__file__).resolve().parents[1] / "data" / "hwloc"  # the fixture the tests edit
SHIPPED = Path(__file__).resolve().parents[2] / "gdrlab" / "data" / "hwloc"  # real machines


def parse_table(text: str) -> dict[str, dict[str, str]]:
    """An nvidia-smi style table (header row of names, one row per device) into a dict."""
    lines = [l.split() for l in text.strip().splitlines()]
    names = lines[0]
    return {row[0]: dict(zip(names, row[1:])) for row in lines[1:]}


XEON = """
        GPU0  GPU1  GPU2  mlx5_0
GPU0    X     SYS   SYS   SYS
GPU1    SYS   X     PHB   PHB
GPU2    SYS   PHB   X     PIX
mlx5_0  SYS   PHB   PIX   X
"""

DGX2_PCIE = """
      GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7 GPU8 GPU9 GPU10 GPU11 GPU12 GPU13 GPU14 GPU15
GPU0  X    PIX  PXB  PXB  NODE NODE NODE NODE SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS
GPU1  PIX  X    PXB  PXB  NODE NODE NODE NODE SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS
GPU2  PXB  PXB  X    PIX  NODE NODE NODE NODE SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS
GPU3  PXB  PXB  PIX  X    NODE NODE NODE NODE SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS
GPU4  NODE NODE NODE NODE X    PIX  PXB  PXB  SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS
GPU5  NODE NODE NODE NODE PIX  X    PXB  PXB  SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS
GPU6  NODE NODE NODE NODE PXB  PXB  X    PIX  SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS
GPU7  NODE NODE NODE NODE PXB  PXB  PIX  X    SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS
GPU8  SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  X    PIX  PXB  PXB  NODE NODE NODE NODE
GPU9  SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  PIX  X    PXB  PXB  NODE NODE NODE NODE
GPU10 SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  PXB  PXB  X    PIX  NODE NODE NODE NODE
GPU11 SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  PXB  PXB  PIX  X    NODE NODE NODE NODE
GPU12 SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  NODE NODE NODE NODE X    PIX  PXB  PXB
GPU13 SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  NODE NODE NODE NODE PIX  X    PXB  PXB
GPU14 SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  NODE NODE NODE NODE PXB  PXB  X    PIX
GPU15 SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  NODE NODE NODE NODE PXB  PXB  PIX  X
"""

POWER8_PCIE = """
      GPU0  GPU1  GPU2  GPU3
GPU0  X     NODE  SYS   SYS
GPU1  NODE  X     SYS   SYS
GPU2  SYS   SYS   X     NODE
GPU3  SYS   SYS   NODE  X
"""

POWER8 = """
      GPU0  GPU1  GPU2  GPU3
GPU0  X     NV2   SYS   SYS
GPU1  NV2   X     SYS   SYS
GPU2  SYS   SYS   X     NV2
GPU3  SYS   SYS   NV2   X
"""


@pytest.fixture(scope="module")
def xeon():
    # hwloc's hand-edited fixture: it loads, with a warning that no machine can have this tree
    with pytest.warns(PciTreeWarning):
        return from_hwloc(DATA / "32em64t-2n8c2t-pci-normalio.xml")


@pytest.fixture(scope="module")
def dgx2():
    return from_hwloc(SHIPPED / "nvidiaDGX2.xml")


@pytest.fixture(scope="module")
def power8():
    return from_hwloc(SHIPPED / "power8gpudistances.xml")


def test_xeon_devices(xeon):
    assert [(d["name"], d["kind"], d["pci_bus_id"], d["numa_node"]) for d in xeon.devices] == [
        ("GPU0", "gpu", "0000:03:00.0", 0), ("GPU1", "gpu", "0000:83:00.0", 1),
        ("GPU2", "gpu", "0000:84:00.0", 1), ("mlx5_0", "nic", "0000:04:00.0", 1)]
    assert [d["socket"] for d in xeon.devices] == [0, 1, 1, 1]


def test_xeon_matrix(xeon):
    # no NVLink in this file: matrix and pcie are the same table
    assert xeon.pcie_matrix() == parse_table(XEON)
    assert xeon.matrix() == parse_table(XEON)


def test_xeon_nearest_nic_gdr_numa(xeon):
    assert xeon.nearest_nic("GPU0") == "mlx5_0"  # the only NIC, even across sockets
    assert xeon.nearest_nic("GPU2") == "mlx5_0"
    # NCCL's default level (P2C from 2.29.2, PXB before; the same here): only the PIX pair gets GDR
    assert xeon.gdr_decision("GPU2", "mlx5_0")["use_gdr"] is True
    assert xeon.gdr_decision("GPU1", "mlx5_0")["use_gdr"] is False
    assert xeon.gdr_decision("GPU0", "mlx5_0")["use_gdr"] is False
    assert "SYS" in xeon.gdr_decision("GPU0", "mlx5_0")["reason"]
    b = xeon.numa_binding("GPU0")
    assert b == {**b, "numa_node": 0, "cpus": "0-7,16-23", "numactl": "numactl --cpunodebind=0 --membind=0"}
    assert xeon.numa_binding("GPU2")["cpus"] == "8-15,24-31"


@pytest.mark.parametrize("level,gpu1,gpu0", [
    ("PHB", True, False), ("3", True, False), (3, True, False),   # old numeric 3 = PHB
    ("SYS", True, True), ("4", True, True), ("5", True, True),    # 4 and 5 both mean SYS
    ("PIX", False, False), ("1", False, False), ("LOC", False, False), ("0", False, False),
    ("phb", True, False),
])
def test_gdr_level_override(xeon, level, gpu1, gpu0):
    assert xeon.gdr_decision("GPU1", "mlx5_0", level)["use_gdr"] is gpu1
    assert xeon.gdr_decision("GPU0", "mlx5_0", level)["use_gdr"] is gpu0


def test_gdr_level_pix_still_allows_pix(xeon):
    assert xeon.gdr_decision("GPU2", "mlx5_0", "PIX")["use_gdr"] is True
    assert xeon.gdr_decision("GPU2", "mlx5_0", "LOC")["use_gdr"] is False


@pytest.mark.parametrize("bad", ["FOO", "", "-1", -1, True])
def test_gdr_level_rejects_junk(xeon, bad):
    with pytest.raises(ValueError):
        xeon.gdr_decision("GPU2", "mlx5_0", bad)


def test_gdr_decision_checks_kinds(xeon):
    with pytest.raises(ValueError, match="not a GPU"):
        xeon.gdr_decision("mlx5_0", "mlx5_0")
    with pytest.raises(ValueError, match="no device named"):
        xeon.gdr_decision("GPU9", "mlx5_0")


def test_dgx2_pcie_and_nvlink(dgx2):
    assert dgx2.gpus == [f"GPU{i}" for i in range(16)]
    assert dgx2.nics == []
    assert dgx2.pcie_matrix() == parse_table(DGX2_PCIE)
    m = dgx2.matrix()
    for a in dgx2.gpus:
        for b in dgx2.gpus:
            assert m[a][b] == ("X" if a == b else "NV6"), (a, b)
    assert [d["numa_node"] for d in dgx2.devices] == [0] * 8 + [1] * 8
    assert dgx2.nearest_nic("GPU0") is None
    assert dgx2.devices[0]["model"] == "Tesla V100-SXM3-32GB-H"


def test_power8(power8):
    assert [d["pci_bus_id"] for d in power8.devices] == [
        "0002:01:00.0", "0003:01:00.0", "000a:01:00.0", "000b:01:00.0"]
    assert power8.pcie_matrix() == parse_table(POWER8_PCIE)
    assert power8.matrix() == parse_table(POWER8)
    # Package 1's cpuset 0x00000303,0x03030000,,0x0: bits 80,81,88,89 and 96,97,104,105
    assert power8.numa_binding("GPU2")["cpus"] == "80-81,88-89,96-97,104-105"


def test_to_json_shape(xeon):
    j = xeon.to_json()
    assert set(j) >= {"devices", "matrix", "pcie", "nearest_nic", "gdr", "numa", "source", "provenance"}
    assert j["matrix"]["GPU2"]["mlx5_0"] == "PIX"
    assert j["gdr"]["GPU2"]["mlx5_0"]["use_gdr"] is True
    assert j["numa"]["GPU1"]["numa_node"] == 1
    assert j["provenance"]["kind"] == "recorded"
    assert "recorded hwloc XML of machine 32em64t-2n8c2t-pci-normalio" in j["source"]


def test_recorded_machines_ship_the_same_files():
    m = recorded_machines()
    assert set(m) == {"nvidiaDGX2", "power8gpudistances"}  # real machines only: the fixture is in tests/data
    for name, path in m.items():
        assert Path(path).resolve() == SHIPPED / f"{name}.xml"


def _as_hwloc2(text: str) -> str:
    """The same machine in hwloc 2.x form: version 2.0 and osdev_type as an enum
    (hwloc 2: 0 block, 1 GPU, 2 network, 3 OpenFabrics, 5 co-processor)."""
    mapping = {"48": "3", "16": "2", "12": "1", "4": "1", "1": "0"}
    text = text.replace('<topology version="3.0">', '<topology version="2.0">')
    return re.sub(r'osdev_type="(\d+)"', lambda m: f'osdev_type="{mapping.get(m.group(1), m.group(1))}"', text)


def test_hwloc2_format_reads_the_same(tmp_path):
    src = (DATA / "32em64t-2n8c2t-pci-normalio.xml").read_text()
    p = tmp_path / "xeon2.xml"
    p.write_text(_as_hwloc2(src))
    with pytest.warns(PciTreeWarning):
        t = from_hwloc(p)
    assert t.nics == ["mlx5_0"]
    assert t.matrix() == parse_table(XEON)
    # the text itself is accepted too
    with pytest.warns(PciTreeWarning):
        assert from_hwloc(_as_hwloc2(src)).matrix() == parse_table(XEON)


def test_figure_highlights_the_pair(xeon, dgx2):
    pytest.importorskip("plotly")
    from gdrlab.topology import figure
    fig = figure(xeon, highlight=("GPU2", "mlx5_0"))
    assert "recorded hwloc XML of machine 32em64t" in fig.layout.title.text
    assert "GPU2 to mlx5_0: PIX" in fig.layout.title.text
    hl = [tr for tr in fig.data if tr.name == "highlighted path"]
    # GPU2 - root port 80:03.0 - mlx5_0: two highlighted edges (x0, x1, None per edge)
    assert len(hl) == 1 and len(hl[0].x) == 6
    names = {tr.name for tr in fig.data}
    assert {"gpu", "nic", "package", "hostbridge", "rootport"} <= names
    fig2 = figure(dgx2, highlight=("GPU0", "GPU2"))
    assert "NV6" in fig2.layout.title.text and "PXB" in fig2.layout.title.text
    # GPU0 and GPU2 meet at switch A: GPU0 - switch B - switch A - switch C - GPU2: 4 edges
    hl2 = [tr for tr in fig2.data if tr.name == "highlighted path"][0]
    assert len(hl2.x) == 12
    sw = [tr for tr in fig2.data if tr.name == "switch"][0]
    assert len(sw.x) == 12  # three switches per host bridge, four host bridges


# A hand-written export in hwloc 1.x form: no version attribute, NUMANode objects as parents of
# the sockets, osdev_type as an enum (1 GPU, 3 OpenFabrics). NUMA node 0 holds a root port
# 00:01.0 with a switch (upstream 01:00.0, downstream 02:00.0 and 02:01.0) above GPU 03:00.0
# and a ConnectX-3 04:00.0 (mlx4_0): one switch -> PIX. NUMA node 1 holds GPU 81:00.0 -> SYS.
HWLOC1 = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc.dtd">
<topology>
 <object type="Machine" os_index="0" cpuset="0x0000000f" nodeset="0x00000003">
  <object type="NUMANode" os_index="0" cpuset="0x00000003" nodeset="0x00000001" local_memory="1000">
   <object type="Socket" os_index="0" cpuset="0x00000003" nodeset="0x00000001">
    <object type="PU" os_index="0" cpuset="0x00000001"/>
    <object type="PU" os_index="1" cpuset="0x00000002"/>
   </object>
   <object type="Bridge" os_index="0" bridge_type="0-1" depth="0" bridge_pci="0000:[00-04]">
    <object type="Bridge" os_index="16" bridge_type="1-1" depth="1" bridge_pci="0000:[01-04]" pci_busid="0000:00:01.0" pci_type="0604 [8086:0e02] [0000:0000] 04"/>
   </object>
  </object>
  <object type="NUMANode" os_index="1" cpuset="0x0000000c" nodeset="0x00000002" local_memory="1000">
   <object type="Socket" os_index="1" cpuset="0x0000000c" nodeset="0x00000002">
    <object type="PU" os_index="2" cpuset="0x00000004"/>
    <object type="PU" os_index="3" cpuset="0x00000008"/>
   </object>
   <object type="Bridge" os_index="1" bridge_type="0-1" depth="0" bridge_pci="0000:[80-81]">
    <object type="Bridge" os_index="17" bridge_type="1-1" depth="1" bridge_pci="0000:[81-81]" pci_busid="0000:80:01.0" pci_type="0604 [8086:0e02] [0000:0000] 04">
     <object type="PCIDev" pci_busid="0000:81:00.0" pci_type="0302 [10de:1024] [10de:0983] a1">
      <object type="OSDev" name="cuda1" osdev_type="1"/>
     </object>
    </object>
   </object>
  </object>
 </object>
</topology>
"""
_SWITCH = """
    <object type="Bridge" bridge_type="1-1" depth="2" bridge_pci="0000:[02-04]" pci_busid="0000:01:00.0" pci_type="0604 [10b5:8747] [10b5:8747] ca">
     <object type="Bridge" bridge_type="1-1" depth="3" bridge_pci="0000:[03-03]" pci_busid="0000:02:00.0" pci_type="0604 [10b5:8747] [10b5:8747] ca">
      <object type="PCIDev" pci_busid="0000:03:00.0" pci_type="0302 [10de:1024] [10de:0983] a1">
       <object type="OSDev" name="cuda0" osdev_type="1"/>
      </object>
     </object>
     <object type="Bridge" bridge_type="1-1" depth="3" bridge_pci="0000:[04-04]" pci_busid="0000:02:01.0" pci_type="0604 [10b5:8747] [10b5:8747] ca">
      <object type="PCIDev" pci_busid="0000:04:00.0" pci_type="0280 [15b3:1003] [15b3:0055] 00">
       <object type="OSDev" name="ib0" osdev_type="2"/>
       <object type="OSDev" name="mlx4_0" osdev_type="3"/>
      </object>
     </object>
    </object>
"""


def test_hwloc1_format():
    text = HWLOC1.replace('pci_type="0604 [8086:0e02] [0000:0000] 04"/>',
                          'pci_type="0604 [8086:0e02] [0000:0000] 04">' + _SWITCH + "</object>", 1)
    t = from_hwloc(text)
    assert [(d["name"], d["pci_bus_id"], d["numa_node"], d["socket"]) for d in t.devices] == [
        ("GPU0", "0000:03:00.0", 0, 0), ("GPU1", "0000:81:00.0", 1, 1), ("mlx4_0", "0000:04:00.0", 0, 0)]
    assert t.matrix() == parse_table("""
            GPU0  GPU1  mlx4_0
    GPU0    X     SYS   PIX
    GPU1    SYS   X     SYS
    mlx4_0  PIX   SYS   X
    """)
    assert t.numa_binding("GPU1")["cpus"] == "2-3"
    assert t.gdr_decision("GPU0", "mlx4_0")["use_gdr"] is True
