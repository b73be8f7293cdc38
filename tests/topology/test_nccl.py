"""The NCCL log parser on the three real logs recorded on two NVLinked H200s (expected values
read by hand from the logs), bus bandwidth, the run environment, the CLI, and live GPU runs."""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys

import pytest

from gdrlab import nccl
from gdrlab.nccl import worker
from gdrlab.errors import GdrlabError, InvalidArgument, Unavailable

DEFAULT, P2P_OFF, P2P_SHM_OFF = "h200x2-nvlink-default", "h200x2-nvlink-p2p_off", "h200x2-nvlink-p2p_shm_off"


@pytest.fixture(scope="module")
def parsed():
    logs = nccl.recorded_logs()
    return {name: nccl.parse_log(logs[name].read_text()) for name in (DEFAULT, P2P_OFF, P2P_SHM_OFF)}


def test_recorded_logs_are_shipped():
    logs = nccl.recorded_logs()
    assert set(logs) == {DEFAULT, P2P_OFF, P2P_SHM_OFF}
    assert all(p.is_file() and p.stat().st_size > 10_000 for p in logs.values())


def test_header_facts(parsed):
    for p in parsed.values():
        assert p["version"] == "2.28.9+cuda13.0"
        assert p["cuda_driver_version"] == 13000
        assert p["nranks"] == 2
        assert [(r["rank"], r["cuda_dev"], r["bus_id"]) for r in p["ranks"]] == [(0, 0, "60"), (1, 1, "70")]
        assert p["network"] == "Socket"
        assert p["env"]["NCCL_NVLS_ENABLE"] == "0"
    # with P2P and SHM off each rank is its own "node" (log: nNodes 2 localRanks 1)
    assert [parsed[n]["nnodes"] for n in (DEFAULT, P2P_OFF, P2P_SHM_OFF)] == [1, 1, 2]


def test_default_uses_p2p_cumem_over_nvlink(parsed):
    p = parsed[DEFAULT]
    # 24 "Channel NN/0 : 0[0] -> 1[1] via P2P/CUMEM" lines from rank 0 and 24 the other way from rank 1
    assert len(p["connections"]) == 48
    assert {c["via"] for c in p["connections"]} == {"P2P/CUMEM"}
    assert p["summary"]["pairs"] == {"0->1": {"transports": {"P2P/CUMEM": 24}, "channels": 24},
                                     "1->0": {"transports": {"P2P/CUMEM": 24}, "channels": 24}}
    assert p["summary"]["transport"] == "P2P/CUMEM"
    assert sorted(c["channel"] for c in p["connections"] if c["src"] == 0) == list(range(24))
    assert all(c["gdr"] is None and c["kind"] == "P2P" for c in p["connections"])
    assert p["topology"]["GPU/0-60->GPU/0-70"] == {"type": "NVL", "bw_gbps": 370.8}
    assert "NCCL_P2P_DISABLE" not in p["env"]
    assert p["graphs"][0]["type_intra"] == "NVL" and p["graphs"][0]["nchannels"] == 12


def test_p2p_off_falls_back_to_shm(parsed):
    p = parsed[P2P_OFF]
    assert p["env"]["NCCL_P2P_DISABLE"] == "1"
    assert len(p["connections"]) == 8
    assert p["summary"]["pairs"] == {"0->1": {"transports": {"SHM/direct/direct": 4}, "channels": 4},
                                     "1->0": {"transports": {"SHM/direct/direct": 4}, "channels": 4}}
    # without P2P, NCCL's topology routes GPU to GPU through the CPU
    assert p["topology"]["GPU/0-60->GPU/0-70"] == {"type": "PHB", "bw_gbps": 48.0}
    messages = [r["message"] for r in p["summary"]["reasons"]]
    assert "NCCL_P2P_DISABLE=1" in messages
    assert messages.index("NCCL_P2P_DISABLE=1") < messages.index("NET/IB : No device found")  # env first


