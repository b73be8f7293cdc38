"""`gdrlab model storage` and `gdrlab model gpu-initiated`: rows, --json, --csv, --explain,
--set for the route's own parameters, and one clear line on bad input."""
from __future__ import annotations

import csv
import io
import json

import pytest

from gdrlab.cli import main


def test_storage_json_rows_and_provenance(capsys):
    assert main(["model", "storage", "--profile", "h200-lab", "--drive", "h200-vda", "--sizes", "4K,1G",
                 "--set", "drive_read_gbps=3", "--set", "ce_eff=0.5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["method"] for r in doc["rows"]} == {"gds", "cufile-compat", "read-pinned", "read-pageable"}
    assert {r["size"] for r in doc["rows"]} == {4096, 1 << 30}
    prov = doc["provenance"]
    assert prov["kind"] == "modelled" and prov["level"] == "verbs" and prov["profile"] == "h200-lab"
    assert prov["storage_params"]["drive_read_gbps"] == 3 and prov["storage_levels"]["drive_read_gbps"] == "override"
    assert prov["overrides"]["ce_eff"] == 0.5                       # a profile parameter went to the profile
    assert any("bounce" in n for n in doc["notes"])


def test_storage_bounce_and_page_cache_move_compat(capsys):
    def compat(*extra):
        main(["model", "storage", "--method", "cufile-compat", "--sizes", "64M", "--json", *extra])
        return json.loads(capsys.readouterr().out)["rows"][0]["lat_us"]
    assert compat("--bounce", "16M") < compat("--bounce", "1M")
    assert compat("--page-cache", "hit") < compat()


def test_storage_text_explain_and_csv(capsys):
    assert main(["model", "storage", "--profile", "kepler-snb-2013", "--drive-placement", "cross-socket",
                 "--method", "gds", "--sizes", "1G", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "slowest link peer-write" in out and "gds" in out
    assert main(["model", "storage", "--sizes", "4K,1M", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 8 and set(rows[0]) == {"method", "size", "lat_us", "bw_gbps", "bottleneck"}


def test_gpu_initiated_json_and_text(capsys):
    assert main(["model", "gpu-initiated", "--sizes", "8,1M", "--set", "gpu_posters=128", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["initiator"] for r in doc["rows"]} == {"proxy", "gpu"}
    assert doc["params"]["gpu_posters"]["level"] == "override"
    assert all(p["source"] for p in doc["params"].values())
    assert any("arXiv:2511.15076" in n for n in doc["notes"])
    assert main(["model", "gpu-initiated", "--sizes", "8"]) == 0
    out = capsys.readouterr().out
    assert "proxy thread" in out and "GPU posting" in out


@pytest.mark.parametrize("argv, words", [
    (["model", "storage", "--drive", "floppy"], "unknown drive"),
    (["model", "storage", "--method", "pigeon"], "unknown storage method"),
    (["model", "storage", "--bounce", "lots"], "--bounce"),
    (["model", "storage", "--set", "drive_read_gbps=-1"], "drive_read_gbps"),
    (["model", "gpu-initiated", "--profile", "h200-lab"], "no RDMA NIC"),
    (["model", "storage", "--set", "warp_drive=9"], "not a parameter of the storage route"),
])
def test_bad_input_one_line(capsys, argv, words):
    assert main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
