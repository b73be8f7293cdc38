# %% [markdown] id="03-title"
# # Lab 03: peer-memory registration
#
# The third pillar of GPUDirect RDMA. Lab 01 showed that a GPU exposes its memory through the
# BAR1 window, lab 02 that PCIe devices can DMA into each other and that *pinned* host memory
# is what the copy engine wants. This lab asks the question in between: how does the RDMA
# NIC (the HCA) learn where a buffer is, and why can't it simply be handed a GPU pointer?
#
# **Learning goals**
#
# 1. Say what `ibv_reg_mr` does: pin pages, map them for DMA, give the HCA a translation table
#    and return keys (`lkey`, `rkey`).
# 2. Tell apart the calls that page-lock **host** memory from the routes that expose **GPU**
#    memory to the HCA.
# 3. Say what registering a GPU pointer does on a machine with no route for it.
# 4. Estimate what registration costs and compute when a registration cache pays off.
#
# **Live on** a GPU with an RDMA HCA; host-memory registration runs live on any RDMA device,
# including a Soft-RoCE one you can add to any Linux machine (section 2). Everywhere else the lab
# runs top to bottom with the state-machine diagram and a cost model, and says which parts it
# could not do here.
#
# | duration | prerequisites |
# |---|---|
# | 45 min (reading 20, running 10, exercises 15) | lab 01 (BAR1); lab 02 (pinned memory) |
#
# **Glossary**
#
# - **PD** (protection domain): groups the resources one application may use together.
# - **MR** (memory region): memory registered with the HCA: pinned, mapped for DMA, with keys.
# - **lkey / rkey**: the keys that let the local HCA, or a remote peer, access an MR.
# - **peer-memory client**: a kernel module (`nvidia-peermem`) that lets `ibv_reg_mr` pin GPU
#   memory; the peer-memory API it uses is part of MLNX_OFED/DOCA-OFED, not upstream Linux.
# - **dma-buf importer**: `ibv_reg_dmabuf_mr`, the upstream route for registering device memory.
# - **Soft-RoCE (rxe)**: a software RDMA device over any Ethernet interface; real verbs, no HCA.
# - **registration cache**: keeps MRs alive between transfers so their cost is paid once.

# %% id="03-setup"
import pandas as pd
from IPython.display import display

from gdrlab import grading
from gdrlab.labsupport import lab03, quick_mode

QUICK = quick_mode()
print("quick mode (small sweeps, no widgets):", QUICK)

# %% [markdown] id="03-registration"
# ## 1. What registration is for
#
# An HCA reads and writes memory by DMA, with *bus addresses*, while a program holds *virtual*
# addresses. `ibv_reg_mr(pd, addr, length, access)` closes that gap once, before any transfer:
#
# * it **pins** the pages (the kernel promises not to move or swap them),
# * maps them for DMA (through the IOMMU when there is one),
# * writes the virtual-to-bus translation into the HCA's memory translation table,
# * returns a memory region (MR) with a local key (`lkey`) and a remote key (`rkey`) that
#   work requests and remote peers quote.
#
# Pinning is the same idea lab 02 measured: pinned host memory is what the copy engine can DMA
# from at full rate. But pinning for CUDA and registering for the HCA are separate steps, and
# neither one touches GPU memory.
#
# > **A correction.** One of the articles this kit started from (on GPUDirect in AI training,
# > section 3.3) says GPU memory is registered for RDMA "through the CUDA API
# > `cudaHostRegister()`". That is wrong. `cudaHostRegister()` page-locks an existing range of
# > **host** memory so the GPU's copy engines can DMA to and from it (lab 02's pinned memory).
# > It does nothing to GPU memory and creates nothing the HCA can use. GPU memory reaches the
# > HCA through a **peer-memory client** (`nvidia-peermem`) or through **dma-buf**, below.

# %% [markdown] id="03-machine-offers"
# ## 2. What this machine offers
#
# Three things decide what can be registered here: an RDMA device
# (`/sys/class/infiniband`), the `nvidia-peermem` kernel module, and dma-buf support (Linux
# 5.12 or newer, a GPU reporting `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`).

