# %% [markdown] id="05-title"
# # Lab 05: topology pitfalls
#
# Lab 01 showed the BAR1 window, lab 02 how copy engines and peer copies move data, lab 04 that GDR
# wins small messages on every platform, and large ones only where the NIC can read GPU memory
# quickly. How quickly depends on **where** the GPU and the NIC sit on the PCIe tree: this lab
# reads those places on real machines and predicts what they cost.
#
# **Learning goals**
#
# 1. Read a PCIe tree and classify a GPU/NIC pair with nvidia-smi's codes (PIX, PXB, PHB,
#    NODE, SYS).
# 2. Pick the nearest NIC for each GPU, on a real DGX A100's `nvidia-smi topo -m` matrix.
# 3. Apply NCCL's default rule for GPUDirect RDMA (only PIX or PXB), know the knob
#    (`NCCL_NET_GDR_LEVEL`) and read NCCL's own decision in its log.
# 4. Predict configuration A (same switch) against B (different sockets) with the model, and
#    fix a process's placement with `numactl`.
#
# **Live on** any Linux machine (it reads its own tree); the machines shown are real: a recorded
# hwloc export (DGX-2H), a DGX A100's `nvidia-smi topo -m` matrix and NCCL log lines posted in
# NCCL's issue tracker (each cited where it appears). The graded questions give the same answers
# everywhere.
#
# | duration | prerequisites |
# |---|---|
# | 65 min (reading 10, running 15, exercises 40) | labs 01 and 04; what a NUMA node is |
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
from gdrlab.labsupport import lab05, provenance_label, quick_mode

QUICK = quick_mode()

# %% [markdown] id="05-codes"
# ## 1. The codes
#
# `nvidia-smi topo -m` (and `gdrlab topo`) labels every pair of devices by the farthest thing
# a transfer between them has to cross. A PCIe switch (one upstream port with its downstream
# ports) counts as one bridge.
#
# | code | the path crosses |
# |---|---|
# | `X` | itself |
# | `PIX` | at most one PCIe bridge (one switch) |
# | `PXB` | several PCIe bridges, never the CPU |
# | `PHB` | a PCIe host bridge (the CPU's root complex) |
# | `NODE` | several host bridges of one NUMA node |
# | `SYS` | the interconnect between NUMA nodes: between sockets (QPI/UPI, Infinity Fabric), or between NUMA nodes of one socket (an AMD EPYC in NPS2/NPS4 mode) |
# | `NV#` | # NVLinks (GPU to GPU) |
#
# Peer traffic gets slower down the table; section 5 puts numbers on the two ends.
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
# The codes hold for *any* two PCIe devices: here for this machine's storage, network and display
# devices, with `nvidia-smi topo -m`'s rule. On a laptop or a VM expect `PHB` (one host bridge); a
# workstation with a PCIe switch or two sockets shows `PIX`, `NODE` or `SYS`.

# %% id="05-own-pairs"
pairs, message = lab05.own_pairs()
print(message)
if len(pairs):
    display(pairs)


# %% [markdown] id="05-real-machines"
# ## 3. Real machines only: a DGX-2
#
# A recorded hwloc export of an NVIDIA DGX-2H (from hwloc's test suite, used unchanged): two Xeon
# sockets and 16 Tesla V100-SXM3, in pairs below two levels of PLX PCIe switches. The export has
# no NICs. GPU to GPU traffic goes over NVSwitch (`NV#`), which hides the PCIe codes in `matrix()`;
# `pcie_matrix()` shows them. More on the file (it is a trimmed test fixture) in
# [docs/topology-reference.md](../docs/topology-reference.md).

# %% id="05-recorded-topology"
dgx2 = lab05.recorded_topology("DGX2")
print(dgx2.source + ";", dgx2.nvlink_note)
lab05.describe(dgx2)
names = dgx2.gpus[:6]
display(pd.DataFrame(dgx2.pcie_matrix()).loc[names, names].rename_axis("PCIe only (recorded DGX-2H)"))
display(pd.DataFrame(dgx2.matrix()).loc[names, names].rename_axis("with NVLink (recorded DGX-2H)"))
print(lab05.pair_code_note(dgx2))

