# %% [markdown] id="01-title"
# # Lab 01: BAR1 exposure
#
# Lab 00 named the three parts GPUDirect RDMA needs. This lab is about the first: how GPU memory
# becomes something another PCIe device can address at all. A PCIe device shows the rest of the
# machine a few *Base Address Registers* (BARs): windows of bus addresses that reach into the
# device. An NVIDIA GPU's **BAR1** is a window onto its memory; whatever is mapped into it can be
# read and written by the CPU or by another device, such as an RDMA adapter.
#
# **Learning goals**
#
# 1. Read a GPU's BAR sizes from sysfs and from NVML, and match NVIDIA's "BAR1" to sysfs's numbering.
# 2. Watch BAR1 use grow while GPU memory is allocated.
# 3. Export GPU memory as a dma-buf and see that the CPU cannot map it: dma-buf is for devices.
# 4. Compute the wall of a small BAR1 (a Tesla K20 had 256 MB), then see it in the model.
#
# **Live on** a machine with an NVIDIA GPU; the BARs of your own PCI devices (NVMe, network card,
# integrated GPU) are read live on any Linux machine. Elsewhere the lab shows data recorded on an
# NVIDIA H200 and the model, and says so above each result.
#
# | duration | prerequisites |
# |---|---|
# | 40 min (reading 15, running 10, exercises 15) | lab 00; virtual and physical addresses; powers of two (MiB, GiB) |
#
# **Glossary**
#
# - **BAR** (base address register): a window of bus addresses through which the rest of the
#   machine reaches into a PCIe device; a 64-bit BAR occupies two of the six slots.
# - **BAR1**: NVIDIA's name for the BAR that exposes GPU memory. Its sysfs slot depends on whether
#   BAR0 is 32-bit or 64-bit, so find it by its flags and size, not by a slot number.
# - **MMIO**: memory-mapped I/O, device registers or memory reached with loads and stores.
# - **prefetchable**: a BAR whose reads have no side effects; large memory windows are.
# - **Above 4G decoding / Resizable BAR**: firmware settings that let a BAR be larger than the
#   space below 4 GiB allows.
# - **dma-buf**: the Linux framework (since 3.3) for sharing a buffer between devices; Linux 5.12
#   added the RDMA importer (`ibv_reg_dmabuf_mr`).
# - **NVML**: NVIDIA's management library, what `nvidia-smi` prints from.

# %% id="01-cuda-status"
from IPython.display import display

from gdrlab import engine, grading, model
from gdrlab.errors import VerbsError
from gdrlab.labsupport import lab01
from gdrlab.recorded import provenance_label
from gdrlab.widgets import diagram, quick_mode

QUICK = quick_mode()
GPU = engine.cuda_status()
print("quick mode:", QUICK, "| CUDA usable here:", GPU["usable"], "" if GPU["usable"] else "(" + GPU["reason"] + ")")

# %% [markdown] id="01-gpu-bar-windows"
# ## 1. A GPU's BARs
#
# A modern NVIDIA GPU has three memory BARs. NVIDIA numbers them in order: BAR0 (registers), BAR1
# (the memory window) and a third, small one the driver uses for itself. Linux numbers BAR *slots*
# (0 to 5), and a 64-bit BAR takes two slots, its own and the next. So the slot of NVIDIA's BAR1
# depends on BAR0's width: on the H200 every BAR is 64-bit and sysfs lists the three as slots 0, 2
# and 4 (BAR1 is slot 2); on most earlier GPUs BAR0 is 32-bit and BAR1 is slot 1. The reliable way
# is to read the flags: BAR1 is the second **memory** BAR. On the H200 the window is 256 GiB, larger
# than the GPU's memory (NVIDIA's "141GB"; the driver reports 150,109,880,320 bytes, 139.8 GiB, in
# the recorded report of lab 00), so all of it can be exposed at once.

# %% id="01-diagram"
diagram("bar1")

# %% [markdown] id="01-diagram-note"
# `gdrlab.hw` reads the sizes from each device's sysfs `resource` file (text only: the BAR files
# themselves are never opened) and from NVML (`nvmlDeviceGetBAR1MemoryInfo`, what `nvidia-smi -q`
# prints under "BAR1 Memory Usage").

