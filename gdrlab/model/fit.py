"""Fit a profile to measurements: least squares per stage (numpy only), then a fit report.

Rows are recognised by their columns, so DataFrames from :func:`gdrlab.engine.bench`,
:func:`gdrlab.engine.copy_bench`, :func:`gdrlab.engine.p2p_bench` (and rows with a ``stage``
column, e.g. ``memcpy``) can be concatenated and fitted in one call. Each stage is fitted on its
own rows, minimising squared *relative* errors, so 8-byte latencies and 256 MiB bandwidths weigh
alike. A stage without rows keeps the base profile's values, and its source says so.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from ..vocab import WIRES
from .core import NETWORK_PATHS, PATHS, STAGES, _resolve, check_path, evaluate, stage_us
from .routes import ce_rate_gbps
from .params import PLACEMENT_SUFFIX
from .profile import Profile, get_profile

__all__ = ["calibrate", "row_target", "predict_row", "fit_report"]


def _val(row: dict, key: str) -> Any:
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v


def row_target(row: dict) -> tuple[str, str] | None:
    """What a measurement row measures: ("stage", name), ("path", "name/wire") or None (not modelled)."""
    if _val(row, "stage") is not None:
        st = str(row["stage"])
        return ("stage", st) if st in STAGES else None
    if _val(row, "direction") is not None:
        d, mem = str(row["direction"]), str(_val(row, "memory") or "pinned")
        return ("stage", f"copy-{d}-{mem}") if d in ("h2d", "d2h") else None
    if _val(row, "peer_access") is not None:
        if bool(_val(row, "bidirectional") or False):
            return None
        return ("stage", "p2p" if bool(row["peer_access"]) else "p2p-staged")
    if _val(row, "path") is not None and str(row["path"]) in PATHS:
        return ("path", f"{row['path']}/{_val(row, 'wire') or ''}")
    return None


def _measured(row: dict) -> dict:
    out = {}
    lat = _val(row, "lat_p50_us")
    bw = _val(row, "bw_gbps")
    if lat is not None:
        out["lat_us"] = float(lat)
    if bw is not None:
        out["bw_gbps"] = float(bw)
    return out


def predict_row(prof: Profile, row: dict) -> dict:
    """The model's lat_us and bw_gbps for what ``row`` measured."""
    tgt = row_target(row)
    if tgt is None:
        raise InvalidArgument(f"row is not something the model predicts: {row}")
    s = np.array([float(row["size"])])
    if tgt[0] == "stage":
        lat = float(stage_us(prof, tgt[1], s)[0])
        return {"lat_us": lat, "bw_gbps": float(s[0]) / lat / 1e3}
    path, wire = tgt[1].split("/")
    chunk = _val(row, "chunk")
    depth = _val(row, "depth")
    p2, c, d = _resolve(prof, None, chunk, depth, wire or None, {})
    w = check_path(p2, path, (wire or None) if path in NETWORK_PATHS else None)
    lats, bws = evaluate(p2, path, s, wire=w, chunk=c, depth=d)
    return {"lat_us": float(lats[0]), "bw_gbps": float(bws[0])}


# ------------------------------------------------------------------------ least squares helpers
def _rel_lstsq(cols: dict[str, np.ndarray], t: np.ndarray, offset: np.ndarray | float = 0.0,
               nonneg: bool = True) -> tuple[dict[str, float], float]:
    """Minimise sum(((offset + A @ x) - t) / t)^2 over x, keeping x >= 0 by dropping negatives."""
    names = list(cols)
    fixed: dict[str, float] = {}
    while True:
        free = [n for n in names if n not in fixed]
        rhs = (t - offset) / t
        if not free:
            x = np.zeros(0)
        else:
            a = np.stack([cols[n] / t for n in free], axis=1)
            x, *_ = np.linalg.lstsq(a, rhs, rcond=None)
        neg = [n for n, v in zip(free, x) if v < 0] if nonneg else []
        if not neg:
            break
        fixed[min(neg, key=lambda n: x[free.index(n)])] = 0.0
    sol = dict(fixed)
    sol.update(zip(free, (float(v) for v in x)))
    pred = offset + sum(cols[n] * sol[n] for n in names)
    return sol, float(np.sqrt(np.mean(((pred - t) / t) ** 2)))


def _rows_for(rows: list[dict], stage: str) -> list[dict]:
    return [r for r in rows if r["_target"] == ("stage", stage) and r["_fit"]]