# %% id="05-tree-figure"
fig = lab05.tree_figure(dgx2, highlight=("GPU0", "GPU1"))
if fig is not None:
    fig.update_layout(title=f"PCIe tree, {dgx2.source}")
    display(fig)
else:
    print("(the tree drawing is not available in this gdrlab; the matrices above show the same)")

# %% [markdown] id="05-dgx-a100-matrix"
# ### A real machine with NICs: a DGX A100's `nvidia-smi topo -m`
#
# The matrix a user posted for "the DGX A100 40GB node that I have access to" in NVIDIA/nccl issue
# #1505 (2024-11-06): the codes nvidia-smi computed, without the bridges behind them (read with
# `gdrlab.topology.parse_topo_matrix`). Only the header and the rows of GPU0-GPU3 are copied,
# verbatim ([docs/topology-reference.md](../docs/topology-reference.md) says more about it).

# %% id="05-dgx-a100-matrix-code"
dgx, dgx_label = lab05.recorded_matrix("dgx-a100")
print(dgx_label)
print("GPUs:", dgx.gpus, " NICs:", dgx.nics, " rows in the excerpt:", dgx.rows)
print("rows that disagree with each other:", dgx.asymmetric_pairs() or "none")
display(lab05.matrix_frame(dgx))
print(lab05.sys_within_one_socket_note(dgx))

# %% [markdown] id="05-exercise-1-classify-pairs"
# ## Exercise 1 (2 points): classify placements from their description
#
# `nvidia-smi topo -m` and `gdrlab.topology` classify a machine you have. Before a machine is
# bought or cabled, you have only its block diagram. Give the code (`"PIX"`, `"PXB"`, `"PHB"`,
# `"NODE"` or `"SYS"`) of the GPU-NIC path in each of these placements:
#
# * **A**: the GPU and the HCA under one PCIe switch (the GPUDirect RDMA article's configuration A);
# * **B**: the GPU on CPU0's root complex, the HCA on CPU1's (its configuration B);
# * **C**: each under its own PCIe switch, the two switches below a third switch, no host bridge
#   on the path (the DGX-2's two-level PLX tree);
# * **D**: the GPU and the HCA on two root ports of the same host bridge, no switch;
# * **E**: one socket, but two different host bridges (PCIe root complexes) of its NUMA node.

# %% id="ex1-classify" nbgrader={"grade": false, "grade_id": "ex1-classify", "locked": false, "schema_version": 3, "solution": true}
placement_codes = {"A": None, "B": None, "C": None, "D": None, "E": None}
### BEGIN SOLUTION
placement_codes = {"A": "PIX", "B": "SYS", "C": "PXB", "D": "PHB", "E": "NODE"}
### END SOLUTION

# %% id="ex1-classify-tests" nbgrader={"grade": true, "grade_id": "ex1-classify-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
grading.check_true(set(placement_codes) == {"A", "B", "C", "D", "E"}, "one entry per placement, A to E")
for key, c in placement_codes.items():
    grading.check_true(c in ("PIX", "PXB", "PHB", "NODE", "SYS"), f"{key}: {c!r} is not one of PIX, PXB, PHB, NODE, SYS",
                       answer=c, name=f"placement {key}")
### BEGIN HIDDEN TESTS
_want = {"A": "PIX", "B": "SYS", "C": "PXB", "D": "PHB", "E": "NODE"}
for _k, _v in _want.items():
    grading.check_equal(placement_codes[_k], _v, name=f"placement {_k}")
### END HIDDEN TESTS

# %% [markdown] id="05-exercise-2-nearest-nic"
# ## Exercise 2 (1 point): the nearest NIC
#
# A job should give each GPU the NIC it reaches most directly. Write
# `pick_nearest_nic(codes)` that takes one GPU's row, `{nic_name: code}`, and returns the name
# of the nearest NIC (order `PIX` < `PXB` < `PHB` < `NODE` < `SYS`; on a tie, the
# alphabetically first name), or `None` when there is no NIC.

# %% id="ex2-nearest" nbgrader={"grade": false, "grade_id": "ex2-nearest", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"nearest_nic": "picks the NIC for you; write the rule"}}
ORDER = ["PIX", "PXB", "PHB", "NODE", "SYS"]

