"""The NCCL version table (gdrlab.nccl.versions) and the rules topology and the log reader take from
it. Expectations are written out by hand from NCCL's source at the named tags
(https://github.com/NVIDIA/nccl): src/graph/topo.h (src/include/graph.h from 2.30) for the path
numbers, src/graph/paths.cc (ncclTopoCheckGdr) for the rule and its log line, src/debug.cc for the
default debug mask, src/transport/net_ib.cc (net_ib/connect.cc from 2.29) for NCCL_IB_TIMEOUT."""
from __future__ import annotations

import pytest

from gdrlab import nccl
from gdrlab.errors import InvalidArgument
from gdrlab.nccl import versions as V
from gdrlab.topology._topo import gdr_verdict, parse_gdr_level

# (version, the number of PIX, PXB, PHB, SYS, and of C2C, P2C, PXN, NET where they exist)
NUMBERS = [
    ("2.12.7", {"PIX": 3, "PXB": 4, "PXN": 5, "PHB": 6, "SYS": 7}, ("C2C", "P2C", "NET")),   # topo.h v2.12.7-1
    ("2.17.1", {"PIX": 3, "PXB": 4, "PXN": 5, "PHB": 6, "SYS": 7}, ("C2C", "P2C", "NET")),   # no PATH_NET yet
    ("2.18.1", {"PIX": 3, "PXB": 4, "PXN": 5, "PHB": 6, "SYS": 7, "NET": 8}, ("C2C", "P2C")),
    ("2.25.1", {"PIX": 3, "PXB": 4, "PXN": 5, "PHB": 6, "SYS": 7, "NET": 8}, ("C2C", "P2C")),
    ("2.26.2", {"C2C": 3, "PIX": 4, "PXB": 5, "PXN": 6, "PHB": 7, "SYS": 8, "NET": 9}, ("P2C",)),
    ("2.27.3", {"C2C": 3, "PIX": 4, "PXB": 5, "PXN": 6, "P2C": 7, "PHB": 8, "SYS": 9, "NET": 10}, ()),
    ("2.27.5", {"C2C": 3, "PIX": 4, "PXB": 5, "P2C": 6, "PXN": 7, "PHB": 8, "SYS": 9, "NET": 10}, ()),
    ("2.28.9", {"C2C": 3, "PIX": 4, "PXB": 5, "P2C": 6, "PXN": 7, "PHB": 8, "SYS": 9, "NET": 10}, ()),
    ("2.30.7", {"C2C": 3, "PIX": 4, "PXB": 5, "P2C": 6, "PXN": 7, "PHB": 8, "SYS": 9, "NET": 10}, ()),
]


@pytest.mark.parametrize("version, numbers, absent", NUMBERS)
def test_path_numbers_by_version(version, numbers, absent):
    names = V.path_types(version)
    for name, number in numbers.items():
        assert names.index(name) == number
        assert nccl.path_type_name(number, version + "+cuda12.2") == name
    for name in absent:
        assert name not in names


def test_p2c_ranks_before_pxn_from_2_27_5_not_2_28():
    assert V.path_rank("P2C", "2.27.3") > V.path_rank("PXN", "2.27.3")
    assert V.path_rank("P2C", "2.27.5") < V.path_rank("PXN", "2.27.5")
    assert V.path_rank("P2C", "2.28") < V.path_rank("PXN", "2.28")


@pytest.mark.parametrize("version, c2c_default, level", [
    ("2.12", None, "PXB"), ("2.25", None, "PXB"), ("2.26", 0, "PXB"), ("2.27", 1, "PXB"),
    ("2.28.9", 1, "PXB"), ("2.29.2", 1, "P2C"), ("2.30", 1, "P2C"),
])
def test_default_level_and_c2c(version, c2c_default, level):
    f = V.facts(version)
    assert f["net_gdr_c2c_default"] == c2c_default
    assert V.default_gdr_level(version)[0] == level
    assert V.default_gdr_level(version, gdr_c2c=False)[0] == "PXB"  # NCCL_NET_GDR_C2C=0: PXB everywhere


@pytest.mark.parametrize("version, level, subsys, line_format_has", [
    ("2.12", "INFO", ["NET"], "GPU {busId:x} / HCA {netDev:d}"),
    ("2.22", "INFO", ["NET"], "HCA {netId:x}"),
    ("2.25", "INFO", ["NET"], "GPU {rank:d}"),
    ("2.27", "INFO", ["GRAPH", "NET"], "GPU {rank:d}"),
    ("2.29", "INFO", ["GRAPH", "NET"], "(rank {rank}) - NET/"),
    ("2.30", "TRACE", ["GRAPH", "NET"], "(rank {rank}) - NET/"),
])
def test_per_pair_line_level_and_subsystems(version, level, subsys, line_format_has):
    line = V.facts(version)["gdr_pair_line"]
    assert (line["level"], line["subsys"]) == (level, subsys)
    assert line_format_has in line["format"]
    # NET is never in the default mask, so the line needs NCCL_DEBUG_SUBSYS naming NET (or GRAPH)
    assert "NET" not in V.facts(version)["debug_subsys_default"]


