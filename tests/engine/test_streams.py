"""Lanes: --streams N on tcp and --qps N on verbs open N sessions with the peer (counted by the
server, or read from its log), each carrying its share of every bandwidth message; the adaptive
iteration count stops on a tight interval; one Sweep measures several paths over one connection."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gdrlab.errors import InvalidArgument
from gdrlab.transfer import driver
from gdrlab.transfer.lanes import Parity, lane_sizes
from gdrlab.transfer.stats import median_ci

ROOT = Path(__file__).resolve().parents[2]


def _lanes_sweep(n: int, kind: str) -> tuple[dict, int, list[str]]:
    opts = driver.options("host", [1 << 20], mode="bw", iters=5, parity=Parity(lanes=n))
    with driver.Sweep(opts=opts, local_peer=kind) as sweep:
        row, _ = sweep.row(1 << 20)
        peer = sweep._link.peer
    # counted once the peer has stopped: a process peer's log is then read to its end
    return row, peer.sessions, peer.log


@pytest.mark.parametrize("n", [1, 3])
def test_streams_open_n_sessions_counted_by_the_server(n):
    if n == 1:  # one lane is the plain connection: no lanes peer, one session (the other tests' peer)
        opts = driver.options("host", [4096], iters=3, parity=Parity(lanes=1))
        with driver.Sweep(opts=opts, local_peer="thread") as sweep:
            sweep.row(4096)
            assert sweep._link.lanes == ()
        return
    row, sessions, _ = _lanes_sweep(n, "thread")
    assert sessions == n
    assert row["lanes"] == n and bool(row["verified"]) and row["bw_gbps"] > 0


def test_streams_sessions_show_in_a_process_peers_log():
    row, sessions, log = _lanes_sweep(2, "process")
    assert sessions == 2, log
    assert row["lanes"] == 2 and bool(row["verified"])


def test_lanes_cut_each_message_without_losing_a_byte():
    for size, n in ((8, 3), (1 << 20, 4), (5, 16), (1, 2)):
        parts = lane_sizes(size, n)
        assert sum(parts) == size and min(parts) >= 1 and max(parts) - min(parts) <= 1


def test_qps_on_the_verbs_wire_open_one_queue_pair_per_lane(fake_verbs_lib):
    code = r"""
import json
from gdrlab.transfer import driver
from gdrlab.transfer.lanes import Parity
opts = driver.options("host", [65536], mode="bw", wire="verbs", iters=5, timeout_s=20, parity=Parity(lanes=2))
with driver.Sweep(opts=opts, local_peer="thread") as sweep:
    row, _ = sweep.row(65536)
    print(json.dumps({"row": row, "sessions": sweep._link.peer.sessions}, default=str))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=ROOT,
                       env=dict(os.environ, GDRLAB_IBVERBS_LIB=fake_verbs_lib))
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["sessions"] == 2
    assert doc["row"]["wire"] == "verbs" and doc["row"]["lanes"] == 2 and doc["row"]["verified"] is True


def test_lanes_are_bounded():
    with pytest.raises(InvalidArgument, match="between 1 and 16"):
        driver.options("host", [8], parity=Parity(lanes=17))


# ------------------------------------------------------------------------------ adaptive counts
def test_median_interval_covers_the_median_and_narrows():
    rng = np.random.default_rng(1)
    wide = median_ci(rng.normal(10, 1, 30))
    narrow = median_ci(rng.normal(10, 1, 3000))
    assert wide[0] < 10 < wide[1] and narrow[0] < 10 < narrow[1]
    assert narrow[1] - narrow[0] < (wide[1] - wide[0]) / 4


def test_one_sweep_measures_several_paths_over_one_connection():
    opts = driver.options("host", [1], parity=Parity(duration=0.05))
    with driver.Sweep(opts=opts, local_peer="thread") as sweep:
        sweep.row(64)
        link = sweep._link
        with pytest.raises(InvalidArgument):
            sweep.row(64, path="p2p")  # crosses no wire: refused, the connection stays
        sweep.row(4096, path="host")
        assert sweep._link is link


# ------------------------------------------------------------------------------ GPU paths (stand-in libcuda)
GPU_SCRIPT = """
    import json
    from gdrlab.transfer import driver
    from gdrlab.transfer.lanes import Parity
    out = {}
    for path in ("staged", "shared", "pipelined"):
        for name, par in (("bidir", Parity(bidir=True, src_mem="device", dst_mem="device")),
                          ("lanes", Parity(lanes=2, rate=True))):
            df = driver.bench(path, [4096, 1 << 20], mode="bw", iters=3, warmup=0, local_peer="thread", parity=par)
            out[f"{path}-{name}"] = df.to_dict(orient="records")
    # one adaptive sweep, one connection, every path (what bench/sweep_speed.py times)
    opts = driver.options("host", [1], parity=Parity(duration=0.05))
    with driver.Sweep(opts=opts, local_peer="thread") as sweep:
        link = None
        for path in ("host", "staged", "shared", "pipelined"):
            out["sweep-" + path] = sweep.row(65536, path=path)[0]
            link = link or sweep._link
            out["same_link"] = out.get("same_link", True) and sweep._link is link
    print(json.dumps(out, default=str))
"""


def test_gpu_paths_take_the_parity_options(fake_cuda_dir):
    from standins import run_with_fake_cuda
    out = run_with_fake_cuda(fake_cuda_dir, GPU_SCRIPT)
    for path in ("staged", "shared", "pipelined"):
        bidir, lanes = out[f"{path}-bidir"], out[f"{path}-lanes"]
        assert all(r["verified"] is True and r["bidir"] is True and r["bw_gbps"] > 0 for r in bidir), bidir
        assert all((r["src_mem"], r["dst_mem"]) == ("device", "device") for r in bidir)
        assert all(r["verified"] is True and r["lanes"] == 2 and r["msg_rate_mps"] > 0 for r in lanes), lanes
    assert out["same_link"] is True
    for path in ("host", "staged", "shared", "pipelined"):
        row = out["sweep-" + path]
        assert row["path"] == path and row["verified"] is True and row["lat_p50_us"] > 0