def pick_nearest_nic(codes: dict):
    ### BEGIN SOLUTION
    if not codes:
        return None
    return min(sorted(codes), key=lambda nic: ORDER.index(codes[nic]))
    ### END SOLUTION


# %% id="ex2-nearest-tests" nbgrader={"grade": true, "grade_id": "ex2-nearest-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Self-check on made-up rows (the graded cases are others).
grading.check_function_cases(pick_nearest_nic, [
    (({"nicA": "SYS", "nicB": "PXB"},), "nicB"),
    (({"z": "PIX", "y": "PIX"},), "y"),
], name="pick_nearest_nic")
grading.check_true(pick_nearest_nic({}) is None, "pick_nearest_nic({}): no NIC gives None",
                   answer=pick_nearest_nic({"q": "PHB"}), name="pick_nearest_nic")
### BEGIN HIDDEN TESTS
grading.check_equal(pick_nearest_nic({"mlx5_0": "SYS", "mlx5_1": "PIX"}), "mlx5_1", name="PIX beats SYS")
grading.check_equal(pick_nearest_nic({"mlx5_1": "PHB", "mlx5_0": "PHB"}), "mlx5_0", name="tie")
grading.check_equal(pick_nearest_nic({"mlx5_0": "NODE", "mlx5_1": "PXB", "mlx5_2": "SYS"}), "mlx5_1",
                    name="PXB beats NODE")
grading.check_equal(pick_nearest_nic({"mlx5_0": "SYS", "mlx5_3": "NODE"}), "mlx5_3", name="NODE beats SYS")
grading.check_equal(pick_nearest_nic({"b": "PHB", "a": "NODE"}), "b", name="PHB beats NODE")
### END HIDDEN TESTS

# %% [markdown] id="05-nccl-rule-gpudirect"
# ## 4. NCCL's rule for GPUDirect RDMA
#
# NCCL does not trust every path. By default it uses GPUDirect RDMA only when the GPU-NIC path
# is `PIX` or `PXB` (no CPU in the way); otherwise it stages through host memory. The
# environment variable `NCCL_NET_GDR_LEVEL` moves the limit (`LOC` to forbid GDR, `PHB` to allow
# a path through one host bridge, `SYS` to allow everything). NCCL has no `NODE`: its CPU node is
# a whole NUMA node, so nvidia-smi's `NODE` counts as `PHB` there. (Some of the articles this kit started from recommend
# `NCCL_NET_GDR_LEVEL=2`: that old numeric form means `PXB`, which admits the same GPU-NIC pairs
# on PCIe as NCCL's default, `PXB` before 2.29.2 and `P2C` from it.) A second
# knob, `NCCL_NET_GDR_READ`, decides whether the *sending* side also lets the NIC read GPU memory
# directly: since NCCL 2.19 it is on by default for Ampere and newer GPUs on any platform, and for
# older GPUs only with NVLink (their PCIe peer reads could be slower than host-memory reads). The
# version history: [docs/topology-reference.md](../docs/topology-reference.md).
#
# ## Exercise 3 (1 point): would NCCL use GDR?
#
# Write `nccl_uses_gdr(code, level="PXB")`: `True` when NCCL would use GPUDirect RDMA for a
# pair with nvidia-smi code `code` under `NCCL_NET_GDR_LEVEL=level` (a name among PIX, PXB,
# PHB, SYS).

# %% id="ex3-nccl-rule" nbgrader={"grade": false, "grade_id": "ex3-nccl-rule", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"gdr_decision": "is NCCL's rule as the package implements it: write your own", "parse_gdr_level": "maps the level for you", "pair_table": "shows NCCL's decision for each pair", "PATH_TYPES_2_12": "is NCCL's path order: write the order from the text", "versions": "is NCCL's table by version, path order included: write the order from the text", "path_type_name": "names NCCL's path types in order", "path_types": "lists NCCL's path types in order", "path_rank": "ranks NCCL's path types for you", "PATH_TYPES": "lists NCCL's path types in order", "explain": "reads NCCL's decision and names its path types", "parse_log": "reads NCCL's decision and names its path types"}}
def nccl_uses_gdr(code: str, level: str = "PXB") -> bool:
    ### BEGIN SOLUTION
    order = ["PIX", "PXB", "PHB", "SYS"]
    as_nccl = {"NODE": "PHB"}
    return order.index(as_nccl.get(code, code)) <= order.index(as_nccl.get(level, level))
    ### END SOLUTION


