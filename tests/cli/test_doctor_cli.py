"""`gdrlab doctor` and `gdrlab topo` from the command line: JSON contract, text form, bad input."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sysfs_builder import gpu_nic_same_switch

DATA = Path(__file__).resolve().parents[1] / "data" / "hwloc"  # the fixture the tests edit
SHIPPED = Path(__file__).resolve().parents[2] / "gdrlab" / "data" / "hwloc"  # real machines
PATHS = {"host", "staged", "shared", "pipelined", "gdr", "gdrcopy", "p2p", "p2p-staged"}
GPU_KEYS = {"index", "name", "pci_bus_id", "bar1_total_bytes", "bar1_used_bytes", "pcie_gen",
            "pcie_width", "numa_node", "gdr_supported", "dmabuf_supported"}


def gdrlab(*args, check_rc: int | None = 0) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "gdrlab", *args], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    if check_rc is not None:
        assert p.returncode == check_rc, (p.returncode, p.stdout, p.stderr)
    return p


def test_doctor_json_contract():
    p = gdrlab("doctor", "--json")
    r = json.loads(p.stdout)  # exactly one JSON document on stdout
    assert set(r["paths"]) == PATHS
    for v in r["paths"].values():
        assert set(v) == {"available", "reason", "fix"} and isinstance(v["available"], bool) and v["reason"]
    assert r["paths"]["host"]["available"] is True
    for g in r["gpus"]:
        assert GPU_KEYS <= set(g)
    assert set(r["libraries"]) == {"libcuda.so.1", "libnvidia-ml.so.1", "libibverbs.so.1", "libgdrapi.so.2", "libucp.so.0"}
    for lib in r["libraries"].values():
        assert lib["found"] or lib["reason"]  # found, or says why not
    assert {"nvidia_peermem_loaded", "dmabuf_usable"} <= set(r["peer_memory"])
    assert isinstance(r["rdma_devices"], list)
    assert r["provenance"]["kind"] == "live" and r["provenance"]["date"]


def test_doctor_text_lists_every_path():
    out = gdrlab("doctor").stdout
    for p in PATHS:
        assert re.search(rf"^\s+{re.escape(p)}\s+(yes|no)\s", out, re.M), p
    assert "Libraries" in out and "libibverbs.so.1" in out


def test_doctor_on_recorded_tree(tmp_path):
    gpu_nic_same_switch(tmp_path)
    r = json.loads(gdrlab("doctor", "--sysfs", str(tmp_path), "--json").stdout)
    assert r["provenance"]["kind"] == "recorded"
    assert [g["pci_bus_id"] for g in r["gpus"]] == ["0000:03:00.0", "0000:05:00.0"]
    assert r["gpus"][0]["bar1_total_bytes"] == 256 << 30
    assert r["rdma_devices"][0]["name"] == "mlx5_0"


def test_doctor_bad_root(tmp_path):
    p = gdrlab("doctor", "--sysfs", str(tmp_path / "nope"), "--json", check_rc=1)
    err = json.loads(p.stdout)["error"]
    assert "does not exist" in err["message"]


def test_topo_json_recorded_machine():
    r = json.loads(gdrlab("topo", "--hwloc-xml", str(DATA / "32em64t-2n8c2t-pci-normalio.xml"), "--json").stdout)
    assert [d["name"] for d in r["devices"]] == ["GPU0", "GPU1", "GPU2", "mlx5_0"]
    assert r["matrix"]["GPU2"]["mlx5_0"] == "PIX" and r["pcie"]["GPU1"]["mlx5_0"] == "PHB"
    assert r["nearest_nic"] == {"GPU0": "mlx5_0", "GPU1": "mlx5_0", "GPU2": "mlx5_0"}
    assert r["gdr"]["GPU2"]["mlx5_0"]["use_gdr"] is True and r["gdr"]["GPU1"]["mlx5_0"]["use_gdr"] is False
    assert r["numa"]["GPU0"]["numactl"] == "numactl --cpunodebind=0 --membind=0"


def test_topo_gdr_level_option_and_env():
    xml = str(DATA / "32em64t-2n8c2t-pci-normalio.xml")
    r = json.loads(gdrlab("topo", "--hwloc-xml", xml, "--gdr-level", "PHB", "--json").stdout)
    assert r["gdr"]["GPU1"]["mlx5_0"]["use_gdr"] is True
    import os
    env = dict(os.environ, NCCL_NET_GDR_LEVEL="4")
    p = subprocess.run([sys.executable, "-m", "gdrlab", "topo", "--hwloc-xml", xml, "--json"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert json.loads(p.stdout)["gdr"]["GPU0"]["mlx5_0"]["use_gdr"] is True  # 4 = SYS


def test_topo_by_machine_name_and_text():
    out = gdrlab("topo", "--hwloc-xml", "power8gpudistances").stdout
    rows = {l.split()[0]: l.split()[1:5] for l in out.splitlines() if re.match(r"^GPU\d", l)}
    assert rows["GPU0"] == ["X", "NV2", "SYS", "SYS"]
    assert rows["GPU3"] == ["SYS", "SYS", "NV2", "X"]
    assert "Legend" in out and "NV#" in out
    listing = json.loads(gdrlab("topo", "--list", "--json").stdout)
    # Only real machines ship (hwloc exports and nvidia-smi matrices); the hand-edited hwloc
    # fixture stays under tests/data.
    assert set(listing) == {"nvidiaDGX2", "power8gpudistances", "dgx-a100-nccl-issue-1505"}


def test_topo_sysfs_tree(tmp_path):
    gpu_nic_same_switch(tmp_path)
    r = json.loads(gdrlab("topo", "--sysfs", str(tmp_path), "--json").stdout)
    assert r["matrix"]["GPU0"]["mlx5_0"] == "PIX" and r["nearest_nic"]["GPU1"] == "mlx5_0"
    text = gdrlab("topo", "--sysfs", str(tmp_path)).stdout
    assert "NIC0: mlx5_0" in text


@pytest.mark.parametrize("content,needle", [
    ("<topology version=\"3.0\"><object type=\"Machine\"", "not well-formed"),
    ("<?xml version=\"1.0\"?><root/>", "not an hwloc XML"),
    ("<?xml version=\"1.0\"?><topology version=\"2.0\"><object type=\"Machine\" os_index=\"0\" "
     "cpuset=\"0x1\" nodeset=\"0x1\"><object type=\"Package\" os_index=\"0\" cpuset=\"0x1\"/></object></topology>",
     "no PCI objects"),
])
def test_topo_bad_xml(tmp_path, content, needle):
    f = tmp_path / "bad.xml"
    f.write_text(content)
    p = gdrlab("topo", "--hwloc-xml", str(f), "--json", check_rc=1)
    assert needle in json.loads(p.stdout)["error"]["message"]
    p = gdrlab("topo", "--hwloc-xml", str(f), check_rc=1)
    assert needle in p.stderr and p.stdout == ""


def test_topo_truncated_real_xml(tmp_path):
    f = tmp_path / "cut.xml"
    f.write_text((SHIPPED / "nvidiaDGX2.xml").read_text()[:20000])
    p = gdrlab("topo", "--hwloc-xml", str(f), check_rc=1)
    assert "not well-formed" in p.stderr


def test_topo_missing_inputs(tmp_path):
    p = gdrlab("topo", "--hwloc-xml", str(tmp_path / "none.xml"), check_rc=1)
    assert "not found" in p.stderr
    p = gdrlab("topo", "--sysfs", str(tmp_path / "none"), "--json", check_rc=1)
    assert "does not exist" in json.loads(p.stdout)["error"]["message"]
    p = gdrlab("topo", "--gdr-level", "BOGUS", "--hwloc-xml", "nvidiaDGX2", check_rc=1)
    assert "NCCL_NET_GDR_LEVEL" in p.stderr


def test_topo_machine_without_gpu(tmp_path):
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    r = json.loads(gdrlab("topo", "--sysfs", str(tmp_path), "--json").stdout)
    assert r["devices"] == [] and r["matrix"] == {}
    r = json.loads(gdrlab("doctor", "--sysfs", str(tmp_path), "--json").stdout)
    assert r["gpus"] == [] and r["gpus_reason"]


# ----------------------------------------------------------------------------- GPU machine
def _parse_topo_m(text: str) -> tuple[dict[str, dict[str, str]], dict[str, str], dict[str, str]]:
    """`nvidia-smi topo -m` -> (codes, NUMA affinity per device, NIC legend NICk -> name)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # nvidia-smi underlines the header with ANSI escapes
    lines = [l for l in text.splitlines() if l.strip()]
    head = lines[0].split()
    cols = [h for h in head if re.match(r"^(GPU|NIC)\d+$", h)]
    codes, numa, legend = {}, {}, {}
    for l in lines[1:]:
        t = l.split()
        if re.match(r"^(GPU|NIC)\d+$", t[0]) and len(t) > len(cols):
            codes[t[0]] = dict(zip(cols, t[1:1 + len(cols)]))
            rest = t[1 + len(cols):]
            if t[0].startswith("GPU") and len(rest) >= 2:
                numa[t[0]] = rest[1]
        m = re.match(r"^\s*(NIC\d+):\s*(\S+)", l)
        if m:
            legend[m.group(1)] = m.group(2)
    return codes, numa, legend


