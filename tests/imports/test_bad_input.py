"""Anything that is not a tool's output is refused with one line naming the file and why: binary,
empty, truncated, oversized (without reading it), deeply nested, hostile strings cleaned."""
from __future__ import annotations

import builtins
import json
import sys

import pytest

from gdrlab import imports
from gdrlab.imports import MAX_BYTES, BadOutput


def _refused(path, **kw) -> str:
    with pytest.raises(BadOutput) as err:
        imports.read(path, **kw)
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 400
    return msg


def test_empty_and_whitespace(tmp_path):
    (tmp_path / "e.txt").write_text("")
    (tmp_path / "w.txt").write_text("  \n\t\n")
    assert "is empty" in _refused(tmp_path / "e.txt")
    assert "only whitespace" in _refused(tmp_path / "w.txt")


def test_binary(tmp_path):
    (tmp_path / "b.out").write_bytes(bytes(range(256)) * 8)
    assert "binary" in _refused(tmp_path / "b.out")


def test_missing_and_directory(tmp_path):
    assert "cannot read" in _refused(tmp_path / "nope.txt")
    assert "not a regular file" in _refused(tmp_path)


def test_unknown_text_and_unknown_tool(tmp_path):
    (tmp_path / "x.txt").write_text("hello\nworld\n")
    assert "cannot tell which tool" in _refused(tmp_path / "x.txt")
    assert "unknown tool" in _refused(tmp_path / "x.txt", tool="iperf")


def test_over_the_cap_is_refused_before_reading(tmp_path, monkeypatch):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:       # 100 MB, sparse: nothing is written but the last byte
        f.seek(100 * 1000 * 1000)
        f.write(b"\n")
    opened = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: opened.append(str(p)) or real_open(p, *a, **k))
    msg = _refused(big)
    assert "100000001 bytes" in msg and f"{MAX_BYTES >> 20} MiB" in msg
    assert str(big) not in opened    # refused from its size alone


@pytest.mark.parametrize("name, text, why", [
    ("perftest_cut.txt", "                    RDMA_Write BW Test\n Device : mlx5_0\n", "no '#bytes'"),
    ("perftest_header_only.txt", " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
     "no result rows"),
    ("osu_cut.txt", "# OSU MPI Latency Test v7.2\n# Size          Latency (us)\n", "no result rows"),
    ("nccl_cut.txt", ("# nThread 1 nGpus 1 minBytes 8 maxBytes 8\n#  size  count  type  redop  root  time  algbw"
                      "  busbw  #wrong  time  algbw  busbw  #wrong\n        8    2  float"), "no result rows"),
    ("nvb_cut.json", '{"nvbandwidth": {"testcases": [', "not valid JSON"),
    ("perftest_cut.json", '{\n"test_info": {\n"test": "RDMA_Write_BW_Test",\n', "not valid JSON"),
    ("ucx_cut.txt", "|              |       latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |\n",
     "no ucx_perftest result line"),
])
def test_truncated_outputs(tmp_path, name, text, why):
    (tmp_path / name).write_text(text)
    assert why in _refused(tmp_path / name)


def test_json_of_the_wrong_shape(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"nvbandwidth": {"testcases": "no"}}))
    assert "testcases" in _refused(tmp_path / "a.json")
    (tmp_path / "b.json").write_text(json.dumps([1, 2, 3]))
    assert "nccl-tests" in _refused(tmp_path / "b.json", tool="nccl-tests")


def test_deep_nesting(tmp_path):
    (tmp_path / "d.json").write_text('{"results": ' + "[" * 200_000 + "]" * 200_000 + "}")
    assert "nests too deeply" in _refused(tmp_path / "d.json", tool="nccl-tests")


def test_tool_without_json(tmp_path):
    (tmp_path / "o.json").write_text('{"a": 1}')
    assert "osu writes no JSON" in _refused(tmp_path / "o.json", tool="osu")


def test_hostile_strings_are_cleaned(tmp_path):
    evil = "mlx5_0\x1b]0;pwned\x07\u202e" + "A" * 500
    text = (f"                    RDMA_Write BW Test\n Device         : {evil}\n"
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
            " 65536      5000             100.00             90.00              0.001441\n")
    (tmp_path / "e.txt").write_text(text)
    prov = imports.read(tmp_path / "e.txt").attrs["provenance"]
    assert "\x1b" not in prov["options"] and "\u202e" not in prov["options"] and "\x07" not in prov["options"]
    assert len(prov["options"]) < 200


def test_invalid_utf8_is_read_with_replacement(tmp_path):
    raw = (b"# OSU MPI Latency Test v7.2\n# Size          Latency (us)\n") + b"\xff\xfe\n8   1.50\n"
    (tmp_path / "u.txt").write_bytes(raw)
    df = imports.read(tmp_path / "u.txt")
    assert list(df["size"]) == [8] and df["lat_mean_us"].iloc[0] == 1.5


def test_cli_bad_input_is_one_line(run_cli, tmp_path):
    (tmp_path / "x.bin").write_bytes(b"\x00\x01\x02")
    r = run_cli("import", tmp_path / "x.bin")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "binary" in r.stderr
    r = run_cli("import", tmp_path / "x.bin", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["error"]["type"] == "BadOutput" and "binary" in doc["error"]["message"]


def test_cli_refuses_a_file_name_that_is_not_utf8(run_cli, tmp_path):
    if sys.platform != "linux":
        pytest.skip("undecodable file names are a Linux (bytes) file-system property")
    r = run_cli("import", "caf\udce9.txt")
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "UTF-8" in r.stderr