# %% id="03-peer-memory-status"
status = lab03.peer_memory_status()
print("RDMA devices:        ", status["rdma_devices"] or "none")
print("nvidia-peermem loaded:", status["nvidia_peermem"], status["nvidia_peermem_version"] or "")
print("nv_peer_mem (old name) loaded:", status["nv_peer_mem"])
print("kernel:", status["kernel"], "(dma-buf import by RDMA needs 5.12+:", status["kernel_dmabuf"], ")")
print("GPUs:", status["gpus"] or "none (" + status["cuda"].get("reason", "") + ")")
print("libibverbs exports ibv_reg_dmabuf_mr:", status["ibv_reg_dmabuf_mr"]["exported"],
      status["ibv_reg_dmabuf_mr"]["reason"])
print("pyverbs (rdma-core's Python binding):", status["pyverbs"]["reason"])
pd.DataFrame([{"route": k, **v} for k, v in status["routes"].items()])

# %% [markdown] id="03-soft-roce-intro"
# ### No HCA? Make a software one: Soft-RoCE
#
# Linux has a software RDMA device, **Soft-RoCE** (`rdma_rxe`), on any Ethernet interface.
# `ibv_reg_mr` on it is the real call (pins pages, returns keys, fails with `ENOMEM` beyond
# `ulimit -l`), so host-memory registration below runs live; GPU memory still needs a real HCA.
# It needs root on the host (a container cannot load modules). The cell prints the commands; more
# in [docs/registration-reference.md](../docs/registration-reference.md).

# %% id="03-soft-roce-status"
rxe = lab03.soft_roce_status()
print(rxe["reason"])
if not rxe["rdma_devices"]:
    print("to add a Soft-RoCE device here:")
    for line in rxe["commands"]:
        print("   ", line)


# %% [markdown] id="03-state-machine-inside-ibv"
# ## 3. The state machine inside `ibv_reg_mr`
#
# The kernel's RDMA core (`ib_umem_get`) first asks: is this ordinary host memory? If so it
# pins the pages and maps them. If not (a `cudaMalloc` pointer is not backed by host pages)
# it asks each registered **peer-memory client** whether it owns the address. With
# `nvidia-peermem` loaded, the NVIDIA driver answers yes, pins the GPU pages
# (`nvidia_p2p_get_pages`, in 64 KiB GPU pages, mapped through BAR1: lab 01's window) and
# hands back their bus addresses. With no client, nobody claims the address and registration
# fails with `EFAULT` (perftest prints "Couldn't allocate MR").
#
# The **dma-buf route** (right) avoids the client altogether: CUDA exports the range as a
# dma-buf file descriptor (`cuMemGetHandleForAddressRange(..., CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)`)
# and `ibv_reg_dmabuf_mr` imports it through the kernel's generic dma-buf interface.

# %% id="03-state-machine-figure"
lab03.state_machine_figure()

# %% [markdown] id="03-state-machine-figure-note"
# > **A second correction.** The GPUDirect RDMA article names the translation layer `nv_peer_mem`,
# > its name until about 2020. Today it is **`nvidia-peermem`**, shipped with the NVIDIA driver,
# > and it loads only on MLNX_OFED/DOCA-OFED (its kernel API was never merged upstream); CUDA 13.0's
# > GPUDirect RDMA guide deprecates the NV-P2P API it is built on. **dma-buf is the way forward**:
# > no extra module, upstream interfaces only (Linux 5.12+, CUDA 11.7+, open GPU kernel modules,
# > `ibv_reg_dmabuf_mr`); `nvidia-peermem` is the legacy path. History in
# > [docs/registration-reference.md](../docs/registration-reference.md).

# %% [markdown] id="03-state-machine-figure-note-note"
# Libraries probe for these routes when they start. NCCL, for example, looks up the dma-buf
# registration calls in rdma-core and says so in its log. From a recorded `NCCL_DEBUG=INFO`
# log of a machine with two H200s and no RDMA device:

# %% id="03-setup-2"
from gdrlab.labsupport import nccl_log_lines

lines, label = nccl_log_lines("h200x2-nvlink-p2p_shm_off", ("dmabuf", "NET/IB : No device"))
print(label)
for line in lines:
    print(" ", line)