def _lat_of(r: dict) -> float | None:
    m = r["_measured"]
    if "lat_us" in m:
        return m["lat_us"]
    if "bw_gbps" in m and m["bw_gbps"] > 0:
        return float(r["size"]) / m["bw_gbps"] / 1e3  # synchronous copies: bw = size / latency
    return None


def _fit_ce(rows: list[dict], p: dict, fitted: dict, label: str) -> None:
    sel = [r for d in ("h2d", "d2h") for r in _rows_for(rows, f"copy-{d}-pinned") if _lat_of(r)]
    if not sel:
        return
    s = np.array([float(r["size"]) for r in sel])
    t = np.array([_lat_of(r) for r in sel])
    dirs = [r["_target"][1].split("-")[1] for r in sel]
    n_sizes = len(set(s.tolist()))
    best: tuple[dict[str, float], float, float] | None = None
    grid = [0.0] + list(np.geomspace(256, 16 << 20, 65)) if n_sizes >= 4 else [0.0]
    for rb in grid:
        cols = {f"ce_launch_{d}_us": np.array([1.0 if x == d else 0.0 for x in dirs]) for d in sorted(set(dirs))}
        if rb > 0:
            for d in sorted(set(dirs)):
                cols[f"ce_ramp_{d}_us"] = np.array([1.0 if x == d else 0.0 for x in dirs]) * s / (s + rb)
        if n_sizes >= 2:
            for d in sorted(set(dirs)):
                cols[f"_x_{d}"] = np.array([1.0 if x == d else 0.0 for x in dirs]) * s
            off: np.ndarray | float = 0.0
        else:
            off = np.array([x / (ce_rate_gbps(p, d) * 1e3) for x, d in zip(s, dirs)])
        sol, rms = _rel_lstsq(cols, t, off)
        if best is None or rms < best[1] - 1e-12:
            best = (sol, rms, rb)
    assert best is not None  # the grid is never empty
    sol, rms, rb = best
    for k, v in sol.items():
        if k.startswith("_x_"):
            if v > 0:
                key = "ce_eff" if k == "_x_h2d" else "ce_eff_d2h"
                rate = 1.0 / v / 1e3
                if rate > p["gpu_pcie_gbps"]:
                    # Faster than the base profile's link: that link is not this machine's. Keep
                    # the base's efficiency and infer the link from it.
                    p["gpu_pcie_gbps"] = rate / p[key]
                    fitted["gpu_pcie_gbps"] = (label + " (copy rate above the base link; inferred)", len(sel), rms)
                p[key] = rate / p["gpu_pcie_gbps"]
                fitted[key] = (label, len(sel), rms)
        else:
            p[k] = v
            fitted[k] = (label, len(sel), rms)
    if rb > 0:
        p["ce_ramp_bytes"] = float(round(rb))
        fitted["ce_ramp_bytes"] = (label, len(sel), rms)
    else:
        for d in sorted(set(dirs)):
            p[f"ce_ramp_{d}_us"] = 0.0
            fitted[f"ce_ramp_{d}_us"] = (label + " (no ramp needed)", len(sel), rms)


def _fit_simple(rows: list[dict], stage: str, p: dict, fitted: dict, label: str, fixed_key: str, rate_key: str,
                extra: Callable[[np.ndarray], Any] | None = None) -> float | None:
    """t = p[fixed_key] + extra(s) + s / p[rate_key]: the fixed part too when two sizes or more."""
    sel = [r for r in _rows_for(rows, stage) if _lat_of(r)]
    if not sel:
        return None
    s = np.array([float(r["size"]) for r in sel])
    t = np.array([_lat_of(r) for r in sel])
    off = extra(s) if extra else 0.0
    cols = {"_x": s}
    if len(set(s.tolist())) >= 2 and fixed_key:
        cols[fixed_key] = np.ones_like(s)
    elif fixed_key:
        off = off + p[fixed_key]
    sol, rms = _rel_lstsq(cols, t, off)
    if sol.get("_x", 0) > 0:
        p[rate_key] = 1.0 / sol["_x"] / 1e3
        fitted[rate_key] = (label, len(sel), rms)
    if fixed_key in sol:
        p[fixed_key] = sol[fixed_key]
        fitted[fixed_key] = (label, len(sel), rms)
    return rms


def _capped(chunk: float, rate: float) -> Callable[[np.ndarray], np.ndarray]:
    """``min(size, chunk) / rate``: microseconds to copy a message's first chunk (``rate`` in bytes/us)."""
    return lambda x: np.minimum(x, chunk) / rate


