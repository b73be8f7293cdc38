"""gdrlab.hw: sysfs readers on synthetic trees, path availability rules, and (GPU) NVML vs nvidia-smi."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gdrlab import hw
from sysfs_builder import gpu_nic_same_switch, gpu_nic_two_sockets

GiB, MiB = 1 << 30, 1 << 20


def test_pci_devices_reads_bars_links_numa(tmp_path):
    gpu_nic_same_switch(tmp_path)
    devs = {d["pci_bus_id"]: d for d in hw.pci_devices(tmp_path)}
    gpu = devs["0000:03:00.0"]
    # the builder wrote BAR0 16 MiB, BAR2 256 GiB, BAR4 32 MiB (an H200's layout)
    assert [(b["bar"], b["size_bytes"]) for b in gpu["bars"]] == [(0, 16 * MiB), (2, 256 * GiB), (4, 32 * MiB)]
    assert (gpu["current_link_gts"], gpu["current_link_width"], gpu["pcie_gen"]) == (32.0, 16, 5)
    assert gpu["numa_node"] == 0 and gpu["vendor_id"] == 0x10DE and gpu["class_id"] == 0x030200
    assert gpu["sysfs_path"] == ["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:08.0", "0000:03:00.0"]
    assert devs["0000:01:00.0"]["is_bridge"] is True


def test_rdma_devices(tmp_path):
    gpu_nic_two_sockets(tmp_path)
    r = {d["name"]: d for d in hw.rdma_devices(tmp_path)}
    assert r["mlx5_0"]["pci_bus_id"] == "0000:98:00.0"
    assert r["mlx5_0"]["ports"][0] == {"port": 1, "state": "DOWN", "phys_state": "LinkUp",
                                       "rate": "10 Gb/sec (1X QDR)", "link_layer": "Ethernet"}
    assert r["mlx5_0"]["active"] is False and r["mlx5_1"]["active"] is True


def test_peer_memory(tmp_path):
    gpu_nic_two_sockets(tmp_path)  # kernel 5.4, nvidia_peermem loaded
    pm = hw.peer_memory(tmp_path)
    assert pm["nvidia_peermem_loaded"] is True and pm["nvidia_peermem_version"] == "580.1"
    assert pm["kernel_dmabuf"] is False and pm["dmabuf_usable"] is False
    pm2 = hw.peer_memory(tmp_path, gpus=[{"dmabuf_supported": True}],
                         libraries={"libibverbs.so.1": {"found": True, "has_ibv_reg_dmabuf_mr": True}})
    assert pm2["dmabuf_usable"] is False and "5.12" in pm2["dmabuf_reason"]


def test_peer_memory_dmabuf_usable(tmp_path):
    gpu_nic_same_switch(tmp_path)  # kernel 6.8, no peermem
    libs = {"libibverbs.so.1": {"found": True, "has_ibv_reg_dmabuf_mr": True}}
    pm = hw.peer_memory(tmp_path, gpus=[{"dmabuf_supported": True}], libraries=libs)
    assert pm["nvidia_peermem_loaded"] is False and pm["dmabuf_usable"] is True
    old = {"libibverbs.so.1": {"found": True, "has_ibv_reg_dmabuf_mr": False}}
    assert hw.peer_memory(tmp_path, gpus=[{"dmabuf_supported": True}], libraries=old)["dmabuf_usable"] is False


def test_discover_recorded_tree(tmp_path):
    gpu_nic_same_switch(tmp_path)
    r = hw.discover(tmp_path)
    assert r["provenance"]["kind"] == "recorded"
    assert [g["pci_bus_id"] for g in r["gpus"]] == ["0000:03:00.0", "0000:05:00.0"]
    g = r["gpus"][0]
    # NVIDIA's "BAR1" is the second memory BAR: sysfs BAR2 here, 256 GiB
    assert g["bar1_total_bytes"] == 256 * GiB and g["bar1_source"] == "sysfs"
    assert (g["pcie_gen"], g["pcie_width"], g["numa_node"]) == (5, 16, 0)
    assert g["gdr_supported"] is None  # CUDA is not asked about a recording
    assert [d["name"] for d in r["rdma_devices"]] == ["mlx5_0"]
    # a recording cannot run anything but host
    assert r["paths"]["host"]["available"] is True
    assert r["paths"]["staged"]["available"] is False


def test_discover_missing_root(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        hw.discover(tmp_path / "missing")


def _report(n_gpus=1, gdr=True, dmabuf=True, rdma=True, active=True, verbs=True, peermem=False,
            dmabuf_usable=True, gdrapi=False, gdrdrv=False):
    return {
        "cuda": {"usable": n_gpus > 0, "reason": "" if n_gpus else "libcuda.so.1 not found", "driver_version": 13000},
        "gpus": [{"cuda_usable": True, "gdr_supported": gdr, "dmabuf_supported": dmabuf} for _ in range(n_gpus)],
        "rdma_devices": [{"name": "mlx5_0", "active": active, "ports": [{"state": "ACTIVE" if active else "DOWN"}]}] if rdma else [],
        "peer_memory": {"nvidia_peermem_loaded": peermem, "dmabuf_usable": dmabuf_usable,
                        "dmabuf_reason": "ok" if dmabuf_usable else "kernel 5.4.0 is older than 5.12"},
        "libraries": {"libibverbs.so.1": {"found": verbs, "reason": "" if verbs else "not found"},
                      "libgdrapi.so.2": {"found": gdrapi, "reason": "" if gdrapi else "libgdrapi.so.2: cannot open"}},
        "gdrdrv_present": gdrdrv,
    }


def test_paths_all_present():
    p = hw.path_availability(_report(n_gpus=2))
    assert set(p) == {"host", "staged", "shared", "pipelined", "gdr", "gdrcopy", "p2p", "p2p-staged"}
    for k in ("host", "staged", "shared", "pipelined", "gdr", "p2p", "p2p-staged"):
        assert p[k]["available"] is True, (k, p[k])
    assert "dma-buf" in p["gdr"]["reason"]


def test_paths_no_gpu():
    p = hw.path_availability(_report(n_gpus=0, rdma=False))
    assert p["host"]["available"] is True
    for k in ("staged", "shared", "pipelined", "gdr", "p2p", "p2p-staged"):
        assert p[k]["available"] is False and p[k]["fix"], k
    assert "libcuda.so.1 not found" in p["staged"]["reason"]
    assert "found 0" in p["p2p"]["reason"]


def test_paths_gdr_reasons():
    p = hw.path_availability(_report(rdma=False))
    assert p["gdr"]["available"] is False
    assert "no RDMA device found (/sys/class/infiniband is empty)" in p["gdr"]["reason"]
    p = hw.path_availability(_report(active=False))
    assert "ACTIVE" in p["gdr"]["reason"]
    p = hw.path_availability(_report(dmabuf_usable=False, peermem=False))
    assert "no peer-memory client is loaded (nvidia_peermem, or MLNX_OFED's nv_peer_mem)" in p["gdr"]["reason"] and "modprobe nvidia-peermem" in p["gdr"]["fix"]
    p = hw.path_availability(_report(dmabuf_usable=False, peermem=True))
    assert p["gdr"]["available"] is True and "nvidia_peermem" in p["gdr"]["reason"]
    p = hw.path_availability(_report(verbs=False))
    assert "libibverbs.so.1 not found" in p["gdr"]["reason"]
    p = hw.path_availability(_report(gdr=False))
    assert "GPU_DIRECT_RDMA_SUPPORTED" in p["gdr"]["reason"]


def test_paths_gdrcopy_and_p2p_counts():
    p = hw.path_availability(_report(n_gpus=1))
    assert p["gdrcopy"]["available"] is False and "libgdrapi.so.2 not found" in p["gdrcopy"]["reason"]
    assert p["p2p"]["reason"] == "needs 2 or more GPUs, found 1"
    p = hw.path_availability(_report(gdrapi=True, gdrdrv=True))
    assert p["gdrcopy"] == {"available": False, "fix": p["gdrcopy"]["fix"],
                            "reason": "not implemented by this gdrlab version (the model covers it)"}


def test_nvml_gpus_never_raises():
    g = hw.nvml_gpus()
    assert isinstance(g, list)
    if not g:
        assert g.reason  # says why it is empty


def test_import_loads_no_driver_library():
    code = ("import gdrlab, gdrlab.hw, gdrlab.topology\n"
            "maps = open('/proc/self/maps').read()\n"
            "bad = [l for l in ('libcuda', 'libnvidia-ml', 'libibverbs', 'libgdrapi') if l in maps]\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# ----------------------------------------------------------------------------- GPU machine

def _smi(*args) -> str:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=True, timeout=60).stdout


def _smi_q_gpus() -> dict[str, dict]:
    """Per bus id: BAR1 total MiB, PCIe max/current gen and width, from `nvidia-smi -q`."""
    import re
    out, cur, section = {}, None, []
    for line in _smi("-q").splitlines():
        m = re.match(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)", line)
        if m:
            cur = hw.sysfs.norm_bus_id(m.group(1))
            out[cur] = {}
            section = []
            continue
        if cur is None or ":" not in line:
            if line.strip():
                indent = len(line) - len(line.lstrip())
                section = [s for s in section if s[0] < indent] + [(indent, line.strip())]
            continue
        key, _, val = line.partition(":")
        path = "/".join(s[1] for s in section if s[0] < len(line) - len(line.lstrip()))
        out[cur][path + "/" + key.strip()] = val.strip()
    return out


SMI_Q_SAMPLE = """
==============NVSMI LOG==============

