"""'Is this number normal?' on made-up machines and made-up measured rows."""
from __future__ import annotations

import pandas as pd
import pytest

from gdrlab import model

MiB = 1 << 20
H100_OK = {"gpu_name": "NVIDIA H100 80GB HBM3", "pcie_gen": 5, "pcie_width": 16, "pcie_max_gen": 5,
           "pcie_max_width": 16, "nic_rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand", "gpu_numa": 0,
           "nic_numa": 0, "cpu": "Intel(R) Xeon(R) Platinum 8480+"}


def test_a_machine_starts_from_the_nearest_profile_with_its_own_links():
    prof = model.profile_from_machine({**H100_OK, "pcie_gen": 3, "pcie_width": 8})
    # PCIe 3.0 x8: 8 GT/s x 8 lanes x 128/130 / 8 bits
    assert prof.params["gpu_pcie_gbps"] == pytest.approx(8 * 8 * 128 / 130 / 8)
    assert prof.params["nic_wire_gbps"] == pytest.approx(400 / 8)
    assert prof.topology["host_class"] == "sapphire-rapids"
    assert "PCIe link trained at Gen3 x8, max Gen5 x16" in prof.description
    # the scaling constants follow the slower link: BAR1 writes a share of Gen3 x8, not of Gen5 x16
    assert prof.params["gdrcopy_write_gbps"] < model.get_profile("hopper-ndr").params["gdrcopy_write_gbps"] / 4


def test_numa_placement_link_layer_and_host_class_come_from_the_facts():
    prof = model.profile_from_machine({"gpu_name": "NVIDIA L40S", "nic_rate": 200, "link_layer": "Ethernet",
                                       "gpu_numa": 0, "nic_numa": 1, "cpu": "AMD EPYC 9454"})
    assert prof.placement == "cross-socket" and prof.link_layer == "Ethernet"
    assert prof.topology["host_class"] == "epyc"
    assert prof.params["nic_wire_gbps"] == pytest.approx(25.0)
    cpu_only = model.profile_from_machine({"cpu": "Intel Xeon E5-2680 v2", "no_nic": True})
    assert not cpu_only.has_nic and cpu_only.topology["host_class"] == "ivy-bridge"


def test_rows_within_the_uncertainty_are_normal_and_slow_ones_say_why():
    ok = model.profile_from_machine(H100_OK)
    slow_link = model.profile_from_machine({**H100_OK, "pcie_gen": 3, "pcie_width": 8})
    # made-up measurements: the 64 MiB host rate over NDR is the wire
    # less framing (about 48.7 GB/s): 47 is normal, 20 is low, and a 64 MiB gdr row at 6 GB/s is low
    rows = pd.DataFrame([
        {"path": "host", "wire": "verbs", "size": 64 * MiB, "lat_p50_us": None, "bw_gbps": 47.0},
        {"path": "host", "wire": "verbs", "size": 64 * MiB, "lat_p50_us": None, "bw_gbps": 20.0},
        {"path": "gdr", "wire": "verbs", "size": 64 * MiB, "lat_p50_us": None, "bw_gbps": 6.0},
        {"path": "nonsense", "size": 8},
    ])
    out = model.explain_rows(rows, ok)
    assert list(out["verdict"]) == ["normal", "low", "low", "not modelled"]
    assert out["model_bw_gbps"][0] == pytest.approx(50.0 * 0.97, rel=0.02)
    # on the machine whose link trained at Gen3 x8, 6 GB/s gdr is what its link allows (7.9 x 0.9)
    slow = model.explain_rows(rows, slow_link)
    assert slow["verdict"][2] == "normal" and slow["bottleneck"][2] == "gpu-pcie"
    # and a slow host row on it names the trained-down link among the likeliest causes
    assert "PCIe link trained at Gen3 x8, max Gen5 x16" in slow["likely_causes"][1]


def test_host_rows_work_without_a_gpu_or_nic():
    prof = model.profile_from_machine({"cpu": "Intel Xeon Platinum 8480+", "no_nic": True})
    rows = [{"path": "host", "wire": "tcp", "size": 8, "lat_p50_us": 200.0, "bw_gbps": None}]
    out = model.explain_rows(rows, prof)
    assert out["verdict"][0] == "low" and "TCP" in out["likely_causes"][0]


