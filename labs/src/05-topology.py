# %% [markdown] id="05-title"
# # Lab 05: topology pitfalls
#
# Lab 01 showed the BAR1 window, lab 02 that PCIe devices DMA into each other and that a copy
# from the wrong NUMA node is slow, lab 04 that GDR only beats staging when the NIC can read
# GPU memory quickly. How quickly depends on **where** the GPU and the NIC sit on the PCIe
# tree. On Sandy/Ivy Bridge servers a NIC reading a GPU on the *other* socket got about
# 1 GB/s or less, slower than staging through host memory, while the same pair under one PCIe
# switch got 9-10 GB/s.
#
# **Learning goals**
#
# 1. Read a PCIe tree and classify a GPU/NIC pair with nvidia-smi's codes (PIX, PXB, PHB,
#    NODE, SYS).
# 2. Pick the nearest NIC for each GPU.
# 3. Apply NCCL's default rule for GPUDirect RDMA (only PIX or PXB) and know the knob
#    (`NCCL_NET_GDR_LEVEL`).
# 4. Predict configuration A (same switch) against B (different sockets) with the model, and
#    fix a process's placement with `numactl`.
#
# **Live on** any Linux machine (it reads its own tree); the graded questions use recorded
# hwloc exports of real machines, so they give the same answers everywhere.
#
# | duration | prerequisites |
# |---|---|
# | 50 min (reading 15, running 10, exercises 25) | labs 01 and 04; what a NUMA node is |
#
# **Glossary**
#
# - **PCIe switch (PLX)**: one upstream port fanning out to downstream ports; peers under one
#   switch exchange traffic without reaching the CPU.
# - **X, PIX, PXB, PHB, NODE, SYS, NV#**: nvidia-smi's codes for what lies between two devices
#   (the table in section 1).
# - **NUMA node**: a CPU socket (or part of one) with its own memory and PCIe root ports.
# - **ACS** (access control services): a PCIe feature that can send peer traffic up to the root
#   complex for checking, which slows or blocks P2P.
# - **IOMMU**: translates device addresses; when it is on, peer DMA may have to go through it.
# - **`NCCL_NET_GDR_LEVEL`**: the farthest distance at which NCCL uses GPUDirect RDMA.

# %% id="05-setup"
import pandas as pd
from IPython.display import display

from gdrlab import grading
from gdrlab.labsupport import lab05, quick_mode

QUICK = quick_mode()

# %% [markdown] id="05-codes"
# ## 1. The codes
#
# `nvidia-smi topo -m` (and `gdrlab topo`) labels every pair of devices by the farthest thing
# a transfer between them has to cross. A PCIe switch (one upstream port with its downstream
# ports) counts as one bridge.
#
# | code | the path crosses | GDR on Sandy/Ivy Bridge era servers |
# |---|---|---|
# | `X` | itself | |
# | `PIX` | at most one PCIe bridge (one switch) | fast (9-10 GB/s measured under a PLX switch) |
# | `PXB` | several PCIe bridges, never the CPU | fast |
# | `PHB` | a PCIe host bridge (the CPU's root complex) | slow peer reads |
# | `NODE` | several host bridges of one NUMA node | slow |
# | `SYS` | the inter-socket link (QPI/UPI) | about 1 GB/s or less: slower than staging |
# | `NV#` | # NVLinks (GPU to GPU) | |
#
# A small made-up machine, to fix the picture:
#
# ![a made-up two-socket PCIe tree with GPUs and NICs](img/05-tree.svg)

# %% [markdown] id="05-machine-tree"
# ## 2. This machine's tree
#
# `gdrlab.topology.from_sysfs()` reads `/sys/bus/pci/devices` (live). On a laptop or a VM with
# no NVIDIA GPU and no RDMA NIC there is nothing to classify: the cell says so and the lab
# carries on with recorded machines.