def test_p2p_and_shm_off_use_the_socket_network(parsed):
    p = parsed[P2P_SHM_OFF]
    assert p["env"]["NCCL_P2P_DISABLE"] == "1" and p["env"]["NCCL_SHM_DISABLE"] == "1"
    conns = p["connections"]
    # each rank logs 2 sends and 2 receives: "Channel 0N/0 : 1[1] -> 0[0] [receive] via NET/Socket/0"
    assert len(conns) == 8
    assert {c["via"] for c in conns} == {"NET/Socket/0"}
    assert sorted(c["direction"] for c in conns) == ["receive"] * 4 + ["send"] * 4
    assert all(c["gdr"] is False for c in conns)
    # the sender and the receiver of a connection both log it: counted once per pair
    assert p["summary"]["pairs"] == {"0->1": {"transports": {"NET/Socket": 2}, "channels": 2},
                                     "1->0": {"transports": {"NET/Socket": 2}, "channels": 2}}
    assert p["ring_flags"] == {"PXN": 0, "GDR": 0}
    reasons = {r["message"]: r for r in p["summary"]["reasons"]}
    assert "NET/IB : No device found" in reasons
    assert sorted(reasons["NET/IB : No device found"]["ranks"]) == [0, 1]
    socket = reasons["NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'"]["meaning"]
    assert "eth0" in socket and "socket transport cannot do GPUDirect RDMA" in socket
    assert "mlx5dv_reg_dmabuf_mr" in reasons["dlvsym failed on mlx5dv_reg_dmabuf_mr"]["message"]
    assert "NCCL_SHM_DISABLE=1" in reasons


def test_results_lines(parsed):
    # the last lines of each log, by hand
    for name, t8, bus256 in ((DEFAULT, 24.0, 299.14), (P2P_OFF, 46.4, 27.05), (P2P_SHM_OFF, 44.8, 3.20)):
        res = parsed[name]["results"]
        assert [r["size"] for r in res] == [8, 65536, 1048576, 16777216, 268435456]
        assert res[0]["time_us"] == t8 and res[-1]["busbw_gbps"] == bus256
        for r in res:  # algbw = bytes / time, within the log's rounding; busbw = algbw for 2 ranks
            assert r["algbw_gbps"] == pytest.approx(r["size"] / r["time_us"] / 1e3, abs=0.01, rel=2e-3)
            assert r["busbw_gbps"] == r["algbw_gbps"]


def test_recorded_summary_matches_the_curriculum_figures():
    s = nccl.recorded_summary()
    assert s["provenance"]["kind"] == "recorded" and "H200" in s["provenance"]["hardware"]
    runs = {r["name"]: r for r in s["runs"]}
    assert [r["name"] for r in s["runs"]] == ["default", "p2p_off", "p2p_shm_off"]
    # CURRICULUM, 2x H200: 299 GB/s / 24 us; 27 GB/s / 46 us; 3.2 GB/s / 45 us
    for name, transport, bus, t8 in (("default", "P2P/CUMEM", 299, 24), ("p2p_off", "SHM/direct/direct", 27, 46),
                                     ("p2p_shm_off", "NET/Socket", 3.2, 45)):
        r = runs[name]
        assert r["transport"] == transport
        assert r["busbw_size"] == 256 << 20 and r["busbw_gbps"] == pytest.approx(bus, rel=0.02)
        assert r["time_size"] == 8 and r["time_us"] == pytest.approx(t8, abs=1.0)
    assert runs["default"]["env"] == {}
    assert runs["p2p_shm_off"]["env"] == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    assert "P2P" in runs["default"]["generation"] and "socket" in runs["p2p_shm_off"]["generation"].lower()
    assert "NVLink" in runs["default"]["generation"]
    # GPU-to-GPU path in NCCL's topology: NVL; PHB once P2P is off; each rank alone with SHM off too
    assert [runs[n]["gpu_path"] for n in ("default", "p2p_off", "p2p_shm_off")] == ["NVL", "PHB", None]


@pytest.mark.parametrize("via, kind, transport, gdr, read", [
    ("P2P/CUMEM", "P2P", "P2P/CUMEM", None, False),
    ("P2P/CUMEM/read", "P2P", "P2P/CUMEM", None, True),
    ("P2P/IPC", "P2P", "P2P/IPC", None, False),
    ("P2P/direct pointer/read", "P2P", "P2P/direct", None, True),
    ("SHM/direct/direct", "SHM", "SHM/direct/direct", None, False),
    ("NET/IB/0/GDRDMA", "NET", "NET/IB/GDRDMA", True, False),
    ("NET/IB/1", "NET", "NET/IB", False, False),
    ("NET/Socket/0", "NET", "NET/Socket", False, False),
])
def test_classify_via(via, kind, transport, gdr, read):
    c = nccl.classify_via(via)
    assert (c["kind"], c["transport"], c["gdr"], c["read"]) == (kind, transport, gdr, read)


