# %% [markdown] id="04-title"
# # Lab 04: staging vs RDMA, and where they cross
#
# A GPU buffer bound for another node can travel several ways. Lab 02 measured their
# ingredients (a `cudaMemcpy` costs several µs to launch however small, 5.6 µs H2D and 6.4 µs D2H
# at 8 B in the H200 recording; pinned copies reach tens of GB/s), lab 03 explained the registered buffers they land in. Here the ways race each other.
#
# **Learning goals**
#
# 1. Measure (or read recorded measurements of) `staged`, `shared` and `pipelined` transfers
#    against message size, and explain each curve's shape.
# 2. Write the code that finds where two modelled paths cross, and use it on GPUDirect RDMA
#    against pipelined staging; see the crossing move with the platform (Sandy Bridge, Ivy Bridge,
#    A100 + HDR, Hopper, GH200), placement and chunk size.
# 3. Write the hybrid threshold policy an MPI library uses, in the **right direction**.
#
# **Live on** a GPU (tcp wire between two local processes), plus GDR over verbs with an RDMA
# HCA; the wire alone (`host` path) runs live on any machine. Elsewhere: recorded H200 sweeps
# where they ship, and the model.
#
# | duration | prerequisites |
# |---|---|
# | 50 min (reading 15, running 15, exercises 20) | labs 02 and 03 |
#
# **Glossary**
#
# - **staged / shared / pipelined / gdr**: the transfer paths of lab 00; pipelined cuts a staged
#   transfer into chunks so the copy and the wire overlap.
# - **crossover**: the message size at which one path becomes faster than another.
# - **eager / rendezvous**: MPI protocols for small messages (sent at once into a buffer the receiver
#   has ready) and large ones (a handshake first, then the data).
# - **hybrid threshold policy**: a rule that picks a path by message size, as MVAPICH2-GDR does
#   with `MV2_GPUDIRECT_LIMIT`.
# - **model profile**: a named set of hardware parameters the model predicts from; each says its
#   level (verbs or MPI) and its sources.

# %% id="04-cuda-status"
import numpy as np
import pandas as pd
from IPython.display import display

from gdrlab import engine, grading, model, provenance
from gdrlab.labsupport import lab04, profile_with_level, quick_mode

QUICK = quick_mode()
print("quick mode:", QUICK, "| GPU here:", engine.cuda_status()["usable"])

# %% [markdown] id="04-ways-gpu-buffer-leaves"
# ## 1. The ways a GPU buffer leaves the node
#
# ![the transfer paths, drawn as boxes and copies](img/04-paths.svg)
#
# | path | copies on the sender | what it changes |
# |---|---|---|
# | `staged` | `cudaMemcpy` to a bounce buffer, CPU `memcpy` to the wire's buffer | the baseline (pre-2010) |
# | `shared` | `cudaMemcpy` straight into the registered buffer | one host copy saved (GPUDirect 1.0, 2010) |
# | `pipelined` | `shared` in chunks over several buffers | copy of one chunk overlaps the send of another |
# | `gdr` | none: the NIC reads GPU memory | no copy launch; the NIC's peer reads set the rate |
# | `gdrcopy` | CPU copy through BAR1 instead of `cudaMemcpy` | no copy launch; the CPU's BAR1 reads set the rate |
#
# Which path is faster at which size is for you to find in this lab.

# %% [markdown] id="04-measure-staged-shared-pipelined"
# ## 2. Measure: staged, shared, pipelined over the tcp wire
#
# On a GPU machine the cell below measures each path now between two local processes over
# TCP (nine sizes; three in quick mode; the widget after it sweeps every power of two). Elsewhere it loads the recorded sweeps from an NVIDIA H200
# (if this copy of gdrlab ships them) and says so; with neither, it says why.

# %% [markdown] id="04-predict-sweep"
# ### Exercise 0: predict before you measure
#
# Before the next cell runs, commit a prediction for the recorded H200 sweep: for one 64 MiB
# message over the TCP wire, how many times longer does `staged` take than `pipelined`? Set
# `predicted_staged_over_pipelined_64mib` (think: which copies does each path serialise, which does
# it overlap, and what caps both?). The number itself is not graded: a notebook cannot tell a
# prediction typed before the plot from one typed after. Your reason, and how the recording
# differed, is graded by hand in the cell after the summary.