# %% id="05-own-topology"
own, message = lab05.own_topology()
print(message)
if own is not None and own.devices:
    print(lab05.tree_text(own))
    display(pd.DataFrame(own.matrix()))

# %% [markdown] id="05-own-pairs-intro"
# ### Your own devices, classified (live on any Linux machine)
#
# The codes describe the path between *any* two PCIe devices, not only GPUs and NICs. Here they
# are for every pair of this machine's storage, network and display devices (an NVMe drive, an
# Ethernet card, an integrated GPU), with the same rule `nvidia-smi topo -m` uses. Peer DMA between
# an NVMe drive and a GPU (what GPUDirect Storage does) cares about the same distances. On a
# laptop or a VM most devices hang straight off one host bridge: expect `PHB`; a workstation with a
# PCIe switch or two sockets shows `PIX`, `NODE` or `SYS`.

# %% id="05-own-pairs"
pairs, message = lab05.own_pairs()
print(message)
if len(pairs):
    display(pairs)


# %% [markdown] id="05-real-dual-socket-server"
# ## 3. A real dual-socket server
#
# A recorded hwloc export (`lstopo --of xml`, from hwloc's test suite) of a dual-socket Xeon E5
# server with three NVIDIA GPUs and a Mellanox ConnectX-4 (`mlx5_0`). hwloc names the GPUs by
# model: GPU0 and GPU1 are Tesla M2075 (Fermi), GPU2 is a Tesla K40m (Kepler, the first
# generation with GPUDirect RDMA).

# %% id="05-recorded-topology"
xeon = lab05.recorded_topology("32em64t")
print(xeon.source, "(recorded)")
print(lab05.tree_text(xeon))
lab05.describe(xeon)

# %% id="05-tree-figure"
fig = lab05.tree_figure(xeon, highlight=("GPU0", "mlx5_0"))
if fig is not None:
    fig.update_layout(title=f"PCIe tree, {xeon.source} (recorded)")
    display(fig)
else:
    print("(the tree drawing is not available in this gdrlab; the text tree above shows the same)")

# %% [markdown] id="05-exercise-1-classify-pairs"
# ## Exercise 1: classify the pairs
#
# From the tree above, give the code of each GPU's path to `mlx5_0`: one of `"PIX"`, `"PXB"`,
# `"PHB"`, `"NODE"`, `"SYS"`. (Hint: find where the two branches meet. Under one bridge? In
# one socket's host bridge? Only at the machine, across the sockets?)

# %% id="ex1-classify" nbgrader={"grade": false, "grade_id": "ex1-classify", "locked": false, "schema_version": 3, "solution": true}
codes_to_mlx5_0 = {"GPU0": None, "GPU1": None, "GPU2": None}
### BEGIN SOLUTION
codes_to_mlx5_0 = {"GPU0": "SYS", "GPU1": "PHB", "GPU2": "PIX"}
### END SOLUTION

# %% id="ex1-classify-tests" nbgrader={"grade": true, "grade_id": "ex1-classify-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert set(codes_to_mlx5_0) == {"GPU0", "GPU1", "GPU2"}, "one entry per GPU"
for gpu, c in codes_to_mlx5_0.items():
    assert c in ("PIX", "PXB", "PHB", "NODE", "SYS"), f"{gpu}: {c!r} is not one of PIX, PXB, PHB, NODE, SYS"
assert codes_to_mlx5_0["GPU0"] == "SYS", "GPU0 is on socket 0 and mlx5_0 on socket 1"
### BEGIN HIDDEN TESTS
for gpu in ("GPU1", "GPU2"):
    grading.check_equal(codes_to_mlx5_0[gpu], xeon.pcie_code(gpu, "mlx5_0")[0], name=f"code of {gpu} to mlx5_0")
### END HIDDEN TESTS

