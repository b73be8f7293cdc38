"""`gdrlab doctor --cluster` and `--bundle` on recorded trees: each check names its evidence and its
fix. The trees are synthetic, built here with sysfs_builder (the shipped one,
tests/data/sysfs/pod-fixture/, is marked synthetic in its MANIFEST.json): a pod on a machine whose
GPU and NIC share a PCIe switch with ACS redirecting, no /dev/infiniband, memlock 0 without
CAP_IPC_LOCK, a translated IOMMU domain and a GPU link trained at x8."""
from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

from sysfs_builder import gpu_nic_same_switch, gpu_nic_two_sockets

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "sysfs" / "pod-fixture"


def build_pod(path: Path) -> Path:
    t = gpu_nic_same_switch(path)
    r = t.root
    gpu = r / "sys/bus/pci/devices/0000:03:00.0"
    (gpu / "current_link_width").write_text("8\n")
    (gpu / "iommu_group").mkdir()
    (gpu / "iommu_group/type").write_text("DMA-FQ\n")
    (r / "sys/class/infiniband_verbs/uverbs0").mkdir(parents=True)
    (r / "sys/class/infiniband_verbs/uverbs0/ibdev").write_text("mlx5_0\n")
    (r / "dev").mkdir()  # recorded inside a container started without --device /dev/infiniband
    (r / "proc/self").mkdir(parents=True)
    (r / "proc/self/limits").write_text("Limit                     Soft Limit           Hard Limit           Units\n"
                                        "Max locked memory         0                    0                    bytes\n")
    (r / "proc/self/status").write_text("Name:\tpython\nCapEff:\t00000000a80425fb\n")
    (r / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on\n")
    (r / "gdrlab-acs.txt").write_text("0000:02:08.0 005d\n0000:02:10.0 005d\n")
    (r / "MANIFEST.json").write_text(json.dumps({"synthetic": True, "what": "fixture for gdrlab doctor --cluster: "
                                                 "a pod on a one-switch GPU+NIC machine, every first-run mistake",
                                                 "made_by": "tests/cli/test_doctor_cluster.py build_pod"}, indent=1))
    return r


def _doctor(root: Path, *extra: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "gdrlab", "doctor", "--sysfs", str(root), "--cluster", "--json", *extra],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return json.loads(p.stdout)


def _by_id(checks: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for c in checks:
        out.setdefault(c["id"], []).append(c)
    return out


def test_pod_tree_finds_every_mistake(tmp_path):
    c = _by_id(_doctor(build_pod(tmp_path))["cluster_checks"])
    assert c["dev_infiniband"][0]["status"] == "fail" and "uverbs0 (mlx5_0)" in c["dev_infiniband"][0]["evidence"]
    assert "--device /dev/infiniband" in c["dev_infiniband"][0]["fix"]
    assert c["memlock"][0]["status"] == "fail" and "IPC_LOCK" in c["memlock"][0]["fix"]
    acs = next(x for x in c["acs"] if "0000:03:00.0" in x["title"])
    assert acs["status"] == "fail" and "0000:02:08.0 ACSCtl=0x005d" in acs["evidence"]
    assert "RequestRedirect" in acs["evidence"] and "setpci -s 0000:02:10.0 ECAP_ACS+0x6.w=0000" in acs["fix"]
    assert c["iommu"][0]["status"] == "warn" and "DMA-FQ" in c["iommu"][0]["evidence"]
    assert "iommu=pt" in c["iommu"][0]["fix"]
    gpu_link = next(x for x in c["pcie_link"] if "GPU" in x["title"])
    assert gpu_link["status"] == "fail" and gpu_link["evidence"].startswith("Gen5 x8 of Gen5 x16")
    nic_link = next(x for x in c["pcie_link"] if "mlx5_0" in x["title"])
    assert nic_link["status"] == "ok"
    assert c["numa"][0]["status"] == "ok" and "numactl --cpunodebind=0 --membind=0" in c["numa"][0]["evidence"]
    assert c["port"][0]["status"] == "ok" and "rate 200 Gb/sec" in c["port"][0]["evidence"]
    assert c["peer_memory"][0]["status"] == "warn"  # kernel 6.8: dma-buf carries it
    for x in sum(c.values(), []):
        assert x["evidence"] and (x["status"] in ("ok", "unknown") or x["fix"]), x


def test_two_socket_tree_names_the_cpus_to_bind(tmp_path):
    gpu_nic_two_sockets(tmp_path)
    c = _by_id(_doctor(tmp_path)["cluster_checks"])
    numa = c["numa"][0]
    # the nearest NIC is mlx5_1 (same node); the down port of mlx5_0 is its own finding
    assert numa["status"] == "ok" and "mlx5_1" in numa["title"]
    down = next(x for x in c["port"] if x["title"].startswith("mlx5_0"))
    assert down["status"] == "fail" and "DOWN" in down["evidence"] and "subnet manager" in down["fix"]
    assert c["peer_memory"][0]["status"] == "ok" and "nvidia_peermem 580.1" in c["peer_memory"][0]["evidence"]
    assert c["acs"][0]["status"] == "unknown"  # no switch between them


def test_numa_mismatch(tmp_path):
    t = gpu_nic_two_sockets(tmp_path)
    import shutil
    shutil.rmtree(t.root / "sys/class/infiniband/mlx5_1", ignore_errors=True)
    (t.root / "sys/class/infiniband/mlx5_1").unlink()
    c = _by_id(_doctor(tmp_path)["cluster_checks"])
    numa = c["numa"][0]
    assert numa["status"] == "fail" and "CPUs 0-7" in numa["evidence"]
    assert "numactl --cpunodebind=0 --membind=0" in numa["fix"] and "taskset -c 0-7" in numa["fix"]


def test_shipped_fixture_is_the_pod_tree():
    manifest = json.loads((SHIPPED / "MANIFEST.json").read_text())
    assert manifest["synthetic"] is True
    c = _by_id(_doctor(SHIPPED)["cluster_checks"])
    assert {k: v[0]["status"] for k, v in c.items() if k in ("dev_infiniband", "memlock", "acs")} == \
        {"dev_infiniband": "fail", "memlock": "fail", "acs": "fail"}


def test_text_form_lists_checks_with_fixes(tmp_path):
    p = subprocess.run([sys.executable, "-m", "gdrlab", "doctor", "--sysfs", str(build_pod(tmp_path)), "--cluster"],
                       capture_output=True, text=True, timeout=120)
    assert "Cluster checks" in p.stdout and "FAIL    ACS between GPU 0000:03:00.0 and mlx5_0" in p.stdout
    assert "fix: sudo setpci" in p.stdout


def test_bundle_has_the_documents_and_no_secrets(tmp_path):
    root = build_pod(tmp_path / "tree")
    results = tmp_path / "out/rdma_pair"
    results.mkdir(parents=True)
    (results / "verbs-gdr.json").write_text(json.dumps({"rows": [{"size": 8}], "provenance": {
        "host": "node-b.cluster.example", "command": "gdrlab bench --peer node-a.cluster.example:18515 --token s3cr3t"}}))
    (results / "perftest-write_imm_lat_host.json").write_text(json.dumps({"ok": True, "rows": []}))
    bundle = tmp_path / "b.tar.gz"
    env = {"GDRLAB_TOKEN": "s3cr3t"}
    import os
    p = subprocess.run([sys.executable, "-m", "gdrlab", "doctor", "--sysfs", str(root), "--cluster", "--bundle",
                        str(bundle), "--results", str(tmp_path / "out")], capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, **env))
    assert p.returncode == 0, p.stderr
    with tarfile.open(bundle) as tar:
        names = sorted(m.name for m in tar.getmembers())
        text = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}
    assert names == ["gdrlab-bundle/README.txt", "gdrlab-bundle/doctor.json",
                     "gdrlab-bundle/rdma_pair/perftest-write_imm_lat_host.json",
                     "gdrlab-bundle/rdma_pair/verbs-gdr.json", "gdrlab-bundle/topology.json"]
    doc = json.loads(text["gdrlab-bundle/doctor.json"])
    assert {c["id"] for c in doc["cluster_checks"]} >= {"acs", "memlock", "dev_infiniband"}
    blob = "".join(text.values())
    assert "s3cr3t" not in blob and "node-a.cluster.example" not in blob and "node-b" not in blob
    gdr = json.loads(text["gdrlab-bundle/rdma_pair/verbs-gdr.json"])
    assert gdr["provenance"]["host"] is None


def test_bundle_needs_cluster(tmp_path):
    p = subprocess.run([sys.executable, "-m", "gdrlab", "doctor", "--bundle", str(tmp_path / "x.tgz")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "--bundle needs --cluster" in (p.stdout + p.stderr)
