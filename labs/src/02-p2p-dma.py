# %% [markdown] id="02-title"
# # Lab 02: P2P DMA
#
# Lab 01 showed that a GPU exposes its memory as a PCIe window (BAR1). The second part of
# GPUDirect RDMA is that *another device* can aim its DMA at such a window. Before any RDMA
# adapter does that, two engines you already own move data by DMA: the GPU's **copy engine**
# (between host memory and GPU memory) and, between two GPUs, **peer-to-peer copies**
# (GPUDirect P2P, CUDA 4.0, 2011), over PCIe or NVLink. This lab measures both, and keeps apart
# the PCIe peer DMA a NIC does from NVLink copies, which never touch BAR1.
#
# **Learning goals**
#
# 1. Measure copy-engine latency and bandwidth, host to device and back, and describe the curve
#    with two numbers: a fixed cost `alpha` and a streaming rate `beta` (`t = alpha + n / beta`).
# 2. See why *pinned* host memory matters: pageable copies are several times slower.
# 3. Compare GPU-to-GPU copies with peer access on (one DMA over NVLink or PCIe) and off (the
#    driver stages through host memory).
# 4. Overlay the model and say where it agrees with the measurement and where it does not.
#
# **Live on** a machine with an NVIDIA GPU (two or more for the peer part); the CPU's own copy is
# measured live on any machine. Elsewhere, data recorded on an NVIDIA H200 (one GPU) and on a
# 2x H200 machine, and the model.
#
# | duration | prerequisites |
# |---|---|
# | 45 min (reading 15, running 10, exercises 20) | lab 00; lab 01 section 1; reading a log-log plot |
#
# **Glossary**
#
# - **copy engine**: the GPU's DMA engine for copies to and from host memory and peers.
# - **pageable / pinned memory**: ordinary host memory the OS may move, against page-locked memory a
#   device can DMA into directly.
# - **alpha / beta**: the fixed cost of one transfer and its streaming rate, `t = alpha + n / beta`.
# - **PCIe peer-to-peer (P2P)**: one PCIe device DMAs into another's BAR, through a switch or the
#   root complex; a NIC writing into a GPU's BAR1 is this.
# - **NVLink P2P**: GPU-to-GPU copies over NVLink, which never pass through a PCIe BAR window.
# - **root complex**: where the CPU's PCIe tree starts; peer traffic through it can be slow.

# %% id="02-cuda-status"
import numpy as np
from IPython.display import display

from gdrlab import engine, grading, provenance
from gdrlab.labsupport import lab02
from gdrlab.widgets import diagram, plot_sweep, quick_mode

QUICK = quick_mode()
GPU = engine.cuda_status()
print("quick mode:", QUICK, "| CUDA usable here:", GPU["usable"], "" if GPU["usable"] else "(" + GPU["reason"] + ")")
print("model profile for copies:", lab02.copy_profile())

# %% [markdown] id="02-copy-engine-pinned-memory"
# ## 1. The copy engine and pinned memory
#
# `cudaMemcpy` from host to GPU is a DMA by one of the GPU's copy engines, reading host memory
# over PCIe. A DMA engine needs physical pages that stay put. **Pinned** (page-locked) host
# memory, from `cudaHostAlloc` or `cudaHostRegister` on an existing buffer, gives it exactly
# that. **Pageable** memory (plain `malloc`) does not, so the driver first copies it with the CPU
# into a pinned staging buffer of its own and DMAs from there, chunk by chunk.
#
# (`cudaHostRegister` is about *host* memory. It does not make GPU memory visible to an RDMA
# adapter: that is lab 03's business.)

# %% id="02-diagram"
diagram("copy-engine")