# %% [markdown] id="05-exercise-2-nearest-nic"
# ## Exercise 2: the nearest NIC
#
# A job should give each GPU the NIC it reaches most directly. Write
# `pick_nearest_nic(codes)` that takes one GPU's row, `{nic_name: code}`, and returns the name
# of the nearest NIC (order `PIX` < `PXB` < `PHB` < `NODE` < `SYS`; on a tie, the
# alphabetically first name), or `None` when there is no NIC.

# %% id="ex2-nearest" nbgrader={"grade": false, "grade_id": "ex2-nearest", "locked": false, "schema_version": 3, "solution": true}
ORDER = ["PIX", "PXB", "PHB", "NODE", "SYS"]

def pick_nearest_nic(codes: dict):
    ### BEGIN SOLUTION
    if not codes:
        return None
    return min(sorted(codes), key=lambda nic: ORDER.index(codes[nic]))
    ### END SOLUTION

for gpu in xeon.gpus:
    row = {nic: xeon.pcie_code(gpu, nic)[0] for nic in xeon.nics}
    print(gpu, row, "->", pick_nearest_nic(row))

# %% id="ex2-nearest-tests" nbgrader={"grade": true, "grade_id": "ex2-nearest-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false}
assert pick_nearest_nic({"mlx5_0": "SYS", "mlx5_1": "PIX"}) == "mlx5_1"
assert pick_nearest_nic({}) is None
### BEGIN HIDDEN TESTS
grading.check_equal(pick_nearest_nic({"mlx5_1": "PHB", "mlx5_0": "PHB"}), "mlx5_0", name="tie")
grading.check_equal(pick_nearest_nic({"mlx5_0": "NODE", "mlx5_1": "PXB", "mlx5_2": "SYS"}), "mlx5_1",
                    name="PXB beats NODE")
grading.check_equal(pick_nearest_nic({"mlx5_0": "SYS", "mlx5_3": "NODE"}), "mlx5_3", name="NODE beats SYS")
for gpu in xeon.gpus:
    row = {nic: xeon.pcie_code(gpu, nic)[0] for nic in xeon.nics}
    grading.check_equal(pick_nearest_nic(row), xeon.nearest_nic(gpu), name=f"nearest NIC of {gpu}")
### END HIDDEN TESTS

# %% [markdown] id="05-nccl-rule-gpudirect"
# ## 4. NCCL's rule for GPUDirect RDMA
#
# NCCL does not trust every path. By default it uses GPUDirect RDMA only when the GPU-NIC path
# is `PIX` or `PXB` (no CPU in the way); otherwise it stages through host memory. The
# environment variable `NCCL_NET_GDR_LEVEL` moves the limit (for example `PHB` to allow a path
# through one host bridge, `SYS` to allow everything). NCCL has no `NODE`: its CPU node is a
# whole NUMA node, so nvidia-smi's `NODE` counts as `PHB` there. (Seed articles recommend
# `NCCL_NET_GDR_LEVEL=2`: that old numeric form means `PXB`, NCCL's default anyway.)
#
# ## Exercise 3: would NCCL use GDR?
#
# Write `nccl_uses_gdr(code, level="PXB")`: `True` when NCCL would use GPUDirect RDMA for a
# pair with nvidia-smi code `code` under `NCCL_NET_GDR_LEVEL=level` (a name among PIX, PXB,
# PHB, SYS).

# %% id="ex3-nccl-rule" nbgrader={"grade": false, "grade_id": "ex3-nccl-rule", "locked": false, "schema_version": 3, "solution": true}
def nccl_uses_gdr(code: str, level: str = "PXB") -> bool:
    ### BEGIN SOLUTION
    order = ["PIX", "PXB", "PHB", "SYS"]
    as_nccl = {"NODE": "PHB"}
    return order.index(as_nccl.get(code, code)) <= order.index(as_nccl.get(level, level))
    ### END SOLUTION


