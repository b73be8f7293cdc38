"""Lab 00, setup check: what this machine can show, and the doctor report of the recorded H200.

The H200's report is the recorded file ``h200-doctor`` when it ships; otherwise it is assembled
from the facts measured on that machine (CURRICULUM's "Measured on an NVIDIA H200 machine") and
says so in its provenance. Either way :func:`gdrlab.hw.path_availability` decides the paths, so
the reasons read exactly like ``gdrlab doctor``'s.
"""
from __future__ import annotations

import copy
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from .. import provenance
from ..hw import path_availability

if TYPE_CHECKING:
    import pandas as pd

    from ..widgets import SweepWidget

__all__ = ["H200_FACTS", "run_doctor_cli", "paths_table", "gpu_table", "h200_report", "host_measure",
           "host_sweep",
           "host_sweep_widget", "host_model", "default_profile", "host_spread", "spread_figure", "spread_note",
           "paths_view"]

GiB = 1 << 30

# One NVIDIA H200, PCIe Gen5 x16, driver 580.159.04 (open kernel module), CUDA 13.0, KVM guest,
# kernel with IB core and mlx5 built in but no RDMA device, nvidia_peermem not loaded,
# libibverbs installed, GDR and dma-buf attributes 1, BAR1 256 GiB, one NUMA node.
H200_FACTS: dict[str, Any] = {
    "source": "recorded facts of one NVIDIA H200 machine (2026-11), assembled into a doctor report",
    "cuda": {"usable": True, "reason": "", "driver_version": 13000},
    "gpus": [{
        "index": 0, "name": "NVIDIA H200", "pci_bus_id": None, "bar1_total_bytes": 256 * GiB,
        "total_mem_bytes": 150_109_880_320,  # recorded (h200-doctor): what the driver reports, 139.8 GiB
        "bar1_used_bytes": None, "bar1_source": "nvml", "pcie_gen": 5, "pcie_width": 16, "numa_node": 0,
        "gdr_supported": True, "dmabuf_supported": True, "cuda_usable": True,
        "bars": [{"bar": 0, "size_bytes": 16 << 20}, {"bar": 2, "size_bytes": 256 * GiB},
                 {"bar": 4, "size_bytes": 32 << 20}],
    }],
    "gpus_reason": "",
    "rdma_devices": [],
    "rdma_reason": "no RDMA device found (/sys/class/infiniband is empty)",
    "peer_memory": {"nvidia_peermem_loaded": False, "nv_peer_mem_loaded": False, "kernel_dmabuf": True,
                    "dmabuf_usable": True, "dmabuf_reason": "kernel, GPU and libibverbs all support dma-buf"},
    "libraries": {
        "libcuda.so.1": {"found": True, "version": "580.159.04", "reason": ""},
        "libnvidia-ml.so.1": {"found": True, "version": "580.159.04", "reason": ""},
        "libibverbs.so.1": {"found": True, "version": None, "reason": "", "has_ibv_reg_dmabuf_mr": True},
        "libgdrapi.so.2": {"found": False, "version": None, "reason": "gdrcopy is not installed there"},
    },
    "gdrdrv_present": False,
}