# %% id="ex0-predict"
predicted_staged_over_pipelined_64mib = None   # your prediction: how many times longer
if grading.done(predicted_staged_over_pipelined_64mib, name="Exercise 0"):
    print("your prediction, staged / pipelined at 64 MiB:", predicted_staged_over_pipelined_64mib)

# %% id="04-measured-data"
data = lab04.measured_data(lab04.STATIC_SIZES)   # recorded sweeps keep all their sizes
for path, result in data.items():
    print(f"{path:10s} {result.source:9s} {result.why}")

# %% id="04-cuda-status-2"
# The live sweep widget: start/stop a background sweep of one path, model overlaid.
if engine.cuda_status()["usable"] and not QUICK:
    sweep = lab04.sweep_widget("pipelined", "8:64M")
    display(sweep)
else:
    print("live sweep widget skipped:", "quick mode" if QUICK else engine.cuda_status()["reason"])

# %% id="04-measured-figure"
if any(r.data is not None for r in data.values()):
    display(lab04.measured_figure(data, y="lat_p50_us"))
    display(lab04.measured_figure(data, y="bw_gbps"))
else:
    print("no measured data on this machine and no recorded sweep shipped: the model below carries the lab")

# %% id="04-measured-summary"
summary = lab04.measured_summary(data)
summary

# %% [markdown] id="04-measured-summary-note"
# What to look for in the measured curves (and in the summary above):
#
# * at small sizes the three paths sit near one floor (`small_lat_us`). What sets it is in the
#   recording itself: the next cell takes the H200's floor apart into the wire alone and the two
#   copy launches. (If small messages come out *slower* than mid-size ones on a live run, you are
#   seeing the TCP stack itself: acknowledgements, interrupt moderation, a receiver asleep in
#   `recv`. RDMA wires avoid all of it.)
# * `shared` pulls ahead of `staged` once the host `memcpy` it skips is a real cost (large
#   messages; at 8 bytes that copy costs next to nothing, so `shared` saves nothing there);
# * `pipelined` is fastest for large messages (compare `large_vs_staged`) because the GPU copy
#   of one chunk overlaps the send of the previous one. Below one chunk (256 KiB) there is
#   nothing to overlap, and the **model** draws pipelined equal to shared there; the second line
#   of the next cell says what the recording shows instead. Over loopback TCP the wire caps the
#   streaming bandwidth of all three, so the latency plot shows the difference more clearly than
#   the bandwidth plot.
# * Where the model misses most is large staged messages (the third line): recorded staged
#   bandwidth *falls* above 1 MiB, which a model of fixed costs plus constant rates cannot draw
#   (the host `memcpy` of large buffers and the TCP socket buffers in a VM are the likely causes;
#   the recording cannot say which).

# %% id="04-floor-parts"
# Each sentence is computed from the recordings (gdrlab/data/recorded) when this cell runs.
from gdrlab.recorded import RecordedDataMissing

try:
    print(lab04.floor_note())
    print(lab04.pipelined_vs_shared_note())
    _st = grading.dataset("h200-bench-staged").set_index("size")["lat_p50_us"]
    _modelled = float(model.latency_us("h200-lab", "staged", np.array([64.0 * 2**20]), wire="tcp")[0])
    print(f"Staged at 64 MiB: recorded {_st.loc[64 << 20] / 1e3:.1f} ms, modelled (h200-lab) {_modelled / 1e3:.1f} ms "
          f"({1 - _modelled / _st.loc[64 << 20]:.0%} less than measured).")
except RecordedDataMissing as exc:
    print("the recorded H200 sweeps do not ship with this copy:", exc)

# %% [markdown] id="explain-prediction-sweep-question" nbgrader={"grade": false, "grade_id": "explain-prediction-sweep-question", "locked": true, "schema_version": 3, "solution": false}
# ### Your prediction's reason (2 points, graded by hand)
#
# Why did you predict that ratio, and where was the recording different?