# %% id="ex3-nccl-rule-tests" nbgrader={"grade": true, "grade_id": "ex3-nccl-rule-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false}
assert nccl_uses_gdr("PIX") is True
assert nccl_uses_gdr("SYS") is False
assert nccl_uses_gdr("SYS", "SYS") is True
### BEGIN HIDDEN TESTS
for c in ("PIX", "PXB", "PHB", "NODE", "SYS"):
    for lvl in ("PIX", "PXB", "PHB", "SYS"):
        grading.check_equal(bool(nccl_uses_gdr(c, lvl)), lab05.reference_nccl_gdr(c, lvl),
                            name=f"nccl_uses_gdr({c!r}, {lvl!r})")
for gpu, nic in lab05.gpu_nic_pairs(xeon):
    decision = xeon.gdr_decision(gpu, nic)
    grading.check_equal(bool(nccl_uses_gdr(decision["code"])), decision["use_gdr"], name=f"{gpu}-{nic}")
grading.check_equal(bool(nccl_uses_gdr("NODE", "PHB")), True, name="NODE counts as PHB")
### END HIDDEN TESTS

# %% id="05-pair-table"
# What NCCL decides on the recorded server, with its reasons (default level, then PHB).
table = lab05.pair_table(xeon)
table["with NCCL_NET_GDR_LEVEL=PHB"] = [xeon.gdr_decision(g, n, "PHB")["use_gdr"]
                                       for g, n in zip(table["gpu"], table["nic"], strict=True)]
table

# %% [markdown] id="05-nccl-writes-log"
# ### What NCCL writes in its log
#
# NCCL prints its GDR decision with `NCCL_DEBUG=INFO`. A recorded log from a machine with two
# H200s and no RDMA device (all-reduce with P2P and shared memory turned off, so traffic goes
# through NCCL's network transport):

# %% id="05-setup-2"
from gdrlab.labsupport import nccl_log_lines

lines, label = nccl_log_lines("h200x2-nvlink-p2p_shm_off", ("GPU Direct RDMA", "NET/IB", "Using network"))
print(label)
for line in lines:
    print(" ", line)

# %% [markdown] id="05-configuration-vs-b-predicted"
# ## 5. Configuration A vs B, predicted
#
# The GPUDirect RDMA article compares two builds of one server:
#
# * **A**: GPU0 and HCA0 under the same PCIe switch: GDR measured at 9-10 GB/s.
# * **B**: GPU0 on CPU0's root complex, HCA0 on CPU1's: peer traffic crosses QPI and the IOH,
#   about 1 GB/s, *slower than host staging*.
#
# The model (`gdrlab.model`) has a `placement` for each (`same-switch`, `cross-socket`);
# the plot compares GDR and pipelined staging in both, for an Ivy Bridge era profile.

# %% id="05-config-ab-table"
ab = lab05.config_ab_table("kepler-ivb-2014", sizes=[1 << k for k in range(3, 27, 3 if QUICK else 1)])
lab05.config_ab_figure(ab)

# %% [markdown] id="05-config-ab-table-note"
# The same question in lab 04's explorer: pick a profile and switch the placement between
# `same-switch` (A), `same-host-bridge` and `cross-socket` (B). On the Ivy Bridge profile the
# gdr/pipelined crossover falls from hundreds of KB to a few KB across sockets; under one
# switch GDR never loses.

# %% id="05-crossover-explorer"
from gdrlab.labsupport import lab04

lab04.crossover_explorer("kepler-ivb-2014")

# %% [markdown] id="05-exercise-4-which-path"
# ## Exercise 4: which path wins in configuration B?
#
# With the model, profile `kepler-snb-2013`, GPU and NIC on different sockets
# (`placement="cross-socket"`): which of `"gdr"` and `"pipelined"` has the lower latency for a
# 1 MiB message? Store it in `winner_b_1mib`, and the modelled GDR bandwidth in GB/s for that
# message in configuration A (`"same-switch"`) divided by that in B in `gdr_ratio_a_over_b`.
# Use `gdrlab.model.latency_us(profile, path, sizes, placement=...)`.

