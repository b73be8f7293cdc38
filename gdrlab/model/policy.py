"""Crossovers between paths and the size-based hybrid policy a communication library would derive."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from ..vocab import GPU_PATHS
from . import routes as R
from .core import NETWORK_PATHS, _resolve, as_sizes, check_path, default_paths, evaluate
from .profile import Profile

__all__ = [
    "CHUNK_NOTE",
    "band_margin_us",
    "crossings",
    "crossover",
    "hybrid_policy",
    "ranges_of",
    "settled_policy",
    "step_bands",
]

_STEPS_PER_OCTAVE = 32
_MAX_ROUNDS = 64

#: Printed beside every crossing list: the steps are the model's, not a numerical artefact.
CHUNK_NOTE = ("pipelined latency steps up at every multiple of the chunk size (one more chunk pays its "
              "fixed costs again), so the faster path can change back and forth just below and above "
              "chunk multiples: these are real features of the pipelined schedule, not rounding. Each "
              "stretch where it happens is one band (step_bands), where the two paths stay close")


def _grid(lo: int, hi: int, chunk: float | None = None) -> np.ndarray:
    """Starting sizes: a geometric grid, every size up to 65 B (gdrcopy's small reads step at
    multiples of 8 B) and, for a chunked path, both sides of every chunk multiple: the only places
    where a modelled latency jumps. Between them every latency is continuous."""
    if lo < 1 or hi < lo:
        raise InvalidArgument(f"need 1 <= lo <= hi, got lo={lo}, hi={hi}")
    n = max(2, int(np.ceil(np.log2(hi / lo) * _STEPS_PER_OCTAVE)) + 1)
    parts = [np.round(np.geomspace(lo, hi, n)), np.arange(1.0, 66.0)]
    if chunk is not None and chunk >= 1:
        edges = np.arange(np.floor(lo / chunk), np.ceil(hi / chunk) + 1) * chunk
        parts += [edges, edges + 1]
    g = np.concatenate(parts)
    g = g[(g >= lo) & (g <= hi)]
    return np.unique(np.r_[float(lo), g, float(hi)].astype(np.int64))


def _refine(fns: list[Callable[[Any], np.ndarray]], slope: float, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sizes and latencies (paths x sizes) on which every change of the fastest path lies between
    two neighbours with different winners. ``slope`` bounds how fast (us per byte) any latency
    changes between the grid's jumps, so the margin (second fastest minus fastest) changes at most
    ``2 * slope`` per byte: two neighbours with the same winner whose margins add up to more than
    ``2 * slope`` times their distance cannot hide a change between them. Others are split."""
    x = g.astype(np.int64)
    lat = np.stack([f(x.astype(float)) for f in fns])
    for _ in range(_MAX_ROUNDS):
        if lat.shape[0] < 2:
            break
        srt = np.sort(lat, axis=0)
        margin = srt[1] - srt[0]
        best = _best(lat)
        h = np.diff(x)
        need = (best[1:] == best[:-1]) & (h > 1) & (margin[:-1] + margin[1:] <= 2 * slope * h)
        if not need.any():
            break
        mids = (x[:-1][need] + x[1:][need]) // 2
        new = np.stack([f(mids.astype(float)) for f in fns])
        order = np.argsort(np.r_[x, mids], kind="stable")
        x, lat = np.r_[x, mids][order], np.concatenate([lat, new], axis=1)[:, order]
    return x, lat


def _lat_fn(profile: Profile | str, path: str, placement: str | None, chunk: float | None, depth: float | None,
            wire: str | None, overrides: dict[str, Any]) -> Callable[[Any], np.ndarray]:
    prof, c, d = _resolve(profile, placement, chunk, depth, wire, overrides)
    w = check_path(prof, path, wire if path in NETWORK_PATHS else None)
    return lambda s: evaluate(prof, path, as_sizes(s), wire=w, chunk=c, depth=d)[0]