def run_doctor_cli(json_output: bool = False, timeout_s: float = 120.0) -> str:
    """Run ``gdrlab doctor`` as a learner would in a terminal and return what it printed."""
    cmd = [sys.executable, "-m", "gdrlab", "doctor"] + (["--json"] if json_output else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    return proc.stdout + (proc.stderr if proc.returncode else "")


def paths_table(report: dict[str, Any]) -> pd.DataFrame:
    """One row per path: available, reason, fix (a DataFrame)."""
    import pandas as pd

    paths = report.get("paths") or path_availability(report)
    return pd.DataFrame([{"path": p, **v} for p, v in paths.items()]).set_index("path")


def paths_view(report: dict[str, Any]) -> Any:
    """:func:`paths_table` for display: every reason and fix in full, wrapped, left-aligned (a
    DataFrame's display cuts them at 50 characters, so the fix, the useful part, was lost)."""
    df = paths_table(report)
    return df.style.set_properties(subset=[c for c in ("reason", "fix") if c in df.columns],
                                   **{"white-space": "normal", "text-align": "left", "min-width": "18em"})


def gpu_table(report: dict[str, Any]) -> pd.DataFrame:
    """The GPUs of a report with BAR1 in GiB (a DataFrame; empty when the report has none)."""
    import pandas as pd

    rows = []
    for g in report.get("gpus") or []:
        bar1 = g.get("bar1_total_bytes")
        rows.append({"index": g.get("index"), "name": g.get("name"), "pci_bus_id": g.get("pci_bus_id"),
                     "bar1_GiB": None if bar1 is None else bar1 / GiB, "pcie": f"Gen{g.get('pcie_gen')} x{g.get('pcie_width')}",
                     "numa_node": g.get("numa_node"), "gdr_supported": g.get("gdr_supported"),
                     "dmabuf_supported": g.get("dmabuf_supported")})
    return pd.DataFrame(rows)


def h200_report() -> tuple[dict, str]:
    """``(report, where_from)``: the recorded H200 doctor report, or the assembled facts report.

    Both carry ``report["provenance"]`` (a dict, kind ``recorded``) and ``report["paths"]``.
    """
    from ..recorded import RecordedDataMissing, load_report

    try:
        report = load_report("h200-doctor")
        where = "the recorded `gdrlab doctor --json` of the H200 machine"
    except RecordedDataMissing:
        report = copy.deepcopy(H200_FACTS)
        report["provenance"] = provenance.recorded(
            "NVIDIA H200, PCIe Gen5 x16, driver 580.159.04", "2026-11",
            command="facts measured on the machine, assembled by hand into the doctor report's form "
                    "(no doctor run was shipped)")
        where = "facts measured on the H200 machine, assembled into a doctor report (no doctor run shipped)"
    report["paths"] = path_availability(report)
    return report, where


def host_measure(size: int) -> pd.DataFrame:
    """One size of the ``host`` path over the tcp wire (a local peer process; any machine)."""
    from ..engine import bench

    return bench("host", [int(size)], mode="both")


def default_profile() -> str:
    """The profile the labs overlay: ``h200-lab`` (fitted to the recorded H200) when it ships,
    else ``hopper-ndr`` (H100/H200 class figures)."""
    from .. import model

    names = model.profiles()
    return "h200-lab" if "h200-lab" in names else "hopper-ndr"


def host_model(sizes: Any = "8:4M", profile: str | None = None) -> pd.DataFrame | None:
    """The model's ``host`` path over the tcp wire (what this lab measures), or None with no model."""
    from ..widgets import model_frame

    try:
        return model_frame(profile or default_profile(), "host", sizes, wire="tcp")
    except Exception:  # the model may not describe this path; the live curve stands alone
        return None


def host_sweep(sizes: Any = "8:4M") -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """``(live DataFrame, model DataFrame or None)``: the ``host`` path measured now over tcp
    loopback (a few sizes in quick mode)."""
    from ..engine import bench
    from ..widgets import sweep_sizes

    return bench("host", sweep_sizes(sizes), mode="both"), host_model(sizes)


def host_sweep_widget(sizes: Any = "8:4M", y: str = "lat_p50_us") -> SweepWidget:
    """A :class:`gdrlab.widgets.SweepWidget` measuring the ``host`` path size by size."""
    from ..widgets import SweepWidget

    from ..engine import LIVE_DURATION_S, Sweep

    # One local peer process and one connection for the whole sweep, not a process per point;
    # each size's iteration count fills LIVE_DURATION_S (gdrlab bench --duration), so a point
    # lands every few hundredths of a second where the fixed counts took up to a second.
    return SweepWidget(Sweep("host", duration=LIVE_DURATION_S), sizes, y=y, name="host path, tcp loopback", model=host_model(sizes),
                       title="host path over the tcp wire")


def host_spread(size: int = 8, repeats: int = 5, iters: int = 2000) -> "pd.DataFrame":
    """``repeats`` latency tests of one size of the ``host`` path over one connection, back to
    back: one row per repeat with its p50 and p99 (µs), live provenance. How much one machine's
    small-message latency spreads, within a test (p99 against p50) and between tests (the p50s)."""
    import pandas as pd

    from ..engine import Sweep

    rows = []
    with Sweep("host", mode="lat", iters=int(iters)) as sweep:
        for i in range(int(repeats)):
            row, _ = sweep.row(int(size))
            rows.append({"repeat": i + 1, "size": row["size"], "iters": row["iters"],
                         "lat_p50_us": row["lat_p50_us"], "lat_p99_us": row["lat_p99_us"],
                         "verified": row["verified"]})
        prov = sweep.provenance()
    return provenance.attach(pd.DataFrame(rows), prov)


def spread_figure(df: "pd.DataFrame") -> Any:
    """Each repeat's p50 as a point and its p99 as the top of a bar above it (µs, log scale)."""
    import plotly.graph_objects as go

    src = provenance.label(df)
    fig = go.Figure()
    fig.add_bar(x=df["repeat"], y=df["lat_p99_us"] - df["lat_p50_us"], base=df["lat_p50_us"],
                name="p50 to p99", marker_color="rgba(99,110,250,0.25)",
                hovertemplate="repeat %{x}: p99 %{y:.1f} µs above p50<extra></extra>")
    fig.add_scatter(x=df["repeat"], y=df["lat_p50_us"], mode="markers", name="p50",
                    marker={"size": 10, "color": "rgb(99,110,250)"},
                    hovertemplate="repeat %{x}: p50 %{y:.2f} µs<extra></extra>")
    size = int(df["size"].iloc[0])
    fig.update_layout(title=f"{size} B host latency, {len(df)} tests in a row ({src})", height=360,
                      xaxis_title="test", yaxis_title="latency, half round trip (µs)", yaxis_type="log",
                      barmode="overlay")
    return fig


def spread_note(df: "pd.DataFrame") -> str:
    """One sentence computed from ``df`` (from :func:`host_spread`): the p50s' range between tests
    and how far the p99 sits above the p50 within them."""
    p50, p99 = df["lat_p50_us"], df["lat_p99_us"]
    ratio = (p99 / p50).median()
    return (f"Here, {len(df)} tests of {int(df['size'].iloc[0])} B in a row: p50 from {p50.min():.1f} to "
            f"{p50.max():.1f} µs, and the p99 a median {ratio:.1f}x the p50 within a test "
            f"({provenance.label(df)}).")