def test_bench_explain_adds_the_columns_on_a_cpu_only_machine(capsys):
    import json

    from gdrlab.cli import main

    assert main(["bench", "--path", "host", "--sizes", "8,4K", "--iters", "20", "--explain", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "model" in doc and len(doc["rows"]) == 2
    for r in doc["rows"]:
        assert {"model_lat_us", "model_bw_gbps", "bottleneck", "verdict", "likely_causes"} <= set(r)
        assert r["verdict"] == "not comparable" and "loopback" in r["likely_causes"] and r["model_lat_us"] > 0
    assert main(["bench", "--path", "host", "--sizes", "8", "--iters", "20", "--json"]) == 0
    assert "verdict" not in json.loads(capsys.readouterr().out)["rows"][0]  # without the flag: unchanged


# ---------------------------------------------------------------- this machine, read live
def _tree(tmp_path):
    """A recorded machine: an H100-class GPU whose link trained at Gen3 x8 (max Gen5 x16) on NUMA
    node 0, an NDR port on NUMA node 1 and a second, RoCE port on NUMA node 0 that is down."""
    from sysfs_builder import GPU_CLASS, INTEL, MELLANOX, NIC_CLASS, NVIDIA, SysfsTree

    t = SysfsTree(tmp_path)
    t.numa_node(0, "0-7", socket=0)
    t.numa_node(1, "8-15", socket=1)
    t.pci("0000:16:01.0", "pci0000:16", cls=0x060400, vendor=INTEL, numa=0, cpulist="0-7")
    gpu = t.pci("0000:17:00.0", "0000:16:01.0", cls=GPU_CLASS, vendor=NVIDIA, device=0x2330, numa=0,
                cpulist="0-7", bars=[16 << 20, 0, 128 << 30, 0, 32 << 20], link=("8.0", 8))
    (gpu / "max_link_speed").write_text("32.0 GT/s PCIe\n")
    (gpu / "max_link_width").write_text("16\n")
    t.pci("0000:97:01.0", "pci0000:97", cls=0x060400, vendor=INTEL, numa=1, cpulist="8-15")
    t.pci("0000:98:00.0", "0000:97:01.0", cls=NIC_CLASS, vendor=MELLANOX, device=0x1021, numa=1,
          cpulist="8-15", link=("32.0", 16))
    t.rdma("mlx5_0", "0000:98:00.0", rate="400 Gb/sec (4X NDR)")
    t.pci("0000:3a:01.0", "pci0000:3a", cls=0x060400, vendor=INTEL, numa=0, cpulist="0-7")
    t.pci("0000:3b:00.0", "0000:3a:01.0", cls=NIC_CLASS, vendor=MELLANOX, device=0x1021, numa=0,
          cpulist="0-7", link=("32.0", 16))
    t.rdma("mlx5_1", "0000:3b:00.0", state="1: DOWN", rate="10 Gb/sec (1X QDR)", link_layer="Ethernet")
    return t


def test_machine_facts_read_numa_placement_and_the_trained_link_from_sysfs(tmp_path):
    from gdrlab.model.machine import machine_facts

    _tree(tmp_path)
    facts = machine_facts(root=str(tmp_path))
    # the doctor's RDMA devices carry no NUMA node: it comes from the NIC's PCI function
    assert (facts["gpu_numa"], facts["nic_numa"]) == (0, 1)
    # NVML is not read on a recorded tree: the maximum link comes from sysfs (32 GT/s = Gen5)
    assert (facts["pcie_gen"], facts["pcie_width"], facts["pcie_max_gen"], facts["pcie_max_width"]) == (3, 8, 5, 16)
    prof = model.profile_from_machine(facts)
    assert prof.placement == "cross-socket"
    assert prof.params["nic_wire_gbps"] == pytest.approx(400 / 8)  # the active port, not the down one
    assert prof.params["gpu_pcie_gbps"] == pytest.approx(8 * 8 * 128 / 130 / 8)
    assert "PCIe link trained at Gen3 x8, max Gen5 x16" in prof.description
    assert "NUMA node 0, NIC on NUMA node 1" in prof.description


def test_the_active_port_on_the_gpus_numa_node_is_preferred():
    from gdrlab.model.machine import facts_from_doctor

    report = {"gpus": [{"index": 0, "name": "NVIDIA H100", "pci_bus_id": "0000:17:00.0", "numa_node": 1}],
              "rdma_devices": [
                  {"name": "mlx5_0", "pci_bus_id": "0000:3b:00.0",
                   "ports": [{"state": "ACTIVE", "rate": "100 Gb/sec (4X EDR)", "link_layer": "InfiniBand"}]},
                  {"name": "mlx5_1", "pci_bus_id": "0000:98:00.0",
                   "ports": [{"state": "ACTIVE", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}]}]}
    pci = [{"pci_bus_id": "0000:3b:00.0", "numa_node": 0}, {"pci_bus_id": "0000:98:00.0", "numa_node": 1}]
    facts = facts_from_doctor(report, "AMD EPYC 9654", 0, pci)
    assert facts["nic_numa"] == 1 and facts["nic_rate"].startswith("400")
    assert model.profile_from_machine(facts).placement == "same-host-bridge"


def test_a_smaller_roce_mtu_costs_header_bytes():
    # RoCE v2: 82 header bytes a packet (docs/model.md); at MTU 1024 a larger share of the wire is headers
    base = {"gpu_name": "NVIDIA L40S", "nic_rate": 200, "link_layer": "Ethernet", "gpu_numa": 0, "nic_numa": 0}
    big = model.profile_from_machine({**base, "nic_mtu": 4096})
    small = model.profile_from_machine({**base, "nic_mtu": 1024})
    ratio = small.params["wire_eff"] / big.params["wire_eff"]
    assert ratio == pytest.approx((1024 / (1024 + 82)) / (4096 / (4096 + 82)), rel=1e-9)
    big_bw = float(model.bandwidth_gbps(big, "host", [64 * MiB])[0])
    small_bw = float(model.bandwidth_gbps(small, "host", [64 * MiB])[0])
    assert small_bw == pytest.approx(big_bw * ratio, rel=0.01)
    assert "RDMA MTU 1024" in small.description


def test_with_no_facts_the_profile_and_the_explanation_are_of_this_machine(monkeypatch):
    from gdrlab.model import machine

    live = model.profile_from_machine()  # this machine, whatever it has: it must build
    assert live.name == "this-machine"
    monkeypatch.setattr(machine, "machine_facts", lambda device=0, root="/": dict(H100_OK))
    rows = [{"path": "host", "wire": "verbs", "size": 64 * MiB, "lat_p50_us": None, "bw_gbps": 47.0}]
    out = model.explain_rows(rows)
    assert out["verdict"][0] == "normal"
    assert out["model_bw_gbps"][0] == pytest.approx(50.0 * 0.97, rel=0.02)  # NDR less framing, as above


def test_calibrate_tightens_the_machine_profile_from_its_own_rows():
    # made-up rows from a machine whose NDR port delivers 24 GB/s (half the wire) and 3 us one way
    prof = model.profile_from_machine(H100_OK)
    sizes = [8, 64, 512, 4096, MiB, 4 * MiB, 16 * MiB, 64 * MiB]
    rows = pd.DataFrame([{"path": "host", "wire": "verbs", "size": s, "lat_p50_us": 3.0 + s / 24e3,
                          "bw_gbps": 24.0 if s >= MiB else None} for s in sizes])
    assert set(model.explain_rows(rows, prof)["verdict"]) == {"low"}
    fitted, _ = model.calibrate(rows, base=prof, name="this-machine-fitted")
    out = model.explain_rows(rows, fitted)
    assert set(out["verdict"]) == {"normal"}
    big = out[out["size"] >= MiB]
    assert list(big["model_bw_gbps"]) == pytest.approx([24.0] * len(big), rel=0.05)
    assert list(out["model_lat_us"]) == pytest.approx(list(rows["lat_p50_us"]), rel=0.05)
    # what the fit did not touch is still this machine's: its host class and its links
    assert fitted.topology["host_class"] == "sapphire-rapids"
    assert fitted.params["gpu_pcie_gbps"] == prof.params["gpu_pcie_gbps"]


def test_recorded_or_modelled_rows_are_not_rated_against_this_machine():
    # A recorded sweep (another machine's) or the model's own curve, explained against a machine:
    # no verdict on that machine, the reason names where the rows come from.
    prof = model.profile_from_machine(H100_OK)
    rows = pd.DataFrame([{"path": "host", "wire": "verbs", "size": 64 * MiB, "lat_p50_us": None, "bw_gbps": 20.0},
                         {"path": "nonsense", "size": 8}])
    rows.attrs["provenance"] = {"kind": "recorded", "hardware": "NVIDIA H200, PCIe Gen5 x16"}
    out = model.explain_rows(rows, prof)
    assert list(out["verdict"]) == ["not comparable", "not modelled"]
    assert out["likely_causes"][0] == "recorded data (NVIDIA H200, PCIe Gen5 x16), not a measurement of this machine"
    rows.attrs["provenance"] = {"kind": "modelled", "profile": "hopper-ndr"}
    assert model.explain_rows(rows, prof)["likely_causes"][0].startswith("modelled data (hopper-ndr)")
    rows.attrs["provenance"] = {"kind": "live"}
    assert model.explain_rows(rows, prof)["verdict"][0] == "low"
