# %% [markdown] id="00-title"
# # Lab 00: setup check
#
# Before measuring anything, find out what this machine can measure. GPUDirect RDMA needs a GPU,
# an RDMA network adapter (an *HCA*) and a way for the two to share GPU memory; most laptops have
# none of these, a cloud VM often has a GPU but no HCA, a cluster node may have all three. The labs
# run everywhere: what cannot be measured here is shown from data **recorded** on named hardware
# or **modelled**, and every plot says which.
#
# **Learning goals**
#
# 1. Run `gdrlab doctor` and read its report: GPUs, BAR1, RDMA devices, peer-memory support,
#    libraries and, for each transfer path, whether it can run here and why not.
# 2. Name the transfer paths the labs compare (`host`, `staged`, `shared`, `pipelined`, `gdr`,
#    `gdrcopy`, `p2p`) and what each one needs.
# 3. Read the recorded report of an NVIDIA H200 machine and predict what it could and could not run.
# 4. Take a first live measurement (the `host` path over TCP loopback, which runs on any machine)
#    and compare it with the model.
#
# **Live on** any machine. Nothing here needs a GPU.
#
# | duration | prerequisites |
# |---|---|
# | 30 min (reading 10, running 10, exercises 10) | Python and Jupyter basics; knowing that a GPU and a network adapter are separate PCIe devices |
#
# **Glossary**
#
# - **RDMA**: remote direct memory access; a network adapter reads and writes another machine's
#   memory without that machine's CPU copying the data.
# - **HCA**: host channel adapter, the RDMA network adapter (InfiniBand or RoCE).
# - **GPUDirect RDMA (GDR)**: the HCA reads and writes GPU memory directly over PCIe.
# - **transfer path**: one way of moving a buffer (`host`, `staged`, `shared`, `pipelined`, `gdr`,
#   `gdrcopy`, `p2p`); the labs use these names everywhere.
# - **pinned (page-locked) memory**: host memory the OS may not move or swap, so a device can DMA to it.
# - **BAR1**: the PCIe window through which other devices reach a GPU's memory (lab 01).

# %% id="00-setup"
import copy

from IPython.display import display

from gdrlab import grading, hw
from gdrlab.labsupport import lab00
from gdrlab.widgets import diagram, plot_sweep, quick_mode

QUICK = quick_mode()
print("quick mode (small sweeps, no widget loops):", QUICK)

# %% [markdown] id="00-story-one-picture"
# ## 1. The story in one picture
#
# Before 2010 a GPU buffer bound for another node crossed host memory twice: a `cudaMemcpy` into a
# pinned *bounce buffer*, a CPU `memcpy` into the network adapter's registered buffer, then the
# adapter's DMA (the `staged` path, red below). GPUDirect 1.0 (2010) let CUDA and the adapter share
# one pinned buffer (`shared`: one copy saved). GPUDirect RDMA (2013) let the adapter read and write
# GPU memory directly (`gdr`, green). Three parts must all exist for that arrow:
#
# 1. **BAR1 exposure**: the GPU exposes a window of its memory on the PCIe bus (lab 01);
# 2. **P2P DMA**: a PCIe device can target that window instead of host memory (lab 02);
# 3. **peer-memory registration**: the RDMA stack can register GPU memory, through the
#    `nvidia-peermem` module or through dma-buf (lab 03).

# %% id="00-diagram"
diagram("transfer-paths")

# %% [markdown] id="00-ask-doctor"
# ## 2. Ask the doctor
#
# `gdrlab doctor` is the same report on the command line (`gdrlab doctor`, or `gdrlab doctor --json`
# for scripts). Here it runs as a learner would run it in a terminal:

# %% id="00-run-doctor-cli"
print(lab00.run_doctor_cli())

# %% [markdown] id="00-run-doctor-cli-note"
# From Python, `gdrlab.hw.doctor_report()` returns the same report as a dictionary. Its `paths`
# entry says, for every path, whether it can run here, why (or why not), and what would fix it.