# %% id="ex3-nccl-rule-tests" nbgrader={"grade": true, "grade_id": "ex3-nccl-rule-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Self-check: the two ends of the rule (the graded table is hidden).
grading.check_function_cases(nccl_uses_gdr, [(("PIX", "PIX"), True), (("SYS", "PXB"), False), (("SYS", "SYS"), True)],
                             name="nccl_uses_gdr")
### BEGIN HIDDEN TESTS
# The rule written out as a table (rows: code; columns: level PIX, PXB, PHB, SYS).
_table = {"PIX": (1, 1, 1, 1), "PXB": (0, 1, 1, 1), "PHB": (0, 0, 1, 1), "NODE": (0, 0, 1, 1),
          "SYS": (0, 0, 0, 1)}
for _c, _row in _table.items():
    for _lvl, _use in zip(("PIX", "PXB", "PHB", "SYS"), _row, strict=True):
        grading.check_equal(bool(nccl_uses_gdr(_c, _lvl)), bool(_use), name=f"nccl_uses_gdr({_c!r}, {_lvl!r})")
grading.check_equal(bool(nccl_uses_gdr("PXB")), True, name="the function's default level (PXB)")
grading.check_equal(bool(nccl_uses_gdr("NODE")), False, name="NODE at the default level")
### END HIDDEN TESTS

# %% [markdown] id="05-exercise-dgx-a100"
# ## Exercise 4 (2 points): the DGX A100's NICs
#
# Back to the real DGX A100 matrix of section 3 (`dgx`; `dgx.code("GPU2", "NIC2")` gives one
# entry). Its 12 NICs are not all alike: which each GPU should use is for you to work out from the
# codes, with your `pick_nearest_nic` and `nccl_uses_gdr`.
#
# * `dgx_nics`: for each GPU whose row the excerpt holds (`dgx.rows`), the **set** of NIC columns
#   nearest to it (all of them when several tie);
# * `dgx_gdr_default`: would NCCL, at its default `NCCL_NET_GDR_LEVEL`, use GPUDirect RDMA between
#   GPU2 and the NICs you picked for it (`True`/`False`)?
# * `dgx_forced_distance`: a job forces GPU2 onto NIC0 (say with `NCCL_IB_HCA`). NCCL 2.19 logs
#   `GPU Direct RDMA Disabled for GPU <bus> / HCA <n> (distance D > L)`, where `D` is the type of the
#   GPU-NIC path and `L` the farthest type `NCCL_NET_GDR_LEVEL` allows, both as numbers of NCCL's
#   `src/graph/topo.h`, which from NCCL 2.12 to 2.25 reads LOC 0, NVL 1, NVB 2, PIX 3, PXB 4,
#   PXN 5, PHB 6, SYS 7. Predict `(D, L)` for that pair at the default level.

# %% id="ex-dgx-a100" nbgrader={"grade": false, "grade_id": "ex-dgx-a100", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"nearest_nic": "picks the NIC for you; use your pick_nearest_nic", "gdr_decision": "is NCCL's rule as the package implements it: use your nccl_uses_gdr", "pair_table": "shows NCCL's decision for each pair", "PATH_TYPES_2_12": "is NCCL's numbering: take it from the text", "PATH_TYPES_2_26": "is NCCL's numbering: take it from the text", "versions": "is NCCL's numbering by version: take it from the text", "path_types": "is NCCL's numbering: take it from the text", "path_rank": "is NCCL's numbering: take it from the text", "path_type_name": "is NCCL's numbering: take it from the text", "PATH_TYPES": "lists NCCL's path types in order"}}
dgx_nics = {gpu: None for gpu in dgx.rows}
dgx_gdr_default = None
dgx_forced_distance = None
### BEGIN SOLUTION
_codes = {g: {n: dgx.code(g, n) for n in dgx.nics} for g in dgx.rows}
_nearest = {g: pick_nearest_nic(row) for g, row in _codes.items()}
dgx_nics = {g: {n for n, c in row.items() if c == row[_nearest[g]]} for g, row in _codes.items()}
dgx_gdr_default = nccl_uses_gdr(dgx.code("GPU2", _nearest["GPU2"]))
dgx_forced_distance = (7, 4)   # NIC0 is SYS from GPU2 (PATH_SYS 7); the default level is PATH_PXB 4
### END SOLUTION
print(dgx_nics, dgx_gdr_default, dgx_forced_distance)