def _fit_pageable(rows: list[dict], p: dict, fitted: dict, label: str) -> None:
    """Per direction: fixed cost and steady rate; the staging chunk (shared) by grid search."""
    sel = [r for d in ("h2d", "d2h") for r in _rows_for(rows, f"copy-{d}-pageable") if _lat_of(r)]
    if not sel:
        return
    mc = p["cpu_memcpy_gbps"] * 1e3
    many = len({float(r["size"]) for r in sel}) >= 4
    chunks = [0.0] + list(np.geomspace(16 << 10, 64 << 20, 49)) if many else [p["pageable_chunk_bytes"]]
    best: tuple[float, float] | None = None
    for c in chunks:
        err, p2 = 0.0, dict(p, pageable_chunk_bytes=c)
        for d in ("h2d", "d2h"):
            rms = _fit_simple(rows, f"copy-{d}-pageable", p2, {}, label, f"pageable_{d}_us",
                              f"pageable_{d}_gbps", extra=_capped(c, mc))
            err += (rms or 0.0) ** 2
        if best is None or err < best[0] - 1e-12:
            best = (err, c)
    assert best is not None  # chunks is never empty
    c = best[1]
    p["pageable_chunk_bytes"] = float(round(c))
    for d in ("h2d", "d2h"):
        _fit_simple(rows, f"copy-{d}-pageable", p, fitted, label, f"pageable_{d}_us", f"pageable_{d}_gbps",
                    extra=_capped(c, mc))
    if many:
        fitted["pageable_chunk_bytes"] = (label, len(sel), float(np.sqrt(best[0] / 2)))


def _fit_p2p_staged(rows: list[dict], p: dict, fitted: dict, label: str) -> None:
    sel = [r for r in _rows_for(rows, "p2p-staged") if _lat_of(r)]
    if not sel:
        return
    s = np.array([float(r["size"]) for r in sel])
    ce = ce_rate_gbps(p, "d2h") * 1e3
    chunks = list(np.geomspace(16 << 10, 64 << 20, 61)) if len(set(s.tolist())) >= 3 else [p["p2p_staged_chunk_bytes"]]
    best: tuple[float, float] | None = None
    for c in chunks:
        p2 = dict(p, p2p_staged_chunk_bytes=c)
        rms = _fit_simple(rows, "p2p-staged", p2, {}, label, "p2p_staged_lat_us", "p2p_staged_gbps",
                          extra=_capped(c, ce))
        assert rms is not None  # sel is not empty, so _fit_simple fitted
        if best is None or rms < best[0] - 1e-12:
            best = (rms, c)
    assert best is not None  # chunks is never empty
    p["p2p_staged_chunk_bytes"] = float(round(best[1]))
    _fit_simple(rows, "p2p-staged", p, fitted, label, "p2p_staged_lat_us", "p2p_staged_gbps",
                extra=_capped(best[1], ce))
    if len(chunks) > 1:
        fitted["p2p_staged_chunk_bytes"] = (label, len(sel), best[0])


def _fit_wire(rows: list[dict], p: dict, fitted: dict, label: str) -> None:
    """The tcp (or verbs) wire from ``host`` bench rows: latency rows give the fixed one-way time,
    bandwidth rows the per-message cost and rate; both share the rate."""
    for wire in WIRES:
        sel = [r for r in rows if r["_fit"] and r["_target"] in (("path", f"host/{wire}"),)
               + ((("path", "host/"),) if wire == "tcp" else ())]
        if not sel:
            continue
        fixed_key, msg_key = ("tcp_lat_us", "tcp_msg_us") if wire == "tcp" else ("nic_lat_us", None)
        s_l = [float(r["size"]) for r in sel if "lat_us" in r["_measured"]]
        t_l = [r["_measured"]["lat_us"] for r in sel if "lat_us" in r["_measured"]]
        if wire == "tcp":  # the kernel copy is part of every message's busy time: all rows count
            s_b, t_b = _rate_bound(sel, 0.0)
        else:
            s_b, t_b = _rate_bound(sel, max(p["sw_overhead_us"] + p["doorbell_us"], p["completion_us"]))
        s = np.array(s_l + s_b)
        t = np.array(t_l + t_b)
        is_lat = np.array([1.0] * len(s_l) + [0.0] * len(s_b))
        off = is_lat * p["sw_overhead_us"]
        if wire == "verbs":
            off = off + is_lat * (p["doorbell_us"] + p["completion_us"])
        cols = {"_x": s}
        if len(set(s_l)) >= (2 if s_b else 1) or (s_l and s_b):
            cols[fixed_key] = is_lat
        elif s_l:
            off = off + is_lat * p[fixed_key]
        if msg_key and len(set(s_b)) >= 2:
            cols[msg_key] = 1.0 - is_lat
        elif msg_key:
            off = off + (1.0 - is_lat) * p[msg_key]
        sol, rms = _rel_lstsq(cols, t, off)
        for k, v in sol.items():
            if k == "_x":
                if v > 0:
                    key = "tcp_gbps" if wire == "tcp" else "nic_wire_gbps"
                    p[key] = 1.0 / v / 1e3 / (p["wire_eff"] if wire == "verbs" else 1.0)
                    fitted[key] = (label, len(sel), rms)
                    if wire == "verbs" and p["nic_pcie_gbps"] * p["pcie_eff"] < p[key]:
                        p["pcie_eff"] = min(1.0, p[key] / p["nic_pcie_gbps"])
            else:
                p[k] = v
                fitted[k] = (label, len(sel), rms)