# %% [markdown] id="02-predict-copy"
# ### Exercise 0: predict before you look
#
# Before anything below draws the recorded H200 copies (the live panel overlays them too), commit
# two predictions for a **pinned** host-to-device copy on the H200 (PCIe Gen5 x16, 63 GB/s per
# direction on paper): `predicted_8b_us`, the time of an 8-byte copy in µs, and
# `predicted_256mib_gbps`, the bandwidth of a 256 MiB copy in GB/s. The numbers are not graded (a
# notebook cannot prove they were typed before the plot was seen); your reason is, by hand, in the
# written cell below. The check under your numbers only asks whether they are physically possible.

# %% id="ex0-predict" nbgrader={"grade": false, "grade_id": "ex0-predict", "locked": false, "schema_version": 3, "solution": true}
predicted_8b_us = None
predicted_256mib_gbps = None
### BEGIN SOLUTION
predicted_8b_us = 8.0          # a launch and a completion, not bytes: several microseconds
predicted_256mib_gbps = 50.0   # most of the link's 63 GB/s, less protocol overhead
### END SOLUTION

# %% id="ex0-predict-tests" nbgrader={"grade": false, "grade_id": "ex0-predict-tests", "locked": true, "schema_version": 3, "solution": false}
# Not graded: a copy takes some time, and no copy outruns its link's 63 GB/s on paper.
grading.check_true(predicted_8b_us is None or float(predicted_8b_us) > 0, "predicted_8b_us should be a time above 0 µs",
                   answer=predicted_8b_us, name="predicted_8b_us")
grading.check_true(predicted_256mib_gbps is None or 0 < float(predicted_256mib_gbps) <= 63.0,
                   "predicted_256mib_gbps is more than a PCIe Gen5 x16 link carries in one direction (GB/s, not Gb/s?)",
                   answer=predicted_256mib_gbps, name="predicted_256mib_gbps")

# %% [markdown] id="explain-prediction-copy-question"
# **Written (1 point, graded by hand).** Why those two numbers? After the plots below, come back
# and add one sentence: how far was each prediction from the recording, and why?

# %% [markdown] id="explain-prediction-copy" nbgrader={"grade": true, "grade_id": "explain-prediction-copy", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# An 8-byte copy moves almost nothing: its time is the launch, the DMA setup and the completion
# the host waits for, several microseconds. A 256 MiB copy is long enough for the fixed cost to
# vanish and runs near the link's rate, less PCIe packet overhead: about 50 GB/s of 63. (Then one
# sentence comparing each prediction with the recorded plot.)

# %% [markdown] id="02-live-copy-engine-sweep"
# ### Live: a copy-engine sweep
#
# Choose the direction, the kind of host memory and the model profile; press **Start**. The
# recorded H200 sweep (dotted) and the model (dashed) for the same copy are drawn first, so you
# can watch your machine's points land relative to them. Each point is the median of many
# synchronous copies (`cuMemcpyAsync` + stream synchronize, timed on the host clock).

# %% id="02-copy-panel"
if GPU["usable"] and not QUICK:
    panel = lab02.copy_panel("8:256M", y="bw_gbps")
    display(panel)
    panel.sweep().start()
else:
    print("no live sweep:", GPU["reason"] if not GPU["usable"] else "quick mode")

# %% [markdown] id="02-copy-panel-note"
# All four copies side by side (live where a GPU is, otherwise recorded on the H200), bandwidth
# and then latency. Compare them with your predictions of exercise 0:

# %% id="02-copy-data"
copies = {f"{d} {m}": lab02.copy_data(d, m) for d in lab02.DIRECTIONS for m in lab02.MEMORIES}
for name, res in copies.items():
    print(f"{name:13s}: {res.why}")
shown = {name: res.data for name, res in copies.items() if res.data is not None}
model = {f"{d} {m}": lab02.copy_model(d, m) for d in lab02.DIRECTIONS for m in lab02.MEMORIES}
display(plot_sweep(shown, y="bw_gbps", model=model, title="copy-engine bandwidth"))
plot_sweep(shown, y="lat_p50_us", model=model, title="copy-engine latency")


