"""Issue 34 item 5: the CLI shows a real GDR decision. `gdrlab topo --matrix` reads the text of
`nvidia-smi topo -m` (the shipped DGX A100 excerpt by name) and prints the pair codes, nearest NIC
and NCCL's GDR verdict as it does for a tree; `gdrlab nccl parse` takes every name `gdrlab nccl
recorded` lists, the published excerpts by short name; no internal function names in messages."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gdrlab.topology import (
    from_hwloc,
    matrix_report,
    parse_topo_matrix,
    recorded_matrices,
)

DGX = "dgx-a100-nccl-issue-1505"
# NCCL's default NCCL_NET_GDR_LEVEL, from its ncclTopoCheckGdr (src/graph/paths.cc): PXB through
# 2.29.1; from v2.29.2-1, P2C when NCCL_NET_GDR_C2C is 1 (its default since 2.27.3). P2C ranks after
# PXB (src/graph/topo.h from v2.27.5-1), so PIX and PXB pairs keep GDR and PHB, SYS lose it under both.
DEFAULT_LEVEL = "P2C"  # the kit's rule defaults to the newest NCCL it knows; see test_the_default_nccl_is_one_with_p2c
OLD_LEVEL = "PXB"  # NCCL 2.28


def gdrlab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gdrlab", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd)


def test_list_names_the_shipped_matrix_with_its_flag():
    text = gdrlab("topo", "--list")
    assert text.returncode == 0, text.stderr
    assert f"--matrix {DGX}" in text.stdout and "--hwloc-xml nvidiaDGX2" in text.stdout
    assert DGX in json.loads(gdrlab("topo", "--list", "--json").stdout)


def test_matrix_by_name_shows_nearest_nic_and_the_gdr_verdict():
    proc = gdrlab("topo", "--matrix", DGX)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    out = proc.stdout
    rows = {l.split()[0]: l.split()[1:] for l in out.splitlines() if re.match(r"^GPU\d ", l)}
    assert set(rows) == {"GPU0", "GPU1", "GPU2", "GPU3"}  # the excerpt's rows, no invented ones
    assert rows["GPU0"][:10] == ["X"] + ["NV12"] * 7 + ["PXB", "PXB"]
    assert "GPU0: nearest NIC NIC0; GPU0 to NIC0 is PXB" in out
    assert f"NCCL uses GPUDirect RDMA (PXB <= {DEFAULT_LEVEL})" in out
    assert "numactl --cpunodebind=3 --membind=3" in out and "numactl --cpunodebind=1 --membind=1" in out
    assert "GPU4: nearest NIC unknown" in out and "no row for GPU4" in out
    assert "not well-formed" not in out


def test_the_default_nccl_is_one_with_p2c():
    """DEFAULT_LEVEL holds for the version the rule takes when none is named (2.29.2 or later)."""
    from gdrlab.nccl import versions
    assert versions.NEWEST >= (2, 29, 2)


def test_an_older_nccl_version_keeps_pxb_as_its_default():
    proc = gdrlab("topo", "--matrix", DGX, "--nccl-version", "2.28")
    assert proc.returncode == 0, proc.stderr
    assert f"NCCL uses GPUDirect RDMA (PXB <= {OLD_LEVEL})" in proc.stdout and DEFAULT_LEVEL not in proc.stdout
    far = json.loads(gdrlab("topo", "--matrix", DGX, "--nccl-version", "2.28", "--json").stdout)["gdr"]["GPU0"]["NIC2"]
    assert far["use_gdr"] is False and f"(SYS > {OLD_LEVEL})" in far["reason"]


def test_matrix_json_has_the_tree_reports_keys_and_every_known_pair():
    doc = json.loads(gdrlab("topo", "--matrix", DGX, "--json").stdout)
    tree = json.loads(gdrlab("topo", "--hwloc-xml", "nvidiaDGX2", "--json").stdout)
    for key in ("source", "provenance", "devices", "matrix", "nearest_nic", "gdr", "numa"):
        assert key in doc and key in tree
    assert doc["provenance"]["kind"] == "recorded"
    assert doc["nearest_nic"] == {"GPU0": "NIC0", "GPU1": "NIC0", "GPU2": "NIC2", "GPU3": "NIC2",
                                  "GPU4": None, "GPU5": None, "GPU6": None, "GPU7": None}
    assert len(doc["gdr"]["GPU0"]) == 12 and doc["gdr"]["GPU4"] == {}
    assert doc["gdr"]["GPU0"]["NIC1"]["use_gdr"] is True
    far = doc["gdr"]["GPU0"]["NIC2"]
    assert far["use_gdr"] is False and far["code"] == "SYS" and f"(SYS > {DEFAULT_LEVEL})" in far["reason"]
    assert doc["matrix"]["GPU4"]["NIC0"] is None and doc["matrix"]["NIC0"]["GPU0"] == "PXB"


def test_gdr_level_moves_the_matrix_verdict_as_it_moves_the_trees():
    doc = json.loads(gdrlab("topo", "--matrix", DGX, "--gdr-level", "SYS", "--json").stdout)
    assert doc["gdr"]["GPU0"]["NIC2"]["use_gdr"] is True and doc["gdr"]["GPU0"]["NIC2"]["level"] == "SYS"
    doc = json.loads(gdrlab("topo", "--matrix", DGX, "--gdr-level", "PIX", "--json").stdout)
    assert doc["gdr"]["GPU0"]["NIC0"]["use_gdr"] is False


def test_matrix_and_tree_give_one_rule():
    """The same code gives the same verdict, whether a tree or a matrix says it."""
    from gdrlab.topology._topo import gdr_verdict

    rep = matrix_report(parse_topo_matrix(recorded_matrices()[DGX].read_text()), "test")
    for code, use in (("PXB", True), ("SYS", False)):
        hit = next(d for d in rep["gdr"]["GPU0"].values() if d["code"] == code)
        assert hit["use_gdr"] is use and hit["nccl_path"] == code
        assert {k: v for k, v in gdr_verdict("a", "b", code, "why").items() if k != "reason"} == \
            {k: v for k, v in hit.items() if k != "reason"}
    tree = from_hwloc(str(recorded_matrices()[DGX].parent.parent / "hwloc" / "nvidiaDGX2.xml"))
    assert tree.to_json()["gdr"] == {g: {} for g in tree.gpus}  # the shipped tree has no NIC: why the matrix ships


def test_a_saved_matrix_file_with_legends_names_the_rdma_devices(tmp_path):
    text = """\
        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity
