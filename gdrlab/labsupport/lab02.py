"""Lab 02, P2P DMA: copy-engine copies (H2D/D2H, pinned vs pageable) and GPU-to-GPU copies with
peer access on and off; live where the GPUs are, recorded H200 data and the model everywhere."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .. import provenance as prov

if TYPE_CHECKING:
    import ipywidgets
    import pandas as pd

    from ..recorded import LiveOrRecorded

__all__ = ["host_copy_live", "DIRECTIONS", "MEMORIES", "P2P_PROFILE", "copy_profile", "copy_measure", "copy_data", "copy_model",
           "copy_panel", "p2p_data", "p2p_model", "p2p_explorer", "alpha_beta_frame", "PLACEMENT_PROFILES",
           "placement_table"]

DIRECTIONS = ("h2d", "d2h")
MEMORIES = ("pinned", "pageable")
P2P_PROFILE = "hopper-ndr"  # H100/H200 class with NVLink; its P2P figures are the 2x H200's


def copy_profile() -> str:
    """``h200-lab`` (fitted to the recorded H200) when it ships, else ``hopper-ndr``."""
    from .. import model

    return "h200-lab" if "h200-lab" in model.profiles() else "hopper-ndr"


def _live_args(min_gpus: int = 1) -> dict:
    from ..engine import cuda_status, gpus

    st = cuda_status()
    if not st["usable"]:
        return {"live": False, "why_not_live": f"no GPU here ({st['reason']})"}
    n = len(gpus())
    if n < min_gpus:
        return {"live": False, "why_not_live": f"needs {min_gpus} GPUs, this machine has {n}"}
    return {"live": True}


def copy_measure(direction: str, memory: str) -> Callable[[int], pd.DataFrame]:
    """``measure(size)`` for a SweepWidget: one copy_bench row."""
    from ..engine import copy_bench

    return lambda size: copy_bench(direction, [int(size)], memory=memory)


def copy_data(direction: str, memory: str, sizes: Any = "8:256M") -> LiveOrRecorded:
    """:class:`gdrlab.recorded.LiveOrRecorded`: copies measured now (few sizes in quick mode)
    with a GPU, else the recorded ``h200-copy-<direction>-<memory>``."""
    from ..engine import copy_bench
    from ..recorded import live_or_recorded
    from ..widgets import sweep_sizes

    return live_or_recorded(lambda: copy_bench(direction, sweep_sizes(sizes), memory=memory),
                            f"h200-copy-{direction}-{memory}", **_live_args())


def copy_model(direction: str, memory: str, sizes: Any = "8:256M", profile: str | None = None,
               **overrides: float) -> pd.DataFrame:
    """The model's copy-engine copy (``stage_us``) as a frame with lat_us and bw_gbps."""
    import numpy as np
    import pandas as pd

    from .. import model
    from ..units import parse_sizes

    profile = profile or copy_profile()
    s = np.asarray(parse_sizes(sizes), dtype=float)
    lat_us = np.asarray(model.stage_us(profile, f"copy-{direction}-{memory}", s, **overrides), dtype=float)
    df = pd.DataFrame({"size": s.astype(np.int64), "lat_us": lat_us, "bw_gbps": s / lat_us / 1e3})
    extra: dict[str, Any] = {"stage": f"copy-{direction}-{memory}"}
    if overrides:
        extra["overrides"] = overrides
    prov.attach(df, prov.modelled(profile, **extra), column=False)
    return df


def copy_panel(sizes: Any = "8:256M", y: str = "bw_gbps") -> ipywidgets.VBox:
    """Dropdowns (direction, host memory, model profile) over a live SweepWidget of copy_bench; the
    recorded H200 sweep and the model for the same copy are overlaid."""
    import ipywidgets as w

    from .. import model
    from ..recorded import RecordedDataMissing, load
    from ..widgets import SweepWidget

    direction = w.Dropdown(options=DIRECTIONS, value="h2d", description="direction")
    memory = w.Dropdown(options=MEMORIES, value="pinned", description="host memory")
    profile = w.Dropdown(options=model.profiles(), value=copy_profile(), description="model profile")
    holder = w.VBox()
    state: dict = {}

    def rebuild(_change: Any = None) -> None:
        old = state.get("sweep")
        if old is not None:
            old.stop(wait=True)
        overlays = {"model": copy_model(direction.value, memory.value, sizes, profile.value)}
        try:
            overlays["H200"] = load(f"h200-copy-{direction.value}-{memory.value}")
        except RecordedDataMissing:
            pass
        sweep = SweepWidget(copy_measure(direction.value, memory.value), sizes, y=y,
                            name=f"{direction.value} {memory.value}", model=overlays,
                            title=f"copy engine, {direction.value}, {memory.value} host memory")
        state["sweep"] = sweep
        holder.children = (sweep.widget,)

    for control in (direction, memory, profile):
        control.observe(rebuild, names="value")
    rebuild()
    panel = w.VBox([w.HBox([direction, memory, profile]), holder])
    panel.sweep = lambda: state["sweep"]  # the SweepWidget on show (for .start() / .result())
    return panel