# %% [markdown] id="02-copy-data-note"
# Two regimes: below a few KiB every copy costs about the same (5-7 us on the H200: launching the
# copy and waiting for it, not moving bytes); above a few MiB the time grows with size at the
# link's streaming rate (about 55 GB/s pinned, of the 63 GB/s a PCIe Gen5 x16 link carries).
#
# ### Exercise 1 (3 points): fit `alpha` and `beta`
#
# Write `fit_alpha_beta(sizes, times_us)` that returns `(alpha_us, beta_gbps)` for the model
# `t = alpha + n / beta`, with `t` in microseconds, `n` in bytes and `beta` in GB/s (1 GB/s =
# 1e9 bytes/s = 1e3 bytes/us). A straight-line least-squares fit of `t` against `n` works
# (`np.polyfit(n, t, 1)`; weighting by `1 / t` keeps the small sizes from being ignored). The
# tests use exact synthetic data first, then the recorded H200 sweep.

# %% id="ex1-alpha-beta" nbgrader={"grade": false, "grade_id": "ex1-alpha-beta", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"calibrate": "fits the model's alpha and beta for you; write the fit", "alpha_beta_frame": "draws a fit, it does not make one"}}
def fit_alpha_beta(sizes, times_us):
    ### BEGIN SOLUTION
    n = np.asarray(sizes, dtype=float)
    t = np.asarray(times_us, dtype=float)
    slope_us_per_byte, alpha_us = np.polyfit(n, t, 1, w=1 / t)
    return float(alpha_us), float(1 / slope_us_per_byte / 1e3)
    ### END SOLUTION


h2d = grading.dataset("h200-copy-h2d-pinned")  # recorded: the same data on every machine
_fit = fit_alpha_beta(h2d["size"], h2d["lat_p50_us"])
alpha_us, beta_gbps = _fit if _fit is not None else (None, None)
if grading.done(alpha_us, beta_gbps, name="Exercise 1") and alpha_us is not None:
    print(f"your fit of the H200 pinned H2D sweep: alpha = {alpha_us:.2f} us, beta = {beta_gbps:.1f} GB/s")

# %% id="test-ex1-alpha-beta" nbgrader={"grade": true, "grade_id": "test-ex1-alpha-beta", "locked": true, "points": 3, "schema_version": 3, "solution": false}
n = np.array([8, 4096, 1 << 20, 1 << 26], dtype=float)
# Visible self-check on made-up exact data (the graded cases are others).
def _rounded(s, t):
    r = fit_alpha_beta(s, t)
    return None if r is None else tuple(round(v, 6) for v in r)


grading.check_function_cases(_rounded, [((n, 5.0 + n / 50e3), (5.0, 50.0))], name="fit_alpha_beta")
### BEGIN HIDDEN TESTS
a, b = fit_alpha_beta(n, 1.5 + n / 12e3)
grading.check_close(a, 1.5, rel=1e-3, name="alpha_us for t = 1.5 + n/12e3")
grading.check_close(b, 12.0, rel=1e-3, name="beta_gbps for t = 1.5 + n/12e3")
# The recorded H200 sweep: a few-microsecond launch cost and about 55 GB/s.
grading.check_between(alpha_us, 3.0, 10.0, name="alpha_us on the H200", unit="us")
grading.check_between(beta_gbps, 45.0, 65.0, name="beta_gbps on the H200", unit="GB/s")
### END HIDDEN TESTS

# %% [markdown] id="02-ex1-alpha-beta-note"
# The fit drawn over the recorded points, with the model of the same copy:

# %% id="02-alpha-beta-frame"
# Without your fit (exercise 1 not done yet), the recorded points and the model alone.
_yours = [lab02.alpha_beta_frame(alpha_us, beta_gbps)] if None not in (alpha_us, beta_gbps) else []
plot_sweep({"pinned H2D": h2d}, y="lat_p50_us", title="alpha-beta fit, H2D pinned",
           model=_yours + [lab02.copy_model("h2d", "pinned")])

