"""The adaptive iteration count (--duration) must measure what the fixed count measures: a fake
connection whose first iterations of every test are slow (fresh buffers) and whose warm samples
spread deterministically must give the adaptive method the fixed method's median, with no cold
sample kept; the count must follow the budget; large sizes must cost one test per half."""
from __future__ import annotations

import pytest

from gdrlab.transfer import driver
from gdrlab.transfer.lanes import Parity, measure_size

COLD_ITERS = 5  # slow first iterations of every test: more than a short re-warm-up, fewer than the fixed one
COLD_S = 1.0  # a cold sample, far from every warm one
WARM_S = 1e-4  # a warm latency sample (half a round trip), before the spread
SPREAD = 0.2  # warm samples lie in [WARM_S, WARM_S * 1.2], a fixed pattern


class FakeConn:
    """Answers ``measure`` as the engine's connection does, without a wire: every call is a test
    of its own (``warmup`` untimed iterations, then ``iters`` timed ones) whose first
    COLD_ITERS iterations are cold."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.global_i = 0

    def measure(self, path, size, *, mode, iters, warmup, window, buffer, chunk, depth, device, both_ways=False):
        self.calls.append({"mode": mode, "iters": iters, "warmup": warmup})
        samples = []
        for i in range(warmup + iters):
            self.global_i += 1
            warm = WARM_S * (1 + SPREAD * ((self.global_i * 37) % 101) / 100)
            if i >= warmup:
                samples.append(COLD_S if i < COLD_ITERS else warm)
        return samples, float(size * window), True, {"fake": True}


def _measure(size: int, duration: float | None, mode: str = "lat"):
    conn = FakeConn()
    opts = driver.options("host", [size], mode=mode, parity=Parity(duration=duration))
    row, kept, _ = measure_size([conn], opts, size)
    return conn, row, kept


def test_fixed_count_is_one_warmed_test():
    conn, _, kept = _measure(8, None)
    assert len(conn.calls) == 1
    assert conn.calls[0]["warmup"] >= COLD_ITERS  # the fixed warm-up covers the cold iterations here
    assert COLD_S * 1e6 not in kept["lat_us"]


@pytest.mark.parametrize("size", [8, 4096, 256 << 10])
def test_cold_first_iterations_do_not_reach_the_adaptive_median(size):
    _, fixed, _ = _measure(size, None)
    conn, adaptive, kept = _measure(size, 0.08)
    assert COLD_S * 1e6 not in kept["lat_us"], [c for c in conn.calls]
    warm_p50 = WARM_S * (1 + SPREAD / 2) * 1e6
    assert adaptive["lat_p50_us"] == pytest.approx(fixed["lat_p50_us"], rel=0.03)
    assert adaptive["lat_p50_us"] == pytest.approx(warm_p50, rel=0.03)


@pytest.mark.parametrize("size", [8, 4096, 256 << 10])
def test_adaptive_keeps_one_test_sized_by_the_budget(size):
    budget = 0.08
    conn, row, kept = _measure(size, budget)
    assert len(conn.calls) <= 2  # at most a probe and the kept test
    last = conn.calls[-1]
    assert row["iters"] == last["iters"] == len(kept["lat_us"])
    # the kept test's modelled time (a round trip per iteration, the spread's upper end) fits the half budget
    per_iter = 2 * WARM_S * (1 + SPREAD)
    assert (last["warmup"] + last["iters"]) * per_iter <= budget / 2 * 1.05 or last["iters"] <= 20
    assert last["iters"] >= 20  # small sizes: at least the least count


def test_large_sizes_take_one_test_per_half_without_a_probe():
    conn, _, _ = _measure(64 << 20, 0.08, mode="both")
    modes = [c["mode"] for c in conn.calls]
    assert modes == ["lat", "bw"], conn.calls
    assert all(c["iters"] <= 5 for c in conn.calls)
    assert all(c["warmup"] >= 1 for c in conn.calls)


def test_fake_detects_pooled_cold_samples():
    """The check above can fail: samples pooled from tests warmed up with 2 iterations hold cold ones."""
    conn = FakeConn()
    pooled = []
    for _ in range(3):
        pooled += conn.measure("host", 8, mode="lat", iters=20, warmup=2, window=1, buffer=None, chunk=0, depth=0,
                               device=0)[0]
    assert pooled.count(COLD_S) == 3 * (COLD_ITERS - 2)


class SteadyConn(FakeConn):
    """Every sample the same: ``one_way_s`` per latency sample, ``window`` times it per window."""

    def __init__(self, one_way_s: float) -> None:
        super().__init__()
        self.one_way_s = one_way_s

    def measure(self, path, size, *, mode, iters, warmup, window, buffer, chunk, depth, device, both_ways=False):
        self.calls.append({"mode": mode, "iters": iters, "warmup": warmup})
        per = self.one_way_s * (window if mode == "bw" else 1)
        return [per] * iters, float(size * window), True, {}


@pytest.mark.parametrize("one_way_s,probes", [(2e-3, False), (1e-5, True)])
def test_the_bandwidth_probe_is_skipped_where_the_latency_shows_the_least_count_fills_the_budget(one_way_s, probes):
    # 2 MiB: a window of 32 messages, least 3 windows after 1 warm-up. At 2 ms one way, 4 windows
    # take 256 ms at the latency's pace, 64 ms at 4 times it: more than the 40 ms half budget, so
    # a probe (4 more windows) could only choose the least count again. At 10 us they take 0.3 ms.
    conn = SteadyConn(one_way_s)
    opts = driver.options("host", [2 << 20], mode="both", parity=Parity(duration=0.08))
    measure_size([conn], opts, 2 << 20)
    bw_calls = [c for c in conn.calls if c["mode"] == "bw"]
    assert len(bw_calls) == (2 if probes else 1), conn.calls
    if not probes:
        assert bw_calls[0]["iters"] == 3
    else:  # the probe saw a fast window and the kept test takes more than the least count
        assert bw_calls[-1]["iters"] > 3


def test_least_fills_reads_the_latency_median():
    import math

    from gdrlab.transfer.lanes import STREAM_SPEEDUP, least_fills
    from gdrlab.transfer.stats import summarize
    lat = summarize([1e-3] * 5, 1)  # p50 1000 us
    assert least_fills(6 * 32 * 1e-3 / STREAM_SPEEDUP, 6, 32, lat)
    assert not least_fills(6 * 32 * 1e-3 / STREAM_SPEEDUP * 1.01, 6, 32, lat)
    assert not least_fills(0.001, 6, 32, None)
    assert not least_fills(0.001, 6, 32, summarize([], 1))  # NaN median: unknown
    assert not math.isnan(lat.p50_us)