def p2p_data(sizes: Any = "8:256M", src: int = 0, dst: int = 1) -> LiveOrRecorded:
    """:class:`gdrlab.recorded.LiveOrRecorded` of GPU-to-GPU copies with peer access on and off:
    live with 2+ GPUs, else the 2x H200 figures (``h200x2-p2p-curriculum``)."""
    import pandas as pd

    from ..engine import p2p_bench
    from ..errors import CudaError, Unavailable
    from ..recorded import live_or_recorded
    from ..widgets import sweep_sizes

    def measure() -> pd.DataFrame:
        try:
            on = p2p_bench(src, dst, sweep_sizes(sizes), peer_access=True)
        except CudaError as exc:  # e.g. no peer path between these two GPUs: say so, show the record
            raise Unavailable(f"peer access GPU{src} -> GPU{dst} failed: {exc}") from exc
        off = p2p_bench(src, dst, sweep_sizes(sizes), peer_access=False)
        df = pd.concat([on, off], ignore_index=True)
        prov.attach(df, prov.derived(on) if prov.of(on) else prov.live(), column=False)
        return df

    return live_or_recorded(measure, "h200x2-p2p-curriculum", **_live_args(min_gpus=2))


def p2p_model(sizes: Any = "8:256M", profile: str = P2P_PROFILE) -> dict[str, pd.DataFrame]:
    """``{"peer access on": frame, "peer access off": frame}`` from the model's p2p paths."""
    from ..widgets import model_frame

    return {"peer access on": model_frame(profile, "p2p", sizes),
            "peer access off": model_frame(profile, "p2p-staged", sizes)}


def p2p_explorer(sizes: Any = "8:256M", y: str = "bw_gbps") -> Any:
    """Sliders over the P2P parameters of the model (peer access on and off)."""
    from ..widgets import model_explorer

    return model_explorer(P2P_PROFILE, paths=["p2p", "p2p-staged"], sizes=sizes, y=y,
                          params=["p2p_lat_us", "p2p_gbps", "p2p_staged_lat_us", "p2p_staged_gbps"])


def alpha_beta_frame(alpha_us: float, beta_gbps: float, sizes: Any = "8:256M",
                     label: str = "alpha-beta fit") -> pd.DataFrame:
    """``t = alpha + n / beta`` as a modelled frame (lat_us, bw_gbps) for overlaying a fit."""
    import numpy as np
    import pandas as pd

    from ..units import parse_sizes

    s = np.asarray(parse_sizes(sizes), dtype=float)
    lat_us = float(alpha_us) + s / (float(beta_gbps) * 1e3)
    df = pd.DataFrame({"size": s.astype(np.int64), "lat_us": lat_us, "bw_gbps": s / lat_us / 1e3})
    # A learner's own alpha-beta line: the model is theirs, so its label names it as such.
    prov.attach(df, prov.modelled(f"{label} (alpha {alpha_us:.3g} us, beta {beta_gbps:.3g} GB/s)",
                                  fit="you" if label == "your fit" else "least squares"), column=False)
    return df


def host_copy_live(sizes: Any = None, repeats: int | None = None) -> pd.DataFrame:
    """Live, on any machine: the CPU copying host memory to host memory (``numpy.copyto``), as
    rows of size, lat_p50_us, lat_min_us and bw_gbps, to fit with the same ``t = alpha + n / beta``.

    Not a DMA: the CPU moves the bytes, and ``alpha`` is the cost of one Python call. Quick mode
    measures fewer sizes and repeats. Buffers stay at or below 64 MiB.
    """
    import time

    import numpy as np
    import pandas as pd

    from ..units import parse_sizes
    from . import quick_mode

    quick = quick_mode()
    sizes = sizes if sizes is not None else ("8:16M" if quick else "8:64M")
    repeats = repeats or (7 if quick else 31)
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    grid = [int(n) for n in parse_sizes(sizes)]
    if quick:
        grid = grid[::2] + ([grid[-1]] if len(grid) % 2 == 0 else [])
    rows = []
    for n in grid:
        if n > 64 << 20:
            raise ValueError(f"size {n} is above the 64 MiB this measurement allows")
        src = np.ones(n, dtype=np.uint8)
        dst = np.empty_like(src)
        np.copyto(dst, src)  # first touch: page faults are not part of a copy
        times_us = []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            np.copyto(dst, src)
            times_us.append((time.perf_counter_ns() - t0) / 1e3)
        p50 = float(np.median(times_us))
        rows.append({"size": n, "lat_p50_us": p50, "lat_min_us": float(min(times_us)),
                     "bw_gbps": n / p50 / 1e3, "verified": bool(dst[-1] == 1)})
    df = pd.DataFrame(rows)
    prov.attach(df, prov.live({"what": f"numpy.copyto, host to host memory, median of {repeats}"}), column=False)
    return df



#: Profiles whose GPU and NIC sit under one PCIe switch in their good placement (lab 02's table of
#: what PCIe peer DMA gives a NIC): a 2014 K40 + FDR server, a DGX-1 (EDR), an H100/H200 with NDR.
PLACEMENT_PROFILES = ("kepler-ivb-2014", "volta-dgx1", "hopper-ndr")


def placement_table(profiles: tuple[str, ...] = PLACEMENT_PROFILES, size: int = 256 << 20) -> pd.DataFrame:
    """The model's GPUDirect RDMA bandwidth (GB/s, 1e9 B/s) at ``size`` for each profile with the GPU
    and NIC under one PCIe switch and on different sockets: the good and the poor end of PCIe peer
    DMA. Each row names its profile; the frame carries modelled provenance."""
    import pandas as pd

    from .. import model

    rows = []
    for name in profiles:
        prof = model.get_profile(name)
        row: dict[str, str | float] = {"profile": name, "machine": prof.description.split(", ")[0].split(" (")[0]}
        for placement in ("same-switch", "cross-socket"):
            row[f"gdr_gbps_{placement}"] = round(float(model.bandwidth_gbps(name, "gdr", [size], placement=placement)[0]), 2)
        rows.append(row)
    df = pd.DataFrame(rows)
    prov.attach(df, prov.modelled(", ".join(profiles), what=f"gdr bandwidth at {size} B by placement"), column=False)
    return df