# %% [markdown] id="02-alpha-beta-frame-note"
# The straight line misses the middle sizes (64 KiB to 1 MiB) a little: there the copy engine
# has not yet reached its streaming rate. The model adds a ramp term for that
# (`ce_ramp_us`, `ce_ramp_bytes`); two numbers describe the ends of the curve, not every point.
#
# ### Exercise 2 (2 points): what pageable memory costs, and where it goes
#
# The copy engine can only DMA from memory the OS will not move, so a copy from **pageable** memory
# is done by the CUDA driver in two steps: the CPU first copies the data into a pinned staging
# buffer, then the copy engine DMAs it as a pinned copy would. Model the two steps as one after
# the other, each at its own rate: per byte, the time of the pageable copy is the time of the
# pinned copy plus the time of the staging copy (`1 / pageable = 1 / pinned + 1 / staging`, rates
# in GB/s).
#
# * Write `staging_rate_gbps(pinned_gbps, pageable_gbps)`: the staging copy's rate that this model
#   needs to turn the pinned rate into the pageable one; `None` when the pageable copy is not slower
#   (the model then has no staging cost to find). The grader tries it on made-up rates, not only on
#   the H200's.
# * Set `h200_staging_gbps` to that rate for the recorded H200 at the **largest size both sweeps
#   contain** (`grading.dataset("h200-copy-h2d-pinned")` and `"h200-copy-h2d-pageable"`,
#   column `bw_gbps`).
#
# Then say in the written cell below whether that rate is believable for a CPU copy, and what it
# would be if the driver overlapped the two steps instead.

# %% id="ex2-pageable" nbgrader={"grade": false, "grade_id": "ex2-pageable", "locked": false, "schema_version": 3, "solution": true}
pinned = grading.dataset("h200-copy-h2d-pinned")
pageable = grading.dataset("h200-copy-h2d-pageable")


def staging_rate_gbps(pinned_gbps, pageable_gbps):
    ### BEGIN SOLUTION
    if pageable_gbps >= pinned_gbps:
        return None
    return 1.0 / (1.0 / pageable_gbps - 1.0 / pinned_gbps)
    ### END SOLUTION


h200_staging_gbps = None
### BEGIN SOLUTION
_largest = max(set(pinned["size"]) & set(pageable["size"]))
h200_staging_gbps = staging_rate_gbps(float(pinned.loc[pinned["size"] == _largest, "bw_gbps"].iloc[0]),
                                      float(pageable.loc[pageable["size"] == _largest, "bw_gbps"].iloc[0]))
### END SOLUTION
print(f"staging copy the serial model needs on the H200: {h200_staging_gbps} GB/s")

# %% id="test-ex2-pageable" nbgrader={"grade": true, "grade_id": "test-ex2-pageable", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Visible self-check on made-up rates (the graded rates are others).
grading.check_function_cases(staging_rate_gbps, [((30.0, 10.0), 15.0)], name="staging_rate_gbps", rel=1e-6)
grading.check_true(staging_rate_gbps(20.0, 20.0) is None, "a pageable copy as fast as the pinned one leaves no staging cost")
grading.check_true(h200_staging_gbps is None or h200_staging_gbps > 0, "h200_staging_gbps should be a positive rate",
                   answer=h200_staging_gbps, name="h200_staging_gbps")
### BEGIN HIDDEN TESTS
for (_pin, _pag), _want in [((50.0, 10.0), 12.5), ((20.0, 10.0), 20.0), ((12.0, 4.0), 6.0), ((100.0, 99.0), 9900.0)]:
    grading.check_close(staging_rate_gbps(_pin, _pag), _want, rel=1e-6, name=f"staging_rate_gbps({_pin}, {_pag})")