def test_parse_other_formats_and_gdr_lines():
    # older NCCL prints bus ids in the brackets and no connection index
    text = "\n".join([
        "node1:100:100 [0] NCCL INFO NCCL version 2.18.3+cuda12.2",
        "node1:100:100 [0] NCCL INFO Channel 00 : 0[1a000] -> 1[1b000] via P2P/IPC/read",
        "node1:100:120 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
        "node1:100:120 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 1a000 / HCA 0 (distance 3 <= 4), "
        "read 1 mode Default",
        "node1:100:120 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 3d000 / HCA 1 (distance 5 > 4)",
        "node1:100:100 [0] NCCL WARN NET/IB : Got async event : port error",
        "some other program output",
    ])
    p = nccl.parse_log(text)
    assert p["version"] == "2.18.3+cuda12.2"
    assert p["summary"]["pairs"] == {"0->1": {"transports": {"P2P/IPC": 1}, "channels": 1},
                                     "2->0": {"transports": {"NET/IB/GDRDMA": 1}, "channels": 1}}
    # NCCL 2.18 numbers its path types PIX 3, PXB 4, PXN 5 (src/graph/topo.h at v2.18.3-1)
    assert [(g["gpu"], g["hca"], g["enabled"], g["distance"], g["op"], g["limit"], g["distance_type"], g["limit_type"])
            for g in p["gdr"]] == [("1a000", "0", True, 3, "<=", 4, "PIX", "PXB"),
                                   ("3d000", "1", False, 5, ">", 4, "PXN", "PXB")]
    meanings = " | ".join(r["meaning"] for r in p["summary"]["reasons"])
    assert "NCCL uses GPUDirect RDMA between GPU 1a000 and HCA 0, path type 3 <= limit 4 (PIX <= PXB)" in meanings
    assert "does not use GPUDirect RDMA (it stages through host memory) between GPU 3d000 and HCA 1" in meanings
    assert p["warnings"] == ["NET/IB : Got async event : port error"]


@pytest.mark.parametrize("number, version, name", [
    (7, "2.19.3+cuda12.2", "SYS"), (4, "2.19.3", "PXB"), (6, "2.25.1", "PHB"),   # 2.12 to 2.25
    (8, "2.26.2+cuda12.8", "SYS"), (5, "2.28.9+cuda13.0", "PXB"), (3, "2.26.2", "C2C"),  # C2C from 2.26
    (5, "2.7.6+cuda11.1", None),   # before 2.12 the numbers differ (PHB 4, SYS 5): not named
    (7, None, None), (42, "2.19.3", None), (-1, "2.19.3", None), (3, "garbage", None),
])
def test_path_type_name_follows_the_nccl_version(number, version, name):
    assert nccl.path_type_name(number, version) == name


def test_hca_lines_say_what_the_transport_can_do():
    text = "\n".join([
        "a:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'",
        "a:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'",
        "a:1:1 [0] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'",
    ])
    p = nccl.parse_log(text)
    assert [(h["transport"], h["hca"], h["name"], h["enabled"]) for h in p["gdr_hca"]] == [
        ("NET/IB", 0, "mlx5_0", True), ("NET/IB", 1, "mlx5_1", False), ("NET/Socket", 0, "eth0", False)]
    reasons = {r["message"]: r["meaning"] for r in p["summary"]["reasons"]}
    assert reasons["NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'"].startswith("not a topology decision")
    assert "no peer-memory module and no dma-buf" in reasons["NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'"]


