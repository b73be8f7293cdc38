"""Statistics of timed samples and the rows they become (the schema is :mod:`gdrlab.vocab`'s).

Latencies are one-way (half round trips, like perftest and OSU); bandwidth is in GB/s
(1e9 bytes per second) at the median sample.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

__all__ = ["ProgressFn", "Summary", "summarize", "result_columns", "auto_counts"]

#: ``progress(done, total, row)``, called after each size of a sweep with the row just measured.
ProgressFn = Callable[[int, int, dict], Any]


@dataclass(frozen=True)
class Summary:
    """min/p50/p99/mean of one set of samples in microseconds, and GB/s at the median."""

    min_us: float
    p50_us: float
    p99_us: float
    mean_us: float
    gbps: float

    def __getitem__(self, key: str) -> float:  # dict-style access, as summarize() used to return
        return float(getattr(self, key))

    def as_dict(self) -> dict[str, float]:
        """The five figures as a dict keyed by field name."""
        return {k: float(getattr(self, k)) for k in ("min_us", "p50_us", "p99_us", "mean_us", "gbps")}


def summarize(samples_s: Any, bytes_per_sample: float) -> Summary:
    """min/p50/p99/mean in microseconds and GB/s (1e9 bytes/s) at the median; NaN when empty."""
    s = np.asarray(samples_s, dtype=float)
    if s.size == 0:
        return Summary(np.nan, np.nan, np.nan, np.nan, np.nan)
    p50 = float(np.median(s))
    return Summary(min_us=float(s.min() * 1e6), p50_us=p50 * 1e6, p99_us=float(np.percentile(s, 99) * 1e6),
                   mean_us=float(s.mean() * 1e6), gbps=bytes_per_sample / p50 / 1e9 if p50 > 0 else np.nan)


def result_columns(lat: Summary | None, bw: Summary | None, verified: bool, path: str, chunk: int,
                   depth: int) -> dict[str, Any]:
    """The measured columns of a bench row, from :func:`summarize` results; NaN for a half that
    was not measured. Shared by every wire."""
    nan = np.nan
    return {
        "lat_min_us": lat.min_us if lat else nan,
        "lat_p50_us": lat.p50_us if lat else nan,
        "lat_p99_us": lat.p99_us if lat else nan,
        "lat_mean_us": lat.mean_us if lat else nan,
        "bw_gbps": bw.gbps if bw else nan,
        "verified": verified,
        "chunk": chunk if path == "pipelined" else nan,
        "depth": depth if path == "pipelined" else nan,
    }


def auto_counts(size: int) -> tuple[int, int, int]:
    """(latency iterations, bandwidth window, bandwidth repetitions) that keep each size near a
    fraction of a second on a PCIe 5 machine and still give a median over many samples."""
    lat_iters = int(max(10, min(1000, (256 << 20) // size)))
    window = int(max(1, min(64, (64 << 20) // size)))
    reps = int(max(8, min(100, (1 << 30) // (size * window))))
    return lat_iters, window, reps