# %% id="ex-dgx-a100-tests" nbgrader={"grade": true, "grade_id": "ex-dgx-a100-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_nics_set = None if any(v is None for v in dgx_nics.values()) else True
grading.check_true(set(dgx_nics) == set(dgx.rows), "dgx_nics: one entry per GPU row of the excerpt",
                   answer=_nics_set, name="dgx_nics")
grading.check_true(all(isinstance(v, (set, frozenset)) and v for v in dgx_nics.values()),
                   "dgx_nics: each entry a non-empty set of NIC columns", answer=_nics_set, name="dgx_nics")
grading.check_true(isinstance(dgx_gdr_default, bool), "dgx_gdr_default is True or False",
                   answer=dgx_gdr_default, name="dgx_gdr_default")
### BEGIN HIDDEN TESTS
_order = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}
for _g in dgx.rows:
    _row = {_n: dgx.codes[_g][_n] for _n in dgx.nics}
    _best = min(_order[_c] for _c in _row.values())
    grading.check_set_equal(dgx_nics[_g], {_n for _n, _c in _row.items() if _order[_c] == _best},
                            name=f"dgx_nics[{_g!r}]")
_gpu2 = {dgx.codes["GPU2"][_n] for _n in dgx_nics["GPU2"]}
grading.check_equal(dgx_gdr_default, _gpu2 <= {"PIX", "PXB"}, name="dgx_gdr_default")
grading.check_equal(tuple(dgx_forced_distance or ()), (7, 4), name="dgx_forced_distance",
                    hint="the pair's code as NCCL's path type, and the default limit, in NCCL 2.19's numbering")
### END HIDDEN TESTS

# %% [markdown] id="05-nccl-writes-log"
# ### What NCCL writes in its log
#
# NCCL says what it decided with `NCCL_DEBUG=INFO` **and** `NCCL_DEBUG_SUBSYS` including `NET` (or,
# from 2.27, `GRAPH`): the default subsystems (`INIT,BOOTSTRAP,ENV` since 2.23) leave the topology
# lines out, and from 2.30 the per-pair line below is printed only by builds with tracing. Two kinds of lines
# matter, and only one of them is about distance (NCCL's source: `src/graph/topo.cc` and
# `src/graph/paths.cc`):
#
# * `NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'` says whether the network transport can
#   hand GPU memory to that NIC at all (a peer-memory module or dma-buf), for every GPU alike;
# * `GPU Direct RDMA Disabled for GPU ca000 / HCA 0 (distance 7 > 4)` (the form of NCCL 2.12-2.23)
#   is the **topology decision** for one GPU (bus id `ca000`) and one NIC: path type 7 is farther than the limit 4. The channel
#   lines then end `via NET/IB/<n>/GDRDMA` when a connection uses GPUDirect RDMA and
#   `via NET/IB/<n>` when it stages through host memory.
#
# This kit has no InfiniBand recording of its own (the recorded H200 pair has no HCA), so here are
# lines users posted in NCCL's issue tracker, copied verbatim and read by `gdrlab.nccl.parse_log`
# (sources in `gdrlab/data/nccl/README.md`): published logs, not measurements of this kit.

# %% id="05-nccl-ib-decision-code"
for where, explained in lab05.ib_gdr_lines():
    print(where)
    for line in explained:
        print("  ", line)