# %% [markdown] id="explain-prediction-sweep" nbgrader={"grade": true, "grade_id": "explain-prediction-sweep", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# Staged does its two GPU copies, two host memcpys and the wire one after another; pipelined
# overlaps the copies of one chunk with the send of the previous one, so for a large message it
# approaches the slowest single stage (the TCP wire). So about 2-3x; the recording shows 2.6x.

# %% [markdown] id="04-no-nic-note"
# None of these paths uses the NIC's ability to read GPU memory. That needs an HCA: the next
# cell measures `gdr` over verbs where one exists.

# %% [markdown] id="04-wire-alone-intro"
# ### The wire alone, live on any machine
#
# Every staging path is copies plus the wire. The `host` path is the wire alone (host buffer to host
# buffer over TCP loopback, as in lab 00), and it runs on this machine now. On the H200 the
# recorded `host` and `staged` sweeps come from the same machine, so the gap between them is what
# the two GPU copies and the host `memcpy` cost; your live `host` curve shows how this machine's
# wire compares with the H200's (a VM or a laptop is often slower per message).

# %% id="04-wire-alone"
from gdrlab.labsupport import lab00
from gdrlab.widgets import plot_sweep

wire_live, _ = lab00.host_sweep("8:4M")
curves = {"host, this machine": wire_live, "host, H200": grading.dataset("h200-bench-host")}
if data["staged"].data is not None:
    where = "H200" if data["staged"].source == "recorded" else "this machine"
    curves[f"staged, {where}"] = data["staged"].data
plot_sweep(curves, y="lat_p50_us", title="the wire alone (host) against staging")


# %% [markdown] id="04-chunk-size"
# ### The chunk size
#
# Pipelining needs chunks small enough that copy and send overlap, and large enough that
# each chunk's fixed costs (a copy launch, a wire message) stay small next to its bytes.
# MVAPICH2-GDR's default, `MV2_CUDA_BLOCK_SIZE`, is 256 KiB. One 64 MiB message, pipelined
# with different chunk sizes:

# %% id="04-chunk-data"
chunks = lab04.chunk_data()
print(chunks.source, "-", chunks.why)
if chunks.data is not None:
    display(lab04.chunk_figure(chunks.data))

# %% id="04-gdr-live"
gdr_df, why = lab04.gdr_live("8:64M")
print("gdr over verbs:", why)
if gdr_df is not None:
    display(lab04.measured_figure({"gdr": gdr_df}, y="lat_p50_us"))

# %% [markdown] id="04-small-messages-gdr-large"
# ## 3. GDR against pipelined staging: which wins where?
#
# One of the articles this kit started from (on GPUDirect RDMA, pitfall 4) states a hybrid
# policy for MVAPICH2-GDR: one path for small messages, the other for large ones, with a reason
# about doorbells and copies. Do not take its word for it: find the crossing yourself, from the
# model (`gdrlab.model`), for five platforms:
#
# | profile | machine | level |
# |---|---|---|
# | `kepler-snb-2013` | K20 (PCIe Gen2) + ConnectX-3 FDR, Sandy Bridge | MPI |
# | `kepler-ivb-2014` | K40 + Connect-IB FDR, Ivy Bridge | verbs |
# | `a100-hdr` | A100 + ConnectX-6 HDR, DGX A100 class | verbs |
# | `hopper-ndr` | H100 + ConnectX-7 NDR, Sapphire Rapids | verbs |
# | `gh200` | GH200 (Grace + Hopper over NVLink-C2C) + ConnectX-7 NDR | verbs |
#
# > **Read the level.** The profiles are not all calibrated at the same layer. `kepler-snb-2013`
# > is **MPI level**: its figures come from MVAPICH2-GDR runs and include about 3.6 µs of MPI
# > software per message. The others are **verbs level** (no MPI). Most of the small-message
# > difference between the two Kepler profiles is that software, not the CPU generation. Every
# > modelled plot and table names its profile and level; each profile's sources are in
# > `gdrlab model --profile NAME` (the 2026 profiles mark which of their parameters are assumed).
#
# `model.latency_us(profile, path, sizes)` gives the modelled latency in µs of a path for an
# array of sizes, at the profile's default placement:

