"""The PCI-tree consistency check (``gdrlab.topology.check_pci_tree``) and its warning.

Expected problems were read off the XML by hand, not produced by gdrlab:
32em64t-2n8c2t-pci-normalio.xml (hwloc's hand-edited test fixture) has root port 0000:80:03.0
with ``bridge_pci="0000:[84-84]"`` (secondary and subordinate bus 0x84), yet the ConnectX-4
PCIDev directly below it has ``pci_busid="0000:04:00.0"`` (bus 0x04), which is also the address
of the C602 SATA controller below root port 0000:00:11.0; and functions of three vendors (10de
Tesla M2075 at 84:00.0, 1002 Radeon at 84:00.1, 15b3 ConnectX-4) sit directly below that one
root port. In nvidiaDGX2.xml the switch port 0000:33:00.0 has ``bridge_pci="0000:[34-34]"`` and
the V100 0000:34:00.0 below it; its sibling port 0000:33:10.0 routes [36-36].
"""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from gdrlab.errors import InvalidArgument
from gdrlab.topology import PciTreeWarning, check_pci_tree, from_hwloc, from_sysfs, recorded_machines
from sysfs_builder import BRIDGE_CLASS, GPU_CLASS, NVIDIA, gpu_nic_same_switch

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURE = DATA / "hwloc" / "32em64t-2n8c2t-pci-normalio.xml"
SHIPPED = Path(__file__).resolve().parents[2] / "gdrlab" / "data" / "hwloc"  # real machines
DGX2 = (SHIPPED / "nvidiaDGX2.xml").read_text()