# %% id="01-gpu-bars"
bars, why = lab01.gpu_bars()
if len(bars):
    print("live, this machine (sysfs):")
    display(bars)
else:
    print("no GPU BARs here:", why)
nvml, why = lab01.nvml_bar1()
if len(nvml):
    print("live, this machine (NVML):")
    display(nvml)
else:
    print("NVML:", why)
h200_bars = lab01.h200_bars()
print(provenance_label(h200_bars), "(sysfs resource file):")
h200_bars

# %% [markdown] id="01-own-bars-intro"
# ### Your own machine's BARs (live on any Linux machine)
#
# GPUs are not the only devices with BARs: your NVMe drive exposes its registers through one, so
# does your network card, and an integrated GPU has a window onto memory. Each line of `/sys/bus/pci/devices/<device>/resource` is one
# slot: start address, end address and the kernel's flags, all in hex. The flags say what the
# slot is (`include/linux/ioport.h`):
#
# | flag | value | meaning |
# |---|---|---|
# | `IORESOURCE_IO` | `0x00000100` | an I/O-port BAR |
# | `IORESOURCE_MEM` | `0x00000200` | a memory BAR |
# | `IORESOURCE_PREFETCH` | `0x00002000` | prefetchable: reads have no side effects |
# | `IORESOURCE_MEM_64` | `0x00100000` | 64-bit: this BAR also uses the next slot |
#
# The table below is this machine's memory BARs, laid out from those flags (`slots` shows the pair
# a 64-bit BAR takes). Small non-prefetchable BARs are registers; large prefetchable ones are
# windows onto memory, like a GPU's BAR1.

# %% id="01-own-bars"
mine, why = lab01.own_bars()
if len(mine):
    print(f"live, this machine: {len(mine)} memory BARs of {mine['pci_bus_id'].nunique()} PCI devices")
    display(mine)
else:
    print("no BARs to show here:", why)


# %% [markdown] id="01-bar1-use-while-allocating"
# ## 2. BAR1 use while allocating
#
# On the recorded H200 (a KVM guest with driver 580) we observed the driver mapping every
# allocation into BAR1 as it was made, so NVML's "BAR1 used" followed `cudaMalloc`: allocate
# 1 GiB, see about 1 GiB more BAR1 in use. That is one observation, not a rule: a GPU whose BAR1
# is smaller than its memory cannot map everything, and NVIDIA does not document when its driver
# maps up front and when on demand (when a peer or gdrcopy asks). Other GPUs and drivers, even
# large-BAR1 ones, may show BAR1 use staying flat; the live widget shows what yours does.
#
# Live, the widget allocates each size with `gdrlab.engine.Buffer(size, "device")`, reads NVML
# before and after, and frees the buffer.

# %% id="01-bar1-sweep-widget"
if GPU["usable"] and not QUICK:
    sweep = lab01.bar1_sweep_widget("64M:16G")
    display(sweep)
    sweep.start()
else:
    bar1 = lab01.bar1_data("64M:16G")  # a few sizes live in quick mode, else recorded
    print(bar1.why)
    if bar1.data is not None:
        display(lab01.bar1_figure(bar1.data))

# %% [markdown] id="01-dma-buf-devices-not"
# ## 3. A dma-buf is for devices, not for the CPU
#
# Since Linux 3.3 (2012) the kernel can hand one device's memory to another device as a
# **dma-buf**: a file descriptor standing for the memory. Linux 5.12 added the RDMA importer
# (`ib_umem_dmabuf`, `ibv_reg_dmabuf_mr` in rdma-core), so an HCA can register such a buffer.
# CUDA 11.7+ exports GPU memory this way
# (`cuMemGetHandleForAddressRange(..., CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)`): no `nvidia-peermem`
# module needed. This is the way forward: CUDA 13.0's GPUDirect RDMA guide deprecates the NV-P2P
# kernel API (`nvidia_p2p_get_pages` and friends) that `nvidia-peermem` is built on, so the module
# is the legacy path, kept for older kernels and drivers.
#
# Whether the CPU may `mmap` a dma-buf is up to its exporter, and it changes with the driver. Many
# exporters allow it; NVIDIA's refused it on the recorded H200 (driver 580.159.04, errno 524,
# `ENOTSUPP`), so there this fd is not a way for the CPU to reach GPU memory. Newer drivers (those of
# CUDA 13.3 and later) do map it: gdrcopy 2.6 uses exactly that to map GPU memory for the CPU
# without its own kernel module. The cell below says which machine its answer comes from.
#
# > **A correction.** `cudaHostRegister()` is sometimes described as the call that "registers GPU
# > memory" for RDMA. It page-locks **host** memory so the GPU's copy engines can DMA it (lab 02
# > measures why that matters). GPU memory reaches an RDMA adapter only through BAR1, by a
# > dma-buf like the one below or by the legacy `nvidia-peermem` module.