# %% [markdown] id="03-try-three-registrations"
# ## 4. Try it: three registrations
#
# The cell below tries, with whatever this machine has: registering pinned host memory,
# registering a raw GPU pointer, and exporting a GPU buffer as a dma-buf (the first half of
# the dma-buf route; the second half, `ibv_reg_dmabuf_mr`, needs an HCA). Each row says what
# happened, or why it could not be tried.

# %% id="03-try-registrations"
attempts = pd.DataFrame(lab03.try_registrations(1 << 20))
attempts

# %% [markdown] id="03-try-registrations-note"
# rdma-core's own Python binding, `pyverbs`, has the same objects under the verbs names, beside
# gdrlab's in the next cell (used live where `pyverbs` imports and sees an RDMA device). The calls
# behind the rows above are in [docs/registration-reference.md](../docs/registration-reference.md).

# %% id="03-pyverbs-beside-gdrlab"
display(pd.DataFrame(lab03.PYVERBS_BESIDE_GDRLAB))
pv = lab03.pyverbs_status()
print("pyverbs:", pv["reason"])
pd.DataFrame(lab03.pyverbs_registrations(1 << 20))


# %% [markdown] id="03-try-registrations-note-note"
# What to look for:
#
# * **With an HCA and no peer-memory client**, the GPU-pointer row fails with errno 14
#   (`EFAULT`, "Bad address"): no one claimed the address.
# * **On a GPU machine without an HCA** (for example the H200 this kit was calibrated on), the
#   dma-buf export succeeds: an fd whose size is the buffer's, and the CPU's `mmap` of it
#   fails (errno 524, `ENOTSUPP`, as measured on the H200). A dma-buf is a handle for *device*
#   importers, not a CPU mapping (lab 01 met the same fd).
# * **With no GPU and no HCA**, every row says what is missing. Add a Soft-RoCE device (section 2)
#   and the host-memory row registers for real, with keys, on this machine; the GPU rows still
#   need a GPU and a real HCA.

# %% [markdown] id="03-predict-registration"
# ## Exercise 0: predict the cost of a GPU registration
#
# Lab 02 recorded a 64 KiB pinned copy on the H200 at about 8 µs. Before reading on, commit
# `predicted_gpu_reg_64k_us`: the µs to register one 64 KiB GPU buffer (the state machine of
# section 3). The number is not graded (a notebook cannot tell a prediction typed before the
# figure from one typed after); your reason, and how far you were, is graded by hand after
# section 5 gives a published figure.

# %% id="ex0-predict"
predicted_gpu_reg_64k_us = None   # your prediction, in µs
if grading.done(predicted_gpu_reg_64k_us, name="Exercise 0"):
    print("your prediction:", predicted_gpu_reg_64k_us, "µs for one 64 KiB GPU registration")

# %% [markdown] id="03-exercise-1-registration-route"
# ## Exercise 1: which route registers GPU memory on this machine?
#
# Section 3 named the conditions of each route. Apply them to machines you have not seen. Write
# `gpu_registration_route(machine)` for a GPU and a Mellanox/NVIDIA HCA (mlx5) in one node, where
# `machine` is a dictionary:
#
# | key | meaning | example |
# |---|---|---|
# | `"kernel"` | Linux kernel version, (major, minor) | `(6, 8)` |
# | `"cuda"` | the CUDA version the GPU driver supports, (major, minor) | `(12, 4)` |
# | `"gpu_modules"` | which NVIDIA kernel modules are loaded: `"open"` or `"proprietary"` | `"open"` |
# | `"rdma_stack"` | `"inbox"` (the distribution's kernel and rdma-core), `"MLNX_OFED"` or `"DOCA-OFED"` | `"inbox"` |
#
# Return the route a library that prefers dma-buf (NCCL does, when both work) ends up using:
# `"dma-buf"`, `"nvidia-peermem"` (the driver ships the module; it loads only on an OFED stack),
# or `"staging"` when no route can register GPU memory, so GPU data goes through pinned host memory.