grading.check_true(staging_rate_gbps(10.0, 12.0) is None, "pageable faster than pinned: None")
_p = grading.dataset("h200-copy-h2d-pinned").set_index("size")["bw_gbps"]
_q = grading.dataset("h200-copy-h2d-pageable").set_index("size")["bw_gbps"]
_n = max(set(_p.index) & set(_q.index))
grading.check_close(h200_staging_gbps, 1.0 / (1.0 / _q[_n] - 1.0 / _p[_n]), rel=0.01, name="h200_staging_gbps",
                    hint="the two bandwidths at the largest size present in both sweeps")
### END HIDDEN TESTS

# %% [markdown] id="explain-staging-rate-question" nbgrader={"grade": false, "grade_id": "explain-staging-rate-question", "locked": true, "schema_version": 3, "solution": false}
# **Written (1 point, graded by hand).** Is the staging rate you found believable for a CPU copy,
# and what would it be if the driver overlapped the CPU copy of one chunk with the DMA of the
# previous one?

# %% [markdown] id="explain-staging-rate" nbgrader={"grade": true, "grade_id": "explain-staging-rate", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# The serial model needs a staging copy of about 33 GB/s at 256 MiB (from 55 GB/s pinned and
# 21 GB/s pageable). That is a fast rate for a CPU copy: compare it with the CPU copy measured live
# in the next cell, which runs on another machine but is the same kind of copy. If the driver
# overlapped the two steps completely, the pageable copy would run at the slower of the two, so the
# staging copy would be the 21 GB/s measured and the DMA (55 GB/s) would wait for it. The truth lies
# between the two models; either way the CPU's copy, not the PCIe link, sets the pageable rate.

# %% [markdown] id="02-host-copy-intro"
# ### Live on any machine: the CPU's own copy
#
# No GPU is needed to see the two regimes. The cell below times this machine's CPU copying host
# memory to host memory (`numpy.copyto`, median of several runs per size) and fits it with your
# `fit_alpha_beta`. This is not a DMA: the CPU moves the bytes, and `alpha` is mostly the cost of
# one Python call. Expect a third regime the copy engine does not show: sizes that fit in the
# CPU's caches copy faster than the memory behind them can stream, so the rate drops once a buffer
# outgrows the last-level cache. Two numbers describe the ends of a curve, not every point.

# %% id="02-host-copy-live"
mine = lab02.host_copy_live()
try:
    _fit = fit_alpha_beta(mine["size"], mine["lat_p50_us"])
except NotImplementedError:
    _fit = None
a_host, b_host = _fit if _fit is not None else (None, None)
if a_host is None:
    print("not done yet: exercise 1; the points are shown without your fit")
if a_host is not None:
    print(f"live, this machine's CPU (numpy.copyto): alpha = {a_host:.2f} us, beta = {b_host:.1f} GB/s")
fits = [lab02.alpha_beta_frame(a_host, b_host, sizes="8:64M", label="your fit")] if a_host is not None else []
plot_sweep({"host memcpy": mine}, y="lat_p50_us", title="host to host copy by the CPU", model=fits)


