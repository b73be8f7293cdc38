"""The ucx wire (gdrlab bench --wire ucx) and gdrlab ucx protocols.

Where UCX is missing (the gdrlab[ucx] extra not installed) the tests that need it skip saying so;
under CI=true they fail instead, since CI installs the extra. The parser tests need no UCX.
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import os
from pathlib import Path

import pytest
from conftest import UNDER_ASAN

from gdrlab import errors
from gdrlab.ucx import PROTOCOL_COLUMNS, parse_proto_info, parse_range

DATA = Path(__file__).parent / "data"
# `gdrlab ucx protocols` output kept as it came: UCX 1.22.0 (the libucx-cu12 wheel), host memory,
# UCX_TLS=tcp, a worker in a thread of the probe process as the peer (each worker prints the same
# tables: the file holds each several times).
PROTO_1_22 = DATA / "proto_info_host_tcp_ucx1.22.0.txt"


def _ucx_missing() -> str | None:
    try:
        from gdrlab.transfer.ucx_wire import status
        st = status()
    except errors.Unavailable as exc:
        return f"the engine is not built: {exc}"
    return None if st["loaded"] else st["reason"]


_MISSING = _ucx_missing()
if _MISSING is not None and os.environ.get("CI") == "true":
    pytest.fail(f"CI installs gdrlab[ucx], yet UCX cannot be loaded: {_MISSING}", pytrace=False)
needs_ucx = pytest.mark.skipif(_MISSING is not None, reason=f"UCX not usable here: {_MISSING}")
# Under the sanitizer build (bench/asan_tests.sh: LD_PRELOAD of libasan) UCX's protocol texts come out
# differently: `gdrlab ucx protocols` finds no table and the request query's description is not the
# table's (seen in one CI run, not understood yet). Transfers still verify there; the tests that
# compare protocol texts run in the plain suite only.
_TEXTS_UNDER_ASAN = pytest.mark.skipif(UNDER_ASAN, reason="UCX's protocol texts differ under the sanitizer build "
                                       "(not understood yet); compared in the plain run")


def _ucx_cuda_missing() -> str | None:
    """Why the loaded UCX cannot move GPU memory (no libuct_cuda module), or None."""
    if _MISSING is not None:
        return _MISSING
    from gdrlab.transfer.ucx_wire import status
    st = status()
    return None if st["has_cuda"] else f"the UCX at {st['library']} has no CUDA module (libuct_cuda in {st['module_dir']})"


needs_ucx_cuda = pytest.mark.skipif(_ucx_cuda_missing() is not None,
                                    reason=f"UCX cannot move GPU memory here: {_ucx_cuda_missing()}")


# --------------------------------------------------------------------------- the table reader
def test_ranges_in_ucx_units():
    assert parse_range("0") == (0, 0)
    assert parse_range("1..16483") == (1, 16483)
    assert parse_range("256K..inf") == (256 * 1024, None)
    assert parse_range("4M..16M") == (4 << 20, 16 << 20)
    with pytest.raises(ValueError, match="not a UCX size range"):
        parse_range("eager short")


def test_real_ucx_1_22_output_becomes_rows():
    rows = parse_proto_info(PROTO_1_22.read_text())
    assert rows and all(list(r) == list(PROTOCOL_COLUMNS) for r in rows)
    plain = [(r["min_bytes"], r["max_bytes"], r["protocol"], r["estimated"], r["transports"]) for r in rows
             if r["operation"] == "tagged message by ucp_tag_send*" and r["variant"] == ""]
    # The first table of the file, read by eye.
    assert plain == [(0, 0, "eager short", False, "tcp/lo"),
                     (1, 16483, "eager zero-copy copy-out", False, "tcp/lo"),
                     (16484, 273826, "multi-frag eager copy-in copy-out", False, "tcp/lo"),
                     (273827, None, "rendezvous fragmented copy-in copy-out", True, "tcp/lo")]
    assert {r["variant"] for r in rows if r["operation"].startswith("tagged")} == {"", "fast-completion", "multi"}
    assert all(r["memory"] == "host" for r in rows if r["operation"].startswith("tagged"))
    assert {r["endpoint"] for r in rows} == {"gdrlab intra-node cfg#0"}
    fast = [r for r in rows if r["variant"] == "fast-completion"]
    assert fast[-1]["range"] == "256K..inf" and fast[-1]["min_bytes"] == 262144


def test_a_table_printed_twice_is_one_set_of_rows():
    text = PROTO_1_22.read_text()
    once = parse_proto_info(text)
    # every worker printed it (a worker per side and test: three tests, two sides)
    assert text.count("tagged message by ucp_tag_send* from host memory") == 6
    assert parse_proto_info(text + "\n" + text) == once
    # every range of one table follows the last: no gaps, no overlaps, ends at inf
    for variant in ("", "fast-completion", "multi"):
        t = [r for r in once if r["operation"].startswith("tagged") and r["variant"] == variant]
        assert t[0]["min_bytes"] == 0 and t[-1]["max_bytes"] is None
        assert all(a["max_bytes"] + 1 == b["min_bytes"] for a, b in itertools.pairwise(t))


def test_two_cell_title_and_shared_lanes():
    # The layout ucp_proto_select_elem_info (src/ucp/proto/proto_debug.c, openucx/ucx) prints
    # without the Range/Description/Config header: the endpoint's name and the selection in
    # one row of two cells; a lane split between two transports.
    text = """\