def test_the_published_ib_excerpts():
    logs = nccl.published_logs()
    assert set(logs) == {"nccl-issue-1151-gdr-distance", "nccl-issue-707-a100-gdrdma"}
    readme = (logs["nccl-issue-707-a100-gdrdma"].parent.parent / "README.md").read_text()
    assert all(f"`{name}.log`" in readme for name in logs)
    one = nccl.parse_log(logs["nccl-issue-1151-gdr-distance"].read_text())
    # the line as quoted in the issue: no host prefix, no version line
    assert [(g["gpu"], g["hca"], g["enabled"], g["distance"], g["limit"]) for g in one["gdr"]] == [("ca000", "0", False, 7, 4)]
    assert one["gdr"][0]["distance_type"] is None and nccl.path_type_name(7, "2.19") == "SYS"
    a100 = nccl.parse_log(logs["nccl-issue-707-a100-gdrdma"].read_text())
    assert len(a100["connections"]) == 12 and all(c["gdr"] for c in a100["connections"])
    assert sorted({c["net_dev"] for c in a100["connections"]}) == [0, 2, 4, 5]
    first = a100["connections"][0]
    assert (first["rank"], first["channel"], first["src"], first["dst"], first["direction"]) == (0, 1, 2, 0, "receive")
    assert nccl.recorded_logs().keys().isdisjoint(logs)  # not mixed with the kit's own H200 recordings


def test_net_dev_of_a_channel():
    assert nccl.classify_via("NET/IB/5/GDRDMA")["net_dev"] == 5
    assert nccl.classify_via("NET/IB/1")["net_dev"] == 1
    assert nccl.classify_via("P2P/CUMEM")["net_dev"] is None
    assert nccl.classify_via("NET/IB/" + "9" * 50)["net_dev"] is None


def test_parse_empty_and_bad_input():
    p = nccl.parse_log("")
    assert p["connections"] == [] and p["summary"]["transport"] is None
    assert any("no connection lines" in line for line in nccl.explain(p))
    with pytest.raises(InvalidArgument):
        nccl.parse_log(b"bytes")


def test_explain_reads_like_the_log(parsed):
    lines = nccl.explain(parsed[P2P_SHM_OFF])
    assert lines[0] == "rank 0 -> rank 1: NET/Socket on 2 channels"
    assert lines[1] == "rank 1 -> rank 0: NET/Socket on 2 channels"
    assert any(line.startswith("NCCL_SHM_DISABLE=1: ") for line in lines)


@pytest.mark.parametrize("size, time_us, n, alg, bus", [
    (268435456, 897.4, 2, 299.1, 299.1),  # the default log's last line
    (1_000_000, 10.0, 4, 100.0, 150.0),   # 2*(4-1)/4 = 1.5
    (1_000_000, 10.0, 8, 100.0, 175.0),   # 2*7/8 = 1.75
    (8, 1.0, 1, 0.008, 0.0),
])
def test_bus_bandwidth(size, time_us, n, alg, bus):
    a, b = nccl.bus_bandwidth(size, time_us, n)
    assert a == pytest.approx(alg, rel=1e-3) and b == pytest.approx(bus, rel=1e-3, abs=1e-12)
    with pytest.raises(InvalidArgument):
        nccl.bus_bandwidth(8, 0.0, 2)


def test_result_line_round_trips():
    row = {"size": 1048576, "time_us": 26.1, "algbw_gbps": 40.25, "busbw_gbps": 40.25}
    assert nccl.format_result_line(row).split() == ["allreduce", "1048576", "B", "26.1", "us", "algbw", "40.25",
                                                    "GB/s", "busbw", "40.25", "GB/s"]
    back = nccl.parse_log(nccl.format_result_line(row))["results"]
    assert back == [dict(row, op="allreduce")]


def test_env_forces_debug_and_nvls_off():
    env = nccl.nccl_env(["p2p", "shm"], base={"NCCL_NVLS_ENABLE": "1", "NCCL_IB_DISABLE": "1", "PATH": "/bin"})
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_NVLS_ENABLE"] == "0"
    assert env["NCCL_P2P_DISABLE"] == "1" and env["NCCL_SHM_DISABLE"] == "1"
    assert "NCCL_IB_DISABLE" not in env and env["PATH"] == "/bin"  # only the caller's choice counts
    assert nccl.nccl_env([], base={})["NCCL_NVLS_ENABLE"] == "0"
    with pytest.raises(InvalidArgument, match="p2p, shm, ib"):
        nccl.nccl_env(["nvlink"], base={})


