"""bench/rdma_pair.sh's perftest part against stand-in perftest builds (tests/fake_perftest/):
24.01 (prints "Version: 6.20", refuses GPU memory in ib_write_lat) and 26.04 ("Version: 6.29",
accepts it with --write_with_imm). Feature detection goes by what a build accepts, and the two
nodes agree on one list before any perftest starts, so different builds cannot leave the server
waiting for a test the client skipped. The gdrlab half (SKIP_GDRLAB=1) is tested elsewhere."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "rdma_pair.sh"
STANDIN = ROOT / "tests" / "fake_perftest"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils' timeout")


def _env(release: str, log: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GDRLAB_IB", "NCCL_IB"))}
    env.update(PATH=f"{STANDIN / ('perftest-' + release)}:{env['PATH']}", PYTHON=sys.executable,
               GDRLAB_TOKEN="t0k", SKIP_GDRLAB="1", FAKE_PERFTEST_LOG=str(log), PERF_TIMEOUT="60",
               GDRLAB_IBVERBS_LIB="/nonexistent/libibverbs.so.1", **extra)
    return env


def _probe(release: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    r = subprocess.run(["bash", str(SCRIPT), "probe"], capture_output=True, text=True, timeout=120,
                       env=_env(release, tmp_path / "probe.log", **extra))
    assert r.returncode == 0, r.stderr
    rows = {}
    for line in r.stdout.splitlines()[1:]:
        name, ok, *why = line.split(None, 2)
        rows[name] = ok + " " + (why[0] if why else "")
    return rows


def test_probe_detects_gpu_write_imm_latency_by_behaviour(tmp_path):
    old, new = _probe("24.01", tmp_path), _probe("26.04", tmp_path)
    # 24.01 lists --write_with_imm and --use_cuda in --help, yet refuses GPU memory in ib_write_lat:
    # only running it tells.
    assert old["write_imm_lat_cuda_dmabuf"].startswith("no ") and "refuses GPU memory" in old["write_imm_lat_cuda_dmabuf"]
    assert old["write_imm_lat_host"].startswith("yes") and old["send_lat_cuda_dmabuf"].startswith("yes")
    # 26.04 prints "Version: 6.29", which a gate on "26.01" read as too old
    assert new["write_imm_lat_cuda_dmabuf"].startswith("yes") and new["write_imm_lat_cuda_peermem"].startswith("yes")
    nocuda = _probe("26.04", tmp_path, FAKE_PERFTEST_CUDA="0")
    assert nocuda["write_bw_cuda_dmabuf"].startswith("no ") and "--use_cuda" in nocuda["write_bw_cuda_dmabuf"]
    assert nocuda["write_bw_host"].startswith("yes")


def _free_port_block(n: int) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65000:
            continue
        try:
            socks = []
            for i in range(n):
                t = socket.socket()
                socks.append(t)
                t.bind(("0.0.0.0", base + i))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    pytest.skip("no block of free ports")


def _pair(tmp_path: Path, server_release: str, client_release: str, **extra: str) -> tuple[dict, list[dict]]:
    port = _free_port_block(12)
    log = tmp_path / "perftest.log"
    srv = subprocess.Popen(["bash", str(SCRIPT), "server", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=_env(server_release, log, **extra))
    try:
        cli = subprocess.run(["bash", str(SCRIPT), "client", "127.0.0.1", str(port), str(tmp_path)],
                             capture_output=True, text=True, timeout=240, env=_env(client_release, log, **extra))
        # The server ends by itself once every agreed configuration ran: nothing left waiting.
        _, serr = srv.communicate(timeout=60)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.communicate()
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert srv.returncode == 0, serr[-3000:]
    docs = {p.stem.removeprefix("perftest-"): json.loads(p.read_text())
            for p in (tmp_path / "rdma_pair").glob("perftest-*.json")}
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    return docs, runs


@pytest.mark.timeout(400)
def test_pair_with_different_builds_agrees_and_never_hangs(tmp_path):
    docs, runs = _pair(tmp_path, "24.01", "26.04")
    gpu_lat = docs["write_imm_lat_cuda_dmabuf"]
    assert "server: " in gpu_lat["skipped"] and "refuses GPU memory" in gpu_lat["skipped"]
    assert gpu_lat["perftest_version"] == "Version: 6.29" and gpu_lat["server_perftest_version"] == "Version: 6.20"
    # the fallback runs because the like-for-like row could not, and says so
    send = docs["send_lat_cuda_dmabuf"]
    assert send["ok"] is True and send["rows"] and "could not run on both nodes" in send["comparison"]
    assert docs["write_imm_lat_host"]["ok"] is True and docs["write_bw_host"]["ok"] is True
    # every configuration either ran on both sides or on neither
    ran = {(r["tool"], tuple(a for a in r["args"] if a.startswith("--use") or a == "--write_with_imm"), r["role"])
           for r in runs}
    for tool, opts, role in ran:
        assert (tool, opts, "server" if role == "client" else "client") in ran


@pytest.mark.timeout(400)
def test_pair_of_26_04_runs_the_like_for_like_gpu_latency(tmp_path):
    docs, runs = _pair(tmp_path, "26.04", "26.04", GDRLAB_IB_DEV="mlx5_3:1", NCCL_IB_GID_INDEX="3", NCCL_IB_TC="106")
    for reg in ("dmabuf", "peermem"):
        assert docs[f"write_imm_lat_cuda_{reg}"]["ok"] is True
        assert "like for like" in docs[f"write_imm_lat_cuda_{reg}"]["comparison"]
        assert docs[f"send_lat_cuda_{reg}"]["skipped"].startswith("not needed")
    # V7: perftest gets the HCA, port, GID index and class gdrlab reads, NCCL's names included, on both sides
    for r in runs:
        assert r["args"][:6] == ["-d", "mlx5_3", "-i", "1", "-x", "3"] and "--tclass=106" in r["args"], r
    assert {r["role"] for r in runs} == {"server", "client"}


def test_options_from_env_follow_gdrlab_names_then_nccl():
    from gdrlab.hw.perftest import options_from_env, perftest_options
    assert options_from_env({"NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "106", "GDRLAB_IB_TC": "98"}) == \
        ["-x", "3", "--tclass=98"]
    assert perftest_options({"hca": "mlx5_3", "port": 1, "link_layer": 2, "gid_index": 5, "traffic_class": 106,
                             "service_level": 0, "pkey_index": 0}) == ["-d", "mlx5_3", "-i", "1", "-x", "5",
                                                                       "--tclass=106"]


def test_resolved_link_through_the_stand_in(fake_verbs_lib):
    r = subprocess.run([sys.executable, "-m", "gdrlab.hw.perftest", "args", "--json"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, GDRLAB_IBVERBS_LIB=fake_verbs_lib, FAKE_IBV_LINK="roce",
                                            GDRLAB_IB_TC="106"))
    doc = json.loads(r.stdout)
    assert doc["source"] == "resolved by gdrlab", doc
    # the stand-in's RoCE table: index 3 is the IPv4-mapped v2 GID the engine prefers
    assert doc["options"] == ["-d", "fake0", "-i", "1", "-x", "3", "--tclass=106"]
