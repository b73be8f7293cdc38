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
# 3. **peer-memory registration**: the RDMA stack can register GPU memory, through dma-buf (the
#    way forward) or the legacy `nvidia-peermem` module (lab 03).
#
# > **Widely shared articles, and their errors.** The labs correct, where they meet them, the
# > errors of a few widely shared articles on GPUDirect RDMA (called "the seed articles" in the
# > kit's data and `gdrlab model` output). The first one here: such an article offers
# > "GPUDirect Async / GDS" as the other path "for TCP/IP clusters without RDMA NICs". Neither is.
# > GPUDirect Storage (GDS) moves data between storage (NVMe, or a file system over the network)
# > and GPU memory, not between the GPUs of two nodes; GPUDirect Async lets the GPU trigger network
# > operations itself, and needs an RDMA NIC too. On a TCP cluster without RDMA NICs, GPU data
# > goes through host memory: the `staged`, `shared` and `pipelined` paths below.

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
lab00.paths_view(report)

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
# live (`.attrs["provenance"]`). The widget gives each size about 0.04 s (each size's iteration
# count is chosen to fill it); the same measurement from a terminal:
# `gdrlab bench --path host --sizes 8:4M --duration 0.04`.

# %% [markdown] id="00-host-spread-intro"
# ### How steady is that floor?
#
# One test's p50 hides how much a small message's latency moves. The next cell runs five
# latency tests of 8 B in a row over one connection and draws each test's p50 (a point) and its
# p99 (the top of the bar). Each message wakes a process waiting for it: if that process is still
# polling (the engine polls for up to 50 µs, `GDRLAB_SPIN_US`, before it sleeps) and has a core
# to itself, it answers within a few µs; if it went to sleep, or shares its core with other work,
# the scheduler wakes it tens of µs later. A VM with few virtual CPUs or a laptop saving power
# lands in either regime from one test to the next, so its loopback floor is bimodal; a quiet
# server with cores to spare stays in the fast one.

# %% id="00-host-spread"
spread = lab00.host_spread(size=8, repeats=3 if QUICK else 5, iters=500 if QUICK else 2000)
display(lab00.spread_figure(spread))
print(lab00.spread_note(spread))

# %% [markdown] id="00-class-view"
# ### In a workshop: your machine on the instructor's screen
#
# If your instructor runs a class view ([docs/class-view.md](../docs/class-view.md)) and you joined
# it once (`gdrlab class join URL --name NAME` in a terminal, with the URL they shared), the button
# sends this machine's doctor report and a short `host` sweep, so the room's machines appear side
# by side. Nothing leaves this machine until you press it; without a class it says how to join.

# %% id="00-class-view-button"
from gdrlab.classroom import submit_button

submit_button(lab00.host_sweep("8:64K")[0], lab="00-setup-check")

# %% [markdown] id="00-recorded-h200-machine"
# ## 4. The recorded H200 machine
#
# The other labs lean on measurements from one NVIDIA H200 machine (PCIe Gen5 x16, driver 580,
# CUDA 13.0). Its doctor report tells you what could be measured there, and what could not.

# %% id="00-h200-report"
h200, where = lab00.h200_report()
print("source:", where)
display(lab00.gpu_table(h200))
lab00.paths_view(h200)

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
h200_runnable = None
h200_missing = {"gdr": None, "gdrcopy": None, "p2p": None}
### BEGIN SOLUTION
h200_runnable = sorted(p for p, v in h200["paths"].items() if v["available"])
h200_missing = {"gdr": "an RDMA device", "gdrcopy": "the gdrcopy library and driver", "p2p": "a second GPU"}
### END SOLUTION
print(h200_runnable, h200_missing)

# %% id="test-ex1-runnable" nbgrader={"grade": true, "grade_id": "test-ex1-runnable", "locked": true, "points": 2, "schema_version": 3, "solution": false}
grading.check_true(isinstance(h200_runnable, (list, tuple, set)), "h200_runnable should be a list of path names",
                   answer=h200_runnable, name="h200_runnable")