GPU0     X      SYS     NODE    SYS     0-15            0
GPU1    SYS      X      SYS     PIX     16-31           1
NIC0    NODE    SYS      X      SYS
NIC1    SYS     PIX     SYS      X

Legend:

  X    = Self
  PIX  = Connection traversing at most a single PCIe bridge

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""
    f = tmp_path / "topo.txt"
    f.write_text(text)
    proc = gdrlab("topo", "--matrix", str(f))
    assert proc.returncode == 0, proc.stderr
    assert "NIC0: mlx5_0" in proc.stdout
    assert "GPU1: nearest NIC NIC1; GPU1 to NIC1 (mlx5_1) is PIX" in proc.stdout
    # NODE is PHB to NCCL: farther than its default level (P2C, PXB before 2.29.2)
    assert "GPU0 to NIC0 (mlx5_0) is NODE (NCCL calls it PHB)" in proc.stdout
    assert f"does not use GPUDirect RDMA (PHB > {DEFAULT_LEVEL})" in proc.stdout
    assert f"NCCL uses GPUDirect RDMA (PIX <= {DEFAULT_LEVEL})" in proc.stdout
    assert "Note:" not in proc.stdout  # a whole matrix leaves nothing unknown


def test_bad_matrix_input_is_one_line(tmp_path):
    proc = gdrlab("topo", "--matrix", str(tmp_path / "missing.txt"))
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1 and DGX in proc.stderr
    bad = tmp_path / "bad.txt"
    bad.write_text("<topology/>\n")
    proc = gdrlab("topo", "--matrix", str(bad))
    assert proc.returncode != 0 and "GPU0" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = gdrlab("topo", "--hwloc-xml", DGX)
    assert proc.returncode != 0 and f"--matrix {DGX}" in proc.stderr and "well-formed" not in proc.stderr


def test_nothing_found_hint_names_both_readers(tmp_path):
    (tmp_path / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    out = gdrlab("topo", "--sysfs", str(tmp_path)).stdout
    assert "--matrix NAME" in out and "--hwloc-xml NAME" in out


# ------------------------------------------------------------------------------ nccl names
def _listed_names() -> list[str]:
    doc = json.loads(gdrlab("nccl", "recorded", "--json").stdout)
    return [r["name"] for r in doc["runs"]] + [p["name"] for p in doc["published"]]


def test_nccl_recorded_lists_the_published_logs_by_short_name():
    names = _listed_names()
    assert names == ["default", "p2p_off", "p2p_shm_off", "issue-1151", "issue-707"]
    text = gdrlab("nccl", "recorded").stdout
    assert "issue-1151" in text and "issue-707" in text and "gdrlab nccl parse NAME" in text


@pytest.mark.parametrize("name", ["default", "p2p_off", "p2p_shm_off", "issue-1151", "issue-707",
                                  "h200x2-nvlink-default", "nccl-issue-707-a100-gdrdma"])
def test_nccl_parse_takes_every_listed_name(name):
    proc = gdrlab("nccl", "parse", name, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["provenance"]["kind"] == "recorded"
    if name.startswith(("issue", "nccl-issue")):
        assert "NVIDIA/nccl issue #" in doc["provenance"]["hardware"]


def test_published_logs_show_a_gdr_decision_without_internal_names(tmp_path):
    out = gdrlab("nccl", "parse", "issue-1151").stdout
    assert "does not use GPUDirect RDMA" in out and "distance 7 > 4" in out
    assert "SYS 7" in out and "path_type_name" not in out
    out = gdrlab("nccl", "parse", "issue-707").stdout
    assert "GDRDMA" in out or "GPUDirect RDMA" in out
    # a file in the working folder wins over a shipped name
    (tmp_path / "default").write_text("")
    assert "default:" in gdrlab("nccl", "parse", "default", cwd=tmp_path).stdout.splitlines()[0]


def test_unknown_log_lists_the_short_names():
    proc = gdrlab("nccl", "parse", "nope")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert "default, p2p_off, p2p_shm_off, issue-1151, issue-707" in proc.stderr


def test_no_internal_function_names_in_cli_text():
    """Messages a learner reads name commands and options, not Python functions."""
    internal = re.compile(r"\b(path_type_name|parse_topo_matrix|recorded_logs|published_logs|from_hwloc|"
                          r"matrix_report|gdr_verdict)\b")
    for args in (("topo", "--matrix", DGX), ("topo", "--list"), ("nccl", "recorded"),
                 ("nccl", "parse", "issue-1151"), ("nccl", "parse", "issue-707"), ("nccl", "parse", "nope"),
                 ("topo", "--hwloc-xml", DGX)):
        proc = gdrlab(*args)
        assert not internal.search(proc.stdout + proc.stderr), (args, internal.search(proc.stdout + proc.stderr))
