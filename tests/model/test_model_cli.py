"""`gdrlab model` as DESIGN.md's CLI contract describes it: one JSON document with --json."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gdrlab.cli import main

PARAM_COUNT = None


def run_json(capsys, *argv) -> tuple[int, dict]:
    rc = main(["model", *argv, "--json"])
    out = capsys.readouterr().out
    return rc, json.loads(out)  # exactly one JSON document, nothing else


def test_list(capsys):
    rc, doc = run_json(capsys, "--list")
    assert rc == 0
    assert [p["name"] for p in doc["profiles"]] == ["kepler-snb-2013", "kepler-ivb-2014", "volta-dgx1",
                                                    "hopper-ndr", "h200-lab", "a100-hdr", "gh200", "b200-xdr",
                                                    "l40s-pcie", "aws-p5-efa"]
    assert all(p["description"] for p in doc["profiles"])


def test_predict_rows(capsys):
    rc, doc = run_json(capsys, "--profile", "kepler-ivb-2014", "--path", "gdr", "--path", "staged",
                       "--sizes", "8,4K,1M")
    assert rc == 0
    assert doc["provenance"]["kind"] == "modelled" and doc["provenance"]["profile"] == "kepler-ivb-2014"
    assert [(r["path"], r["size"]) for r in doc["rows"]] == [("gdr", 8), ("gdr", 4096), ("gdr", 1048576),
                                                             ("staged", 8), ("staged", 4096), ("staged", 1048576)]
    for r in doc["rows"]:
        assert set(r) == {"path", "size", "lat_us", "bw_gbps", "bottleneck", "level"}
        assert r["level"] == "verbs"  # kepler-ivb-2014 follows verbs-level figures
    assert doc["provenance"]["level"] == "verbs"
    gdr8 = doc["rows"][0]["lat_us"]
    assert 1.7 <= gdr8 <= 1.9  # NVIDIA 2014, K40m + Connect-IB


def test_set_and_placement_change_the_prediction(capsys):
    _, base = run_json(capsys, "--profile", "volta-dgx1", "--path", "gdr", "--sizes", "64M")
    _, slow = run_json(capsys, "--profile", "volta-dgx1", "--path", "gdr", "--sizes", "64M",
                       "--set", "p2p_read_gbps=0.8")
    _, xs = run_json(capsys, "--profile", "volta-dgx1", "--path", "gdr", "--sizes", "64M",
                     "--placement", "cross-socket")
    assert slow["rows"][0]["bw_gbps"] == pytest.approx(0.8, rel=1e-3)
    assert xs["rows"][0]["bw_gbps"] < base["rows"][0]["bw_gbps"]
    assert slow["provenance"]["overrides"] == {"p2p_read_gbps": 0.8}


def test_crossover(capsys):
    rc, doc = run_json(capsys, "crossover", "--profile", "kepler-snb-2013", "--a", "gdr", "--b", "pipelined")
    assert rc == 0 and 1024 <= doc["crossover_bytes"] <= 65536  # "in the kilobytes" (MVAPICH2: 8 KB)
    rc, doc = run_json(capsys, "crossover", "--profile", "hopper-ndr", "--a", "gdr", "--b", "pipelined")
    assert rc == 0 and doc["crossover_bytes"] is None  # no 2013 read limit: GDR wins at every size


def test_policy(capsys):
    rc, doc = run_json(capsys, "policy", "--profile", "kepler-ivb-2014")
    assert rc == 0
    pol = doc["policy"]
    assert pol[0]["lo"] == 1 and pol[0]["path"] in ("gdr", "gdrcopy") and pol[-1]["path"] == "pipelined"


def test_show_lists_every_parameter_with_a_source(capsys):
    from gdrlab.model import PARAMS

    rc, doc = run_json(capsys, "show", "--profile", "h200-lab")
    assert rc == 0 and doc["has_nic"] is False and doc["n_gpus"] == 2
    assert [p["name"] for p in doc["params"]] == list(PARAMS)
    assert all(p["source"] and p["unit"] for p in doc["params"])


@pytest.mark.parametrize("argv,kind,needle", [
    (["--profile", "nope"], "InvalidArgument", "kepler-snb-2013"),
    (["--set", "bogus=1"], "InvalidArgument", "nic_wire_gbps"),
    (["--set", "nic_wire_gbps=-3"], "InvalidArgument", "--set nic_wire_gbps=-3"),
    (["--set", "nic_wire_gbps=1e-300"], "InvalidArgument", "--set nic_wire_gbps=1e-300"),
    (["--chunk", "0"], "InvalidArgument", "--chunk 0"),
    (["--depth", "5000"], "InvalidArgument", "depth must be a whole number from 1 to 1024"),
    (["--set", "tcp_lat_us=1e300"], "InvalidArgument", "--set tcp_lat_us=1e+300"),
    (["--set", "nic_wire_gbps"], "InvalidArgument", "KEY=VALUE"),
    (["--sizes", "0"], "InvalidArgument", "at least 1 byte"),
    (["--profile", "h200-lab", "--path", "gdr"], "Unavailable", "RDMA NIC"),
    (["--profile", "kepler-snb-2013", "--path", "p2p"], "Unavailable", "socket"),
    (["crossover", "--profile", "hopper-ndr", "--a", "gdr"], "InvalidArgument", "--b"),
])
def test_errors_are_one_json_document(capsys, argv, kind, needle):
    rc = main(["model", *argv, "--json"])
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert rc == 1 and doc["error"]["type"] == kind and needle in doc["error"]["message"]
    assert "Traceback" not in cap.err


def test_borrowed_nic_what_if(capsys):
    rc, doc = run_json(capsys, "--profile", "h200-lab", "--borrow-nic", "hopper-ndr", "--path", "gdr",
                       "--sizes", "1M")
    assert rc == 0 and doc["provenance"]["profile"] == "h200-lab+nic:hopper-ndr"


def test_entry_point_prints_only_json():
    out = subprocess.run([sys.executable, "-m", "gdrlab", "model", "--profile", "hopper-ndr", "--sizes", "8",
                          "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {r["path"] for r in doc["rows"]} == {"host", "staged", "shared", "pipelined", "gdr", "gdrcopy", "p2p",
                                                "p2p-staged"}


def test_crossover_keeps_its_contract_and_lists_every_crossing(capsys):
    rc, doc = run_json(capsys, "crossover", "--profile", "hopper-ndr", "--placement", "cross-socket",
                       "--chunk", "1M", "--a", "gdr", "--b", "pipelined")
    assert rc == 0
    found = doc["crossings"]
    assert found and doc["crossover_bytes"] == next(c["size"] for c in found if c["faster"] == "pipelined")
    sizes = [c["size"] for c in found]
    assert sizes == sorted(sizes)
    # the faster path alternates from one crossing to the next
    assert all(x["faster"] != y["faster"] for x, y in zip(found, found[1:]))


def test_crossover_text_prints_the_size_once(capsys):
    assert main(["model", "crossover", "--profile", "volta-dgx1", "--placement", "cross-socket",
                 "--a", "gdr", "--b", "pipelined"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    size = [w for w in line.split() if w.isdigit()]
    assert len(size) == 1, line


def test_tcp_wire_runs_without_gdr(capsys):
    rc, doc = run_json(capsys, "--profile", "hopper-ndr", "--wire", "tcp", "--sizes", "8,1M")
    assert rc == 0
    paths = {r["path"] for r in doc["rows"]}
    assert "gdr" not in paths and {"host", "staged", "pipelined"} <= paths
    rc, doc = run_json(capsys, "policy", "--profile", "hopper-ndr", "--wire", "tcp")
    assert rc == 0 and all(r["path"] != "gdr" for r in doc["policy"])


def test_explain_names_every_link_and_the_bottleneck(capsys):
    rc, doc = run_json(capsys, "--profile", "hopper-ndr", "--path", "gdr", "--sizes", "1G",
                       "--set", "gpu_pcie_gbps=6.25", "--explain")
    assert rc == 0
    e = doc["explain"][0]
    assert {"gpu-pcie", "nic-pcie", "wire", "root-complex-read"} <= set(e["links_gbps"])
    assert e["bottleneck"] == "gpu-pcie" == doc["rows"][0]["bottleneck"]
    assert doc["rows"][0]["bw_gbps"] <= 6.25