# %% [markdown] id="02-gpu-gpu-peer-access"
# ## 2. GPU to GPU: peer access on and off
#
# Two GPUs on one machine can copy to each other in two ways. With **peer access on**
# (`cudaDeviceEnablePeerAccess`), one GPU's copy engine writes straight into the other's memory.
# With it **off**, the driver copies into host memory and out again.
#
# *Over which link* matters. Over **PCIe**, a peer copy is PCIe peer-to-peer DMA: one device's
# writes target the other's BAR window, through a PCIe switch or the root complex. That is the
# transaction a NIC issues for GPUDirect RDMA. Over **NVLink** (the recorded 2x H200 machine, whose
# GPUs are `NV18`), the copy never touches PCIe or a BAR1 window: NVLink figures say nothing about
# what a NIC can do. The recorded H200 is also a KVM guest (a flat virtual PCIe tree), so it could
# not show a PCIe peer path even if it had one.
#
# What PCIe P2P gives depends on where the NIC sits. Published measurements of **poor**
# placements, on PCIe-only machines:
#
# | what | figure | machine | source |
# |---|---|---|---|
# | NIC reading GPU memory through the root complex (PCIe peer read) | about 800 MB/s | Sandy Bridge | NVIDIA blog "Benchmarking GPUDirect RDMA on Modern Server Platforms" (2014) |
# | adapter writing to a GPU on the other socket | 250 MB/s | Ivy Bridge era | same |
# | `ib_write_bw --use_cuda`, GPU and NIC on different sockets (`SYS`) | 11.5 GB/s, against 24.1 GB/s from host memory (perftest prints "about 11000" and "23000" MB/sec; its MB is 2^20 bytes) | A30, 200 Gb/s ConnectX (mlx5) | perftest issue #241 |
#
# Under one PCIe **switch** shared by the GPU and the NIC, GPUDirect RDMA runs at the NIC's line
# rate: the cell after the diagram shows the model's figures for good and poor placements.
#
# Peer reads are the weak side: a PCIe read is a non-posted request that waits for a completion,
# and root complexes served peer reads slowly, while writes are posted and stream. ACS or an
# IOMMU can also force peer traffic up to the root complex (or block it), which is why HPC nodes
# often disable ACS on the switches between GPUs and NICs.

# %% id="02-diagram-2"
diagram("p2p")

# %% id="02-placement-table"
display(lab02.placement_table())

# %% id="02-p2p-data"
p2p = lab02.p2p_data("8:256M")
print(p2p.why)
if p2p.data is not None:
    data = {("peer access on" if on else "peer access off"): df
            for on, df in p2p.data.groupby("peer_access", sort=False)}
    for df in data.values():
        provenance.attach(df, provenance.derived(p2p.data), column=False)
    as_diagram = {"peer access on": "#2ca02c", "peer access off": "#d62728"}   # the diagram's green and red
    display(plot_sweep(data, y="bw_gbps", model=lab02.p2p_model(), title="GPU to GPU bandwidth", colours=as_diagram))
    display(plot_sweep(data, y="lat_p50_us", model=lab02.p2p_model(), title="GPU to GPU latency", colours=as_diagram))

# %% [markdown] id="02-p2p-data-note"
# The model's P2P parameters on sliders (profile `hopper-ndr`, whose P2P figures come from the 2x
# H200 machine, over NVLink). A widely shared article on GPUDirect RDMA (one of the "seed
# articles" lab 00 names) gives "about 24 GB/s" for P2P between its K20s.
# That cannot be: a K20 is a PCIe **Gen2** x16 card, 8 GB/s per direction on paper (5 GT/s × 16
# lanes × 8/10 encoding), about 6 GB/s in practice; even PCIe 3.0 x16 carries 15.75 GB/s per
# direction (8 GT/s × 16 × 128/130). Only both directions of a faster link, or NVLink, reach 24.
# Move `p2p_gbps` down to a PCIe figure (about 6 for Gen2, 12-13 for Gen3) and see how much of the
# gap to staging through host memory is left.

# %% id="02-p2p-explorer"
explorer = lab02.p2p_explorer("8:256M", y="bw_gbps")
explorer

# %% [markdown] id="02-seed-4mb-figure"
# The same article pairs "4 MB", "380 Gb/s" and "3 µs" in one sentence. Rates and sizes settle it:
# a message cannot arrive before its last byte has crossed the link.

# %% id="02-seed-4mb-arithmetic"
from gdrlab import units

link_gbps = units.to_gbps(380, "Gb/s")           # bits to bytes: 47.5 GB/s
four_mib_us = 4 * 2**20 / (link_gbps * 1e9) * 1e6
print(f"4 MiB at 380 Gb/s ({link_gbps:.1f} GB/s) takes at least {four_mib_us:.0f} µs on the wire; "
      "3 µs is a small-message latency, not a 4 MB transfer time")