grading.check_true(h200_runnable is None or "host" in h200_runnable,
                   "the host path needs nothing: it runs everywhere", answer=h200_runnable, name="h200_runnable")
grading.check_true(all(v is None or v in MISSING for v in h200_missing.values()),
                   "each h200_missing value should be one of the MISSING strings")
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
# The report gives the H200's BAR1 as `h200["gpus"][0]["bar1_total_bytes"]` and its memory as
# `h200["gpus"][0]["total_mem_bytes"]` (what the driver reports, recorded on that machine). NVIDIA's
# data sheet calls the memory "141GB"; the recorded byte count is neither 141 × 10^9 nor 141 × 2^30,
# so use the recorded bytes. A PCIe BAR's size is always a power of two: the device says how many
# low address bits it decodes, and the window is aligned to its size. A GPU whose BAR1 must map
# **all** of its memory at once therefore needs the smallest power of two at least as large as that
# memory.
#
# Write `bar1_to_map_all(memory_bytes)`, the smallest power-of-two number of bytes that is at least
# `memory_bytes`. The grader tries it on other GPUs than the H200 (a 5 GB Kepler, an 80 GiB part,
# sizes that are already powers of two), so typing in the H200's figure earns nothing; the visible
# check below tries it on two made-up sizes. Then set `h200_bar1_headroom` to the H200's recorded
# BAR1 divided by its recorded memory: how much larger the window is than what it has to map. Lab 01
# shows what happens when BAR1 is far *smaller* than memory.

# %% id="ex2-bar1" nbgrader={"grade": false, "grade_id": "ex2-bar1", "locked": false, "schema_version": 3, "solution": true}
H200_MEMORY_BYTES = h200["gpus"][0]["total_mem_bytes"]   # recorded: what the driver reports


def bar1_to_map_all(memory_bytes: int) -> int:
    ### BEGIN SOLUTION
    return 1 << max(0, (int(memory_bytes) - 1).bit_length())
    ### END SOLUTION


h200_bar1_headroom = None
### BEGIN SOLUTION
h200_bar1_headroom = h200["gpus"][0]["bar1_total_bytes"] / H200_MEMORY_BYTES
### END SOLUTION
_mine = bar1_to_map_all(H200_MEMORY_BYTES)
if grading.done(_mine, h200_bar1_headroom, name="Exercise 2") and None not in (_mine, h200_bar1_headroom):
    print(f"your smallest BAR1 that maps the H200's {H200_MEMORY_BYTES / 2**30:.1f} GiB: "
          f"{_mine / 2**30:g} GiB; your headroom: {h200_bar1_headroom:.3g}")

# %% id="test-ex2-bar1" nbgrader={"grade": true, "grade_id": "test-ex2-bar1", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Visible self-check on made-up sizes (the graded cases are other GPUs).
grading.check_function_cases(bar1_to_map_all, [((4096,), 4096), ((3000,), 4096), ((5 * 2**20,), 8 * 2**20)],
                             name="bar1_to_map_all")
grading.check_true(h200_bar1_headroom is None or h200_bar1_headroom > 0, "h200_bar1_headroom should be positive",
                   answer=h200_bar1_headroom, name="h200_bar1_headroom")
### BEGIN HIDDEN TESTS
for _mem, _want in [(5 * 10**9, 2**33), (80 * 2**30, 2**37), (2**34, 2**34), (2**34 + 1, 2**35), (1, 1),
                    (141 * 10**9, 2**38), (40 * 2**30, 2**36), (3 * 2**20, 2**22)]:
    grading.check_equal(int(bar1_to_map_all(_mem)), _want, name=f"bar1_to_map_all({_mem})")