[1.0] [h:1:0]   +----------------------+-----------------------------------------------------+
[1.0] [h:1:0]   | 0x2717b30 self cfg#2 | tagged message by ucp_tag_send* from host memory    |
[1.0] [h:1:0]   +----------------------+--------------------------+--------------------------+
[1.0] [h:1:0]   |                0..92 | eager short              | sysv/memory              |
[1.0] [h:1:0]   |            9434..inf | (?) rendezvous zero-copy | 55% on knem/memory and 45% on rc_mlx5/mlx5_0:1 |
[1.0] [h:1:0]   +----------------------+--------------------------+--------------------------+
unrelated line | with a bar
"""
    rows = parse_proto_info(text)
    assert [(r["endpoint"], r["range"], r["protocol"], r["estimated"]) for r in rows] == [
        ("self cfg#2", "0..92", "eager short", False), ("self cfg#2", "9434..inf", "rendezvous zero-copy", True)]
    assert rows[1]["transports"] == "knem/memory,rc_mlx5/mlx5_0:1"
    assert parse_proto_info("no table here\n") == []


def test_request_description_splits_into_protocol_and_lanes():
    from gdrlab.transfer.ucx_wire import UNKNOWN, split_protocol

    # what ucp_request_query said about a 4 MiB tagged send here (UCX 1.22.0, UCX_TLS=tcp)
    said = ("{proto|init|rk_use} tag_send from host memory length 4194304 rendezvous fragmented copy-in "
            "copy-out tcp/lo 12.0 MB/s 332724.15 us")
    assert split_protocol(said) == ("rendezvous fragmented copy-in copy-out", "tcp/lo")
    assert split_protocol("") == (UNKNOWN, "")


# --------------------------------------------------------------------------- the wire
@pytest.fixture
def gpu_missing() -> None:
    """Skip where a GPU is usable: the refusal of device memory is tested where there is none."""
    from gdrlab.engine import cuda_status

    if cuda_status()["usable"]:
        pytest.skip("a GPU is usable here: device memory would not be refused")


def _bench_json(run_cli, *args, env=None):
    proc = run_cli("bench", "--wire", "ucx", "--json", *args, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@needs_ucx
@_TEXTS_UNDER_ASAN
def test_bench_over_ucx_with_a_process_peer_verifies_every_size(run_cli):
    doc = _bench_json(run_cli, "--path", "host", "--sizes", "8,64K,1M", "--iters", "20")
    rows = doc["rows"]
    assert [r["size"] for r in rows] == [8, 65536, 1 << 20]
    assert all(r["verified"] is True and r["path"] == "ucx" and r["wire"] == "ucx" for r in rows)
    assert all(r["lat_p50_us"] > 0 and r["bw_gbps"] > 0 for r in rows)
    assert all(r["protocol"] for r in rows)
    prov = doc["provenance"]
    assert prov["peer"] == "local process" and prov["ucx_tls"] == "tcp" and prov["ucx_version"]
    # UCX's own table for this configuration names the protocol the 1 MiB row reports
    proto = json.loads(run_cli("ucx", "protocols", "--json", timeout=120).stdout)["rows"]
    at_1m = [r["protocol"] for r in proto if r["variant"] == "" and r["min_bytes"] <= 1 << 20
             and (r["max_bytes"] is None or r["max_bytes"] >= 1 << 20)]
    assert at_1m == [rows[2]["protocol"]]


@needs_ucx
@_TEXTS_UNDER_ASAN
def test_bench_over_ucx_with_a_thread_peer():
    from gdrlab.transfer.driver import bench

    df = bench("host", [8, 4096], iters=10, wire="ucx", local_peer="thread")
    assert list(df["verified"]) == [True, True]
    assert set(df["path"]) == {"ucx"} and "protocol" in df.columns
    assert df.attrs["provenance"]["peer"] == "local thread"
    # each row names UCX's protocol, from the request or (completed at once) from UCX's table
    assert all(p != "unknown" for p in df["protocol"])
    assert set(df["protocol_source"]) <= {"ucp_request_query", "UCX_PROTO_INFO"}


@needs_ucx
def test_the_token_gates_the_ucx_wire(native_server):
    from gdrlab.transfer.ucx_wire import UcxConnection

    with pytest.raises(errors.AuthError):
        UcxConnection("127.0.0.1", native_server.port, "not-" + native_server.token, 5.0)
    with UcxConnection("127.0.0.1", native_server.port, native_server.token, 5.0) as conn:
        assert conn.measure("host", 64, mode="verify", iters=0, warmup=0)[2] is True


@needs_ucx
def test_a_refused_test_leaves_the_session_usable(native_server, gpu_missing):
    from gdrlab.transfer.ucx_wire import UcxConnection

    with UcxConnection("127.0.0.1", native_server.port, native_server.token, 5.0, dst_mem="device") as conn:
        with pytest.raises(errors.Unavailable, match="device memory needs CUDA"):
            conn.measure("host", 64, mode="lat", iters=2, warmup=1)
        conn.dst_mem = "pageable"
        assert conn.measure("host", 64, mode="lat", iters=2, warmup=1)[2] is True


@needs_ucx
def test_verbs_transports_on_a_ucx_without_verbs_say_so(run_cli):
    from gdrlab.transfer.ucx_wire import status

    if status()["has_verbs"]:
        pytest.skip("this UCX has verbs transports: nothing to refuse")
    proc = run_cli("bench", "--wire", "ucx", "--sizes", "8", env={"UCX_TLS": "rc,tcp"})
    assert proc.returncode == 1 and "built without verbs" in proc.stderr and "no rc/dc/ud" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Recorded" not in proc.stderr  # no tcp recording offered
    proc = run_cli("ucx", "protocols", "--tls", "dc", "--json")
    assert proc.returncode == 1 and "built without verbs" in json.loads(proc.stdout)["error"]["message"]


def test_bad_input_is_one_line(run_cli):
    proc = run_cli("bench", "--wire", "ucx", "--path", "staged", "--sizes", "8")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert "takes --path host" in proc.stderr
    proc = run_cli("ucx", "protocols", "--tls", "tcp;rm")
    assert proc.returncode == 1 and "--tls takes UCX transport names" in proc.stderr
    proc = run_cli("ucx")
    assert proc.returncode == 1 and "name a subcommand: protocols" in proc.stderr
    assert run_cli("ucx", "protocols", "--help").returncode == 0


@needs_ucx
@_TEXTS_UNDER_ASAN
def test_protocols_command_json_and_csv(run_cli):
    doc = json.loads(run_cli("ucx", "protocols", "--json", timeout=120).stdout)
    assert doc["rows"] and all(r["operation"].startswith("tagged message") for r in doc["rows"])
    assert doc["provenance"]["kind"] == "live" and doc["provenance"]["memory"] == "host"
    first = next(r for r in doc["rows"] if r["variant"] == "")
    assert first["min_bytes"] == 0 and "tcp/" in first["transports"]
    out = run_cli("ucx", "protocols", "--csv", "--all", timeout=120).stdout
    table = list(csv.DictReader(io.StringIO(out)))
    assert list(table[0]) == list(PROTOCOL_COLUMNS)
    assert len(table) > len(doc["rows"])  # --all adds the rendezvous data operations


@needs_ucx
def test_doctor_names_ucx_and_its_verbs(run_cli):
    from gdrlab.transfer.ucx_wire import status

    libs = json.loads(run_cli("doctor", "--json", timeout=120).stdout)["libraries"]
    ucx = libs["libucp.so.0"]
    st = status()
    assert ucx["found"] is True and ucx["ucx_version"] == st["version"]
    assert ucx["has_verbs"] is st["has_verbs"]
    if not st["has_verbs"]:
        assert "built without verbs" in ucx["version"]


@needs_ucx_cuda
@pytest.mark.gpu
def test_device_memory_over_ucx_cuda_copy():
    """Device memory on both sides, and device to host: UCX's cuda_copy (needs a GPU)."""
    from gdrlab.transfer.peers import ThreadPeer
    from gdrlab.transfer.ucx_wire import UcxConnection

    with ThreadPeer() as peer:
        for src, dst in (("device", "device"), ("device", "pageable"), ("pageable", "device")):
            with UcxConnection("127.0.0.1", peer.port, peer.token, 30.0, src_mem=src, dst_mem=dst) as conn:
                for size in (8, 64 << 10, 4 << 20):
                    assert conn.measure("host", size, mode="lat", iters=5, warmup=2)[2] is True