# %% id="01-live-or-recorded-dmabuf"
dmabuf = lab01.live_or_recorded_dmabuf()
print(dmabuf.why)
if dmabuf.data is not None:
    for row in dmabuf.data.to_dict("records"):
        print(f"exported {row['size']:>11,} B -> fd of {row['fd_size']:>11,} B; CPU mmap: "
              f"{lab01.errno_name(row['cpu_mmap_errno'])}")

# %% [markdown] id="01-wall-k20-256"
# ## 4. The wall: a K20's 256 MB BAR1
#
# Registering GPU memory with an RDMA adapter maps it into BAR1 (in 64 KiB GPU pages), and the
# driver keeps part of BAR1 for itself. On a Tesla K20 the whole window was 256 MB, so an MPI
# library that registered a large GPU buffer got `ENOMEM` from `ibv_reg_mr`. The model keeps the
# same books (`gdrlab.model.register_mr`), for profile `kepler-snb-2013` (K20 + ConnectX-3); you
# work them out first, then see the model's table after exercise 2.

# %% [markdown] id="01-exercise-1-2-points"
# ### Exercise 1 (2 points): the largest registration
#
# One registration pins whole GPU pages, so `n` bytes take `n` rounded **up** to a whole number of
# GPU pages of BAR1, and the driver keeps `reserved_bytes` of BAR1 for itself. Write
# `max_register_bytes(bar1_bytes, reserved_bytes, page_bytes)`: the largest number of bytes one
# `ibv_reg_mr` can register on an otherwise empty BAR1. The grader tries it on made-up GPUs (other
# window sizes, reserves that are not a whole number of pages, other page sizes); the visible check
# tries one. Then set `k20_max_register_bytes` for the `kepler-snb-2013` profile, from its parameters
# (`model.get_profile(lab01.K20_PROFILE).params`: `bar1_bytes`, `bar1_reserved_bytes`,
# `gpu_page_bytes`).

# %% id="ex1-k20-max" nbgrader={"grade": false, "grade_id": "ex1-k20-max", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"bar1_available_bytes": "computes this exercise's answer; derive it from the parameters", "register_mr": "answers by trial; derive the limit from the parameters", "register_table": "shows the model's answer; derive it"}}
k20 = model.get_profile(lab01.K20_PROFILE).params
k20_max_register_bytes = None


def max_register_bytes(bar1_bytes, reserved_bytes, page_bytes):
    ### BEGIN SOLUTION
    return int(bar1_bytes - reserved_bytes) // int(page_bytes) * int(page_bytes)
    ### END SOLUTION


### BEGIN SOLUTION
k20_max_register_bytes = max_register_bytes(k20["bar1_bytes"], k20["bar1_reserved_bytes"], k20["gpu_page_bytes"])
### END SOLUTION
if grading.done(k20_max_register_bytes, name="Exercise 1") and k20_max_register_bytes is not None:
    print(f"your K20 limit: {k20_max_register_bytes / 2**20:g} MiB")

# %% id="test-ex1-k20-max" nbgrader={"grade": true, "grade_id": "test-ex1-k20-max", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Visible self-check on a made-up GPU (1 GiB window, 16 MiB reserve, 2 MiB pages).
grading.check_function_cases(max_register_bytes, [((2**30, 2**24, 2**21), 2**30 - 2**24)], name="max_register_bytes")
grading.check_between(k20_max_register_bytes, 1 << 20, 256 << 20, name="k20_max_register_bytes",
                      unit="bytes", hint="a K20's whole BAR1 is 256 MB")