grading.check_close(h200_bar1_headroom, h200["gpus"][0]["bar1_total_bytes"] / h200["gpus"][0]["total_mem_bytes"],
                    rel=0.01, name="h200_bar1_headroom", hint="recorded BAR1 bytes divided by recorded memory bytes")
### END HIDDEN TESTS

# %% [markdown] id="00-exercise-3-2-points"
# ### Exercise 3 (2 points): what does `gdr` need?
#
# Read `h200["paths"]["gdr"]["reason"]` and the path table above. `doctor` decides `gdr` from a
# handful of facts. Here a machine is a small dictionary of those facts (made up, not a doctor
# report):
#
# | key | meaning |
# |---|---|
# | `"gpu_gdr"` | the GPU reports GPUDirect RDMA support (`True`/`False`) |
# | `"libibverbs"` | the verbs library is installed |
# | `"rdma_ports"` | the state of each RDMA port, e.g. `["ACTIVE", "DOWN"]`; `[]` when there is no HCA |
# | `"nvidia_peermem"` | the `nvidia-peermem` module is loaded |
# | `"dmabuf"` | dma-buf registration of GPU memory is usable (kernel, driver and libibverbs support it) |
#
# Write `gdr_missing(machine)`: the **set** of what the machine lacks for `gdr`, chosen from
# `GDR_NEEDS` below (an empty set when `gdr` can run). The grader tries it on made-up machines
# (`hw.path_availability` is the package's own rule, so the grader refuses it in this cell).
#
# Then set `h200_machine` to the H200's facts as such a dictionary, read from the report `h200`
# (its GPU entry, `libraries`, `rdma_devices` and `peer_memory`), and `h200_whatif_missing` to
# what it would lack with one `ACTIVE` RDMA port added.
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

# %% id="ex3-whatif" nbgrader={"grade": false, "grade_id": "ex3-whatif", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"path_availability": "is the package's own gdr rule; write the rule yourself", "doctor_report": "reads this machine, not the one asked about"}}
GDR_NEEDS = ("a GPU that supports GPUDirect RDMA", "libibverbs", "an active RDMA port", "a way to register GPU memory")
print(h200["paths"]["gdr"]["reason"])
h200_machine = None
h200_whatif_missing = None


def gdr_missing(machine: dict) -> set:
    ### BEGIN SOLUTION
    out = set()
    if not machine["gpu_gdr"]:
        out.add("a GPU that supports GPUDirect RDMA")
    if not machine["libibverbs"]:
        out.add("libibverbs")
    if "ACTIVE" not in machine["rdma_ports"]:
        out.add("an active RDMA port")
    if not (machine["nvidia_peermem"] or machine["dmabuf"]):
        out.add("a way to register GPU memory")
    return out
    ### END SOLUTION


### BEGIN SOLUTION
h200_machine = {
    "gpu_gdr": bool(h200["gpus"][0]["gdr_supported"]),
    "libibverbs": bool(h200["libraries"]["libibverbs.so.1"]["found"]),
    "rdma_ports": [],
    "nvidia_peermem": bool(h200["peer_memory"]["nvidia_peermem_loaded"]),
    "dmabuf": bool(h200["peer_memory"]["dmabuf_usable"]),
}
h200_whatif_missing = gdr_missing(dict(h200_machine, rdma_ports=["ACTIVE"]))
### END SOLUTION
print("the H200 with one active RDMA port would lack:", h200_whatif_missing)

# %% id="test-ex3-whatif" nbgrader={"grade": true, "grade_id": "test-ex3-whatif", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Visible self-check on a made-up machine (the graded machines are others).
_ok = {"gpu_gdr": True, "libibverbs": True, "rdma_ports": ["ACTIVE"], "nvidia_peermem": True, "dmabuf": False}
grading.check_function_cases(gdr_missing, [((dict(_ok, libibverbs=False),), {"libibverbs"})], name="gdr_missing")
grading.check_true(h200_machine is None or isinstance(h200_machine, dict), "h200_machine should be a dictionary",
                   answer=h200_machine, name="h200_machine")