# %% [markdown] id="05-nccl-ib-decision"
# Read the first one as NCCL's developers did in that issue: the poster's GPU and NIC were "not on
# one PCIe switch"; in NCCL 2.12-2.25's numbering 7 is `SYS` and 4 is `PXB`, the default limit, so
# NCCL refused GPUDirect RDMA and staged through host memory. The maintainer's answer: force it
# with `NCCL_NET_GDR_LEVEL=SYS` if you must, but it "may not give you better performance if the NIC
# and GPU are not on the same PCI switch". The per-pair line changes with the NCCL version: the
# cell below prints how it reads in each release range, from the kit's NCCL version table (each
# row read in NCCL's source at the tag it names). From 2.30 only a build with tracing prints it;
# the channel lines (`via NET/IB/<n>/GDRDMA` or not) remain in every version.
# The second excerpt is the other outcome: four A100
# on one node with P2P and shared memory turned off talk through their IB NICs, every channel
# `via NET/IB/<n>/GDRDMA`.
#
# The line the recorded H200 logs *do* hold is of the first kind, and for a transport that can
# never do it: `NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'` only says that TCP
# sockets cannot take GPU memory. It is not a distance decision:

# %% id="05-gdr-line-history"
for row in lab05.gdr_line_history():
    print("-", row)

# %% id="05-setup-2"
from gdrlab.labsupport import nccl_log_lines

lines, label = nccl_log_lines("h200x2-nvlink-p2p_shm_off", ("GPU Direct RDMA", "NET/IB", "Using network"))
print(label)
for line in lines:
    print(" ", line)

# %% [markdown] id="05-efa-srd"
# ### On AWS: EFA and SRD where a cluster would have InfiniBand
#
# AWS's GPU instances reach other nodes through Elastic Fabric Adapters (EFA), and NCCL talks to
# them through the aws-ofi-nccl plugin over libfabric's `efa` provider, not through its own
# `NET/IB`. The transport underneath is SRD (Scalable Reliable Datagram): the adapter makes
# delivery reliable, but it sprays each flow over many network paths, so packets arrive out of
# order and the provider puts messages back together; there are no RC queue pairs to connect
# per peer, as InfiniBand's and RoCE's reliable connections need. At the PCIe end nothing changes:
# GPUDirect RDMA still means the adapter reading and writing GPU memory through BAR1 (libfabric's
# `FI_HMEM`), and the plugin's log says whether it could. Sources: Shalev et al., "A
# Cloud-Optimized Transport Protocol for Elastic and Scalable HPC", IEEE Micro 40(6), 2020
# (SRD); the aws/aws-ofi-nccl README. Two logs users posted (sources in
# `gdrlab/data/nccl/plugins/README.md`), read by `gdrlab nccl parse`: an 8-GPU p5en node with 16
# EFA devices, and an older instance whose EFA device cannot read remote memory, so no GPU memory
# over the network:

# %% id="05-efa-logs"
from gdrlab import nccl

for name in ("nccl-issue-1597-efa-p5en", "ofi-issue-161-efa-no-hmem"):
    ofi_log = nccl.parse_log(nccl.plugin_logs()[name].read_text())
    print(name)
    for r in ofi_log["summary"]["reasons"]:
        if r["source"] == "plugin" and ("Provider" in r["message"] or "HMEM" in r["message"] or "DMA-BUF" in r["message"]):
            print(f"  {r['message']}\n    -> {r['meaning']}")

# %% [markdown] id="05-nccl-allreduce-intro"
# ### What the recorded transports deliver
#
# The same two H200s ran one all-reduce three ways: NCCL's default (NVLink), `NCCL_P2P_DISABLE=1`
# (staging through host memory) and `NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1` (TCP sockets). How the
# figures were taken, and the second recording beside them:
# [docs/topology-reference.md](../docs/topology-reference.md).

# %% id="05-nccl-allreduce"
figures = lab05.allreduce_figures()
print(provenance_label(figures.attrs.get("provenance"), "recorded"), "- 256 MiB, busbw (= algbw at 2 ranks)")
display(figures)

# %% [markdown] id="05-nccl-allreduce-note"
# The sockets row is a guest's TCP stack over virtio Ethernet: no InfiniBand network with GPUDirect
# RDMA is in these recordings, so this gap is not what a refused GDR path costs on an RDMA network.

