"""Statistics of timed samples and the rows they become (the schema is :mod:`gdrlab.vocab`'s).

Latencies are one-way (half round trips, like perftest and OSU); bandwidth is in GB/s
(1e9 bytes per second) at the median sample.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..units import RATE_UNITS

__all__ = ["ProgressFn", "Summary", "summarize", "result_columns", "auto_counts", "median_ci", "Adaptive",
           "PARITY_COLUMNS", "COLUMN_ANCHORS", "GBITS_PER_GBPS"]

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


def median_ci(samples: Any, z: float = 1.96) -> tuple[float, float]:
    """Distribution-free confidence interval of the median (about 95 % for ``z=1.96``): the order
    statistics at ranks n/2 -/+ z*sqrt(n)/2, from the binomial distribution of the count of samples
    below the median (W. J. Conover, Practical Nonparametric Statistics, 3rd ed., section 3.2).
    (NaN, NaN) for fewer than 3 samples."""
    s = np.sort(np.asarray(samples, dtype=float))
    n = s.size
    if n < 3:
        return np.nan, np.nan
    half = z * np.sqrt(n) / 2
    lo = int(max(0, np.floor(n / 2 - half)))
    hi = int(min(n - 1, np.ceil(n / 2 + half) - 1))
    return float(s[lo]), float(s[hi])


@dataclass
class Adaptive:
    """The adaptive iteration count of one measurement (perftest's ``-D``): what the half of a
    size may spend (``budget_s``) and the least and most timed iterations its kept test takes;
    :func:`gdrlab.transfer.lanes._collect` chooses the count from a probe test within them."""

    budget_s: float
    least: int
    most: int


#: perftest's --report_gbits unit (10**9 bits per second) per GB/s (10**9 bytes per second).
GBITS_PER_GBPS = RATE_UNITS["GB/s"] / RATE_UNITS["Gb/s"]

# The columns `gdrlab bench` adds for its parity options: name, unit, what it holds.
_PARITY_SCHEMA = """
bw_gbits     Gb/s     bandwidth at the median sample in 10**9 bits per second (--gbits)
msg_rate_mps msg/s    messages per second at the median window time (--rate), all lanes together
bidir        -        the bandwidth moved both directions at once; bw_gbps counts both (--bidir)
lanes        count    sessions (tcp --streams) or queue pairs (verbs --qps) the bandwidth was spread over; bw_gbps is then all lanes' bytes over the slowest lane's timed loop
src_mem      -        memory kind of the measuring side's message buffer
dst_mem      -        memory kind of the peer's message buffer
ci_rel       ratio    half-width of the median's 95 % confidence interval over the median (adaptive runs)
"""

#: The parity columns as (name, unit, meaning).
PARITY_COLUMNS: tuple[tuple[str, str, str], ...] = tuple(
    (name, "" if unit == "-" else unit, meaning)
    for name, unit, meaning in (line.split(None, 2) for line in _PARITY_SCHEMA.strip().splitlines()))

#: What a perftest or OSU micro-benchmarks user knows each column (or the option behind it) as.
#: perftest: linux-rdma/perftest README and `ib_write_bw --help` (perftest 24.x); OSU: the
#: osu-micro-benchmarks README (7.x), sections osu_latency, osu_bw, osu_bibw, osu_mbw_mr.
COLUMN_ANCHORS: dict[str, dict[str, str]] = {
    "size": {"perftest": "#bytes (-s, -a)", "osu": "Size (-m)"},
    "iters": {"perftest": "#iterations (-n; -D for a time bound)", "osu": "-i (iterations)"},
    "lat_min_us": {"perftest": "ib_write_lat t_min[usec]", "osu": ""},
    "lat_p50_us": {"perftest": "ib_write_lat t_typical[usec] (median)", "osu": ""},
    "lat_p99_us": {"perftest": "ib_write_lat 99% percentile[usec]", "osu": ""},
    "lat_mean_us": {"perftest": "ib_write_lat t_avg[usec]", "osu": "osu_latency Avg Latency(us)"},
    "bw_gbps": {"perftest": "BW average[MB/sec] (MB = 2**20 B; here 10**9 B/s at the median)",
                "osu": "osu_bw Bandwidth (MB/s, 10**6 B/s; here 10**9 B/s)"},
    "bw_gbits": {"perftest": "BW average[Gb/sec] with --report_gbits", "osu": ""},
    "msg_rate_mps": {"perftest": "MsgRate[Mpps] (here messages/s)", "osu": "osu_mbw_mr Messages/s"},
    "bidir": {"perftest": "-b (--bidirectional)", "osu": "osu_bibw"},
    "lanes": {"perftest": "-q (--qp) on verbs", "osu": "osu_mbw_mr: one pair of processes per lane"},
    "src_mem": {"perftest": "--use_cuda on the client side", "osu": "-d cuda, first buffer letter (D or H)"},
    "dst_mem": {"perftest": "--use_cuda on the server side", "osu": "-d cuda, second buffer letter (D or H)"},
    "verified": {"perftest": "", "osu": "-c (validation)"},
    "ci_rel": {"perftest": "", "osu": ""},
}