# %% id="04-model-curves"
demo_sizes = np.array([8.0, 4096.0, 65536.0, 1 << 20, 16 << 20])
pd.DataFrame({p: model.latency_us("kepler-ivb-2014", p, demo_sizes) for p in ("gdr", "pipelined")},
             index=demo_sizes.astype(int)).rename_axis("size (B), modelled µs, " + profile_with_level("kepler-ivb-2014"))

# %% [markdown] id="04-exercise-1-find-crossovers"
# ## Exercise 1 (2 points): where the faster path changes
#
# Write `first_change(sizes, lat_a, lat_b)`: given increasing message sizes and two paths'
# latencies at those sizes (arrays of the same length), return the smallest size at which the
# path that is faster at the **smallest** size is no longer faster (the other one is strictly
# faster), as an `int`; `None` when that never happens. It must work whichever of the two is
# faster first.
#
# Then use it on the model, with `sizes` fine enough to land within 1 % of the crossing (for
# example `np.geomspace(1, 4 << 20, 20000)`), for `gdr` against `pipelined` at each profile's
# default placement: `crossover_snb_bytes` (`kepler-snb-2013`) and `crossover_ivb_bytes`
# (`kepler-ivb-2014`). Graded: the function on made-up curves, and both sizes within 10 % of
# the model's. The package's crossover finders are refused in this cell: write your own.

# %% id="ex1-crossover" nbgrader={"grade": false, "grade_id": "ex1-crossover", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"crossover": "finds the crossing for you; find it with your first_change", "crossovers": "finds the crossing for you; find it with your first_change", "crossings": "finds the crossing for you; find it with your first_change", "hybrid_policy": "gives the model's ranges, crossings included", "policy_table": "gives the model's ranges, crossings included", "crossover_figure": "marks the crossing for you", "crossover_explorer": "marks the crossing for you"}}
import numpy as np


def first_change(sizes, lat_a, lat_b):
    ### BEGIN SOLUTION
    sizes, a, b = np.asarray(sizes), np.asarray(lat_a, dtype=float), np.asarray(lat_b, dtype=float)
    changed = np.nonzero(b < a)[0] if a[0] <= b[0] else np.nonzero(a < b)[0]
    return int(sizes[changed[0]]) if changed.size else None
    ### END SOLUTION


crossover_snb_bytes = None
crossover_ivb_bytes = None
### BEGIN SOLUTION
sizes = np.unique(np.geomspace(1, 4 << 20, 20000).astype(np.int64)).astype(float)  # 0.1% steps to 4 MiB
crossover_snb_bytes = first_change(sizes, model.latency_us("kepler-snb-2013", "gdr", sizes),
                                   model.latency_us("kepler-snb-2013", "pipelined", sizes))
crossover_ivb_bytes = first_change(sizes, model.latency_us("kepler-ivb-2014", "gdr", sizes),
                                   model.latency_us("kepler-ivb-2014", "pipelined", sizes))
### END SOLUTION
if grading.done(crossover_snb_bytes, crossover_ivb_bytes, name="Exercise 1"):
    print(f"your crossings, gdr against pipelined: Sandy Bridge: {crossover_snb_bytes} B, Ivy Bridge: {crossover_ivb_bytes} B")

# %% id="ex1-crossover-tests" nbgrader={"grade": true, "grade_id": "ex1-crossover-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Self-check on made-up curves (not the graded profiles): a wrong function fails here.
grading.check_function_cases(first_change, [
    (([1, 2, 4, 8], [1.0, 2.0, 3.0, 4.0], [2.0, 2.5, 2.9, 3.0]), 4),   # a faster first, b from 4 on
    (([1, 2, 4, 8], [5.0, 5.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0]), 4),   # b faster first, a from 4 on
], name="first_change")
grading.check_true(first_change([1, 2, 4, 8], [1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]) is None,
                   "first_change: when the same path is faster at every size, return None",
                   answer=first_change([1, 2, 4, 8], [1.0, 2.0, 3.0, 4.0], [2.0, 2.5, 2.9, 3.0]), name="first_change")