# %% id="ex1-registration-route" nbgrader={"grade": false, "grade_id": "ex1-registration-route", "locked": false, "schema_version": 3, "solution": true}
def gpu_registration_route(machine: dict) -> str:
    ### BEGIN SOLUTION
    dmabuf = (tuple(machine["kernel"]) >= (5, 12) and tuple(machine["cuda"]) >= (11, 7)
              and machine["gpu_modules"] == "open")
    if dmabuf:
        return "dma-buf"
    if machine["rdma_stack"] != "inbox":
        return "nvidia-peermem"
    return "staging"
    ### END SOLUTION


# %% id="ex1-registration-route-tests" nbgrader={"grade": true, "grade_id": "ex1-registration-route-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Self-check on two machines (the graded machines are others).
grading.check_function_cases(gpu_registration_route, [
    (({"kernel": (6, 8), "cuda": (12, 4), "gpu_modules": "open", "rdma_stack": "inbox"},), "dma-buf"),
    (({"kernel": (4, 18), "cuda": (12, 2), "gpu_modules": "proprietary", "rdma_stack": "inbox"},), "staging"),
], name="gpu_registration_route")
### BEGIN HIDDEN TESTS
import itertools

for kernel, cuda, modules, stack in itertools.product(
        [(4, 18), (5, 11), (5, 12), (5, 14), (6, 8)], [(11, 4), (11, 6), (11, 7), (12, 2), (13, 0)],
        ["open", "proprietary"], ["inbox", "MLNX_OFED", "DOCA-OFED"]):
    machine = {"kernel": kernel, "cuda": cuda, "gpu_modules": modules, "rdma_stack": stack}
    upstream_ok = kernel[0] * 100 + kernel[1] >= 512 and cuda[0] * 100 + cuda[1] >= 1107 and modules == "open"
    want = "dma-buf" if upstream_ok else ("staging" if stack == "inbox" else "nvidia-peermem")
    grading.check_equal(gpu_registration_route(dict(machine)), want, name=f"gpu_registration_route({machine})")
### END HIDDEN TESTS

# %% [markdown] id="03-exercise-1-note"
# The same conditions decide a host-memory registration in none of these cases: `ibv_reg_mr` on
# malloc'd or `cudaMallocHost` memory always works, and `cudaHostRegister` page-locks **host**
# memory for the copy engine; it never makes GPU memory visible to the HCA (the article's error
# that lab 01 corrected).

# %% [markdown] id="03-registration-costs"
# ## 5. What registration costs
#
# Registration touches every page: the host pins 4 KiB pages (`get_user_pages`), the NVIDIA
# driver pins GPU memory in 64 KiB pages and maps each into BAR1 (so a registration also uses
# up BAR1 space: lab 01's 256 MB wall on a K20). The cost grows with the number of pages on
# top of a fixed cost for the system call and the MR itself, and it is large: gdrcopy's README
# reports that pinning a 64 KB GPU buffer (`gdr_pin_buffer`) takes about **1.3 ms** on a V100.
#
# ## Exercise 2: how many GPU pages does a registration pin?
#
# Write `gpu_pages_pinned(addr, nbytes)`: the number of 64 KiB GPU pages touched by the byte
# range `[addr, addr + nbytes)`. A buffer that starts in the middle of a page still pins that
# whole page.

# %% id="ex2-gpu-pages" nbgrader={"grade": false, "grade_id": "ex2-gpu-pages", "locked": false, "schema_version": 3, "solution": true}
GPU_PAGE = 64 * 1024

def gpu_pages_pinned(addr: int, nbytes: int) -> int:
    ### BEGIN SOLUTION
    return (addr + nbytes - 1) // GPU_PAGE - addr // GPU_PAGE + 1
    ### END SOLUTION


# %% id="ex2-gpu-pages-tests" nbgrader={"grade": true, "grade_id": "ex2-gpu-pages-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Self-check on small cases: one byte, one page, a straddle, 1 MiB.
grading.check_function_cases(gpu_pages_pinned, [((0, 1), 1), ((0, 65536), 1), ((65535, 2), 2), ((0, 1 << 20), 16)],
                             name="gpu_pages_pinned")
### BEGIN HIDDEN TESTS
import random