### BEGIN HIDDEN TESTS
_cases = [
    (dict(_ok), set()),
    (dict(_ok, nvidia_peermem=False, dmabuf=True), set()),
    (dict(_ok, nvidia_peermem=False, dmabuf=False), {"a way to register GPU memory"}),
    (dict(_ok, rdma_ports=["DOWN"]), {"an active RDMA port"}),
    (dict(_ok, rdma_ports=["DOWN", "ACTIVE"]), set()),
    (dict(_ok, rdma_ports=[], libibverbs=False), {"an active RDMA port", "libibverbs"}),
    (dict(_ok, gpu_gdr=False, nvidia_peermem=False, dmabuf=True), {"a GPU that supports GPUDirect RDMA"}),
    ({"gpu_gdr": False, "libibverbs": False, "rdma_ports": [], "nvidia_peermem": False, "dmabuf": False},
     {"a GPU that supports GPUDirect RDMA", "libibverbs", "an active RDMA port", "a way to register GPU memory"}),
]
grading.check_function_cases(lambda m: set(gdr_missing(m)), [((m,), want) for m, want in _cases], name="gdr_missing")
_g, _pm = h200["gpus"][0], h200["peer_memory"]
grading.check_equal(h200_machine, {"gpu_gdr": bool(_g["gdr_supported"]),
                                   "libibverbs": bool(h200["libraries"]["libibverbs.so.1"]["found"]),
                                   "rdma_ports": [], "nvidia_peermem": bool(_pm["nvidia_peermem_loaded"]),
                                   "dmabuf": bool(_pm["dmabuf_usable"])},
                    name="h200_machine", hint="read each fact from the report h200; it has no RDMA device")
grading.check_equal(set(h200_whatif_missing), set(), name="h200_whatif_missing",
                    hint="which registration route does the H200 already have?")
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
# with few cores). Over InfiniBand or RoCE (the transports this kit and NCCL use) GPUDirect RDMA
# does not run TCP at all: the RDMA transport runs in the HCA, which reads the GPU's memory through
# its BAR1 with no CPU copy and no kernel on the data path (iWARP does run TCP, but offloaded into
# the adapter, not in the host's kernel: a learner who says so is right).
# So loopback measures software costs that GDR removes, and none of the PCIe costs GDR adds. Here
# the report's `gdr` row says it cannot run because there is no RDMA device (and no usable GPU).

# %% [markdown] id="00-you-saw"
# ## What you saw
#
# * `gdrlab doctor` reads this machine without changing it: NVML and the CUDA driver for GPUs and
#   BAR1, `/sys/class/infiniband` for RDMA devices, `/sys/module/nvidia_peermem` and the kernel
#   version for peer memory. On a machine with no GPU only `host` runs, and the report says why
#   each other path cannot.
# * The `host` path measured live gives a first latency curve: a floor for small messages (fixed
#   costs: system calls, the TCP stack, a process wake-up) and a rising slope once size dominates.
#   On a VM or a laptop the floor is noisy, even bimodal: a process that sleeps waiting for the
#   next message is woken up by the scheduler, sometimes at once, sometimes after tens of µs.
#   Every later lab has the same two regimes.
# * The H200's report showed which paths it could run and, for each one it could not, the missing
#   piece in its reason; your what-if showed whether a peer-memory module is among them.
# * A BAR's size is a power of two, so a GPU that maps all its memory at once needs a BAR1 of at
#   least the next power of two above its memory. Lab 01 shows why that number was once a hard
#   limit (a K20 had 256 **MB**).

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
# [docs/cluster.md](../docs/cluster.md); all the commands on one page:
# [docs/cheatsheet.md](../docs/cheatsheet.md). Both are in the `docs/` folder
# that `gdrlab lab` puts beside your copies of the labs (and in the gdrlab repository's `docs/`).