_both = None if crossover_snb_bytes is None or crossover_ivb_bytes is None else True
grading.check_true(isinstance(crossover_snb_bytes, (int, np.integer)) and isinstance(crossover_ivb_bytes, (int, np.integer)),
                   "crossover_snb_bytes and crossover_ivb_bytes are whole numbers of bytes (both profiles cross)",
                   answer=_both, name="crossover_snb_bytes and crossover_ivb_bytes")
### BEGIN HIDDEN TESTS
_rng = np.random.default_rng(4)
for _k in range(40):
    _sz = np.cumsum(_rng.integers(1, 1000, 30)).astype(float)
    _i = int(_rng.integers(0, 30))
    _a = _rng.uniform(1, 10, 30)
    _b = _a + _rng.uniform(0.1, 5, 30)        # b slower everywhere ...
    _b[_i:] = _a[_i:] - _rng.uniform(0.1, 5, 30 - _i)   # ... until index _i
    _want = int(_sz[_i]) if _i > 0 else None
    _fa, _fb = (_a, _b) if _k % 2 else (_b, _a)          # both orders
    _got = first_change(_sz, _fa, _fb)
    grading.check_true(_got == _want and (_got is None) == (_want is None),
                       f"first_change on made-up curve {_k} ({'no change' if _want is None else 'one change'}): wrong size")
def _first_win(profile):
    _sz = np.unique(np.geomspace(1, 4 << 20, 20000).astype(np.int64)).astype(float)
    _w = np.nonzero(model.latency_us(profile, "pipelined", _sz) < model.latency_us(profile, "gdr", _sz))[0]
    return float(_sz[_w[0]])
grading.check_close(crossover_snb_bytes, _first_win("kepler-snb-2013"), rel=0.10, name="crossover_snb_bytes", unit="B")
grading.check_close(crossover_ivb_bytes, _first_win("kepler-ivb-2014"), rel=0.10, name="crossover_ivb_bytes", unit="B")
### END HIDDEN TESTS

# %% [markdown] id="04-exercise-2-hybrid-policy"
# ## Exercise 2 (3 points): the hybrid policy
#
# Write `choose_path(size, threshold, gdr_ok=True)`, the threshold policy an MPI library runs for
# every message: one size threshold, one path on each side of it.
#
# * When GDR is possible (`gdr_ok=True`: a GPUDirect-capable GPU and HCA close enough, lab 05)
#   choose between `"gdr"` and `"pipelined"`;
# * when it is not (`gdr_ok=False`), between `"gdrcopy"` and `"pipelined"`.
# * `threshold` is where the two paths in question cross, as Exercise 1 defines it (the smallest
#   size at which the faster path changes), or `None` when they never cross: then one path wins
#   at every size.
#
# Which path goes on which side of the threshold, and which wins when there is none, is for you
# to find from your Exercise 1 sweep and the model's curves: that is the point of the exercise.
# It is graded on made-up thresholds; the cell after it puts your policy beside the model's
# fastest path on all five profiles.

# %% id="ex2-policy" nbgrader={"grade": false, "grade_id": "ex2-policy", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"hybrid_policy": "is the model's policy: write your own", "policy_table": "is the model's policy: write your own", "crossover": "finds the threshold; yours comes in as an argument", "crossovers": "finds the threshold; yours comes in as an argument"}}
def choose_path(size: int, threshold, gdr_ok: bool = True) -> str:
    ### BEGIN SOLUTION
    small = "gdr" if gdr_ok else "gdrcopy"
    if threshold is None or size < threshold:
        return small
    return "pipelined"
    ### END SOLUTION


# %% id="ex2-policy-tests" nbgrader={"grade": true, "grade_id": "ex2-policy-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Self-check on a made-up threshold of 1000 B (it checks the form, not the direction).
_below, _above = choose_path(10, 1000), choose_path(10**6, 1000)
grading.check_true(_below in ("gdr", "pipelined") and _above in ("gdr", "pipelined"),
                   "with gdr_ok=True the answer is 'gdr' or 'pipelined'", answer=_below, name="choose_path")