@needs_ucx_cuda
@pytest.mark.gpu
def test_protocols_for_cuda_memory(run_cli):
    doc = json.loads(run_cli("ucx", "protocols", "--mem", "cuda", "--json", timeout=180).stdout)
    assert doc["rows"] and all(r["memory"].startswith("cuda") for r in doc["rows"])


@needs_ucx
def test_every_engine_user_opens_the_ucx_python_imports(tmp_path):
    # A libucx package that is not beside the engine (an editable install, wheels on PYTHONPATH):
    # the engine alone would open the one beside itself or the system's, so a `gdrlab serve`
    # process could load another UCX than its client and fail to reach its worker address. Any
    # use of the engine (here a bare Server, as serve makes one) must open the one Python imports.
    import subprocess
    import sys

    import importlib.util
    spec = importlib.util.find_spec("libucx")
    real = str(Path(spec.origin).parent / "lib" / "libucp.so.0") if spec and spec.origin else ""
    if not real or not Path(real).is_file():
        pytest.skip("the libucx wheel is not installed (UCX comes from the system here)")
    moved = tmp_path / "libucx"
    (moved / "lib").mkdir(parents=True)
    (moved / "__init__.py").write_text("")
    for f in Path(real).parent.iterdir():  # the library and the modules it loads from beside it
        (moved / "lib" / f.name).symlink_to(f)
    code = ("from gdrlab._engine import native\n"
            "n = native()\n"
            "n.Server('127.0.0.1', 0, 'tok', 1000)\n"
            "print(n.ucx.status()['library'])\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-800:]
    assert out.stdout.strip() == str(moved / "lib" / "libucp.so.0")
