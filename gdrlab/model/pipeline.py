"""The exact schedule of a chunked three-stage pipeline (copy out, wire, copy in).

A message of ``n`` chunks passes three servers in order: the sender's copy engine, the wire and the
receiver's copy engine. Each stage ``k`` has an occupancy ``a[k]`` (the server is busy: a queued
copy's launch plus bytes over the rate; a wire message's per-message cost plus bytes over the
rate) and a pure delay ``d[k]`` after it (the server is free again but the chunk is not yet usable
downstream: a copy's completion notice, the wire's one-way flight). There are ``depth`` buffers on
each side: a sender buffer is taken when its copy starts and freed when the wire has read it; a
receiver buffer is taken when the wire starts writing it and freed when its copy-in ends.

All chunks but the last are full (same costs for every size of one profile), so the recurrence of
the full chunks is evaluated once as scalars. Past a transient it repeats with a period that
divides ``depth``: beyond ``horizon`` chunks the state is shifted by whole periods instead of
stepped. The last (partial) chunk is one vectorised step per message size.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["schedule"]


def _step(state: list, a: np.ndarray, d: np.ndarray, depth: int, i: int,
          streamed: bool = False) -> tuple[Any, Any, Any]:
    """Finish times (f1, f2, f3) of chunk ``i`` given the earlier ones (lists of arrays/floats).

    ``streamed``: the wire lands data in the receiver's kernel buffers (tcp), so a receiver buffer
    is needed only from arrival (the receive copy, ``a[1]``) to the end of the copy-in, not during
    the flight; with RDMA the NIC writes into the receiver buffer, which is taken from the send."""
    f1s, f2s, f3s = state
    start1 = f1s[i - 1] if i else 0.0
    if i >= depth:
        start1 = np.maximum(start1, f2s[i - depth])       # sender buffer freed by the wire
    f1 = start1 + a[0]
    start2 = f1 + d[0]
    if i:
        start2 = np.maximum(start2, f2s[i - 1])
    if i >= depth and not streamed:
        start2 = np.maximum(start2, f3s[i - depth])       # receiver buffer freed by the copy-in
    f2 = start2 + a[1]
    start3 = f2 + d[1]
    if i >= depth and streamed:
        start3 = np.maximum(start3, f3s[i - depth] + a[1])  # received once its buffer is free
    if i:
        start3 = np.maximum(start3, f3s[i - 1])
    return f1, f2, start3 + a[2]


def _full_chunks(a_full: np.ndarray, d: np.ndarray, depth: int, m: int, horizon: int,
                 streamed: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Finish times of the first ``min(m, horizon)`` full chunks, and the per-``depth`` shift."""
    k = min(m, horizon)
    f1s: list[float] = []
    f2s: list[float] = []
    f3s: list[float] = []
    for i in range(k):
        f1, f2, f3 = _step([f1s, f2s, f3s], a_full, d, depth, i, streamed)
        f1s.append(float(f1))
        f2s.append(float(f2))
        f3s.append(float(f3))
    return np.array(f1s), np.array(f2s), np.array(f3s)


def schedule(a_full: npt.ArrayLike, a_last: npt.ArrayLike, d: npt.ArrayLike, n: npt.ArrayLike, depth: int,
             horizon: int | None = None, streamed: bool = False) -> np.ndarray:
    """Finish time (end of the last chunk's copy-in, plus its delay) of messages of ``n`` chunks.

    Parameters
    ----------
    a_full : sequence of 3 floats
        Occupancy of each stage for a full chunk (us).
    a_last : array of shape (3, N)
        Occupancy of each stage for each message's last chunk.
    d : sequence of 3 floats
        Delay after each stage (us); the delay after stage 3 is added once at the end.
    n : array of N ints
        Chunks per message (>= 1).
    depth : int
        Buffers per side (>= 1).
    horizon : int, optional
        Full chunks stepped exactly before shifting by periods (default ``8 * depth + 16``).
    streamed : bool
        The wire lands data in kernel buffers (tcp): receiver buffers are not held in flight.

    Returns
    -------
    numpy.ndarray
        Latency of each message in microseconds.
    """
    a_full = np.asarray(a_full, dtype=float)
    a_last = np.asarray(a_last, dtype=float)
    d = np.asarray(d, dtype=float)
    n = np.asarray(n, dtype=np.int64)
    depth = int(depth)
    horizon = int(horizon if horizon is not None else 8 * depth + 16)
    m = n - 1                                   # full chunks before the last one
    mmax = int(m.max()) if m.size else 0
    f1, f2, f3 = _full_chunks(a_full, d, depth, mmax, max(horizon, 2 * depth), streamed)
    k = len(f1)
    # State of the `depth` chunks before the last one, per message (shape depth x N each).
    hist = [np.zeros((depth, n.size)) for _ in range(3)]
    valid = np.zeros((depth, n.size), dtype=bool)
    for j in range(depth):                      # j-th chunk before the last: index m - 1 - j
        idx = m - 1 - j
        ok = idx >= 0
        inside = ok & (idx < k)
        # Beyond the stepped horizon: same phase (mod depth) inside it, shifted by whole periods.
        over = ok & ~inside
        base = np.where(over, k - depth + ((idx - (k - depth)) % depth), np.clip(idx, 0, max(k - 1, 0)))
        periods = np.where(over, (idx - base) // depth, 0)
        if k:
            shift = np.array([f[k - 1] - f[k - 1 - depth] if k > depth else 0.0 for f in (f1, f2, f3)])
            for h, f, sh in zip(hist, (f1, f2, f3), shift):
                h[j] = np.where(ok, f[base] + periods * sh, 0.0)
        valid[j] = ok
    # The last chunk's step, against that history.
    prev1, prev2, prev3 = (np.where(valid[0], h[0], 0.0) for h in hist)
    start1 = np.where(valid[0], prev1, 0.0)
    if depth <= hist[0].shape[0]:
        back = depth - 1                        # the chunk `depth` before the last
        start1 = np.where(valid[back], np.maximum(start1, hist[1][back]), start1)
    fin1 = start1 + a_last[0]
    start2 = np.maximum(fin1 + d[0], np.where(valid[0], prev2, 0.0))
    if not streamed:
        start2 = np.where(valid[depth - 1], np.maximum(start2, hist[2][depth - 1]), start2)
    fin2 = start2 + a_last[1]
    start3 = np.maximum(fin2 + d[1], np.where(valid[0], prev3, 0.0))
    if streamed:
        start3 = np.where(valid[depth - 1], np.maximum(start3, hist[2][depth - 1] + a_last[1]), start3)
    return start3 + a_last[2] + d[2]