Timestamp                                 : Mon Nov 30 04:00:00 2026
Driver Version                            : 580.159.04

Attached GPUs                             : 1
GPU 00000000:00:05.0
    Product Name                          : NVIDIA H200
    PCI
        Bus                               : 0x00
        GPU Link Info
            PCIe Generation
                Max                       : 5
                Current                   : 4
                Device Max                : 5
            Link Width
                Max                       : 16x
                Current                   : 8x
    FB Memory Usage
        Total                             : 143771 MiB
    BAR1 Memory Usage
        Total                             : 262144 MiB
        Used                              : 1 MiB
"""


def test_smi_q_parser(monkeypatch):
    # the GPU test below relies on this parser: check it on a hand-written `nvidia-smi -q` excerpt
    monkeypatch.setattr(sys.modules[__name__], "_smi", lambda *a: SMI_Q_SAMPLE)
    s = _smi_q_gpus()["0000:00:05.0"]
    assert s["PCI/GPU Link Info/PCIe Generation/Max"] == "5"
    assert s["PCI/GPU Link Info/PCIe Generation/Current"] == "4"
    assert s["PCI/GPU Link Info/Link Width/Current"] == "8x"
    assert s["BAR1 Memory Usage/Total"] == "262144 MiB"
    assert s["FB Memory Usage/Total"] == "143771 MiB"


@pytest.mark.gpu
def test_doctor_matches_nvidia_smi_q():
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not installed")
    before = _smi_q_gpus()
    out = subprocess.run([sys.executable, "-m", "gdrlab", "doctor", "--json"], capture_output=True,
                         text=True, check=True, timeout=120)
    import json
    report = json.loads(out.stdout)
    smi = _smi_q_gpus()
    assert len(report["gpus"]) == len(smi)
    for g in report["gpus"]:
        s = smi[g["pci_bus_id"]]
        bar1 = next(v for k, v in s.items() if "BAR1 Memory Usage" in k and k.endswith("/Total"))
        assert g["bar1_total_bytes"] == int(bar1.split()[0]) * MiB
        assert g["pcie_max_gen"] == int(next(v for k, v in s.items() if k.endswith("PCIe Generation/Max")))
        assert g["pcie_max_width"] == int(next(v for k, v in s.items() if k.endswith("Link Width/Max")).rstrip("x"))
        assert g["pcie_width"] == int(next(v for k, v in s.items() if k.endswith("Link Width/Current")).rstrip("x"))
        # the current generation drops while a GPU idles: accept nvidia-smi's reading from just
        # before or just after the doctor ran
        gens = {int(next(v for k, v in x[g["pci_bus_id"]].items() if k.endswith("PCIe Generation/Current")))
                for x in (before, smi)}
        assert g["pcie_gen"] in gens
        assert g["gdr_supported"] in (True, False) and g["dmabuf_supported"] in (True, False)


# ----------------------------------------------------------------------------- recorded trees
SYSFS = Path(__file__).resolve().parents[1] / "data" / "sysfs"


def test_recorded_cpu_vm_has_no_gpu():
    root = SYSFS / "cpu-vm"
    manifest = json.loads((root / "MANIFEST.json").read_text())
    r = hw.discover(root)
    assert r["pci_device_count"] == manifest["pci"] == 6
    assert r["gpus"] == [] and "no NVIDIA GPU" in r["gpus_reason"]
    assert r["rdma_devices"] == []
    assert [k for k, v in r["paths"].items() if v["available"]] == ["host"]


def test_recorded_h200_tree():
    # Facts from the H200 machine (BAR0 16 MiB, BAR2 256 GiB, BAR4 32 MiB; Gen5 x16 = 32 GT/s;
    # no RDMA device; nvidia_peermem not loaded), checked against a capture of its sysfs.
    root = SYSFS / "h200"
    if not root.is_dir():
        pytest.skip("no recorded H200 tree yet: capture it with bench/capture_sysfs.py tests/data/sysfs/h200")
    r = hw.discover(root)
    assert len(r["gpus"]) == 1
    g = r["gpus"][0]
    assert [b["size_bytes"] for b in g["bars"] if b["bar"] != "rom"] == [16 * MiB, 256 * GiB, 32 * MiB]
    assert g["bar1_total_bytes"] == 256 * GiB
    assert (g["pcie_gen"], g["pcie_width"]) == (5, 16)
    assert r["rdma_devices"] == [] and r["peer_memory"]["nvidia_peermem_loaded"] is False
