"""Physical properties of the model. The expected directions come from the table in docs/model.md,
written from physics before the code; this test reads the table, not the code under test."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from gdrlab import model
from gdrlab.errors import InvalidArgument, Unavailable

DOC = Path(__file__).resolve().parents[2] / "docs" / "model.md"
PROFILES = model.profiles()  # every builtin profile: the one registry lists them all
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = np.unique(np.r_[np.round(np.geomspace(1, GiB, 60)), [c * 256 * KiB + d for c in (1, 2, 3, 7)
                                                            for d in (-1, 0, 1)]]).astype(float)


def direction_table() -> list[tuple[str, list[str], list[str]]]:
    text = DOC.read_text()
    section = text.split("## Physics direction table", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("parameter", "") or set(cells[0]) <= {"-"}:
            continue
        rows.append((cells[0], cells[1].split(), cells[2].split()))
    return rows


def test_table_covers_every_parameter():
    names = [r[0] for r in direction_table()]
    assert sorted(names) == sorted(model.PARAMS), set(names) ^ set(model.PARAMS)


def _outputs(prof, token: str) -> list[np.ndarray]:
    """Every evaluation of ``token`` on ``prof`` (one per wire the path can run)."""
    if token == "bar1":
        return [np.array([float(model.bar1_available_bytes(prof))])]
    if token.startswith("stage:"):
        return [model.stage_us(prof, token[6:], SIZES)]
    path, metric = token.rsplit(".", 1)
    fn = model.latency_us if metric == "lat" else model.bandwidth_gbps
    wires = model.WIRES if path in model.NETWORK_PATHS else (None,)
    out = []
    for w in wires:
        try:
            out.append(fn(prof, path, SIZES, wire=w))
        except (Unavailable, InvalidArgument):
            continue
    return out


def _moves(name: str, value: float) -> list[tuple[float, int]]:
    """(new value, +1 raised / -1 lowered) within the parameter's physical range."""
    kind = model.PARAMS[name][1]
    if kind == "fraction":
        return [(v, s) for v, s in ((min(1.0, value * 1.5), 1), (value / 2, -1)) if v != value]
    if kind == "count":
        return [(v, s) for v, s in ((min(1024.0, value * 4), 1), (max(1.0, value // 4), -1)) if v != value]
    if value == 0:
        return [(1.0 if kind == "time" else 64.0 * KiB, 1)]
    return [(value * 4, 1), (value / 4, -1)]


@pytest.mark.parametrize("name,raises,lowers", direction_table(), ids=lambda x: x if isinstance(x, str) else "")
def test_each_parameter_moves_predictions_the_physical_way(name, raises, lowers):
    for token in raises + lowers:
        sign = 1 if token in raises else -1
        strict = False
        for pname in PROFILES:
            for placement in model.PLACEMENTS:
                base = model.get_profile(pname, placement=placement)
                before = _outputs(base, token)
                for value, way in _moves(name, base.params[name]):
                    try:
                        moved = base.with_overrides(**{name: value})
                    except InvalidArgument:
                        continue
                    for b, a in zip(before, _outputs(moved, token)):
                        change = (a - b) * sign * way
                        assert np.all(change >= -1e-9 * np.abs(b)), (
                            f"{name} {'raised' if way > 0 else 'lowered'} moved {token} the wrong way on {pname} "
                            f"({placement}) at sizes {SIZES[change < -1e-9 * np.abs(b)][:5]}")
                        strict = strict or bool(np.any(change > 1e-9 * np.abs(b)))
        assert strict, f"{name} never moves {token} on any profile, though physics says it must"


def _route_min(prof, path, wire):
    from gdrlab.model import routes

    links = routes.route(prof.params, path, prof.placement, wire or "tcp",
                         prof.topology.get("peer_link", "nvlink") == "nvlink")
    return min(links.values())


def _random_overrides(rng, prof) -> dict:
    out = {}
    for name in rng.choice(sorted(model.PARAMS), size=6, replace=False):
        kind = model.PARAMS[name][1]
        v = prof.params[name]
        if kind == "fraction":
            out[name] = float(rng.uniform(0.1, 1.0))
        elif kind in ("rate", "time") and v > 0:
            out[name] = float(v * 10 ** rng.uniform(-1.5, 1.5))
    return out


@pytest.mark.parametrize("pname", PROFILES)
def test_latency_grows_with_size_and_bandwidth_stays_under_the_slowest_link(pname):
    rng = np.random.default_rng(sum(map(ord, pname)))
    for trial in range(6):
        base = model.get_profile(pname)
        over = _random_overrides(rng, base) if trial else {}
        for placement in model.PLACEMENTS:
            prof = base.with_overrides(placement=placement, **over)
            for path in model.PATHS:
                for w in (model.WIRES if path in model.NETWORK_PATHS else (None,)):
                    try:
                        lat = model.latency_us(prof, path, SIZES, wire=w)
                        bw = model.bandwidth_gbps(prof, path, SIZES, wire=w)
                    except (Unavailable, InvalidArgument):
                        continue
                    where = f"{pname} {placement} {path}/{w} overrides {over}"
                    assert np.all(np.diff(lat) >= -1e-9 * lat[1:]), where
                    assert np.all(bw <= _route_min(prof, path, w) * (1 + 1e-9)), where


@pytest.mark.parametrize("pname", PROFILES)
def test_pipelined_no_worse_than_staged_from_two_chunks(pname):
    chunk = 64 * KiB
    sizes = np.unique(np.round(np.geomspace(chunk + 1, 256 * MiB, 80)))
    for w in model.WIRES:
        for depth in (2, 3, 4, 8, 16):
            try:
                pip = model.latency_us(pname, "pipelined", sizes, wire=w, chunk=chunk, depth=depth)
                stg = model.latency_us(pname, "staged", sizes, wire=w)
            except Unavailable:
                continue
            assert np.all(pip <= stg * (1 + 1e-9)), (pname, w, depth, sizes[pip > stg][:4])


@pytest.mark.parametrize("pname", [n for n in PROFILES if model.get_profile(n).has_nic])
def test_cross_socket_never_faster_than_same_switch(pname):
    for path in model.NETWORK_PATHS:
        for w in model.WIRES:
            try:
                near = model.latency_us(pname, path, SIZES, wire=w, placement="same-switch")
                far = model.latency_us(pname, path, SIZES, wire=w, placement="cross-socket")
                near_bw = model.bandwidth_gbps(pname, path, SIZES, wire=w, placement="same-switch")
                far_bw = model.bandwidth_gbps(pname, path, SIZES, wire=w, placement="cross-socket")
            except (Unavailable, InvalidArgument):
                continue
            assert np.all(far >= near * (1 - 1e-12)), (pname, path, w)
            assert np.all(far_bw <= near_bw * (1 + 1e-12)), (pname, path, w)


def test_issue_commands_are_bounded_by_the_link_they_name():
    assert model.bandwidth_gbps("hopper-ndr", "gdr", [GiB], gpu_pcie_gbps=6.25)[0] <= 6.25
    assert model.bandwidth_gbps("h200-lab", "p2p-staged", [GiB], gpu_pcie_gbps=15.75)[0] <= 15.75
    lat = model.latency_us("volta-dgx1", "pipelined", [262144, 262145, 393216])
    assert lat[0] < lat[1] < lat[2]


def test_extreme_but_allowed_values_stay_finite_without_warnings():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, kind in ((n, model.PARAMS[n][1]) for n in model.PARAMS):
            v = {"rate": 1e-6, "time": 1e9}.get(kind)
            if v is None:
                continue
            for path in ("host", "staged", "pipelined", "gdr", "gdrcopy"):
                try:
                    lat = model.latency_us("hopper-ndr", path, [1, GiB], **{name: v})
                except InvalidArgument as exc:  # one clear line, naming what overflowed
                    assert "overflow" in str(exc) and name in str(exc)
                    continue
                assert np.all(np.isfinite(lat)), (name, path)


def test_every_builtin_profile_is_listed_once_and_loads():
    """One registry: every profile the package ships is listed, and every listed one loads."""
    from gdrlab.model import catalog

    names = model.profiles()
    assert len(names) == len(set(names))
    assert set(names) == set(catalog.BUILTIN) | set(catalog.FITTED)
    shipped = {p.stem for p in catalog.PROFILE_DIR.glob("*.json")}
    assert shipped <= set(catalog.FITTED), f"profile files outside the registry: {shipped - set(catalog.FITTED)}"
    for n in names:
        assert model.get_profile(n).name == n


def test_a_builtin_missing_from_the_order_is_refused(monkeypatch):
    from gdrlab.model import catalog

    monkeypatch.setitem(catalog.BUILTIN, "new-profile", catalog.BUILTIN["hopper-ndr"])
    with pytest.raises(RuntimeError, match="not ordered"):
        catalog._check_registry()