@pytest.mark.parametrize("version, timeout", [("2.12", 14), ("2.13", 14), ("2.14", 18), ("2.22", 18),
                                              ("2.23", 20), ("2.28.9", 20), ("2.30", 20)])
def test_ib_timeout_default(version, timeout):
    assert V.facts(version)["ib_timeout_default"] == timeout


@pytest.mark.parametrize("version, cc, nvlink, expect", [
    ("2.18", 80, False, False),   # before 2.19 every GPU without an NVLink peer sends without GDR
    ("2.18", 80, True, True),
    ("2.19", 80, False, True),    # from 2.19 Ampere and newer send through GDR regardless
    ("2.19", 70, False, False),   # a V100 without NVLink does not
    ("2.30", 70, True, True),
    ("2.30", 90, None, True),
    ("2.30", None, None, None),   # unknown GPU: the verdict says it cannot tell
])
def test_send_side_read_rule(version, cc, nvlink, expect):
    assert V.send_side_gdr(version, cc, nvlink)[0] is expect


def test_gdr_read_variable_overrides_the_rule():
    assert V.send_side_gdr("2.30", 70, False, gdr_read=1)[0] is True
    assert V.send_side_gdr("2.30", 90, True, gdr_read=0)[0] is False


def test_every_row_cites_a_file_and_a_tag_and_rows_are_in_order():
    for name, rows in V.TABLE.items():
        starts = [r[0] for r in rows]
        assert starts == sorted(starts), name
        for since, _value, source in rows:
            assert source.startswith("NVIDIA/nccl src/") and f"@ v{V.format_version(since)}-1" in source
            assert since in V.known_versions(), (name, since)


@pytest.mark.parametrize("version", ["2.12", "2.19.3", "2.26", "2.27.3", "2.28.9", "2.29", "2.30.7"])
def test_pcie_codes_get_the_same_verdict_in_every_version(version):
    # PIX and PXB rank at or below both PXB and P2C in every version; PHB and SYS above both
    for code, use in (("PIX", True), ("PXB", True), ("PHB", False), ("NODE", False), ("SYS", False)):
        d = gdr_verdict("GPU0", "mlx5_0", code, "why", None, version)
        assert d["use_gdr"] is use and d["nccl_version"] == V.format_version(V.parse_version(version))


def test_the_reason_names_the_version_and_its_level():
    d = gdr_verdict("GPU0", "mlx5_0", "PXB", "two switches")
    assert d["nccl_version"] == "2.30.7" and d["level"] == "P2C"
    assert "2.30.7" in d["reason"] and "newest" in d["reason"]
    old = gdr_verdict("GPU0", "mlx5_0", "PXB", "two switches", None, "2.28.9")
    assert old["level"] == "PXB" and "newest" not in old["reason"]
    # the sending side of an old GPU without NVLink, NCCL 2.19+
    sent = gdr_verdict("GPU0", "mlx5_0", "PIX", "one switch", None, "2.19", compute_capability=70, nvlink=False)
    assert sent["use_gdr"] is True and sent["send"]["use_gdr"] is False


def test_level_names_exist_only_where_the_version_has_them():
    assert parse_gdr_level("P2C", "2.28") == "P2C"
    assert parse_gdr_level("c2c", "2.26") == "C2C"
    with pytest.raises(InvalidArgument, match="P2C"):
        parse_gdr_level("P2C", "2.26")
    with pytest.raises(InvalidArgument, match="C2C"):
        parse_gdr_level("C2C", "2.25")
    assert parse_gdr_level(3, "2.12") == "PHB" and parse_gdr_level("4", "2.30") == "SYS"


@pytest.mark.parametrize("bad", ["2.11", "3.0", "2.31.1", "two", "", "2.x", "2.28.9.1"])
def test_versions_outside_the_table_are_one_line(bad):
    with pytest.raises(InvalidArgument) as e:
        V.parse_version(bad)
    assert "\n" not in str(e.value)


def test_a_minor_version_alone_is_its_last_release():
    assert V.parse_version("2.27") == (2, 27, 7) and V.parse_version("v2.28.9-1") == (2, 28, 9)
    assert V.parse_version("2.28.9+cuda13.0") == (2, 28, 9)