# %% id="ex4-config-ab" nbgrader={"grade": false, "grade_id": "ex4-config-ab", "locked": false, "schema_version": 3, "solution": true}
import numpy as np

from gdrlab import model

winner_b_1mib = None
gdr_ratio_a_over_b = None
### BEGIN SOLUTION
size = np.array([1 << 20], dtype=float)
lat = {p: float(model.latency_us("kepler-snb-2013", p, size, placement="cross-socket")[0])
       for p in ("gdr", "pipelined")}
winner_b_1mib = min(lat, key=lat.get)
lat_a = float(model.latency_us("kepler-snb-2013", "gdr", size, placement="same-switch")[0])
gdr_ratio_a_over_b = lat["gdr"] / lat_a   # bandwidth ratio = inverse latency ratio
### END SOLUTION
print(winner_b_1mib, gdr_ratio_a_over_b)

# %% id="ex4-config-ab-tests" nbgrader={"grade": true, "grade_id": "ex4-config-ab-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert winner_b_1mib in ("gdr", "pipelined")
assert gdr_ratio_a_over_b is not None and gdr_ratio_a_over_b > 1, "A (same switch) should be the faster one"
### BEGIN HIDDEN TESTS
import numpy as _np

from gdrlab import model as _model

_s = _np.array([1 << 20], dtype=float)
_b = {p: float(_model.latency_us("kepler-snb-2013", p, _s, placement="cross-socket")[0]) for p in ("gdr", "pipelined")}
_a = float(_model.latency_us("kepler-snb-2013", "gdr", _s, placement="same-switch")[0])
grading.check_equal(winner_b_1mib, min(_b, key=_b.get), name="winner_b_1mib")
grading.check_close(gdr_ratio_a_over_b, _b["gdr"] / _a, rel=0.05, name="gdr_ratio_a_over_b")
### END HIDDEN TESTS

# %% [markdown] id="05-fix-nearest-nic-numactl"
# ## 6. The fix: nearest NIC and `numactl`
#
# Two habits from the HPC years, still right today:
#
# 1. give each GPU's process the NIC nearest to that GPU (exercise 2; NCCL does this itself
#    from the topology, MPI libraries take `MV2_IBA_HCA` / `UCX_NET_DEVICES`);
# 2. run the process on the CPU cores and memory of the GPU's NUMA node, so its staging
#    buffers are local too: pinned copies from the wrong NUMA node dropped from 12 GB/s to
#    2.5-3.8 GB/s on a P100 (lab 02's pitfall).
#
# `Topology.numa_binding(gpu)` gives the node and the `numactl` prefix:

# %% id="05-fix-nearest-nic-numactl-code"
for gpu in xeon.gpus:
    b = xeon.numa_binding(gpu)
    print(f"{gpu}: NUMA {b['numa_node']}, CPUs {b['cpus']}, nearest NIC {xeon.nearest_nic(gpu)}")
    print(f"    {b['numactl']} python train.py   # recorded machine: {xeon.source}")
if own is not None and own.gpus:
    for gpu in own.gpus:
        print("this machine:", gpu, own.numa_binding(gpu))

# %% [markdown] id="05-one-more-machine-dgx"
# ## 7. One more machine: a DGX-2
#
# In a DGX-2 the GPUs hang in pairs below two levels of PLX switches (the export ships without
# its NICs; in the real machine each pair of GPUs shares its switch with an InfiniBand NIC:
# the "same switch" rule built into the hardware). GPU to GPU traffic goes over NVSwitch
# (`NV#`), which hides the PCIe codes in `matrix()`; `pcie_matrix()` shows them.