def _rate_bound(sel: list[dict], cpu_us: float) -> tuple[list[float], list[float]]:
    """Sizes and busy times (us per message) of the bandwidth rows whose streaming time is set by
    the data rate: below about twice the per-message CPU cost the stream is CPU-bound and says
    nothing about the rate."""
    s_b, t_b = [], []
    for r in sel:
        bw = r["_measured"].get("bw_gbps", 0)
        if bw > 0:
            busy = float(r["size"]) / bw / 1e3
            if busy > 2.0 * cpu_us:
                s_b.append(float(r["size"]))
                t_b.append(busy)
    return s_b, t_b


def _fit_gdr(rows: list[dict], p: dict, fitted: dict, label: str, placement: str) -> None:
    """GDR over verbs: the extra small-message time, and the rate at the profile's placement (the
    NIC reading the sender's GPU is taken as the limit when it is below the wire)."""

    sel = [r for r in rows if r["_fit"] and r["_target"] == ("path", "gdr/verbs")]
    if not sel:
        return
    hop = p["xsocket_hop_us"] if placement == "cross-socket" else 0.0
    fixed = p["sw_overhead_us"] + p["doorbell_us"] + p["nic_lat_us"] + p["completion_us"] + hop
    s_l = [float(r["size"]) for r in sel if "lat_us" in r["_measured"]]
    t_l = [r["_measured"]["lat_us"] for r in sel if "lat_us" in r["_measured"]]
    s_b, t_b = _rate_bound(sel, max(p["sw_overhead_us"] + p["doorbell_us"], p["completion_us"]))
    s, t = np.array(s_l + s_b), np.array(t_l + t_b)
    is_lat = np.array([1.0] * len(s_l) + [0.0] * len(s_b))
    cols = {"_x": s}
    if s_l:
        cols["gdr_extra_us"] = is_lat
    sol, rms = _rel_lstsq(cols, t, is_lat * fixed)
    if "gdr_extra_us" in sol:
        p["gdr_extra_us"] = sol["gdr_extra_us"]
        fitted["gdr_extra_us"] = (label, len(sel), rms)
    if sol.get("_x", 0) > 0:
        rate = 1.0 / sol["_x"] / 1e3
        sfx = PLACEMENT_SUFFIX[placement]
        wire = min(p["nic_wire_gbps"] * p["wire_eff"], p["nic_pcie_gbps"] * p["pcie_eff"])
        if rate < wire * 0.999:
            p[f"p2p_read_gbps_{sfx}"] = rate
            fitted[f"p2p_read_gbps_{sfx}"] = (label + " (GDR rate below the wire: taken as the NIC's read)",
                                              len(sel), rms)
            if p[f"p2p_write_gbps_{sfx}"] < rate:
                p[f"p2p_write_gbps_{sfx}"] = rate
                fitted[f"p2p_write_gbps_{sfx}"] = (label, len(sel), rms)