# %% [markdown] id="02-exercise-3-2-points"
# ### Exercise 3 (2 points): what peer access buys
#
# From the recorded 2x H200 figures, `grading.dataset("h200x2-p2p-curriculum")` (columns
# `peer_access`, `size`, `lat_p50_us`, `bw_gbps`), set
#
# * `p2p_bw_gain` to the bandwidth with peer access on divided by off, at 256 MiB;
# * `p2p_lat_gain` to the latency with peer access off divided by on, at 8 bytes;
# * `k20_p2p_bound_gbps`: the most a peer copy between two K20s (PCIe **Gen2** x16: 5 GT/s per
#   lane, 8b/10b encoding) could carry in one direction, in GB/s, before packet overheads, worked
#   out from those link figures. Compare it with that article's "about 24 GB/s".

# %% id="ex3-p2p" nbgrader={"grade": false, "grade_id": "ex3-p2p", "locked": false, "schema_version": 3, "solution": true}
h200x2 = grading.dataset("h200x2-p2p-curriculum")
p2p_bw_gain = p2p_lat_gain = k20_p2p_bound_gbps = None
### BEGIN SOLUTION
at = h200x2.set_index(["peer_access", "size"])
p2p_bw_gain = at.loc[(True, 256 << 20), "bw_gbps"] / at.loc[(False, 256 << 20), "bw_gbps"]
p2p_lat_gain = at.loc[(False, 8), "lat_p50_us"] / at.loc[(True, 8), "lat_p50_us"]
k20_p2p_bound_gbps = 5e9 * 16 * 8 / 10 / 8 / 1e9   # transfers/s x lanes x payload bits / bits per byte
### END SOLUTION
if grading.done(p2p_bw_gain, p2p_lat_gain, k20_p2p_bound_gbps, name="Exercise 3") and None not in (
        p2p_bw_gain, p2p_lat_gain, k20_p2p_bound_gbps):
    print(f"yours: peer access {p2p_bw_gain:.1f}x the bandwidth at 256 MiB, {p2p_lat_gain:.1f}x lower latency "
          f"at 8 B; a K20 pair over PCIe Gen2 x16: at most {k20_p2p_bound_gbps:.1f} GB/s per direction")

# %% id="test-ex3-p2p" nbgrader={"grade": true, "grade_id": "test-ex3-p2p", "locked": true, "points": 2, "schema_version": 3, "solution": false}
grading.check_between(p2p_bw_gain, 1.0, 100.0, name="p2p_bw_gain", hint="on divided by off")
grading.check_between(p2p_lat_gain, 1.0, 100.0, name="p2p_lat_gain", hint="off divided by on")
grading.check_between(k20_p2p_bound_gbps, 0.5, 64.0, name="k20_p2p_bound_gbps", unit="GB/s",
                      hint="bytes per second, not bits")
### BEGIN HIDDEN TESTS
# 393 vs 38.2 GB/s at 256 MiB; 18.7 vs 4.7 us at 8 B (2x H200, NVLink).
grading.check_close(p2p_bw_gain, 393 / 38.2, rel=0.003, name="p2p_bw_gain")  # from the dataset: exact
grading.check_close(p2p_lat_gain, 18.7 / 4.7, rel=0.003, name="p2p_lat_gain")
grading.check_close(k20_p2p_bound_gbps, 8.0, rel=0.02, name="k20_p2p_bound_gbps", unit="GB/s",
                    hint="5e9 transfers/s x 16 lanes x 8/10 payload, in bytes")
### END HIDDEN TESTS

# %% [markdown] id="02-written-question" nbgrader={"grade": false, "grade_id": "02-written-question", "locked": true, "schema_version": 3, "solution": false}
# ## Written answer (2 points, graded by hand)
#
# Use your fit from exercise 1. In three to five sentences: which of `alpha` and `beta` decides the
# time of a 4 KiB copy, and which that of a 64 MiB copy (show the arithmetic for one of them), and
# why is a copy from pageable memory slower than one from pinned memory?