def test_log_reader_names_2_29_lines_and_states_the_default():
    text = "\n".join([
        "h:1:1 [0] NCCL INFO NCCL version 2.29.2+cuda12.9",
        "h:1:1 [0] NCCL INFO GPU Direct RDMA Disabled for GPU/0-1 (rank 0) - NET/0-0 (distance 9 > 6)",
        "h:1:1 [1] NCCL INFO GPU Direct RDMA Enabled for GPU/0-2 (rank 1) - NET/0-1 (distance 5 <= 6, read 1, "
        "mode Default)",
    ])
    p = nccl.parse_log(text)
    assert [(g["enabled"], g["distance_type"], g["limit_type"]) for g in p["gdr"]] == [
        (False, "SYS", "P2C"), (True, "PXB", "P2C")]
    meaning = " ".join(r["meaning"] for r in p["summary"]["reasons"])
    assert "default P2C" in meaning and "(SYS > P2C)" in meaning


def test_log_reader_names_2_27_3_by_its_own_order():
    line = "h:1:1 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 0 / HCA 0 (distance 7 > 5)"
    p = nccl.parse_log("h:1:1 [0] NCCL INFO NCCL version 2.27.3+cuda12.9\n" + line)
    assert (p["gdr"][0]["distance_type"], p["gdr"][0]["limit_type"]) == ("P2C", "PXB")
    p = nccl.parse_log("h:1:1 [0] NCCL INFO NCCL version 2.27.5+cuda12.9\n" + line)
    assert p["gdr"][0]["distance_type"] == "PXN"


def _topo(*args: str):
    import subprocess
    import sys
    from pathlib import Path
    return subprocess.run([sys.executable, "-m", "gdrlab", "topo", "--matrix", "dgx-a100-nccl-issue-1505", *args],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])


def test_topo_applies_the_rule_of_the_version_asked():
    import json
    old = json.loads(_topo("--nccl-version", "2.28.9", "--json").stdout)
    new = json.loads(_topo("--json").stdout)
    first = next(iter(old["gdr"]["GPU0"].values()))
    assert first["nccl_version"] == "2.28.9" and first["level"] == "PXB"
    latest = next(iter(new["gdr"]["GPU0"].values()))
    assert latest["nccl_version"] == "2.30.7" and latest["level"] == "P2C" and "newest" in latest["reason"]
    # the same PCIe codes, the same verdicts: the level's name changed, not what it admits
    assert {n: d["use_gdr"] for n, d in old["gdr"]["GPU0"].items()} == \
        {n: d["use_gdr"] for n, d in new["gdr"]["GPU0"].items()}


@pytest.mark.parametrize("args, says", [(("--nccl-version", "2.11"), "outside the versions"),
                                        (("--nccl-version", "2.26", "--gdr-level", "P2C"), "P2C")])
def test_topo_refuses_a_version_or_level_in_one_line(args, says):
    proc = _topo(*args)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr


@pytest.mark.parametrize("version, line, rma", [
    ("2.28.3", None, None), ("2.28.7", "Assigned GIN plugin {name} to comm", False),
    ("2.29.2", "Assigned GIN plugin {name} to comm", True), ("2.30.4", "Assigned GIN plugin {name} to comm", True),
    ("2.30.7", "GIN/Plugin: Assigned plugin {name} type {type} to comm", False),
])
def test_gin_line_by_version(version, line, rma):
    got = V.facts(version)["gin_assign_line"]
    assert (got is None and line is None) or (got[0], got[1]) == (line, rma)


def test_rma_line_versions_are_said_from_the_table():
    p = nccl.parse_log("h:1:1 [0] NCCL INFO Assigned RMA plugin GIN_IB_PROXY to comm")
    assert any("2.29.2 to 2.30.4" in r["meaning"] for r in p["summary"]["reasons"])


def test_nccl_versions_command_lists_every_change_with_its_source():
    import csv
    import io
    import json
    import subprocess
    import sys
    from pathlib import Path
    run = lambda *a: subprocess.run([sys.executable, "-m", "gdrlab", "nccl", "versions", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    doc = json.loads(run("--json").stdout)
    assert doc["newest"] == "2.30.7"
    rows = {(r["fact"], r["since"]): r for r in doc["rows"]}
    assert rows[("ib_timeout_default", "2.14.3")]["value"] == "18"
    assert rows[("ib_timeout_default", "2.14.3")]["until"] == "2.22.3"
    assert rows[("path_types", "2.27.3")]["until"] == "2.27.3"  # P2C after PXN in that release only
    assert all(r["source"].startswith("NVIDIA/nccl src/") for r in doc["rows"])
    one = json.loads(run("--nccl-version", "2.28.9", "--json").stdout)
    assert one["facts"]["ib_timeout_default"] == 20 and one["facts"]["default_gdr_level"]["c2c_on"] == "PXB"
    table = list(csv.DictReader(io.StringIO(run("--csv").stdout)))
    assert len(table) == len(doc["rows"]) and set(table[0]) == {"fact", "since", "until", "value", "source"}
    bad = run("--nccl-version", "9.9")
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