### BEGIN HIDDEN TESTS
grading.check_function_cases(lambda *a: int(max_register_bytes(*a)), [
    ((2**28, 3 * 10**7, 65536), 238419968), ((2**30, 2**20 + 1, 4096), 1072689152),
    ((16 * 2**30, 2**25, 2**16), 17146314752), ((2**28, 2**25 + 5000, 65536), 234815488),
    ((2**33, 10**8, 2**21), 8489271296)], name="max_register_bytes")
try:
    model.register_mr(lab01.K20_PROFILE, int(k20_max_register_bytes))  # must fit
except VerbsError:  # the model's message would print the limit
    raise AssertionError("k20_max_register_bytes does not register on the K20 profile: it is above the limit") from None
try:
    model.register_mr(lab01.K20_PROFILE, int(k20_max_register_bytes) + 1)
except VerbsError as exc:
    grading.check_equal(exc.errno, 12, name="errno one byte past the limit")
else:
    raise AssertionError("one byte more still registers: the answer is below the limit")
### END HIDDEN TESTS

# %% [markdown] id="01-exercise-2-2-points"
# ### Exercise 2 (2 points): how many buffers at once?
#
# An application registers buffers of `buffer_bytes` one after another and keeps them all
# registered; each takes its size rounded up to whole GPU pages. Write
# `buffers_that_fit(bar1_bytes, reserved_bytes, page_bytes, buffer_bytes)`: how many fit before
# `ibv_reg_mr` fails. The grader tries made-up GPUs and buffer sizes that are not whole pages. Then
# set `k20_buffers_64mib` for 64 MiB buffers on the K20 profile.

# %% id="ex2-k20-count" nbgrader={"grade": false, "grade_id": "ex2-k20-count", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"bar1_available_bytes": "computes the BAR1 room this exercise asks you to work out", "register_mr": "answers by trial; count from the parameters", "register_table": "shows the model's answer; derive it"}}
k20_buffers_64mib = None