# %% id="00-doctor-report"
report = hw.doctor_report()
print("GPUs here:", len(report["gpus"]) or report["gpus_reason"])
print("RDMA devices here:", [d["name"] for d in report["rdma_devices"]] or report["rdma_reason"])
lab00.paths_table(report)

# %% [markdown] id="00-doctor-report-note"
# | path | what moves the bytes | needs |
# |---|---|---|
# | `host` | host buffer to host buffer over the wire | nothing |
# | `staged` | GPU to pinned bounce buffer, CPU copy to the wire's buffer, wire | a GPU |
# | `shared` | GPU straight into the wire's pinned buffer (GPUDirect 1.0) | a GPU |
# | `pipelined` | `shared` cut into chunks so copies and wire overlap | a GPU |
# | `gdr` | the HCA reads and writes GPU memory (GPUDirect RDMA) | GPU + RDMA HCA + peer memory |
# | `gdrcopy` | the CPU copies through a BAR1 mapping of GPU memory | GPU + gdrcopy |
# | `p2p` | GPU to GPU by peer DMA (GPUDirect P2P) | 2+ GPUs |
#
# A path that cannot run here is never replaced silently by another one: the reason is the
# answer.

# %% [markdown] id="00-first-live-measurement-host"
# ## 3. A first live measurement: the `host` path
#
# The `host` path needs no GPU, so every machine can run it: a local `gdrlab serve` process is
# started on 127.0.0.1 and messages go back and forth over TCP. Latency is half the round trip,
# as `ib_write_lat` and the OSU benchmarks count it. The dashed curve is the model's prediction for
# the same path on the profile named in the legend (a server of another machine, so expect the
# shape to agree better than the values).
#
# In a live session, press **Start** (or run the cell: it starts by itself) and watch the points
# arrive; **Stop** ends the sweep after the size being measured.

# %% id="00-host-sweep"
if QUICK:
    # CI and the autograder: three sizes, measured in this cell, no background thread.
    live, model = lab00.host_sweep("8:4M")
    display(plot_sweep(live, y="lat_p50_us", model=model, title="host path over tcp loopback"))
else:
    sweep = lab00.host_sweep_widget("8:4M", y="lat_p50_us")
    display(sweep)
    sweep.start()

# %% [markdown] id="00-host-sweep-note"
# When the sweep has finished, `sweep.result()` is a DataFrame of what was measured, tagged as
# live (`.attrs["provenance"]`). The same measurement from a terminal:
# `gdrlab bench --path host --sizes 8:4M`.

# %% [markdown] id="00-recorded-h200-machine"
# ## 4. The recorded H200 machine
#
# The other labs lean on measurements from one NVIDIA H200 machine (PCIe Gen5 x16, driver 580,
# CUDA 13.0). Its doctor report tells you what could be measured there, and what could not.

# %% id="00-h200-report"
h200, where = lab00.h200_report()
print("source:", where)
display(lab00.gpu_table(h200))
lab00.paths_table(h200)

# %% [markdown] id="00-exercise-1-2-points"
# ### Exercise 1 (2 points): which paths could run on the H200?
#
# Set `h200_runnable` to a list of the path names that were available on the H200 machine,
# read from `h200["paths"]` (each entry has an `"available"` flag). Then, for the three paths
# `gdr`, `gdrcopy` and `p2p`, set `h200_missing[path]` to the one thing the H200 would need for
# that path, chosen from `MISSING` below. Read the reasons, and think: the H200 has no
# peer-memory module loaded, yet is that what stops `gdr` (the correction box of exercise 3)?

# %% id="ex1-runnable" nbgrader={"grade": false, "grade_id": "ex1-runnable", "locked": false, "schema_version": 3, "solution": true}
MISSING = ("an RDMA device", "a peer-memory module", "the gdrcopy library and driver", "a second GPU")
h200_missing = {"gdr": None, "gdrcopy": None, "p2p": None}
### BEGIN SOLUTION
h200_runnable = sorted(p for p, v in h200["paths"].items() if v["available"])
h200_missing = {"gdr": "an RDMA device", "gdrcopy": "the gdrcopy library and driver", "p2p": "a second GPU"}
### END SOLUTION
print(h200_runnable, h200_missing)