grading.check_true(_below != _above, "one path on each side of the threshold", answer=_below, name="choose_path")
grading.check_true(choose_path(999, 1000) == _below and choose_path(1000, 1000) == _above,
                   "the threshold is the first size of the other side", answer=_below, name="choose_path")
grading.check_true(choose_path(10, 1000, gdr_ok=False) in ("gdrcopy", "pipelined"),
                   "with gdr_ok=False the answer is 'gdrcopy' or 'pipelined'", answer=_below, name="choose_path")
grading.check_true(choose_path(10, None) == choose_path(10**9, None), "no threshold: one path at every size",
                   answer=_below, name="choose_path")
### BEGIN HIDDEN TESTS
_rng2 = np.random.default_rng(7)
_wrong = []
for _t in [None, 1, 77, 8192, 450000, 5 << 20] + [int(x) for x in _rng2.integers(2, 1 << 24, 20)]:
    for _ok, _small in ((True, "gdr"), (False, "gdrcopy")):
        for _s in [1, 8, 4096, 1 << 20, 64 << 20] + ([_t - 1, _t, _t + 1] if _t else []):
            if _s < 1:
                continue
            _want = _small if _t is None or _s < _t else "pipelined"
            if choose_path(int(_s), _t, _ok) != _want:
                _wrong.append(f"choose_path({int(_s)}, {_t}, gdr_ok={_ok})")
grading.check_true(not _wrong, f"{len(_wrong)} cases pick the slower side, e.g. " + "; ".join(_wrong[:2]))
### END HIDDEN TESTS

# %% [markdown] id="04-seed-correction"
# ## 4. Your policy next to the model and MVAPICH2-GDR
#
# The cell below runs your `choose_path` with the model's crossing for each profile and counts the
# sizes where it picks the model's slower path (modelled, each profile at its default placement).
# On `a100-hdr`, `hopper-ndr` and `gh200` GDR and pipelined do not cross at the default placement:
# GDR wins at every size there.

# %% id="04-policy-check"
if grading.done(choose_path(10, 1000), name="Exercise 2"):
    grid = np.unique(np.round(np.logspace(0, 26, 105, base=2))).astype(np.int64)
    rows = []
    for profile in lab04.HISTORIC_PROFILES:
        for gdr_ok, (small, big) in ((True, ("gdr", "pipelined")), (False, ("gdrcopy", "pipelined"))):
            t = model.crossover(profile, small, big)
            lat = {p: model.latency_us(profile, p, grid.astype(float)) for p in (small, big)}
            fastest = np.where(lat[small] <= lat[big], small, big)
            mine = np.array([choose_path(int(s), t, gdr_ok) for s in grid])
            rows.append({"profile": profile_with_level(profile), "gdr_ok": gdr_ok,
                         "crossing (B)": "none" if t is None else t,
                         f"slower picks (of {len(grid)} sizes)": int((mine != fastest).sum())})
    print("modelled, each profile at its default placement; your choose_path with the model's crossing:")
    display(pd.DataFrame(rows))