# %% [markdown] id="05-configuration-vs-b-predicted"
# ## 5. Configuration A vs B
#
# The GPUDirect RDMA article compares two placements of a GPU and its HCA (it names no hardware):
#
# * **A**: GPU0 and HCA0 under the same PCIe switch;
# * **B**: GPU0 on CPU0's root complex, HCA0 on CPU1's: peer traffic crosses the inter-socket
#   link and the other socket's root complex.
#
# The model (`gdrlab.model`) has a `placement` for each (`same-switch`, `cross-socket`). The
# profile below is `kepler-ivb-2014` (verbs level): a Tesla K40m (PCIe 3.0 x16) and a Connect-IB
# HCA (PCIe 3.0 x16) on an FDR InfiniBand port (4 lanes at 14.0625 Gbaud, 64b/66b encoded).
#
# ### Exercise 5: predict before you look
#
# Before running the plot below, commit two predictions for a 1 MiB message on `kepler-ivb-2014`:
# `predicted_winner_b` (`"gdr"` or `"pipelined"`: which is faster in B) and
# `predicted_gdr_a_gbps` (GDR bandwidth in A, in GB/s). They are not graded (a notebook cannot
# tell a prediction typed before the plot from one typed after); the cell after the plot says how
# they compare, and your reason is graded by hand.

# %% id="ex5-predict-ab"
predicted_winner_b = None     # your prediction: "gdr" or "pipelined"
predicted_gdr_a_gbps = None   # your prediction, in GB/s
if grading.done(predicted_winner_b, predicted_gdr_a_gbps, name="Exercise 5"):
    print("your prediction:", predicted_winner_b, "wins in B; GDR in A", predicted_gdr_a_gbps, "GB/s")

# %% id="05-config-ab-table"
ab = lab05.config_ab_table("kepler-ivb-2014", sizes=[1 << k for k in range(3, 27, 3 if QUICK else 1)])
lab05.config_ab_figure(ab)

# %% id="05-config-ab-feedback"
print(lab05.ab_note(ab))
if grading.done(predicted_winner_b, predicted_gdr_a_gbps, name="Exercise 5"):
    print("your prediction:", lab05.prediction_feedback(predicted_winner_b, predicted_gdr_a_gbps, ab))

# %% [markdown] id="05-config-ab-table-note"
# Now the article's figures. It reports "9-10 GB/s" for A: that cannot be, since an FDR x4 port
# carries the data rate printed above after 64b/66b encoding, and the Connect-IB's PCIe slot no
# more. For B it reports "about 1 GB/s", slower than host staging. The model's B follows NVIDIA's
# 2014 measurement of an adapter writing to a GPU on the other socket (250 MB/s, "Benchmarking
# GPUDirect RDMA on Modern Server Platforms"); the article does not say how it measured its
# figure. Both plotted values are modelled, not measured. What holds in both is the order: in B
# pipelined staging beats GDR by more than an order of magnitude, which is why a GDR-only policy
# would have lost.
#
# The same comparison on two machines of 2026 (each parameter's source, or "assumed", in
# `gdrlab model --profile NAME`; EFA's one-way time is assumed): an AWS p5 instance
# (H100, EFA with its SRD transport) and a PCIe-only L40S server (RoCE v2, GPU and NIC under a
# PCIe switch), modelled beside the Ivy Bridge profile at 1 MiB:

# %% id="05-config-ab-2026"
summary_ab = lab05.ab_summary()
print("modelled at 1 MiB; 'B crossing' is where pipelined first beats GDR across sockets (None: never)")
display(summary_ab)

# %% [markdown] id="explain-prediction-ab-question" nbgrader={"grade": false, "grade_id": "explain-prediction-ab-question", "locked": true, "schema_version": 3, "solution": false}
# ### Your prediction's reason (2 points, graded by hand)
#
# Why did you predict that winner and that bandwidth, and where was the plot different?