def test_measure_loop_with_fake_collective():
    """Two ranks simulated in one process: the other rank contributes 2 to every element."""
    import numpy as np
    a = argparse.Namespace(rank=0, nranks=2, iters=3)

    def step(x):
        x += 2

    rows = worker._measure(a, [8, 1 << 20], lambda n, v: np.full(n, float(v), dtype=np.float32), step,
                         lambda: None, lambda x: (float(x[0]), float(x[-1])), lambda dt: 1e-3)
    assert [r["size"] for r in rows] == [8, 1 << 20]
    assert all(r["verified"] for r in rows) and all(r["iters"] == 3 for r in rows)
    # slowest rank took 1 ms: 1 MiB / 1 ms = 1.048576 GB/s; 2 ranks: busbw = algbw
    assert rows[1]["time_us"] == pytest.approx(1000.0)
    assert rows[1]["algbw_gbps"] == pytest.approx(1.048576) and rows[1]["busbw_gbps"] == pytest.approx(1.048576)
    bad = worker._measure(a, [8], lambda n, v: np.full(n, float(v), dtype=np.float32), lambda x: None,
                        lambda: None, lambda x: (float(x[0]), float(x[-1])), lambda dt: 1e-3)
    assert bad[0]["verified"] is False


def _gpu_count():
    from gdrlab import engine
    return len(engine.gpus()), engine.cuda_status()["reason"]


