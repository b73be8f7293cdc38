"""Crossovers between paths and the size-based hybrid policy a communication library would derive."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from .core import NETWORK_PATHS, _resolve, as_sizes, check_path, default_paths, evaluate
from .profile import Profile

__all__ = ["crossings", "crossover", "hybrid_policy"]

_STEPS_PER_OCTAVE = 32


def _grid(lo: int, hi: int) -> np.ndarray:
    if lo < 1 or hi < lo:
        raise InvalidArgument(f"need 1 <= lo <= hi, got lo={lo}, hi={hi}")
    n = max(2, int(np.ceil(np.log2(hi / lo) * _STEPS_PER_OCTAVE)) + 1)
    g = np.unique(np.round(np.geomspace(lo, hi, n)).astype(np.int64))
    return g


def _lat_fn(profile: Profile | str, path: str, placement: str | None, chunk: float | None, depth: float | None,
            wire: str | None, overrides: dict[str, Any]) -> Callable[[Any], np.ndarray]:
    prof, c, d = _resolve(profile, placement, chunk, depth, wire, overrides)
    w = check_path(prof, path, wire if path in NETWORK_PATHS else None)
    return lambda s: evaluate(prof, path, as_sizes(s), wire=w, chunk=c, depth=d)[0]


def _first_true(pred: Callable[[int], Any], lo: int, hi: int) -> int:
    """Smallest integer in (lo, hi] where pred holds, given pred(lo) is False and pred(hi) True."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _best(lat: np.ndarray) -> np.ndarray:
    """Index of the fastest path per column; near-ties (1e-9 relative) go to the earlier path."""
    ok = lat <= lat.min(axis=0) * (1 + 1e-9)
    return ok.argmax(axis=0)


def crossings(profile: Profile | str, a: str, b: str, *, lo: int = 1, hi: int = 1 << 30,
              placement: str | None = None, chunk: int | None = None, depth: int | None = None,
              wire: str | None = None, **overrides: Any) -> list[dict]:
    """Every size in [lo, hi] at which the faster of ``a`` and ``b`` changes: a list of
    ``{"size": bytes, "faster": path}`` (the path that is faster from that size on), in order.
    Found on a 32-points-per-octave grid, then to the byte by bisection."""
    lat_a = _lat_fn(profile, a, placement, chunk, depth, wire, overrides)
    lat_b = _lat_fn(profile, b, placement, chunk, depth, wire, overrides)
    g = _grid(int(lo), int(hi))

    def b_wins(x: Any) -> np.ndarray:
        x = np.atleast_1d(np.asarray(x))
        return lat_b(x) < lat_a(x)

    wins = b_wins(g)
    out = [{"size": int(g[0]), "faster": b}] if wins[0] else []
    for j in np.flatnonzero(wins[1:] != wins[:-1]) + 1:
        now = bool(wins[j])
        def flips(x: int, now: bool = now) -> bool:
            return bool(b_wins(x)[0]) == now
        edge = _first_true(flips, int(g[j - 1]), int(g[j]))
        out.append({"size": edge, "faster": b if now else a})
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
        # say "pipelined above the GDR limit".
        order = ("gdrcopy", "gdr", "pipelined", "shared", "staged")
        paths = [p for p in order if p in avail]
    paths = list(paths)
    if not paths:
        raise InvalidArgument("no paths to choose from")
    fns = [_lat_fn(profile, p, placement, chunk, depth, wire, overrides) for p in paths]
    g = _grid(int(lo), int(hi))
    lat = np.stack([f(g) for f in fns])
    best = _best(lat)

    def best_at(x: int) -> int:
        return int(_best(np.array([f(np.array([x])) for f in fns]))[0])

    ranges: list[dict] = []
    start = int(g[0])
    for j in range(1, len(g)):
        if best[j] != best[j - 1]:
            prev = int(best[j - 1])
            edge = _first_true(lambda x: best_at(x) != prev, int(g[j - 1]), int(g[j]))
            ranges.append({"lo": start, "hi": edge - 1, "path": paths[prev]})
            start = edge
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