def _slope(profile: Profile | str, paths: Iterable[str], placement: str | None, chunk: float | None,
           depth: float | None, wire: str | None, overrides: dict[str, Any]) -> float:
    """An upper bound (us per byte) on how fast any of ``paths``' latencies grows between jumps:
    a message crosses each link on its route at most twice (staged memcpys), a copy's ramp grows
    at most ``ce_ramp_*_us / ce_ramp_bytes`` per byte, a pageable fill at the memcpy rate."""

    prof = _resolve(profile, placement, chunk, depth, wire, overrides)[0]
    p = prof.params
    nvlink = prof.topology.get("peer_link", "nvlink") == "nvlink"
    worst = 0.0
    for path in paths:
        w = check_path(prof, path, wire if path in NETWORK_PATHS else None)
        links = R.route(p, path, prof.placement, w if path in NETWORK_PATHS else "tcp", nvlink)
        worst = max(worst, sum(2.0 / (r * 1e3) for r in links.values()))
    rb = p["ce_ramp_bytes"]
    ramp = (p["ce_ramp_h2d_us"] + p["ce_ramp_d2h_us"]) / rb if rb > 0 else 0.0
    return worst + ramp + 1.0 / (p["cpu_memcpy_gbps"] * 1e3)


def _chunk_of(profile: Profile | str, paths: Iterable[str], placement: str | None, chunk: float | None,
              depth: float | None, wire: str | None, overrides: dict[str, Any]) -> float | None:
    """The chunk size whose multiples are the steps of a chunked path among ``paths`` (or None)."""
    if "pipelined" not in paths:
        return None
    return _resolve(profile, placement, chunk, depth, wire, overrides)[1]


