"""What labs 04 and 05 must show in the browser, checked against independent sources.

Expected values come from outside the plotting code: the recorded H200 sweeps
shipped as data (every recorded point must be drawn, at its recorded value), the
numbers the notebook's own exercise cells print (the crossover a learner finds
by brute force must be where the figure marks it), the quick sweep the notebook
asks for, and the physics the curriculum states (a NIC reading GPU memory across
sockets gets a fraction of the same-switch bandwidth and loses to staging).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = [
    "RECORDED_DIR",
    "EXPLORER_FALLBACK",
    "find_plot",
    "one_plot",
    "trace",
    "crossover_mark_bytes",
    "printed_int",
    "near",
    "check_lab04_plots",
    "check_lab05_plots",
]

RECORDED_DIR = Path(__file__).resolve().parents[2] / "gdrlab" / "data" / "recorded"

# Shown in an added cell when a lab has no control of its own under GDRLAB_QUICK=1:
# the lab kit's crossover explorer (profile, placement, chunk), built with quick
# mode off so it comes with its controls, and quick mode restored afterwards.
EXPLORER_FALLBACK = """\
import os
from gdrlab.labsupport import lab04 as _lab04
_saved_quick = os.environ.get("GDRLAB_QUICK", "")
os.environ["GDRLAB_QUICK"] = "0"
_explorer = _lab04.crossover_explorer({profile!r})
os.environ["GDRLAB_QUICK"] = _saved_quick
display(_explorer)"""

MIB = 1 << 20


def find_plot(plots: list[dict], title_prefix: str) -> list[dict]:
    """Plots whose title starts with ``title_prefix``."""
    return [p for p in plots if (p["title"] or "").startswith(title_prefix)]


def one_plot(plots: list[dict], title_prefix: str) -> dict:
    """The one plot whose title starts with ``title_prefix``."""
    found = find_plot(plots, title_prefix)
    assert len(found) == 1, f"want one plot titled {title_prefix!r}..., titles {[p['title'] for p in plots]}"
    return found[0]


def trace(plot: dict, name_prefix: str) -> dict:
    """The one trace of ``plot`` whose name starts with ``name_prefix``."""
    found = [t for t in plot["traces"] if (t["name"] or "").startswith(name_prefix)]
    names = [t["name"] for t in plot["traces"]]
    assert len(found) == 1, f"{plot['title']!r}: want one trace named {name_prefix!r}..., have {names}"
    return found[0]


def crossover_mark_bytes(plot: dict, pair: str = "gdr/pipelined") -> int | None:
    """Where the figure marks the ``pair`` crossover (its vertical line's x), or None."""
    marks = [t for t in plot["traces"] if (t["name"] or "").startswith(f"{pair} crossover")]
    if not marks:
        return None
    xs = {float(x) for x in marks[0]["x"]}
    assert len(xs) == 1, f"the {pair} crossover mark is not a vertical line: x = {sorted(xs)}"
    return int(round(xs.pop()))


def near(got_bytes: int, want_bytes: int, rel: float = 0.01) -> bool:
    """Within ``rel``: the exercise sweeps a grid (0.1 % steps), the mark is the exact crossover."""
    return abs(got_bytes - want_bytes) <= rel * want_bytes


def printed_int(texts: list[str], pattern: str) -> int:
    """The integer captured by ``pattern`` in the notebook's outputs (exactly one match)."""
    found = [m for t in texts for m in re.findall(pattern, t)]
    assert len(found) == 1, f"want one output matching {pattern!r}, found {found}"
    return int(found[0])


def _recorded_rows(path: str) -> dict[int, dict]:
    rows = json.loads((RECORDED_DIR / f"h200-bench-{path}.json").read_text())["rows"]
    return {int(r["size"]): r for r in rows}


def _close(got: list, want: list, rel: float = 1e-9) -> bool:
    return len(got) == len(want) and all(
        g is not None and abs(g - w) <= rel * max(abs(w), 1e-300) for g, w in zip(got, want)
    )


def check_lab04_plots(plots: list[dict], texts: list[str]) -> list[str]:
    """Assert what lab 04 draws after Run All; return notes for the report."""
    notes = []
    # 1. Measured sweeps: the notebook prints where each path's data came from.
    sources = dict(re.findall(r"(?m)^(staged|shared|pipelined)\s+(live|recorded)\b", "\n".join(texts)))
    measured = find_plot(plots, "staged vs shared vs pipelined")
    if sources:
        assert len(measured) == 2, f"want the latency and the bandwidth figure, titles {[p['title'] for p in plots]}"
        for plot in measured:
            column = "bw_gbps" if "bandwidth" in (plot["y_title"] or "") else "lat_p50_us"
            for path, source in sources.items():
                got = trace(plot, f"{path} — {source}")
                model = trace(plot, f"{path} model")
                if source == "recorded":
                    rows = _recorded_rows(path)
                    sizes = sorted(rows)
                    assert [int(x) for x in got["x"]] == sizes, f"{path}: x {got['x']} != recorded {sizes}"
                    want = [float(rows[s][column]) for s in sizes]
                    assert _close(got["y"], want), f"{path} {column}: drawn {got['y']} != recorded {want}"
                else:
                    # Quick mode measures three sizes: first, last and one between.
                    assert len(got["x"]) == 3, f"{path}: live quick sweep drew {len(got['x'])} points, want 3"
                assert model["x"] == got["x"], f"{path}: the model overlay is not at the measured sizes"
            notes.append(f"{plot['title']} [{column}]: " + ", ".join(
                f"{p} {s} {len(trace(plot, f'{p} — {s}')['x'])} pts" for p, s in sources.items()))
    # 2. The crossover figure: modelled curves on one 1 B .. 64 MiB grid, ~4 points per doubling.
    cross = one_plot(plots, "GDR vs pipelined staging")
    curves = [t for t in cross["traces"] if "crossover" not in (t["name"] or "")]
    assert {(t["name"] or "").split(" — ")[0] for t in curves} >= {"gdr", "pipelined", "staged"}, curves
    grid = curves[0]["x"]
    assert all(t["x"] == grid for t in curves), "modelled curves on different grids"
    n_doublings = 26  # 1 B .. 64 MiB
    assert grid[0] == 1 and grid[-1] == 64 * MIB, (grid[0], grid[-1])
    assert 0.9 * 4 * n_doublings <= len(grid) <= 4 * n_doublings + 1, f"{len(grid)} grid points"
    assert all(len(t["y"]) == len(grid) and None not in t["y"] for t in curves)
    # 3. The mark sits where the learner's brute-force sweep (exercise 1) found the crossover.
    snb_bytes = printed_int(texts, r"Sandy Bridge: (\d+) B")
    mark = crossover_mark_bytes(cross)
    assert mark is not None and near(mark, snb_bytes), f"crossover marked at {mark} B, exercise 1 printed {snb_bytes} B"
    notes.append(f"{cross['title']}: {len(curves)} curves x {len(grid)} points, "
                 f"gdr/pipelined crossover marked at {mark} B (exercise 1 printed {snb_bytes} B)")
    return notes


def check_lab05_plots(plots: list[dict]) -> list[str]:
    """Assert what lab 05 draws after Run All; return notes for the report."""
    # 1. Config A vs B over the quick sweep the notebook asks for: 1 << k, k = 3, 6, ..., 24.
    quick_sizes = [1 << k for k in range(3, 27, 3)]
    ab = one_plot(plots, "Config A")
    curves = {}
    for config, placement in (("A", "same-switch"), ("B", "cross-socket")):
        for path in ("gdr", "pipelined"):
            t = trace(ab, f"config {config} ({placement}): {path}")
            assert [int(x) for x in t["x"]] == quick_sizes, f"config {config} {path}: x {t['x']}"
            assert len(t["y"]) == len(quick_sizes) and None not in t["y"]
            curves[config, path] = t["y"]
    # The curriculum: same switch 9-10 GB/s, across sockets about 1 GB/s or less, below staging.
    assert all(a >= b for a, b in zip(curves["A", "gdr"], curves["B", "gdr"])), "B's GDR beats A's somewhere"
    assert curves["A", "gdr"][-1] > 5 * curves["B", "gdr"][-1], (curves["A", "gdr"][-1], curves["B", "gdr"][-1])
    assert curves["B", "pipelined"][-1] > curves["B", "gdr"][-1], "across sockets staging should beat GDR"
    notes = [f"{ab['title']}: 4 traces x {len(quick_sizes)} points; at 16 MiB GDR A "
             f"{curves['A', 'gdr'][-1]:.2f} GB/s, B {curves['B', 'gdr'][-1]:.2f} GB/s"]
    # 2. The recorded machine's PCIe tree: the real DGX-2H export, 16 GPUs behind PCIe switches, no NIC
    #    in the export (hwloc's test suite recorded it without network devices).
    tree = one_plot(plots, "PCIe tree")
    assert len(trace(tree, "gpu")["x"]) == 16, "the DGX-2H export has sixteen GPUs"
    assert len(trace(tree, "switch")["x"]) > 0, "the DGX-2H's GPUs sit behind PCIe switches"
    notes.append(f"{tree['title']}: 16 GPU nodes and PCIe switches drawn")
    return notes