def buffers_that_fit(bar1_bytes, reserved_bytes, page_bytes, buffer_bytes):
    ### BEGIN SOLUTION
    page = int(page_bytes)
    mapped = -(-int(buffer_bytes) // page) * page
    return int(bar1_bytes - reserved_bytes) // mapped
    ### END SOLUTION


### BEGIN SOLUTION
k20_buffers_64mib = buffers_that_fit(k20["bar1_bytes"], k20["bar1_reserved_bytes"], k20["gpu_page_bytes"], 64 << 20)
### END SOLUTION
if grading.done(k20_buffers_64mib, name="Exercise 2"):
    print(f"your count: {k20_buffers_64mib} buffers of 64 MiB")

# %% id="test-ex2-k20-count" nbgrader={"grade": true, "grade_id": "test-ex2-k20-count", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Visible self-check on a made-up GPU (1 GiB window, 16 MiB reserve, 2 MiB pages, 100 MiB buffers).
grading.check_function_cases(buffers_that_fit, [((2**30, 2**24, 2**21, 100 * 2**20), 10)], name="buffers_that_fit")
grading.check_true(isinstance(k20_buffers_64mib, int), "k20_buffers_64mib should be a whole number",
                   answer=k20_buffers_64mib, name="k20_buffers_64mib")
### BEGIN HIDDEN TESTS
grading.check_function_cases(lambda *a: int(buffers_that_fit(*a)), [
    ((2**28, 2**25, 65536, 100000), 1792), ((2**30, 2**24, 4096, 10**6), 1053),
    ((2**28, 2**25 + 1, 65536, 2**20), 223), ((2**34, 2**26, 2**21, 3 * 10**8), 56)], name="buffers_that_fit")
_k20 = model.get_profile(lab01.K20_PROFILE).params
grading.check_equal(k20_buffers_64mib, int(_k20["bar1_bytes"] - _k20["bar1_reserved_bytes"]) // (64 << 20),
                    name="k20_buffers_64mib", hint="the driver keeps part of BAR1 for itself")
### END HIDDEN TESTS

# %% [markdown] id="01-register-table-intro"
# The model keeps the same books: one registration of each size on the K20 profile, registered or
# refused with the model's `ENOMEM`, and how much BAR1 is left after one registration of each size on
# three profiles (the curve ends at the wall).

# %% id="01-register-table"
table = lab01.register_table(lab01.K20_PROFILE)
print(provenance_label(table))
display(table[["size", "registered", "bar1_left", "error"]])
lab01.bar1_model_figure()

# %% [markdown] id="01-exercise-3-1-point"
# ### Exercise 3 (1 point): write a GPU's `resource` file
#
# NVIDIA's BAR1 is the GPU's *second memory BAR*, and its sysfs slot depends on the BARs before
# it: a 64-bit BAR takes two slots (the second holds its upper address bits). `gdrlab.hw.bars`
# reads the flags for you; here is what it makes of the recorded H200 (every BAR 64-bit, BAR1 in
# slot 2) and of a Kepler-era layout whose BAR0 is 32-bit (`lab01.KEPLER_RESOURCE`, addresses made
# up: BAR1 in slot 1).
#
# Now go the other way, which no function here does for you. Set `k40_resource` to the six lines
# (`start end flags` in hex, one per slot, `0x0 0x0 0x0` for an empty slot) of a Tesla K40 with:
# BAR0 16 MiB, 32-bit, non-prefetchable, at `0xfa000000`; BAR1 16 GiB, 64-bit, prefetchable, at
# `0x3c00000000`; BAR3 32 MiB, 64-bit, prefetchable, at `0x4000000000`; and an I/O BAR of 128 bytes
# at `0xe000`, in the last slot (addresses made up; the sizes are the K40's). Flags (from the
# kernel's `include/linux/ioport.h`): `IORESOURCE_IO` 0x100, `IORESOURCE_MEM` 0x200,
# `IORESOURCE_PREFETCH` 0x2000, `IORESOURCE_MEM_64` 0x100000. Then set `k40_bar1_slot` to the slot
# that holds its BAR1.

# %% id="01-bars-by-flags"
from gdrlab.hw import bars as hw_bars

for label, text in (("H200 (recorded)", lab01.h200_resource()), ("Kepler layout", lab01.KEPLER_RESOURCE)):
    print(label, [(b["slots"], b["kind"], "64-bit" if b["is_64bit"] else "32-bit", hw_bars.nvidia_bar_name(b))
                  for b in hw_bars.bar_layout(text)])

# %% id="ex3-sysfs-index" nbgrader={"grade": false, "grade_id": "ex3-sysfs-index", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"bar_layout": "parses the answer back; write the lines from the flags", "nvidia_bar_name": "names the BAR for you"}}
k40_resource = ""
k40_bar1_slot = None
### BEGIN SOLUTION
k40_resource = """0xfa000000 0xfaffffff 0x40200
0x3c00000000 0x3fffffffff 0x14220c
0x0 0x0 0x0
0x4000000000 0x4001ffffff 0x14220c
0x0 0x0 0x0
0xe000 0xe07f 0x40101"""
k40_bar1_slot = 1
### END SOLUTION
print(k40_resource)

# %% id="test-ex3-sysfs-index" nbgrader={"grade": true, "grade_id": "test-ex3-sysfs-index", "locked": true, "points": 1, "schema_version": 3, "solution": false}
grading.check_true(len(k40_resource.strip().splitlines()) == 6, "k40_resource should have one line per slot, "
                   "empty slots included", answer=k40_resource.strip() or None, name="k40_resource")
### BEGIN HIDDEN TESTS
from gdrlab.hw import bars as _bars

_got = [(b["slot"], b["kind"], b["size_bytes"], b["is_64bit"], b["prefetchable"])
        for b in _bars.bar_layout(k40_resource)]
_want = [(0, "mem", 16 << 20, False, False), (1, "mem", 16 << 30, True, True),
         (3, "mem", 32 << 20, True, True), (5, "io", 128, False, False)]
grading.check_equal(_got, _want, name="the BARs your k40_resource describes",
                    hint="a 64-bit BAR takes two slots; sizes are end - start + 1")
grading.check_equal(k40_bar1_slot, 1, name="k40_bar1_slot", hint="the second memory BAR")
### END HIDDEN TESTS

# %% [markdown] id="01-written-question"
# ## Written answer (2 points, graded by hand)
#
# In three to five sentences: why could a K20 not register a single 240 MiB GPU buffer for RDMA in
# the model, while an H200 can expose all of its memory? Use the words BAR1, bus address and HCA,
# and say which of the K20 numbers are measured and which are assumed.

# %% [markdown] id="explain-bar1-wall" nbgrader={"grade": true, "grade_id": "explain-bar1-wall", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# An HCA can only DMA to bus addresses, and GPU memory has bus addresses only where it is mapped
# into the GPU's BAR1 window; registering GPU memory for RDMA therefore maps it into BAR1. The
# K20's BAR1 is 256 MB and the driver keeps part of it for itself, so in the model (which assumes
# a 32 MiB reserve, not a measured figure) 224 MiB fits and 240 MiB does not. The H200's BAR1 is
# 256 GiB, larger than its 139.8 GiB (NVIDIA's "141GB") of memory, so every byte can be mapped at
# once. The 256 MB BAR1
# is the K20's published size; the reserve and the resulting limits are modelled.

# %% [markdown] id="01-you-saw"
# ## What you saw
#
# * A GPU exposes its memory on the PCIe bus through one BAR. NVIDIA calls it BAR1: the second
#   memory BAR, whose sysfs slot the flags decide (slot 2 on the H200, whose BAR0 is 64-bit; slot 1
#   where BAR0 is 32-bit). Every PCI device on your own machine lists its BARs the same way. On the
#   H200 BAR1 is 256 GiB, more than the memory behind it.
# * On the recorded H200 (a KVM guest, driver 580), BAR1 use followed allocation almost byte for
#   byte (about 1 GiB per GiB allocated, above a baseline of about 0.5 GiB the driver uses). That
#   is one GPU with one driver in one VM: another GPU, even one with a large BAR1 such as an A100,
#   or another driver may map on demand and leave BAR1 use flat. Measure yours.
# * A dma-buf of GPU memory had the buffer's size but the CPU could not map it (errno 524,
#   `ENOTSUPP`, on the H200 with driver 580.159.04; newer drivers allow it): it exists so that
#   *devices* such as an RDMA adapter can import GPU memory, and it is the way forward, with
#   `nvidia-peermem` the legacy route. `cudaHostRegister` is a different thing altogether: it pins
#   host memory.
# * A K20's window was 256 MB (its published size), less what the driver kept. The model
#   *assumes* a 32 MiB reserve, so the limits you computed are modelled, not K20 measurements. That
#   is why early GPUDirect RDMA codes registered small, reused buffers, and why lab 03's
#   registration caches matter. Lab 02 turns to the second part: DMA between PCIe devices.

# %% [markdown] id="01-on-your-cluster"
# ## On your cluster
#
# ```
# nvidia-smi -q -d MEMORY | sed -n '/BAR1/,/Free/p'       # BAR1 total, used, free
# sudo lspci -vvv -d 10de: | grep -E '^[0-9a-f]|Region|Resizable|BAR [0-9]'
# cat /sys/bus/pci/devices/0000:BUS:DEV.FN/resource        # start end flags, one line per slot
# ```
#
# What to look for:
#
# - `BAR1 Memory Usage / Total`: data-centre GPUs have had large fixed windows since Kepler (the
#   K40 of exercise 3: 16 GiB; the H200: 256 GiB); GeForce, Quadro and T4-class boards show
#   256 MiB unless Resizable BAR (with Above 4G decoding) enlarges it. Product class, not age,
#   decides the default. Watch `Used` while a job registers memory: the driver maps what peers
#   need through this window. How much it maps up front depends on the GPU and the driver: what
#   lab 01 showed for the H200 is one machine, so look at yours.
# - `lspci`'s `Region N` lines use the same slot numbers as sysfs: find the large
#   `(64-bit, prefetchable)` region. It is NVIDIA's BAR1, whatever its slot (1 when BAR0 is 32-bit,
#   2 when BAR0 is 64-bit).
# - `Physical Resizable BAR`: the current size of each resizable BAR and the sizes it supports;
#   firmware settings (Above 4G decoding, Resizable BAR) decide which one you get.
#
# Two-node runs with gdrlab, and what each failure message means:
# [docs/cluster.md](../docs/cluster.md); all the commands on one page:
# [docs/cheatsheet.md](../docs/cheatsheet.md). Both are in the `docs/` folder
# that `gdrlab lab` puts beside your copies of the labs (and in the gdrlab repository's `docs/`).