def test_parse_topo_m_sample():
    sample = ("\t\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
              "GPU0\t X \tNV18\tPIX\t0-15\t0\t\tN/A\n"
              "GPU1\tNV18\t X \tSYS\t0-15\t0\t\tN/A\n"
              "NIC0\tPIX\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n")
    codes, numa, legend = _parse_topo_m(sample)
    assert codes["GPU0"] == {"GPU0": "X", "GPU1": "NV18", "NIC0": "PIX"}
    assert numa == {"GPU0": "0", "GPU1": "0"} and legend == {"NIC0": "mlx5_0"}


@pytest.mark.gpu
def test_topo_matches_nvidia_smi_topo_m():
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not installed")
    smi = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, check=True).stdout
    codes, numa, legend = _parse_topo_m(smi)
    r = json.loads(gdrlab("topo", "--json").stdout)
    ours = {d["name"]: d for d in r["devices"]}
    assert sorted(n for n in codes if n.startswith("GPU")) == sorted(n for n in ours if n.startswith("GPU"))
    for g, aff in numa.items():
        mine = ours[g]["numa_node"]
        if aff == "N/A":
            assert mine is None or ours[g].get("numa_inferred"), (g, mine)
        else:
            assert mine == int(aff), (g, aff, mine)
    name = {**{k: k for k in codes}, **legend}
    for a, row in codes.items():
        for b, code in row.items():
            if name[a] in r["matrix"] and name[b] in r["matrix"][name[a]]:
                assert r["matrix"][name[a]][name[b]] == code, (a, b, code)