# %% id="test-ex1-runnable" nbgrader={"grade": true, "grade_id": "test-ex1-runnable", "locked": true, "points": 2, "schema_version": 3, "solution": false}
grading.check_true(isinstance(h200_runnable, (list, tuple, set)), "h200_runnable should be a list of path names")
grading.check_true("host" in h200_runnable, "the host path needs nothing: it runs everywhere")
### BEGIN HIDDEN TESTS
# One GPU, no RDMA device, no gdrcopy: the GPU paths over tcp run, the rest do not.
grading.check_set_equal(h200_runnable, {"host", "staged", "shared", "pipelined"}, name="h200_runnable",
                        hint="read each path's available flag")
grading.check_equal(h200_missing["gdr"], "an RDMA device", name="h200_missing['gdr']",
                    hint="dma-buf needs no peer-memory module: what else does gdr's reason name?")
grading.check_equal(h200_missing["gdrcopy"], "the gdrcopy library and driver", name="h200_missing['gdrcopy']")
grading.check_equal(h200_missing["p2p"], "a second GPU", name="h200_missing['p2p']")
### END HIDDEN TESTS

# %% [markdown] id="00-exercise-2-1-point"
# ### Exercise 2 (1 point): why is the H200's BAR1 256 GiB?
#
# The report gives the H200's BAR1 as `h200["gpus"][0]["bar1_total_bytes"]`; its memory is 141 GB
# (NVIDIA's H200 data sheet; 141 × 10^9 bytes). A PCIe BAR's size is always a power of two: the
# device says how many low address bits it decodes, and the window is aligned to its size. A GPU
# whose BAR1 must map **all** of its memory at once therefore needs the smallest power of two at
# least as large as that memory.
#
# Write `bar1_to_map_all(memory_bytes)`, the smallest power-of-two number of bytes that is at least
# `memory_bytes`. The grader tries it on other GPUs than the H200 (a 5 GB Kepler, an 80 GiB part,
# sizes that are already powers of two), so typing in the H200's figure earns nothing. Then set
# `h200_bar1_headroom` to the H200's recorded BAR1 divided by its 141 GB: how much larger the window
# is than what it has to map. Lab 01 shows what happens when BAR1 is far *smaller* than memory.

# %% id="ex2-bar1" nbgrader={"grade": false, "grade_id": "ex2-bar1", "locked": false, "schema_version": 3, "solution": true}
H200_MEMORY_BYTES = 141 * 10**9   # published (NVIDIA H200 data sheet)


def bar1_to_map_all(memory_bytes: int) -> int:
    ### BEGIN SOLUTION
    return 1 << max(0, (int(memory_bytes) - 1).bit_length())
    ### END SOLUTION


h200_bar1_headroom = None
### BEGIN SOLUTION
h200_bar1_headroom = h200["gpus"][0]["bar1_total_bytes"] / H200_MEMORY_BYTES
### END SOLUTION
print(f"smallest BAR1 that maps 141 GB: {bar1_to_map_all(H200_MEMORY_BYTES) / 2**30:g} GiB; "
      f"recorded on the H200: {h200['gpus'][0]['bar1_total_bytes'] / 2**30:g} GiB; headroom {h200_bar1_headroom}")

# %% id="test-ex2-bar1" nbgrader={"grade": true, "grade_id": "test-ex2-bar1", "locked": true, "points": 1, "schema_version": 3, "solution": false}
grading.check_true(bar1_to_map_all(4096) == 4096, "4096 bytes is already a power of two: a 4096-byte window maps it")
grading.check_true(h200_bar1_headroom is not None and h200_bar1_headroom > 0, "set h200_bar1_headroom")
### BEGIN HIDDEN TESTS
for _mem, _want in [(5 * 10**9, 2**33), (80 * 2**30, 2**37), (2**34, 2**34), (2**34 + 1, 2**35), (1, 1),
                    (141 * 10**9, 2**38), (40 * 2**30, 2**36), (3 * 2**20, 2**22)]:
    grading.check_equal(int(bar1_to_map_all(_mem)), _want, name=f"bar1_to_map_all({_mem})")