# %% [markdown] id="explain-alpha-beta" nbgrader={"grade": true, "grade_id": "explain-alpha-beta", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# With alpha of a few microseconds and beta of tens of GB/s, 4 KiB takes 4096 B / 50 GB/s, about
# 0.08 us, to stream, far less than alpha: the fixed cost decides small copies. 64 MiB takes about
# 67 MB / 50 GB/s = 1.3 ms to stream, hundreds of times alpha: the rate decides large copies. The
# copy engine can only DMA from memory that stays put; pageable memory may move, so the driver
# first copies it, chunk by chunk, into a pinned staging buffer, adding a CPU copy and
# synchronisation to every transfer.

# %% [markdown] id="02-you-saw"
# ## What you saw
#
# * A copy-engine copy costs a fixed 5-7 us (launch and completion) plus size over about 55 GB/s
#   on the H200's PCIe Gen5 x16 link: two numbers, `alpha` and `beta`, describe it end to end.
#   Small messages pay almost only `alpha`; that fixed cost is what makes staging through host
#   memory expensive for small messages, and what GPUDirect RDMA and gdrcopy remove (lab 04).
# * Pageable host memory cost a factor of about 3 (H2D) to 4 (D2H) in bandwidth at large sizes
#   on the H200 (the commonly quoted range is 3-8x): the driver has to copy it into pinned memory first.
#   RDMA adapters need the same thing the copy engine needs, memory that stays put: lab 03's
#   registration.
# * Between two H200s, peer access turned a trip through host memory into one DMA over NVLink,
#   many times faster at large sizes and lower in latency at small ones. That is NVLink P2P, which
#   never touches a BAR1 window. The second part of GPUDirect RDMA is *PCIe* P2P DMA, a NIC
#   writing to or reading from the GPU's BAR1: under a shared PCIe switch it runs at the NIC's line
#   rate; through a root complex or across sockets it fell to hundreds of MB/s on older servers and
#   to half the line rate on a recent one (reads the weak side). Lab 05 shows how to find where
#   your NIC and GPU sit.

# %% [markdown] id="02-on-your-cluster"
# ## On your cluster
#
# ```
# nvidia-smi topo -m                                     # NV# (NVLink) or a PCIe code per GPU pair
# nvidia-smi topo -p2p r                                 # can each pair do peer reads?
# sudo lspci -vvv -d 10de: | grep -E 'LnkCap|LnkSta'     # PCIe generation and width
# nvbandwidth -t host_to_device_memcpy_ce -t device_to_device_memcpy_read_ce
# ```
#
# What to look for:
#
# - `topo -m`: pairs marked `NV#` copy over NVLink, which never passes through a PCIe BAR window;
#   pairs marked `PIX`/`PXB` do PCIe peer-to-peer through one or more switches, as a NIC does for
#   GPUDirect RDMA; `PHB` goes through one host bridge (one root complex, two of its root ports),
#   `NODE` between host bridges of one NUMA node, `SYS` between NUMA nodes: there peer traffic is
#   slower or refused.
# - `topo -p2p r`: `OK` for pairs that can read each other; `NS` or `CNS` means the driver stages
#   through host memory, which is what "peer access off" measured in this lab.
# - `LnkSta` equal to `LnkCap`: a GPU at x8 or a lower generation than it supports shows up as half
#   of the expected `beta` in your alpha/beta fit.
# - `nvbandwidth`: host-to-device close to the link's rate (about 26 GB/s at Gen4 x16, about 55 at
#   Gen5 x16, in one direction) with pinned memory.
#
# Two-node runs with gdrlab, and what each failure message means:
# [docs/cluster.md](../docs/cluster.md); all the commands on one page:
# [docs/cheatsheet.md](../docs/cheatsheet.md). Both are in the `docs/` folder
# that `gdrlab lab` puts beside your copies of the labs (and in the gdrlab repository's `docs/`).