def fit_report(prof: Profile, rows: list[dict]) -> dict:
    """Relative error of ``prof`` on every row, per path/stage and size."""
    out, skipped = [], []
    for r in rows:
        if r.get("_target") is None:
            skipped.append({"row": {k: v for k, v in r.items() if not k.startswith("_")},
                            "reason": "not modelled (d2d or bidirectional copies, unknown path)"})
            continue
        try:
            pred = predict_row(prof, r)
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            skipped.append({"row": {k: v for k, v in r.items() if not k.startswith("_")}, "reason": str(exc)})
            continue
        for metric, meas in r["_measured"].items():
            if meas <= 0:
                continue
            out.append({"target": r["_target"][1], "size": int(r["size"]), "metric": metric, "measured": meas,
                        "predicted": pred[metric], "rel_err": (pred[metric] - meas) / meas,
                        "fitted": r["_fit"], "file": r.get("_file"),
                        **({"note": r["_why_not_fitted"]} if not r["_fit"] and r.get("_why_not_fitted") else {})})
    fit = [abs(e["rel_err"]) for e in out if e["fitted"]]
    errs = np.array(fit) if fit else np.array([np.nan])
    within = float(np.mean(errs <= 0.10)) if fit else float("nan")
    return {"rows": out, "skipped": skipped, "n": len(fit), "n_compared_only": len(out) - len(fit),
            "max_abs_rel_err": float(np.nanmax(errs)), "rms_rel_err": float(np.sqrt(np.nanmean(errs ** 2))),
            "share_within_10pct": within}


def _as_rows(df: Any) -> list[dict]:
    if hasattr(df, "to_dict"):
        recs = df.to_dict(orient="records")
    else:
        recs = [dict(r) for r in df]
    rows = []
    for r in recs:
        if _val(r, "size") is None:
            raise InvalidArgument(f"measurement row without a size: {r}")
        r = dict(r)
        r["_target"] = row_target(r)
        r["_measured"] = _measured(r)
        fit = r.get("_fit", True)
        r["_fit"] = True if fit is None or (isinstance(fit, float) and math.isnan(fit)) else bool(fit)
        rows.append(r)
    return rows


def calibrate(df: Any, base: str | Profile = "hopper-ndr", name: str = "fitted", *, description: str | None = None,
              label: str | None = None, topology: dict | None = None) -> tuple[Profile, dict]:
    """Fit ``base``'s parameters to measurements; return the fitted profile and a report.

    The report has ``rows`` (per path or stage and size: measured, predicted, relative error),
    ``max_abs_rel_err``, ``rms_rel_err``, ``fitted`` (parameter -> rows used and stage rms) and
    ``skipped`` rows. Parameters no row constrains keep the base value, labelled as borrowed.
    """
    prof0 = get_profile(base)
    rows = _as_rows(df)
    if not any(r["_target"] for r in rows):
        raise InvalidArgument("no rows the model can fit (need bench, copy_bench, p2p_bench or stage rows)")
    prov = getattr(df, "attrs", {}).get("provenance", {}) if hasattr(df, "attrs") else {}
    label = label or prov.get("what") or prov.get("kind") or "measurements"
    p = dict(prof0.params)
    fitted: dict[str, tuple[str, int, float]] = {}
    _fit_ce(rows, p, fitted, label)
    _fit_simple(rows, "memcpy", p, fitted, label, "memcpy_us", "cpu_memcpy_gbps")
    _fit_pageable(rows, p, fitted, label)
    _fit_simple(rows, "p2p", p, fitted, label, "p2p_lat_us", "p2p_gbps")
    _fit_p2p_staged(rows, p, fitted, label)
    _fit_wire(rows, p, fitted, label)
    _fit_gdr(rows, p, fitted, label, prof0.placement)
    sources = {}
    for k in p:
        if k in fitted:
            what, n, rms = fitted[k]
            sources[k] = f"fitted to {what} (least squares, {n} rows, stage rms error {rms:.1%})"
        else:
            sources[k] = f"from {prof0.name}, not constrained by the measurements: {prof0.sources[k]}"
    topo = topology if topology is not None else prof0.topology
    desc = description or f"{prof0.name} fitted to {label}"
    prof = Profile(name, desc, p, sources, topo, None if topology is not None else prof0.placement,
                   follows=f"calibrated to {label}", level=prof0.level)
    report = fit_report(prof, rows)
    report["fitted"] = {k: {"value": p[k], "rows": v[1], "stage_rms_rel_err": v[2]} for k, v in fitted.items()}
    report["base"] = prof0.name
    prof.calibration = {"base": prof0.name, "label": label, "n_rows": report["n"],
                        "max_abs_rel_err": report["max_abs_rel_err"], "rms_rel_err": report["rms_rel_err"]}
    return prof, report