grading.check_close(h200_bar1_headroom, h200["gpus"][0]["bar1_total_bytes"] / (141 * 10**9), rel=0.01,
                    name="h200_bar1_headroom", hint="recorded BAR1 bytes divided by 141e9")
### END HIDDEN TESTS

# %% [markdown] id="00-exercise-3-2-points"
# ### Exercise 3 (2 points): what is missing for `gdr` on the H200?
#
# Read `h200["paths"]["gdr"]["reason"]`. Then build a *what-if* report `h200_with_hca`: a deep
# copy of `h200` (do not change `h200` itself) in which the machine has one active RDMA device,
# `{"name": "mlx5_0", "active": True}`, in `rdma_devices`. Set `gdr_whatif` to
# `hw.path_availability(h200_with_hca)["gdr"]`.
#
# > **A correction to keep in mind.** Older guides say GPUDirect RDMA needs the `nv_peer_mem`
# > kernel module. That was its name from 2013 to about 2020; today the module is
# > `nvidia-peermem` and ships with the driver. Newer stacks need no extra module at all: with
# > Linux 5.12+, CUDA 11.7+ and the open GPU kernel modules, GPU memory is handed to the RDMA
# > stack as a **dma-buf**. The H200 has no peer-memory module loaded; does it need one?
#
# > **"Available" is not "fast".** `doctor` checks software prerequisites only: a GPU that
# > supports GPUDirect RDMA, a registration route (dma-buf or a peer-memory module), libibverbs
# > and an active RDMA device. It cannot tell whether the NIC and the GPU share a PCIe switch
# > (lab 05), whether ACS or the IOMMU sends their peer traffic up through the root complex, or
# > whether a hypervisor passes peer-to-peer traffic through at all. The recorded H200 is a KVM
# > guest with a flat virtual PCIe tree: on it, a what-if `available` says nothing about speed.

# %% id="ex3-whatif" nbgrader={"grade": false, "grade_id": "ex3-whatif", "locked": false, "schema_version": 3, "solution": true}
print(h200["paths"]["gdr"]["reason"])
### BEGIN SOLUTION
h200_with_hca = copy.deepcopy(h200)
h200_with_hca["rdma_devices"] = [{"name": "mlx5_0", "active": True}]
gdr_whatif = hw.path_availability(h200_with_hca)["gdr"]
### END SOLUTION
gdr_whatif

# %% id="test-ex3-whatif" nbgrader={"grade": true, "grade_id": "test-ex3-whatif", "locked": true, "points": 2, "schema_version": 3, "solution": false}
grading.check_true(isinstance(gdr_whatif, dict) and "available" in gdr_whatif,
                   "gdr_whatif should be the 'gdr' entry of hw.path_availability(h200_with_hca)")
grading.check_true(gdr_whatif["available"], "with an active RDMA device gdr should be available: "
                   "reason given: " + str(gdr_whatif.get("reason")))
### BEGIN HIDDEN TESTS
grading.check_true(h200["rdma_devices"] == [] and not hw.path_availability(h200)["gdr"]["available"],
                   "h200 itself was changed: make a deep copy (copy.deepcopy) first")
grading.check_true(not h200_with_hca["peer_memory"].get("nvidia_peermem_loaded"),
                   "no peer-memory module is needed: dma-buf is already usable on the H200")
grading.check_true("dma-buf" in gdr_whatif["reason"], "gdr should be registered via dma-buf")
# The what-if must be a real report: the copy has an active RDMA device, keeps everything else
# from h200, and gdr_whatif is what the availability check says about that copy (not typed in).
_devs = h200_with_hca.get("rdma_devices") or []
grading.check_true(any(isinstance(d, dict) and d.get("active") for d in _devs),
                   "h200_with_hca should list one active RDMA device in rdma_devices")
