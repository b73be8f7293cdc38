"""The pipelined path's schedule against a step-by-step FIFO simulation written here, apart from
the model: servers, buffer pools and chunks, nothing shared with gdrlab.model.pipeline."""
from __future__ import annotations

import heapq
import random

import numpy as np
import pytest

from gdrlab.model.pipeline import schedule


def fifo_sim(occ_full, occ_last, delay, n_chunks, depth):
    """Simulate chunk by chunk: each server serves chunks in order; a chunk needs a free buffer on
    the sender side to start its copy-out and one on the receiver side to start on the wire."""
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
        t = max(ready, server_free[1], buf_r) + occ[1]
        server_free[1] = t
        heapq.heappush(send_free, t)
        ready = t + delay[1]
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


@pytest.mark.parametrize("full,last,delay,n,depth", _cases())
def test_schedule_matches_fifo_simulation(full, last, delay, n, depth):
    want = fifo_sim(full, last, delay, n, depth)
    got = float(schedule(full, np.array(last)[:, None], delay, np.array([n]), depth)[0])
    assert got == pytest.approx(want, rel=0.02), (full, last, delay, n, depth)


def test_schedule_vectorised_over_messages():
    full, delay, depth = [4.0, 9.0, 4.5], [3.0, 1.5, 2.0], 2
    lasts = np.array([[1.0, 2.0, 1.1], [4.0, 9.0, 4.5]]).T
    ns = np.array([1, 40])
    got = schedule(full, lasts, delay, ns, depth)
    want = [fifo_sim(full, lasts[:, i], delay, int(ns[i]), depth) for i in range(2)]
    assert got == pytest.approx(want, rel=1e-9)