def test_run_below_two_gpus_is_unavailable():
    n, _ = _gpu_count()
    if n >= 2:
        pytest.skip(f"this machine has {n} GPUs")
    with pytest.raises(Unavailable, match=f"this machine has {n}"):
        nccl.run_allreduce("8")
    proc = subprocess.run([sys.executable, "-m", "gdrlab", "nccl"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"this machine has {n}" in lines[0]


def test_failing_rank_is_reported_not_hung(monkeypatch):
    """Fake two GPUs: the ranks fail (no such backend module / no GPU) and the error says so."""
    use = "cupy" if importlib.util.find_spec("cupy") is None else "torch"
    if importlib.util.find_spec(use) is not None:
        pytest.skip("torch and cupy are both installed: the ranks would not fail")
    from gdrlab.nccl import run as nccl_run
    monkeypatch.setattr(nccl_run, "gpus", lambda: [{"index": 0}, {"index": 1}])  # the names run_allreduce calls
    with pytest.raises(GdrlabError, match="exited with code") as info:
        nccl.run_allreduce("8", use=use, timeout_s=60)
    assert "No module named" in str(info.value)


def test_cli_parse_and_recorded():
    run = [sys.executable, "-m", "gdrlab", "nccl"]
    proc = subprocess.run(run + ["parse", P2P_SHM_OFF, "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["summary"]["transport"] == "NET/Socket" and doc["provenance"]["kind"] == "recorded"
    path = str(nccl.recorded_logs()[P2P_OFF])
    proc = subprocess.run(run + ["--json", "parse", path], capture_output=True, text=True, timeout=120)
    assert json.loads(proc.stdout)["summary"]["transport"] == "SHM/direct/direct"
    proc = subprocess.run(run + ["parse", path], capture_output=True, text=True, timeout=120)
    assert "rank 0 -> rank 1: SHM/direct/direct on 4 channels" in proc.stdout
    proc = subprocess.run(run + ["recorded", "--json"], capture_output=True, text=True, timeout=120)
    assert [r["transport"] for r in json.loads(proc.stdout)["runs"]] == ["P2P/CUMEM", "SHM/direct/direct",
                                                                         "NET/Socket"]
    proc = subprocess.run(run + ["parse", "/nonexistent.log"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1 and "no such log" in proc.stderr


# ----------------------------------------------------------------------------- GPU machines
@pytest.mark.gpu
def test_gpu_one_gpu_nccl_unavailable():
    n, reason = _gpu_count()
    if n == 0:
        pytest.skip("no CUDA GPU: " + reason)
    if n != 1:
        pytest.skip(f"needs exactly one GPU, this machine has {n}")
    with pytest.raises(Unavailable, match="this machine has 1"):
        nccl.run_allreduce("8")


@pytest.mark.gpu
@pytest.mark.multigpu
def test_multigpu_nccl_transports():
    n, reason = _gpu_count()
    if n < 2:
        pytest.skip(f"needs two GPUs, this machine has {n}" + (f": {reason}" if n == 0 else ""))
    try:
        nccl.backend()
    except Unavailable as exc:
        pytest.skip(str(exc))
    runs = nccl.compare("8,1M,64M", timeout_s=280)["runs"]
    for name, run in runs.items():
        assert run["env"]["NCCL_NVLS_ENABLE"] == "0" and run["env"]["NCCL_DEBUG"] == "INFO"
        assert [r["size"] for r in run["results"]] == [8, 1 << 20, 64 << 20]
        assert all(r["verified"] and r["busbw_gbps"] > 0 for r in run["results"])
        pairs = run["parsed"]["summary"]["pairs"]
        assert len(pairs) >= 2, f"{name}: no connection lines in the log"
    kinds = {name: {c["kind"] for c in run["parsed"]["connections"]} for name, run in runs.items()}
    assert "P2P" not in kinds["p2p_off"]
    assert kinds["p2p_shm_off"] == {"NET"}


FAKE_DIST = '''
import os
_n = None
class ReduceOp:
    SUM, MAX = "sum", "max"
def is_nccl_available():
    return True
def init_process_group(backend, init_method, rank, world_size, timeout):
    global _n
    _n = world_size
    p = f"fake:{os.getpid()}:{os.getpid()} [{rank}] NCCL INFO "
    print(p + "NCCL version 0.0.0+fake", flush=True)
    print(p + f"Channel 00/0 : {rank}[{rank}] -> {(rank + 1) % world_size}[0] via SHM/direct/direct", flush=True)
    for k in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE"):
        if k in os.environ:
            print(p + f"{k} set by environment to {os.environ[k]}.", flush=True)
def all_reduce(t, op="sum"):
    if op == "sum" and t.a[0] != 0:
        t.a[:] = _n * (_n + 1) / 2  # what a real sum of rank+1 over the ranks gives
def destroy_process_group():
    pass
'''
FAKE_TORCH = '''
import numpy as np
from . import cuda, distributed
float32, float64 = np.float32, np.float64
class device:
    def __init__(self, kind, index):
        pass
class T:
    def __init__(self, a):
        self.a = a
    def __getitem__(self, i):
        return T(self.a[i:i + 1] if i >= 0 else self.a[i:])
    def item(self):
        return self.a.reshape(-1)[0].item()
def full(shape, value, dtype, device):
    return T(np.full(shape, value, dtype=dtype))
def tensor(values, dtype, device):
    return T(np.array(values, dtype=dtype))
'''


def test_run_plumbing_with_a_stand_in_torch(tmp_path, monkeypatch):
    """Two rank processes, their environment, log capture and results, with a numpy stand-in for
    torch that prints NCCL-style lines: everything but the GPUs."""
    pkg = tmp_path / "torch"
    (pkg / "distributed").mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_TORCH)
    (pkg / "cuda.py").write_text("def set_device(i):\n    pass\ndef synchronize():\n    pass\n")
    (pkg / "distributed" / "__init__.py").write_text(FAKE_DIST)
    from gdrlab.nccl import run as nccl_run
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + ":" + __import__("os").environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # must be overridden
    monkeypatch.setattr(nccl_run, "gpus", lambda: [{"name": "stand-in"}, {"name": "stand-in"}])  # what run_allreduce calls
    monkeypatch.setattr(nccl_run, "cuda_status", lambda: {"usable": True, "reason": "", "driver_version": 0})
    r = nccl.run_allreduce("8,64K", ["p2p"], iters=4, use="torch", timeout_s=60)
    assert r["nranks"] == 2 and r["backend"] == "torch"
    assert [(x["size"], x["iters"], x["verified"]) for x in r["results"]] == [(8, 4, True), (65536, 4, True)]
    for x in r["results"]:
        assert x["algbw_gbps"] == pytest.approx(x["size"] / x["time_us"] / 1e3)
        assert x["busbw_gbps"] == pytest.approx(x["algbw_gbps"])  # 2 ranks: factor 2*(2-1)/2 = 1
    # what the rank processes saw in their environment, read back from their log
    assert r["parsed"]["env"] == {"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}
    assert r["parsed"]["version"] == "0.0.0+fake"
    assert set(r["parsed"]["summary"]["pairs"]) == {"0->1", "1->0"}
    assert "allreduce" in r["log"] and [x["size"] for x in r["parsed"]["results"]] == [8, 65536]