rng = random.Random(3)
for _ in range(200):
    a, n = rng.randrange(0, 1 << 24), rng.randrange(1, 1 << 22)
    pages = len(range(a // 65536, (a + n - 1) // 65536 + 1))
    grading.check_equal(gpu_pages_pinned(a, n), pages, name=f"gpu_pages_pinned({a}, {n})")
grading.check_equal(gpu_pages_pinned(4096, 65536), 2, name="gpu_pages_pinned(4096, 65536)")
grading.check_equal(gpu_pages_pinned(1 << 30, 256 << 20), 4096, name="gpu_pages_pinned(1 GiB, 256 MiB)")
### END HIDDEN TESTS

# %% [markdown] id="explain-prediction-registration-question" nbgrader={"grade": false, "grade_id": "explain-prediction-registration-question", "locked": true, "schema_version": 3, "solution": false}
# ### Your Exercise 0 prediction's reason (2 points, graded by hand)
#
# Why did you predict that, and how far were you from the published 1.3 ms?

# %% [markdown] id="explain-prediction-registration" nbgrader={"grade": true, "grade_id": "explain-prediction-registration", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# A system call that pins pages, a driver call per 64 KiB GPU page, a BAR1 mapping and the HCA's
# translation entries: far more than an 8 µs copy, so hundreds of µs. The published 1.3 ms is
# within a factor 3 of that: the per-page driver work and the BAR1 mapping cost more than I allowed.

# %% [markdown] id="03-registration-cost-against-buffer"
# ## 6. Registration cost against buffer size
#
# The plot shows the lab's registration model: host registration (illustrative parameters:
# 10 µs plus 0.25 µs per 4 KiB page) and GPU registration anchored on the gdrcopy figure
# (one 64 KiB page costs about 1.3 ms; the published figure fixes only that point, the slope
# per page is illustrative). Where this machine has an HCA, measured points are added.
# Notice the two orders of magnitude between the curves at small sizes.

# %% id="03-registration-cost-table"
sizes = [1 << k for k in range(12, 31, 6 if QUICK else 1)]   # 4 KiB .. 1 GiB
table = lab03.registration_cost_table(sizes)
measured = {}
for memory in ("host", "device"):
    df, why = lab03.measure_registration(sizes[:4] if QUICK else sizes, memory)
    print(f"live registration cost, {memory} memory:", why)
    measured[f"measured {memory} memory"] = df
lab03.registration_figure(table, measured)

# %% [markdown] id="03-why-registration-caches-exist"
# ## 7. Why registration caches exist
#
# A 64 KiB message through an *already* registered buffer costs a copy: lab 02 recorded 7.7 µs
# D2H and 8.7 µs H2D on the H200 (medians, launch included). Registering the application's own
# buffer costs about 1.3 ms (gdrcopy README: `gdr_pin_buffer`, 64 KB, V100); the same table gives
# 677 µs for `gdr_unpin_buffer`.
# Registering pays off only for a buffer sent many times: hence the **registration cache** of MPI
# libraries, UCX and NCCL (later sends look the MR up: take 0.5 µs). Two machines (V100, H200): the
# answer is an order of magnitude.
#
# ## Exercise 3: amortization
#
# Write `breakeven_reuses(reg_us, dereg_us, copy_us, lookup_us)`: the smallest number of sends
# `n` for which registering once and reusing the MR (`reg_us + dereg_us + n * lookup_us`) costs
# no more than copying into a pre-registered buffer every time (`n * copy_us`). Return `None`
# when reuse never pays off (a lookup that costs as much as the copy). Then set
# `reuses_gpu_64k` for 64 KiB from the sources above (1.3 ms, 677 µs, 0.5 µs) and the copy cost
# **read from lab 02's recording** (`grading.dataset("h200-copy-d2h-pinned")` or
# `"h200-copy-h2d-pinned"`, `lat_p50_us` at `size` 65536; either direction is accepted).

# %% id="ex3-amortization" nbgrader={"grade": false, "grade_id": "ex3-amortization", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"registration_summary": "computes the break-even count for you", "registration_explorer": "computes the break-even count for you"}}
import math


def breakeven_reuses(reg_us: float, dereg_us: float, copy_us: float, lookup_us: float = 0.0):
    ### BEGIN SOLUTION
    saving = copy_us - lookup_us
    if saving <= 0:
        return None
    return max(1, math.ceil((reg_us + dereg_us) / saving))
    ### END SOLUTION

reuses_gpu_64k = None
### BEGIN SOLUTION
_copy = grading.dataset("h200-copy-d2h-pinned")
copy_64k_us = float(_copy.loc[_copy["size"] == 65536, "lat_p50_us"].iloc[0])
reuses_gpu_64k = breakeven_reuses(1300.0, 677.0, copy_64k_us, 0.5)
### END SOLUTION
if grading.done(reuses_gpu_64k, name="Exercise 3"):
    print("your answer: a 64 KiB GPU registration pays off after", reuses_gpu_64k, "sends")

# %% id="ex3-amortization-tests" nbgrader={"grade": true, "grade_id": "ex3-amortization-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Self-check on made-up costs (the graded ones are others).
grading.check_function_cases(breakeven_reuses, [((100.0, 0.0, 10.0, 0.0), 10), ((100.0, 20.0, 10.0, 4.0), 20)],
                             name="breakeven_reuses")
grading.check_true(breakeven_reuses(100.0, 0.0, 5.0, 5.0) is None,
                   "breakeven_reuses(100, 0, 5, 5): a lookup as dear as the copy never pays off (None)",
                   answer=breakeven_reuses(100.0, 0.0, 10.0, 0.0), name="breakeven_reuses")
grading.check_true(isinstance(reuses_gpu_64k, (int, float)) and reuses_gpu_64k > 0, "reuses_gpu_64k is a count of sends",
                   answer=reuses_gpu_64k, name="reuses_gpu_64k")
### BEGIN HIDDEN TESTS
def _want(reg, dereg, copy, lookup):
    return None if copy <= lookup else max(1, math.ceil((reg + dereg) / (copy - lookup)))
_lat = [float(d.loc[d["size"] == 65536, "lat_p50_us"].iloc[0])
        for d in (grading.dataset("h200-copy-d2h-pinned"), grading.dataset("h200-copy-h2d-pinned"))]
_ok = sorted({_want(1300.0, 677.0, v, 0.5) for v in _lat})
grading.check_true(_ok[0] <= reuses_gpu_64k <= _ok[-1],
                   f"reuses_gpu_64k = {reuses_gpu_64k}: not (1300 + 677) / (copy - 0.5) with the recorded 64 KiB copy")
grading.check_equal(breakeven_reuses(10.0, 2.0, 3.0, 1.0), 6, name="breakeven_reuses(10, 2, 3, 1)")
grading.check_equal(breakeven_reuses(10.0, 0.0, 20.0, 0.0), 1, name="breakeven_reuses(10, 0, 20, 0)")
assert breakeven_reuses(1.0, 1.0, 1.0, 2.0) is None, "breakeven_reuses(1, 1, 1, 2) should be None"
for args in [(1300.0, 677.0, 7.7, 0.5), (40.0, 5.0, 2.5, 0.1), (7.0, 0.0, 7.0, 0.0)]:
    got, want = breakeven_reuses(*args), _want(*args)
    assert got == want, f"breakeven_reuses{args} = {got!r} is not the expected result"
### END HIDDEN TESTS

# %% [markdown] id="03-amortization-tests-note"
# The same arithmetic at every size, with the copy cost taken from the model's pinned
# device-to-host copy for a platform (lab 02's copy engine): move the slider. Small buffers
# need many reuses; large ones pay off sooner, but how much sooner rests on the model's
# per-page slope, which is assumed (gdrcopy's README publishes one size only, 64 KB). That is why
# libraries copy small messages through pre-registered buffers (the *eager* protocol) and
# send large ones from the application's own, registered and cached, memory (*rendezvous*,
# zero-copy).

# %% id="03-registration-explorer"
lab03.registration_explorer("volta-dgx1")

# %% [markdown] id="03-bar1-wall-once-more"
# ## 8. The BAR1 wall, once more
#
# A GPU registration maps its pages into BAR1, so the total registered GPU memory cannot exceed
# the BAR1 aperture (less what the driver keeps). The model raises the error a real
# registration would (`ENOMEM`) for a Kepler K20 with its 256 MB window; an H200 has 256 GiB.

# %% id="03-register-mr"
from gdrlab.errors import VerbsError
from gdrlab.labsupport import optional_module

model, why_not = optional_module("gdrlab.model")
if model is None or not hasattr(model, "register_mr"):
    print("the model's register_mr is not available here:", why_not or "this gdrlab has no register_mr")
else:
    for profile in ("kepler-snb-2013", "h200-lab"):
        for nbytes in (64 << 20, 512 << 20):
            try:
                result = model.register_mr(profile, nbytes)
                print(f"{profile}: register {nbytes >> 20} MiB -> ok ({result})  [modelled]")
            except VerbsError as exc:
                print(f"{profile}: register {nbytes >> 20} MiB -> errno {exc.errno}: {exc}  [modelled]")

# %% [markdown] id="03-written-question" nbgrader={"grade": false, "grade_id": "03-written-question", "locked": true, "schema_version": 3, "solution": false}
# ## Written answer (2 points, graded by hand)
#
# In three to five sentences: why does every serious RDMA library keep a registration cache, and
# name **one** situation in which registering on every transfer (no cache) is the better choice.
# Refer to what `ibv_reg_mr` has to do and to your answer to exercise 3.

# %% [markdown] id="explain-reg-cache" nbgrader={"grade": true, "grade_id": "explain-reg-cache", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# `ibv_reg_mr` pins the pages, maps them for DMA and hands the HCA a translation table, which costs
# from tens of microseconds for small host buffers to milliseconds for GPU memory, far more than
# sending a small message. A cache keeps the registration alive, so a buffer that is sent many times
# pays that cost once; exercise 3 shows it takes many reuses to pay back one GPU registration. A
# buffer used once or twice (for example a large one-off transfer, or memory that is freed right
# after) is better registered and deregistered on the spot, or copied through a pre-registered
# buffer, since a cache would only pin memory (and BAR1) that nobody reuses.

# %% [markdown] id="03-you-saw"
# ## What you saw
#
# * `ibv_reg_mr` pins pages and gives the HCA a translation table and keys; it works on host
#   memory out of the box. A GPU pointer needs a peer-memory client (`nvidia-peermem`, once
#   `nv_peer_mem`) or the dma-buf route (`cuMemGetHandleForAddressRange` then
#   `ibv_reg_dmabuf_mr`, no extra module); with neither, registration fails with `EFAULT`.
#   This is the third pillar of the GPUDirect RDMA story, next to BAR1 (lab 01) and P2P DMA
#   (lab 02).
# * `cudaHostRegister` pins **host** memory for the copy engine; it never registers GPU memory
#   (one of the articles this kit started from had that wrong).
# * Registering GPU memory is slow (about 1.3 ms for 64 KB in gdrcopy's measurement) and uses
#   BAR1. With unpinning and lab 02's recorded copy, a 64 KiB message needs hundreds of reuses of
#   the same buffer (your Exercise 3) before registering beats copying through a pre-registered
#   buffer, so every serious library keeps a registration cache, and small messages keep going
#   through pre-registered buffers.
# * Next, lab 04 puts those pre-registered buffers to work: staging, shared buffers,
#   pipelining and GDR, and where each one wins.

# %% [markdown] id="03-on-your-cluster"
# ## On your cluster
#
# ```
# ibv_devinfo -v | grep -E 'hca_id|max_mr_size|max_mr:|state'
# lsmod | grep nvidia_peermem
# ulimit -l
# # node A (server), then node B (client, with node A's address at the end):
# ib_write_bw -d mlx5_0 --use_cuda=0 --use_cuda_dmabuf -a --report_gbits
# ib_write_bw -d mlx5_0 --use_cuda=0 --use_cuda_dmabuf -a --report_gbits NODE_A
# ```
#
# What to look for, and what a refusal means:
# [docs/registration-reference.md](../docs/registration-reference.md#on-your-cluster-what-the-commands-show).
#
# Two-node runs with gdrlab, and what each failure message means:
# [docs/cluster.md](../docs/cluster.md); all the commands on one page:
# [docs/cheatsheet.md](../docs/cheatsheet.md). Both, and the other `docs/` pages this lab links,
# are in the `docs/` folder that `gdrlab lab` puts beside your copies of the labs (and in the
# gdrlab repository's `docs/`).