# %% [markdown] id="04-seed-correction-box"
# > **A correction.** That article (pitfall 4) says MVAPICH2-GDR sends *small* messages by host staging
# > and *large* ones by RDMA, because a doorbell costs more than the copy it saves. **It is the
# > other way round**, as your policy shows. The MVAPICH2-GDR user guide: GPUDirect RDMA for
# > messages up to `MV2_GPUDIRECT_LIMIT` (8 KB by default), staging above it (pipelined in
# > `MV2_CUDA_BLOCK_SIZE` chunks of 256 KB for large messages; between the two MVAPICH2 switches
# > from eager to rendezvous, which this kit's single `pipelined` path compresses). A small
# > message by staging pays a `cudaMemcpy` launch of several µs (section 2's recording) that GDR
# > skips entirely; a large message by GDR is limited by how fast the NIC can *read* GPU memory
# > through the chipset, which on Sandy Bridge was about 800 MB/s. MVAPICH2-GDR also uses the
# > read/write asymmetry: on the receiver, where the NIC *writes* GPU memory (fast even on old
# > chipsets), it keeps GDR up to `MV2_USE_GPUDIRECT_RECEIVE_LIMIT` (128 KB); the model's `gdr`
# > path takes the slower of read and write and cannot show that. The grain of truth: for the
# > tiniest messages, when data must go through host memory, the `cudaMemcpy` is replaced by a
# > CPU copy through BAR1 (gdrcopy). Its direction matters: gdrcopy's README measures about
# > 0.1 µs for a CPU *write* into GPU memory (`gdr_copy_to_mapping`, the receiver's side, and only
# > the CPU's view: the data may not yet have reached the GPU) but 0.9-1.7 µs for a small *read*
# > from it (`gdr_copy_from_mapping`, the sender's side). Both are far below a copy launch.
#
# > **RDMA is not TCP offload, mostly.** Another of the articles this kit started from says GPUDirect RDMA works by
# > "offloading TCP/IP processing to the NIC". InfiniBand and RoCE, the transports this kit,
# > MVAPICH2 and NCCL use, do not run TCP at all: the InfiniBand transport, with its
# > reliable-connection queue pairs, acknowledgements and retransmission, runs in the HCA, and
# > RoCE v2 wraps it in UDP/IP (port 4791). One RDMA transport does run over TCP: **iWARP**
# > (IETF RFC 5040-5044) puts the TCP/IP stack in the adapter, and vendors of iWARP adapters
# > (Chelsio) support GPUDirect RDMA over it. So that phrase describes iWARP, not the IB/RoCE
# > path it was written about. This lab's staging paths use TCP only because it is the wire every
# > machine has.

# %% [markdown] id="04-your-policy-next-mvapich2"
# The table below shows the model's ranges for each profile (modelled, each at its default
# placement; `kepler-snb-2013` MPI level, the others verbs level). MVAPICH2-GDR's defaults
# (`MV2_GPUDIRECT_LIMIT` = 8 KB, `MV2_CUDA_BLOCK_SIZE` = 256 KB) were set for the Sandy Bridge
# era; on Ivy Bridge NVIDIA measured GDR ahead up to 400-500 KB.
#
# Under one switch or one host bridge, GDR never loses to staging on the three newer profiles in
# the model. Across sockets it does. The cell after the table says where on `hopper-ndr`, from
# the model, and why the crossing comes with a few flips (the model's pipelined curve steps with
# each extra chunk). That is what NCCL's rule in lab 05 encodes: no GDR across sockets by default.
# `gdrlab model crossover --json` lists every sign change (`crossings`), not just the first.
# The explorer then lets you change the platform, the placement (GPU and NIC under one switch,
# through one host bridge, across sockets) and the chunk size.

# %% id="04-policy-table"
rows = []
for profile in lab04.HISTORIC_PROFILES:
    for gdr_ok, paths in ((True, lab04.GDR_POLICY_PATHS), (False, lab04.NO_GDR_POLICY_PATHS)):
        for r in lab04.policy_table(profile, paths):
            rows.append({"profile": profile, "gdr_ok": gdr_ok, **r})
policy = pd.DataFrame(rows)
levels = ", ".join(profile_with_level(p) for p in lab04.HISTORIC_PROFILES)
provenance.attach(policy, provenance.modelled(levels), column=False)
print(f"modelled (gdrlab.model: {levels}), sizes in bytes on a grid of about 4 points per doubling")
policy

# %% id="04-crossings-note"
print(lab04.crossings_note("hopper-ndr", "cross-socket"))

# %% id="04-crossover-explorer"
lab04.crossover_explorer("kepler-snb-2013")

# %% [markdown] id="04-ucx-protocols"
# ### A production library's own switch: UCX
#
# Communication libraries make the same kind of choice by message size. UCX, which MPI libraries
# and NCCL's UCX plugin run on, prints its choice with `UCX_PROTO_INFO=y`, and
# `gdrlab ucx protocols --mem cuda` turns that table into rows. Below, the table for CUDA memory
# between two processes on one host over TCP (no RDMA NIC, so no GDR in it): live where this
# machine's UCX can move CUDA memory, else the H200 recording.

# %% id="04-ucx-protocols-table"
from gdrlab.labsupport import lab04_ucx