def _first_true(pred: Callable[[np.ndarray], np.ndarray], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per bracket, the smallest integer in (lo, hi] where pred holds, given pred(lo) is False and
    pred(hi) True; every bracket is bisected at once (one vectorised evaluation per halving)."""
    lo, hi = np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)
    while lo.size and np.any(hi - lo > 1):
        open_ = hi - lo > 1
        mid = np.where(open_, (lo + hi) // 2, hi)
        ok = np.asarray(pred(mid), dtype=bool)
        hi = np.where(open_ & ok, mid, hi)
        lo = np.where(open_ & ~ok, mid, lo)
    return hi


def _b_ahead(lat_a: np.ndarray, lat_b: np.ndarray) -> np.ndarray:
    """Where ``b`` is faster than ``a`` by more than a near-tie (1e-9 relative, as :func:`_best`):
    pipelined of one chunk and shared are the same schedule summed two ways, and rounding must
    not count as a change of the faster path."""
    return lat_b * (1 + 1e-9) < lat_a


def _best(lat: np.ndarray) -> np.ndarray:
    """Index of the fastest path per column; near-ties (1e-9 relative) go to the earlier path."""
    ok = lat <= lat.min(axis=0) * (1 + 1e-9)
    return ok.argmax(axis=0)


def crossings(profile: Profile | str, a: str, b: str, *, lo: int = 1, hi: int = 1 << 30,
              placement: str | None = None, chunk: int | None = None, depth: int | None = None,
              wire: str | None = None, **overrides: Any) -> list[dict]:
    """Every size in [lo, hi] at which the faster of ``a`` and ``b`` changes: a list of
    ``{"size": bytes, "faster": path}`` (the path that is faster from that size on), in order.
    Exact: bracketed on a grid holding both sides of every jump (chunk multiples), refined until
    no sign change can hide between neighbours (a bound on the latencies' slope, see
    :func:`_refine`), then found to the byte by bisection."""
    lat_a = _lat_fn(profile, a, placement, chunk, depth, wire, overrides)
    lat_b = _lat_fn(profile, b, placement, chunk, depth, wire, overrides)
    g = _grid(int(lo), int(hi), _chunk_of(profile, (a, b), placement, chunk, depth, wire, overrides))
    g, lat = _refine([lat_a, lat_b], _slope(profile, (a, b), placement, chunk, depth, wire, overrides), g)

    def b_wins(x: Any) -> np.ndarray:
        x = np.atleast_1d(np.asarray(x))
        return _b_ahead(lat_a(x), lat_b(x))

    wins = _b_ahead(lat[0], lat[1])
    out = [{"size": int(g[0]), "faster": b}] if wins[0] else []
    j = np.flatnonzero(wins[1:] != wins[:-1]) + 1
    now = wins[j]
    edges = _first_true(lambda x: b_wins(x) == now, g[j - 1], g[j])
    out += [{"size": int(e), "faster": b if w else a} for e, w in zip(edges, now)]
    return out


def crossover(profile: Profile | str, a: str, b: str, *, lo: int = 1, hi: int = 1 << 30,
              placement: str | None = None, chunk: int | None = None, depth: int | None = None,
              wire: str | None = None, **overrides: Any) -> int | None:
    """The smallest size in [lo, hi] at which path ``b`` has a lower latency than path ``a``, or
    None if it never does (:func:`crossings` gives every change of the faster path)."""
    for c in crossings(profile, a, b, lo=lo, hi=hi, placement=placement, chunk=chunk, depth=depth, wire=wire,
                       **overrides):
        if c["faster"] == b:
            return c["size"]
    return None


def hybrid_policy(profile: Profile | str, paths: Iterable[str] | None = None, *, lo: int = 1, hi: int = 1 << 30,
                  placement: str | None = None, chunk: int | None = None, depth: int | None = None,
                  wire: str | None = None, **overrides: Any) -> list[dict]:
    """Which path to use for which size range, as a library would set its thresholds: a list of
    ``{"lo": bytes, "hi": bytes, "path": name}`` covering [lo, hi], the fastest path (lowest
    latency) in each range. By default the GPU-to-remote-GPU paths the profile can run."""
    if paths is None:
        avail = default_paths(profile if not overrides and placement is None else
                              _resolve(profile, placement, chunk, depth, wire, overrides)[0], wire)
        # Simplest-first on ties: with one chunk, pipelined equals shared; a library would still
        # say "pipelined above the GDR limit". The GPU paths' table order reversed: gdrcopy first.
        order = tuple(reversed(GPU_PATHS))
        paths = [p for p in order if p in avail]
    paths = list(paths)
    if not paths:
        raise InvalidArgument("no paths to choose from")
    fns = [_lat_fn(profile, p, placement, chunk, depth, wire, overrides) for p in paths]
    g = _grid(int(lo), int(hi), _chunk_of(profile, paths, placement, chunk, depth, wire, overrides))
    g, lat = _refine(fns, _slope(profile, paths, placement, chunk, depth, wire, overrides), g)
    best = _best(lat)

    def best_at(x: np.ndarray) -> np.ndarray:
        return _best(np.stack([f(x) for f in fns]))

    j = np.flatnonzero(best[1:] != best[:-1]) + 1
    prev = best[j - 1]
    edges = _first_true(lambda x: best_at(x) != prev, g[j - 1], g[j])
    ranges: list[dict] = []
    start = int(g[0])
    for e, pv in zip(edges, prev):
        ranges.append({"lo": start, "hi": int(e) - 1, "path": paths[int(pv)]})
        start = int(e)
    ranges.append({"lo": start, "hi": int(g[-1]), "path": paths[int(best[-1])]})
    merged: list[dict] = []
    for r in ranges:  # bisection can hand back an empty or repeated range at a near-tie
        if r["hi"] < r["lo"]:
            continue
        if merged and merged[-1]["path"] == r["path"]:
            merged[-1]["hi"] = r["hi"]
        else:
            merged.append(r)
    return merged


# ----------------------------------------------------------------------------- chunk steps
def ranges_of(changes: list[dict], a: str, b: str, lo: int = 1, hi: int = 1 << 30) -> list[dict]:
    """The ``{"lo", "hi", "path"}`` ranges that a :func:`crossings` list describes over [lo, hi]."""
    out: list[dict] = []
    start, path = int(lo), a
    for c in changes:
        if c["size"] > start:
            out.append({"lo": start, "hi": int(c["size"]) - 1, "path": path})
        start, path = int(c["size"]), c["faster"]
    out.append({"lo": start, "hi": int(hi), "path": path})
    return [r for r in out if r["hi"] >= r["lo"]]


def step_bands(ranges: list[dict], chunk: float | None) -> list[dict]:
    """Runs of ranges that exist only because a pipelined latency steps at chunk multiples.

    A range is a *step island* when it is narrower than one chunk and the ranges on both sides
    belong to one same path: one more chunk's fixed costs (paid from each multiple of the chunk
    size on) hand the lead back and forth there, and in between the two paths' latencies cross
    again as the steady rates take over. A band is a maximal run of such islands; it reports its
    bounds, the paths that trade the lead, how many times the faster path changes inside it, and
    the chunk multiples it holds. Without a chunk size (no pipelined path) there are no bands."""
    if not chunk or len(ranges) < 3:
        return []
    c = float(chunk)
    island = [0 < i < len(ranges) - 1 and ranges[i - 1]["path"] == ranges[i + 1]["path"]
              and ranges[i]["hi"] - ranges[i]["lo"] + 1 < c for i in range(len(ranges))]
    bands: list[dict] = []
    i = 0
    while i < len(ranges):
        if not island[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(ranges) and island[j + 1]:
            j += 1
        lo, hi = ranges[i]["lo"], ranges[j]["hi"]
        paths = sorted({ranges[k]["path"] for k in range(i - 1, j + 2)})
        first, last = int(np.ceil((lo - 1) / c)), int(np.floor(hi / c))   # a step at k*c shows from k*c + 1
        bands.append({"lo": lo, "hi": hi, "paths": paths, "changes": j - i + 2,
                      "before": ranges[i - 1]["path"], "after": ranges[j + 1]["path"],
                      "chunk_bytes": int(c), "chunk_multiples": [k * int(c) for k in range(max(first, 1), last + 1)]})
        i = j + 1
    return bands


def settled_policy(ranges: list[dict], bands: list[dict]) -> list[dict]:
    """``ranges`` with every step band as one row: ``{"lo", "hi", "path"}`` for the settled
    ranges and ``{"lo", "hi", "path": None, "paths": [...], "band": True}`` for a band."""
    out: list[dict] = []
    for r in ranges:
        band = next((b for b in bands if b["lo"] <= r["lo"] and r["hi"] <= b["hi"]), None)
        if band is not None:
            if not out or out[-1].get("band") is not True or out[-1]["lo"] != band["lo"]:
                out.append({"lo": band["lo"], "hi": band["hi"], "path": None, "paths": band["paths"], "band": True})
            continue
        if out and out[-1].get("path") == r["path"]:
            out[-1]["hi"] = r["hi"]
        else:
            out.append(dict(r))
    return out


def band_margin_us(profile: Profile | str, paths: Iterable[str], band: dict, *, placement: str | None = None,
                   chunk: int | None = None, depth: int | None = None, wire: str | None = None,
                   **overrides: Any) -> float:
    """The largest latency gap (us) between the paths trading the lead inside ``band``, over its
    chunk multiples (both sides) and 256 sizes across it: how little the choice matters there."""
    fns = [_lat_fn(profile, p, placement, chunk, depth, wire, overrides) for p in paths]
    edges = np.asarray(band["chunk_multiples"], dtype=float)
    x = np.unique(np.r_[np.linspace(band["lo"], band["hi"], 256), edges, edges + 1,
                        float(band["lo"]), float(band["hi"])])
    x = x[(x >= band["lo"]) & (x <= band["hi"])]
    lat = np.stack([f(x) for f in fns])
    gap = lat.max(axis=0) - lat.min(axis=0)
    return float(np.max(gap))
