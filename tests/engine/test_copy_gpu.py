"""`gdrlab copy` and the p2p matrix's new options on real GPUs: the SM copy kernel JIT-compiles
from its PTX and moves verified data in every direction, the CUDA-event window lies inside the
host clock's, nothing stays allocated; on two GPUs the patterns, --read and the diagonal."""
from __future__ import annotations

import pytest

from gdrlab import _native
from gdrlab.transfer import copies, p2p

SIZES = [8, 100003, 64 << 20]


@pytest.mark.gpu
@pytest.mark.parametrize("engine", copies.ENGINES)
@pytest.mark.parametrize("direction", copies.DIRECTIONS)
def test_copies_on_the_gpu_are_verified_and_timed_both_ways(engine, direction):
    df = copies.copy_sweep(direction, SIZES, 5, engine=engine, warmup=2)
    assert list(df["size"]) == SIZES
    assert df["verified"].all() and (df["checks"] == 7).all()
    assert (df["event_lat_min_us"] <= df["host_lat_min_us"]).all()
    assert (df["event_bw_gbps"] > 0).all() and (df["host_bw_gbps"] > 0).all()
    assert (_native.live_pinned_bytes(), _native.live_device_bytes()) == (0, 0)


@pytest.mark.gpu
def test_bidir_and_pageable_on_the_gpu():
    df = copies.copy_sweep("h2d", [64 << 20], 5, bidir=True, engine="sm")
    assert df["verified"].all() and int(df["copies"].iloc[0]) == 2
    df = copies.copy_sweep("d2h", [64 << 20], 5, dst_mem="pageable")
    assert df["verified"].all()


@pytest.mark.gpu
def test_diagonal_on_one_gpu():
    r = p2p.p2p_matrix(1, p2p.copy_measure("sm", iters=5), p2p.live_can_access, lat_size=8, bw_size=64 << 20,
                       diagonal=True)
    assert r["uni_bw_gbps"]["peer_on"][0][0] > 0 and r["lat_us"]["peer_off"][0][0] > 0


@pytest.mark.multigpu
@pytest.mark.parametrize("engine", copies.ENGINES)
def test_patterns_and_read_on_two_gpus(engine):
    for kw in ({"direction": "h2d", "pattern": "host-to-all"}, {"direction": "d2h", "pattern": "host-to-all"},
               {"direction": "d2d", "pattern": "all-to-one"}, {"direction": "d2d", "dst_device": 1, "read": True},
               {"direction": "d2d", "dst_device": 1, "bidir": True}):
        df = copies.copy_sweep(sizes=[64 << 20], iters=5, engine=engine, **kw)
        assert df["verified"].all(), kw
    r = p2p.p2p_matrix(2, p2p.copy_measure(engine, read=True, iters=5), p2p.live_can_access, lat_size=8,
                       bw_size=64 << 20, diagonal=True)
    assert r["uni_bw_gbps"]["peer_off"][0][1] > 0 and r["bidir_bw_gbps"]["peer_off"][1][1] > 0