grading.check_true({k: v for k, v in h200_with_hca.items() if k != "rdma_devices"}
                   == {k: v for k, v in h200.items() if k != "rdma_devices"},
                   "only rdma_devices should differ between h200_with_hca and h200")
grading.check_true(gdr_whatif == hw.path_availability(h200_with_hca)["gdr"],
                   "gdr_whatif should be hw.path_availability(h200_with_hca)['gdr'], not a dict typed in")
### END HIDDEN TESTS

# %% [markdown] id="00-written-question"
# ## Written answer (2 points, graded by hand)
#
# The `host` path you measured over TCP loopback is the first curve of the course. In three to five
# sentences: name **two** reasons why its latency does not tell you what GPUDirect RDMA would give
# between two GPUs on two nodes, and say which part of this machine's `doctor` report shows that
# `gdr` cannot run here.

# %% [markdown] id="explain-loopback" nbgrader={"grade": true, "grade_id": "explain-loopback", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# Loopback never leaves the host: no NIC, no PCIe transaction and no wire are involved, only the
# kernel's TCP stack, two system calls and a process wake-up per message (inflated further in a VM
# with few cores). GPUDirect RDMA does not use TCP/IP at all: the RDMA transport runs in the HCA,
# which reads the GPU's memory through its BAR1 with no CPU copy and no kernel on the data path.
# So loopback measures software costs that GDR removes, and none of the PCIe costs GDR adds. Here
# the report's `gdr` row says it cannot run because there is no RDMA device (and no usable GPU).

# %% [markdown] id="00-you-saw"
# ## What you saw
#
# * `gdrlab doctor` reads this machine without changing it: NVML and the CUDA driver for GPUs and
#   BAR1, `/sys/class/infiniband` for RDMA devices, `/sys/module/nvidia_peermem` and the kernel
#   version for peer memory. On a machine with no GPU only `host` runs, and the report says why
#   each other path cannot.
# * The `host` path measured live gives a first latency curve: a flat floor for small messages
#   (fixed costs: system calls, the TCP stack, a process wake-up) and a rising slope once size
#   dominates. Every later lab has the same two regimes.
# * The H200 machine could run the GPU paths over TCP (`staged`, `shared`, `pipelined`) but not
#   `gdr`: the GPU supports GPUDirect RDMA and dma-buf, libibverbs is there, yet there is no RDMA
#   device. Adding one in the what-if report was enough, with no `nvidia-peermem` (let alone
#   `nv_peer_mem`): dma-buf needs no extra module.
# * Its BAR1 is 256 GiB, the smallest power of two that maps all 141 GB of its memory (about twice
#   the memory). Lab 01 shows why that number was once a hard limit (a K20 had 256 **MB**).

# %% [markdown] id="00-on-your-cluster"
# ## On your cluster
#
# On a GPU node with an RDMA adapter, check what `doctor` checks, with the tools every vendor guide uses:
#
# ```
# nvidia-smi                          # driver version and GPUs
# ibv_devinfo                         # RDMA devices and ports
# lsmod | grep -E 'nvidia_peermem|mlx5_ib'
# ulimit -l
# gdrlab doctor
# ```
#
# What to look for:
#
# - `ibv_devinfo`: at least one port with `state: PORT_ACTIVE`; `link_layer: InfiniBand` or
#   `Ethernet` (RoCE). No device at all means no HCA or no driver (`mlx5_ib` not loaded).
# - `lsmod`: `nvidia_peermem` loaded means GPU memory can be registered with plain `ibv_reg_mr`;
#   without it, GPUDirect RDMA needs the dma-buf route (lab 03).
# - `ulimit -l`: `unlimited` on a node meant for RDMA; a few MiB makes registrations fail.
# - `gdrlab doctor`: the `gdr` row should say `available`; if not, its reason names the missing
#   piece, in the same words as the checks above.
#
# Two-node runs with gdrlab, and what each failure message means:
# [docs/cluster.md](../../../docs/cluster.md); all the commands on one page:
# [docs/cheatsheet.md](../../../docs/cheatsheet.md) (both in the gdrlab repository).