# %% [markdown] id="explain-prediction-ab" nbgrader={"grade": true, "grade_id": "explain-prediction-ab", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# In B the NIC's reads of GPU memory cross the inter-socket link and the other socket's root
# complex, which served peer reads slowly on Sandy/Ivy Bridge, while pipelined staging only reads
# host memory; so staging wins. A is bounded by the FDR port's data rate after encoding (6.8 GB/s)
# and the PCIe 3.0 x16 slots above it, so GDR in A sits just under 6.8 GB/s; B's GDR is a small
# fraction of that.

# %% [markdown] id="05-crossover-explorer-intro"
# The same question in lab 04's explorer: pick a profile and switch the placement between
# `same-switch` (A), `same-host-bridge` and `cross-socket` (B); the 2026 machines are in its list.

# %% id="05-crossover-explorer"
from gdrlab.labsupport import lab04

lab04.crossover_explorer("kepler-ivb-2014", profiles=lab05.AB_PROFILES + lab04.HISTORIC_PROFILES[2:])

# %% [markdown] id="05-fix-nearest-nic-numactl"
# ## 6. The fix: nearest NIC and `numactl`
#
# Two habits from the HPC years, still right today:
#
# 1. give each GPU's process the NIC nearest to that GPU (exercise 2; NCCL does this itself
#    from the topology, MPI libraries take `MV2_IBA_HCA` / `UCX_NET_DEVICES`);
# 2. run the process on the CPU cores and memory of the GPU's NUMA node, so its staging
#    buffers are local too: on a Tesla P100 (PCIe 3.0 x16), CUDA's `bandwidthTest` measured pinned
#    host-to-device copies at 12.2 GB/s with memory on the GPU's socket and 3.8 GB/s with memory
#    on the other socket (mpicbg-scicomp/gearshifft PR #82, run under `numactl`; docs/model.md
#    rows V6 and V8). Lab 02 measures pinned copies, but not across NUMA nodes.
#
# `Topology.numa_binding(gpu)` gives the node and the `numactl` prefix:

# %% id="05-fix-nearest-nic-numactl-code"
for gpu in dgx2.gpus[::4]:
    b = dgx2.numa_binding(gpu)
    print(f"{gpu}: NUMA {b['numa_node']}, CPUs {b['cpus']}")
    print(f"    {b['numactl']} python train.py   # recorded machine: {dgx2.source}")
if own is not None and own.gpus:
    for gpu in own.gpus:
        print("this machine:", gpu, own.numa_binding(gpu))

# %% [markdown] id="05-numactl-trimmed"
# The CPU lists above are short because the export is hwloc's **test file**, trimmed to two cores
# per socket (its Machine cpuset is `0x03000003`: four processing units in all). A real DGX-2H has
# two 24-core Xeon Platinum 8174, and `numactl --hardware` there lists all of them; the NUMA node
# numbers and the `numactl` prefix are what carries over.

# %% [markdown] id="05-written-question" nbgrader={"grade": false, "grade_id": "05-written-question", "locked": true, "schema_version": 3, "solution": false}
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
# * One pair of devices can be five different distances apart (`PIX`, `PXB`, `PHB`, `NODE`,
#   `SYS`), and a block diagram is enough to say which. Only the first two are pairs NCCL uses
#   GPUDirect RDMA on by default; on the recorded DGX-2 only the GPU pairs within one PLX tree are.
# * On a real DGX A100's matrix each GPU has a few NICs it should use and many it should not: give
#   it a near one and NCCL's default rule allows GPUDirect RDMA; force it onto a far one and NCCL
#   stages through host memory and, with the right log settings, says why. `SYS` there can be two
#   NUMA nodes of one socket. The socket transport's "Disabled" line is no such decision.
# * Configuration B is not just slower GDR: in the model (profile `kepler-ivb-2014`, verbs level;
#   modelled, not measured) it is slower than pipelined staging, so a GDR-only policy would have
#   lost. That is lab 04's crossover moving with the placement; on a 2026 PCIe-only L40S server the
#   model keeps GDR ahead even across sockets.
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
# [docs/cluster.md](../docs/cluster.md); all the commands on one page:
# [docs/cheatsheet.md](../docs/cheatsheet.md). Both, and the other `docs/` pages this lab links,
# are in the `docs/` folder that `gdrlab lab` puts beside your copies of the labs (and in the
# gdrlab repository's `docs/`).
