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