def test_doctor_says_whether_pyverbs_is_usable(run_cli):
    proc = run_cli("doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    pv = json.loads(proc.stdout)["pyverbs"]
    assert isinstance(pv["usable"], bool) and isinstance(pv["importable"], bool)
    assert pv["reason"], "an unusable pyverbs must say why; a usable one says what works"
    if not pv["importable"]:
        assert "pyverbs" in pv["reason"] and not pv["usable"]


def test_doctor_text_starts_with_a_verdict_and_says_a_long_reason_once():
    """Issue 34 item 9: one line saying what runs here, and the CUDA driver's long reason printed
    once, with the paths pointing at it (it was repeated five times)."""
    from gdrlab.commands import doctor as doctor_cmd

    long_reason = "libcuda.so.1 not found (no NVIDIA driver on this machine): libcuda.so.1: cannot open shared object file"
    no = {"available": False, "reason": f"no usable CUDA GPU: {long_reason}", "fix": "a GPU"}
    report = {"provenance": {"kind": "live", "date": "2026-12-04"}, "source": "live, box",
              "cuda": {"usable": False, "reason": long_reason}, "gpus": [], "gpus_reason": "none",
              "rdma_devices": [], "rdma_reason": "none",
              "peer_memory": {"peer_memory_module": None, "dmabuf_usable": False, "dmabuf_reason": "no GPU"},
              "libraries": {}, "paths": {"host": {"available": True, "reason": "needs nothing", "fix": ""},
                                         "staged": no, "shared": dict(no)}}
    text = doctor_cmd.render(report)
    assert text.splitlines()[1] == ("Here: host runs live; for the other 2 the labs show recorded data and the "
                                    "model (reasons under Paths).")
    assert text.count(long_reason) == 1 and text.count("see CUDA driver above") == 2
