"""What a newcomer hit first: `gdrlab topo` that finds nothing says where the shipped machines are
(inside the JSON document with --json, nothing on stderr); doctor's header names the kind once."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gdrlab.commands import doctor

ROOT = Path(__file__).resolve().parents[2]
EMPTY_SYSFS_HINT = "gdrlab topo --list"


def _gdrlab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gdrlab", *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_topo_with_nothing_found_points_to_the_shipped_machines(tmp_path):
    (tmp_path / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    text = _gdrlab("topo", "--sysfs", str(tmp_path), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert EMPTY_SYSFS_HINT in text.stdout and text.stderr == ""
    js = _gdrlab("topo", "--sysfs", str(tmp_path), "--json", cwd=tmp_path)
    assert js.returncode == 0 and js.stderr == "", js.stderr
    doc = json.loads(js.stdout)
    assert doc["devices"] == [] and any(EMPTY_SYSFS_HINT in n for n in doc["notes"])
    listed = json.loads(_gdrlab("topo", "--list", "--json", cwd=tmp_path).stdout)
    assert listed, "the hint points to a list that is not empty"


def test_topo_of_a_shipped_machine_has_no_notes(tmp_path):
    name = next(iter(json.loads(_gdrlab("topo", "--list", "--json", cwd=tmp_path).stdout)))
    proc = _gdrlab("topo", "--hwloc-xml", name, "--json", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["devices"] and doc["notes"] == []


def test_doctor_header_says_the_kind_once():
    live = {"source": "live, node7", "provenance": {"kind": "live", "date": "2026-01-02T03:04:05+00:00"}}
    assert doctor.header(live) == "gdrlab doctor (live, node7, 2026-01-02T03:04:05+00:00)"
    rec = {"source": "recorded sysfs tree x", "provenance": {"kind": "recorded", "date": "d"}}
    assert doctor.header(rec) == "gdrlab doctor (recorded sysfs tree x, d)"
    other = {"source": "H200 node", "provenance": {"kind": "recorded", "date": "d"}}
    assert doctor.header(other) == "gdrlab doctor (recorded, H200 node, d)"


def test_doctor_text_names_live_once_on_this_machine(tmp_path):
    proc = _gdrlab("doctor", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("gdrlab doctor (") and first.count("live") == 1, first


def test_bench_and_p2p_matrix_that_cannot_run_point_to_recorded_data(run_cli):
    from gdrlab.transfer.buffers import cuda_status
    if cuda_status()["usable"]:
        pytest.skip("this machine has a usable GPU: bench runs live here")
    bench = run_cli("bench", "--path", "staged", "--sizes", "8")
    assert bench.returncode != 0
    assert "gdrlab.recorded.load('h200-bench-staged')" in bench.stderr
    from gdrlab import recorded
    assert "h200-bench-staged" in recorded.available()
    matrix = run_cli("p2p-matrix")
    assert matrix.returncode != 0 and "h200x2-p2p-matrix" in matrix.stderr
    assert recorded.load_document("h200x2-p2p-matrix")