def _quiet(load, *args):
    """Load with every warning turned into an error: a real machine must load silently."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return load(*args)


def test_hand_edited_fixture_is_flagged_with_a_warning():
    with pytest.warns(PciTreeWarning, match=r"32em64t-2n8c2t-pci-normalio\.xml: this PCI tree cannot exist"):
        topo = from_hwloc(FIXTURE)
    found = {(p["rule"], p["where"]) for p in topo.pci_problems}
    assert ("secondary-bus", "0000:04:00.0") in found
    assert ("duplicate-address", "0000:04:00.0") in found
    assert ("one-device-per-link", "0000:80:03.0") in found
    secondary = next(p for p in topo.pci_problems if p["rule"] == "secondary-bus")
    assert "[84-84]" in secondary["message"] and "bus 04" in secondary["message"]
    assert check_pci_tree(topo) == topo.pci_problems  # the public function agrees with the load
    doc = topo.to_json()
    assert doc["pci_problems"] and any("0000:04:00.0" in w for w in doc["warnings"])


@pytest.mark.parametrize("name", ["nvidiaDGX2", "power8gpudistances"])
def test_real_exports_pass_silently(name):
    topo = _quiet(from_hwloc, SHIPPED / f"{name}.xml")
    assert topo.pci_problems == [] and check_pci_tree(topo.root) == []
    assert topo.to_json()["warnings"] == []


@pytest.mark.parametrize("tree", ["h200", "cpu-vm"])
def test_recorded_sysfs_trees_pass_silently(tree):
    topo = _quiet(from_sysfs, DATA / "sysfs" / tree)
    assert topo.pci_problems == []


def test_from_hwloc_takes_the_shipped_names():
    names = recorded_machines()
    assert {"nvidiaDGX2", "power8gpudistances"} <= set(names)
    assert len(_quiet(from_hwloc, "nvidiaDGX2").gpus) == 16
    with pytest.raises(InvalidArgument, match="not found: nosuchmachine .*nvidiaDGX2"):
        from_hwloc("nosuchmachine")


# --------------------------------------------------------------------------- each rule fires
def _dgx2_edited(old: str, new: str) -> str:
    assert DGX2.count(old) == 1, old
    return DGX2.replace(old, new)


@pytest.mark.parametrize("old,new,rule,where", [
    # the V100 moved to a bus its switch port does not route
    ('pci_busid="0000:34:00.0"', 'pci_busid="0000:99:00.0"', "secondary-bus", "0000:99:00.0"),
    # a switch port whose range does not fit inside its upstream port's [33-36]
    ('bridge_pci="0000:[34-34]"', 'bridge_pci="0000:[34-40]"', "nesting", "0000:33:00.0"),
    # two sibling downstream ports routing the same bus
    ('bridge_pci="0000:[36-36]"', 'bridge_pci="0000:[34-34]"', "overlap", None),
    # secondary above subordinate
    ('bridge_pci="0000:[34-34]"', 'bridge_pci="0000:[35-34]"', "nesting", "0000:33:00.0"),
    # a device in another PCI domain than its bridge
    ('pci_busid="0000:34:00.0"', 'pci_busid="0001:34:00.0"', "bus-range", "0001:34:00.0"),
])
def test_each_rule_fires_on_an_edited_real_export(old, new, rule, where):
    with pytest.warns(PciTreeWarning):
        topo = from_hwloc(_dgx2_edited(old, new))
    hits = [p for p in topo.pci_problems if p["rule"] == rule]
    assert hits, topo.pci_problems
    if where is not None:
        assert any(p["where"] == where for p in hits), hits


def test_sysfs_bridge_ranges_are_checked(tmp_path):
    t = gpu_nic_same_switch(tmp_path)
    assert _quiet(from_sysfs, tmp_path).pci_problems == []
    # Linux exposes the bridge's bus registers; a range that leaves out its own GPU is impossible
    t._write(t.dirs["0000:02:08.0"], "secondary_bus_number", "7")
    t._write(t.dirs["0000:02:08.0"], "subordinate_bus_number", "7")
    with pytest.warns(PciTreeWarning):
        topo = from_sysfs(tmp_path)
    assert ("secondary-bus", "0000:03:00.0") in {(p["rule"], p["where"]) for p in topo.pci_problems}


def test_sysfs_devices_on_two_buses_below_one_port(tmp_path):
    t = gpu_nic_same_switch(tmp_path)
    t.pci("0000:06:00.0", "0000:02:08.0", cls=GPU_CLASS, vendor=NVIDIA)  # beside 03:00.0, other bus
    with pytest.warns(PciTreeWarning):
        topo = from_sysfs(tmp_path)
    assert ("secondary-bus", "0000:06:00.0") in {(p["rule"], p["where"]) for p in topo.pci_problems}


def test_sysfs_child_bridge_on_its_parents_bus(tmp_path):
    t = gpu_nic_same_switch(tmp_path)
    # a bridge whose own secondary bus is the bus it sits on cannot route anything below it
    t.pci("0000:05:00.1", "0000:00:02.0", cls=BRIDGE_CLASS, vendor=NVIDIA)
    t.pci("0000:05:00.2", "0000:05:00.1", cls=GPU_CLASS, vendor=NVIDIA)
    with pytest.warns(PciTreeWarning):
        topo = from_sysfs(tmp_path)
    assert any(p["rule"] == "nesting" and p["where"] == "0000:05:00.1" for p in topo.pci_problems)


def test_sysfs_domain_hosted_by_a_device_is_not_flagged(tmp_path):
    """Intel VMD: a storage-class endpoint on bus 00 hosts PCI domain 10000 with its own bus
    numbers; the functions below it follow that domain's numbering, not the host bridge's."""
    t = gpu_nic_same_switch(tmp_path)
    t.pci("0000:00:0e.0", "pci0000:00", cls=0x010400, vendor=0x8086, device=0x467F)
    t.pci("10000:e0:06.0", "0000:00:0e.0", cls=BRIDGE_CLASS, vendor=0x8086)
    t.pci("10000:e1:00.0", "10000:e0:06.0", cls=0x010802, vendor=0x144D)  # an NVMe drive
    assert _quiet(from_sysfs, tmp_path).pci_problems == []