# %% id="05-recorded-topology-2"
dgx2 = lab05.recorded_topology("DGX2")
print(dgx2.source, "(recorded);", dgx2.nvlink_note)
names = dgx2.gpus[:6]
display(pd.DataFrame(dgx2.pcie_matrix()).loc[names, names].rename_axis("PCIe only"))
display(pd.DataFrame(dgx2.matrix()).loc[names, names].rename_axis("with NVLink"))

# %% [markdown] id="05-written-question"
# ## Written answer (2 points, graded by hand)
#
# A job runs with its GPU on socket 0 and the only NIC it was given on socket 1 (`SYS`). In three to
# five sentences: what does NCCL do by default for this pair and why, and what would you change
# (commands or settings) to make GPUDirect RDMA usable and fast?

# %% [markdown] id="explain-placement" nbgrader={"grade": true, "grade_id": "explain-placement", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# NCCL's default `NCCL_NET_GDR_LEVEL` allows GPUDirect RDMA only when the GPU and NIC are at most
# `PXB` apart, so for a `SYS` pair it stages through host memory instead. The reason is that peer
# traffic that crosses root complexes and the inter-socket link is slow (peer reads especially), so
# staging is usually faster there. The fix is placement: give the job a NIC under the GPU's switch
# or at least on its socket (`nvidia-smi topo -m` shows which; `NCCL_IB_HCA` selects it), and bind
# the process's CPUs and memory to the GPU's NUMA node with `numactl --cpunodebind=N --membind=N`.
# Raising `NCCL_NET_GDR_LEVEL` to `SYS` is only worth it if a measurement shows GDR faster.

# %% [markdown] id="05-you-saw"
# ## What you saw
#
# * On the recorded Xeon server one NIC is three different distances away: `PIX` for the K40m
#   beside it, `PHB` through the host bridge, `SYS` across the sockets. Only the first is a
#   pair NCCL uses GPUDirect RDMA on by default.
# * Configuration B is not just slower GDR: in the model (as in the 2014 measurements) it is
#   slower than pipelined staging, so a GDR-only policy would have lost. That is lab 04's
#   crossover moving with the placement.
# * The fix is placement, not code: the nearest NIC per GPU and a `numactl` binding to the
#   GPU's NUMA node. DGX machines build the rule into the hardware by putting each GPU pair
#   and its NIC under one PCIe switch.
# * Together with BAR1 (lab 01), P2P DMA (lab 02) and registration (lab 03), this is the whole
#   of the GPUDirect RDMA story: it works only when all three pillars exist **and** the two
#   devices sit close enough for peer traffic to be fast.

# %% [markdown] id="05-on-your-cluster"
# ## On your cluster
#
# ```
# nvidia-smi topo -m
# lspci -tv
# numactl --hardware
# cat /sys/class/infiniband/*/device/numa_node
# NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
#   mpirun -np 2 -host nodeA,nodeB ./build/all_reduce_perf -b 8 -e 1G -f 2 -g 1
# numactl --cpunodebind=N --membind=N ./your_program
# ```
#
# What to look for:
#
# - `topo -m`: each GPU's row against each NIC (`mlx5_*`) column; the nearest NIC is the one with
#   `PIX` or `PXB`, and the GPU row's `NUMA Affinity` is the node to bind to.
# - nccl-tests' log (nccl-tests is NVIDIA's benchmark suite): channel lines ending
#   `via NET/IB/0/GDRDMA` use GPUDirect RDMA, `via NET/IB/0` stage through host memory; a line
#   `GPU Direct RDMA Disabled for GPU ... (distance X > Y)` names the distance rule that refused it.
#   The `busbw` column is the figure to compare across placements.
# - In a container, run with `--ipc=host` or `--shm-size=1g`: Docker's default 64 MB `/dev/shm` is
#   too small for NCCL's shared-memory segments.
#
# Two-node runs with gdrlab, and what each failure message means:
# [docs/cluster.md](../../../docs/cluster.md); all the commands on one page:
# [docs/cheatsheet.md](../../../docs/cheatsheet.md) (both in the gdrlab repository).
