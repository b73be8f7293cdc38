"""The pipelined path's schedule against a step-by-step FIFO simulation written here, apart from
the model: servers, buffer pools and chunks, nothing shared with gdrlab.model.pipeline."""
from __future__ import annotations

import heapq
import random

import numpy as np
import pytest

from gdrlab.model.pipeline import schedule


def fifo_sim(occ_full, occ_last, delay, n_chunks, depth, streamed=False):
    """Simulate chunk by chunk: each server serves chunks in order; a chunk needs a free buffer on
    the sender side to start its copy-out and one on the receiver side to start on the wire.
    ``streamed`` (tcp): the data waits in the kernel, so the sender never waits for a receiver
    buffer; the receive copy into it (as long as the wire occupancy) ends no earlier than one
    receive copy after that buffer frees."""
    send_free = [0.0] * depth          # times at which each sender buffer becomes free (a heap)
    recv_free = [0.0] * depth
    heapq.heapify(send_free)
    heapq.heapify(recv_free)
    server_free = [0.0, 0.0, 0.0]
    done = 0.0
    for c in range(n_chunks):
        occ = occ_last if c == n_chunks - 1 else occ_full
        # stage 1: copy-out into a sender buffer
        buf_s = heapq.heappop(send_free)
        t = max(server_free[0], buf_s)
        t += occ[0]
        server_free[0] = t
        ready = t + delay[0]
        # stage 2: the wire, into a receiver buffer; frees the sender buffer when done
        buf_r = heapq.heappop(recv_free)
        t = max(ready, server_free[1], 0.0 if streamed else buf_r) + occ[1]
        server_free[1] = t
        heapq.heappush(send_free, t)
        ready = t + delay[1]
        if streamed:  # the receive copy into the user buffer cannot end before the buffer is free
            ready = max(ready, buf_r + occ[1])
        # stage 3: copy-in; frees the receiver buffer
        t = max(ready, server_free[2]) + occ[2]
        server_free[2] = t
        heapq.heappush(recv_free, t)
        done = t + delay[2]
    return done


def _cases():
    rng = random.Random(20261201)
    cases = []
    for depth in (1, 2, 3, 4, 7, 16):
        for n in (1, 2, 3, 5, 17, 64, 100, 255, 256):
            for _ in range(3):
                full = [rng.uniform(0.5, 30.0) for _ in range(3)]
                last = [f * rng.uniform(0.05, 1.0) for f in full]
                delay = [rng.choice([0.0, rng.uniform(0.1, 20.0)]) for _ in range(3)]
                cases.append((full, last, delay, n, depth))
    return cases


@pytest.mark.parametrize("streamed", [False, True], ids=["rdma", "tcp"])
@pytest.mark.parametrize("full,last,delay,n,depth", _cases())
def test_schedule_matches_fifo_simulation(full, last, delay, n, depth, streamed):
    want = fifo_sim(full, last, delay, n, depth, streamed)
    got = float(schedule(full, np.array(last)[:, None], delay, np.array([n]), depth, streamed=streamed)[0])
    assert got == pytest.approx(want, rel=0.02), (full, last, delay, n, depth)


def test_schedule_vectorised_over_messages():
    full, delay, depth = [4.0, 9.0, 4.5], [3.0, 1.5, 2.0], 2
    lasts = np.array([[1.0, 2.0, 1.1], [4.0, 9.0, 4.5]]).T
    ns = np.array([1, 40])
    got = schedule(full, lasts, delay, ns, depth)
    want = [fifo_sim(full, lasts[:, i], delay, int(ns[i]), depth) for i in range(2)]
    assert got == pytest.approx(want, rel=1e-9)


def _stage_costs(p: dict, x: float, wire_rate: float, wire: str = "verbs"):
    """Occupancy and delay of each stage for an x-byte chunk, as docs/model.md states them."""
    def copy(direction, eff):
        rb = p["ce_ramp_bytes"]
        ramp = p[f"ce_ramp_{direction}_us"] * (x / (x + rb) if rb > 0 else 1.0)
        issue = min(p["ce_issue_us"], p[f"ce_launch_{direction}_us"])
        return issue + ramp + x / (p["gpu_pcie_gbps"] * eff * 1e3), p[f"ce_launch_{direction}_us"] - issue
    o1, d1 = copy("d2h", p["ce_eff_d2h"])
    o3, d3 = copy("h2d", p["ce_eff"])
    if wire == "verbs":
        o2, d2 = p["doorbell_us"] + x / (wire_rate * 1e3), p["nic_lat_us"] + p["completion_us"]
    else:
        o2, d2 = p["tcp_msg_us"] + x / (p["tcp_gbps"] * 1e3), max(p["tcp_lat_us"] - p["tcp_msg_us"], 0.0)
    return [o1, o2, o3], [d1, d2, d3]


@pytest.mark.parametrize("wire", ["verbs", "tcp"])
@pytest.mark.parametrize("name", ["volta-dgx1", "hopper-ndr", "kepler-ivb-2014"])
@pytest.mark.parametrize("depth", [1, 2, 5, 16])
def test_pipelined_path_matches_fifo_simulation(name, depth, wire):
    from gdrlab import model

    p = model.get_profile(name).params
    wire_rate = min(p["nic_wire_gbps"] * p["wire_eff"], p["nic_pcie_gbps"] * p["pcie_eff"])
    chunk = 64 * 1024
    for n in (1, 2, 3, 8, 33, 128, 256):
        for tail in (1, chunk // 3, chunk):
            size = (n - 1) * chunk + tail
            full, delay = _stage_costs(p, chunk, wire_rate, wire)
            last, _ = _stage_costs(p, tail, wire_rate, wire)
            want = fifo_sim(full, last, delay, n, depth, streamed=wire == "tcp") + p["sw_overhead_us"]
            got = float(model.latency_us(name, "pipelined", [size], chunk=chunk, depth=depth, wire=wire)[0])
            assert got == pytest.approx(want, rel=0.02), (name, depth, n, tail)