ucx_table, ucx_where = lab04_ucx.ucx_protocols()
print(ucx_where)
display(ucx_table[["range", "protocol", "transports"]])
print(lab04_ucx.ucx_protocols_note(ucx_table))

# %% [markdown] id="04-written-question" nbgrader={"grade": false, "grade_id": "04-written-question", "locked": true, "schema_version": 3, "solution": false}
# ## Written answer (2 points, graded by hand)
#
# In three to five sentences: why does GDR win for small messages, and what can make pipelined
# staging win for large ones? Name the cost each path avoids or pays, and say whether your
# explanation depends on the platform, the placement or the chunk size. Then say in one sentence
# why the model's Sandy Bridge crossover is not MVAPICH2's 8 KB.

# %% [markdown] id="explain-crossover" nbgrader={"grade": true, "grade_id": "explain-crossover", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# Staging pays a copy launch and completion (the alpha of lab 02) before the wire can start, and
# GDR does not, so GDR wins where alpha dominates: small messages. For large messages GDR's rate is
# that of the HCA's peer reads and writes of GPU memory, which on older chipsets, or when the path
# crosses the root complex or the sockets, is far below the copy engine's rate; pipelined staging
# overlaps the copy and the wire and streams at close to the slower of the two. So the crossover
# depends on the platform (peer-read rate), the placement (what the peer traffic crosses) and the
# chunk size (how much the pipeline overlaps, and its per-chunk cost). MVAPICH2's 8 KB is a
# default chosen by its developers for their machines (and a round power of two), not the
# crossing point of two curves; the model's crossover depends on its fitted rates and on the
# placement, so a factor of two between them is no contradiction.

# %% [markdown] id="04-you-saw"
# ## What you saw
#
# * Over the tcp wire the three staging paths share one small-message floor, and on the H200 most
#   of it is the two copy launches, not the wire; `shared` saves a host copy and `pipelined`
#   overlaps copy and wire for large messages.
# * GDR removes the copy launch, so it wins small messages on every platform. For large messages
#   it is limited by the NIC's peer reads of GPU memory, so in the model (not measured here)
#   pipelined staging overtakes it on Sandy Bridge and Ivy Bridge; on A100 + HDR, Hopper and GH200
#   only across sockets.
# * The hybrid policy is therefore **GDR for small messages, pipelined staging for large ones**
#   (and gdrcopy for the tiniest when the data must pass through host memory): the opposite of
#   what the article said. The crossover depends on the platform and on where the GPU
#   and NIC sit, which is lab 05's subject.

# %% [markdown] id="04-on-your-cluster"
# ## On your cluster
#
# ```
# # node A (server), then node B (client, with node A's address at the end)
# ib_write_lat -d mlx5_0 -a                    # host memory
# ib_write_lat -d mlx5_0 -a --use_cuda=0       # GPU memory, GPUDirect RDMA
# mpirun -np 2 -host nodeA,nodeB osu_latency -d cuda D D    # CUDA-aware MPI, GPU buffers
# mpirun -np 2 -host nodeA,nodeB osu_bw -d cuda D D
# ```
#
# What to look for:
#
# - `ib_write_lat`: GPU-memory latency close to host-memory latency at small sizes is GDR at work;
#   where the two curves part, the HCA's peer access to the GPU is the limit.
# - `osu_latency -d cuda D D`: the MPI library's hybrid policy in one curve. Steps in the curve are
#   its protocol switches (eager to rendezvous, GDR to pipelined staging); with MVAPICH2-GDR move
#   them with `MV2_GPUDIRECT_LIMIT` and see the step follow.
# - Compare your crossover with the model's for the profile closest to your machine, and say which
#   of platform, placement (lab 05) or chunk size explains the difference.
#
# Two-node runs with gdrlab, and what each failure message means:
# [docs/cluster.md](../docs/cluster.md); all the commands on one page:
# [docs/cheatsheet.md](../docs/cheatsheet.md). Both, and the other `docs/` pages this lab links,
# are in the `docs/` folder that `gdrlab lab` puts beside your copies of the labs (and in the
# gdrlab repository's `docs/`).
