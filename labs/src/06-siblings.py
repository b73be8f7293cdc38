# %% [markdown] id="06-title"
# # Lab 06: GPUDirect's siblings, Storage and GPU-initiated networking
#
# GPUDirect RDMA (labs 00-05) lets a NIC read and write GPU memory. Two siblings carry the same
# idea elsewhere: **GPUDirect Storage** (GDS) lets a storage device move a file's bytes into GPU
# memory, and **GPU-initiated networking** (GPUDirect Async: NVSHMEM's IBGDA, NCCL's GIN from 2.28.7,
# UCX's GDAKI from 1.20) lets the GPU itself tell an RDMA NIC to send. They are where GPU data
# movement went after 2020: GDS for data loading and checkpoints, GPU-initiated networking for
# mixture-of-experts all-to-alls and fused kernels.
#
# **Learning goals**
#
# 1. Say what each sibling moves, between what, and what hardware it needs; correct the seed
#    article that offers both as a replacement for RDMA NICs.
# 2. Read a file into GPU memory three ways (cuFile, `read()` into pinned memory plus a copy,
#    `read()` into pageable memory plus a copy), and find out which mode cuFile ran in and why.
# 3. Model a bounce-buffer read against GDS proper, and decide from a machine's set-up which
#    mode cuFile will use.
# 4. Model what changes when the GPU, not a CPU proxy thread, posts the messages.
#
# **Live on** a GPU machine with `libcufile` (the storage reads); elsewhere the recorded runs of
# `bench/record_storage.py` where this copy ships them, and the model. The graded questions use
# made-up machines and give the same answers everywhere.
#
# | duration | prerequisites |
# |---|---|
# | 45 min (reading 15, running 10, exercises 20) | labs 02 (copies, pinned memory) and 05 (PCIe distance codes) |
#
# **Glossary**
#
# - **GPUDirect Storage (GDS)**: a storage device (a local NVMe drive, or a storage NIC for a
#   network filesystem) DMAs a file's bytes straight into GPU memory, peer to peer over PCIe.
# - **cuFile / libcufile**: the API of GDS (`cuFileRead`, `cuFileWrite`); it works with or
#   without GDS proper underneath.
# - **compatibility (compat) mode**: cuFile without the peer-to-peer path: POSIX reads into a host
#   bounce buffer, then a copy to the GPU. Same calls, same bytes, different route.
# - **nvidia-fs (`nvidia_fs`)**: the kernel module that lets a filesystem's reads target GPU
#   memory; recent cuFile releases can use the kernel's own PCI P2PDMA instead.
# - **bounce buffer**: a host buffer data passes through on its way somewhere else.
# - **doorbell**: a write to a NIC register that says "new work in your queue".
# - **CPU proxy thread**: a host thread that reads requests a GPU kernel left in memory and posts
#   them to the NIC (NVSHMEM's IBRC transport, GIN's proxy backend).
# - **IBGDA / GIN / GDAKI**: GPU-initiated networking in NVSHMEM (InfiniBand GPUDirect Async), in
#   NCCL (GPU-Initiated Networking, from NCCL 2.28.7) and in UCX (GPUDirect Async Kernel-Initiated).

# %% id="06-setup"
import numpy as np
import pandas as pd
from IPython.display import display

from gdrlab import grading
from gdrlab.labsupport import lab06, quick_mode

QUICK = quick_mode()
status, status_text = lab06.storage_status()
print(status_text)

# %% [markdown] id="06-seed-correction"
# ## 1. What the siblings move (a seed error corrected)
#
# > **A correction.** One of the articles this kit started from ends by offering GPUDirect Storage
# > and GPUDirect Async as the paths "for TCP/IP clusters without RDMA NICs". **Neither is.**
# > GPUDirect Storage moves data between **storage and GPU memory** (a local NVMe drive, or a
# > storage NIC serving a network filesystem), inside one node: it does not move data between
# > nodes at all. GPU-initiated networking lets the GPU write a work request and ring an **RDMA
# > NIC's** doorbell itself: it removes the CPU from the control path, not the RDMA NIC from the
# > data path, so it needs an RDMA NIC (and GPUDirect RDMA underneath) just as much. A cluster
# > with TCP only moves GPU data between nodes by staging through host memory (lab 04's `staged`
# > and `pipelined` paths, or NCCL's socket transport).
#
# | sibling | moves data between | needs | library |
# |---|---|---|---|
# | GPUDirect RDMA | an RDMA NIC and GPU memory | RDMA NIC, BAR1, peer memory or dma-buf (labs 01-03) | verbs, UCX, MPI, NCCL |
# | GPUDirect Storage | storage and GPU memory | `nvidia_fs` or kernel P2PDMA, a supported filesystem, `O_DIRECT`; else compat mode | cuFile, KvikIO |
# | GPU-initiated networking | GPU memory and a remote node, posted by the GPU | an RDMA NIC that the GPU can drive (queues and doorbell mapped to the GPU) | NVSHMEM (IBGDA), NCCL GIN, UCX GDAKI |

# %% [markdown] id="06-three-ways"
# ## 2. Three ways to get a file into GPU memory
#
# | method | route of the bytes | CPU work |
# |---|---|---|
# | `cufile`, GDS proper | drive → GPU memory (peer-to-peer DMA through the GPU's BAR1) | submit only |
# | `cufile`, compat mode | drive → page cache or bounce buffer → GPU (chunks) | the read and the copy |
# | `pinned_read_copy` | drive → page cache → pinned buffer (CPU copy) → GPU (copy engine) | `read()`'s copy |
# | `pageable_read_copy` | as above, into pageable memory; the driver stages the copy itself | `read()`'s copy and more |
#
# Which mode cuFile runs in is not your choice in the code: the same `cuFileRead` call takes
# whichever route the machine allows. The first cell printed this machine's answer: `nvidia_fs`
# loaded or not, what `cufile.json` allows, and so the mode. On the recorded H200, `libcufile`
# 1.15.1 is installed with `/etc/cufile.json` and `nvidia_fs` is not loaded, so cuFile runs in
# compatibility mode there: what most learners' machines will do.
#
# **Predict (not graded).** For a 1 GiB file already in memory (on a tmpfs), which of the three
# is fastest into GPU memory, and by roughly how much over the slowest? Write it down before
# you run the next cells.

# %% id="06-predict"
my_prediction = None   # e.g. "cufile, about 2x over pageable": your words, not graded

# %% id="06-live"
if QUICK:
    live, live_why = None, "live storage reads skipped: quick mode"
else:
    live, live_why = lab06.live_storage()
print(live_why)
if live is not None:
    display(live)
    display(lab06.storage_figure(live, measured=True))

# %% id="06-recorded"
rec, rec_why = lab06.recorded_storage()
print(rec_why)
if rec is not None:
    print(lab06.recorded_mode_note(rec))
    display(lab06.storage_figure(rec, measured=True))
else:
    print("The modelled curves of section 3 stand in for the measurement until a recording ships.")

# %% id="06-recorded-summary"
# Each sentence is computed from the recording when this cell runs.
if rec is not None:
    top = rec[rec["size"] == rec["size"].max()]
    for (where, cache), g in top.groupby(["storage", "cache"], sort=False):
        rates = ", ".join(f"{lab06.METHOD_NAMES[m]} {bw:.2f} GB/s" for m, bw in zip(g["method"], g["bw_gbps"], strict=True))
        print(f"{where}, {cache}, {int(g['size'].iloc[0]) >> 20} MiB: {rates}")
    parts = rec[rec["method"] != "cufile"].dropna(subset=["read_p50_us"])
    if not parts.empty:
        share = (parts["read_p50_us"] / parts["t_p50_us"]).median()
        print(f"In the two read() paths, read() itself is {share:.0%} of the time (median over all rows): "
              "the copy to the GPU is the smaller part.")
else:
    print("no recording: nothing to summarise here")

# %% [markdown] id="06-what-to-look-for"
# What to look for, in a recording or a live run:
#
# * On a tmpfs the file is already in memory: every method is a memory copy plus a copy to the
#   GPU, and `pinned_read_copy` should beat `pageable_read_copy` as in lab 02.
# * In compatibility mode `cufile` **is** a read into a host buffer plus a copy, done by the
#   library, one bounce buffer at a time: expect it at or below `pinned_read_copy`, never above it
#   (section 3's model says by how much). Only GDS proper removes the host hop, and only from a
#   drive that can reach the GPU peer-to-peer.
# * `cold` disk rows are limited by the drive; `warm` rows by memory copies, unless the file was
#   opened with `O_DIRECT` (the `o_direct` column), which skips the page cache on purpose.

# %% [markdown] id="06-model"
# ## 3. The model: GDS proper against the bounce buffer
#
# The package's storage model (`gdrlab.model.storage`, `gdrlab model storage`; docs/model.md)
# reads a **cold** file (not in the page cache) from one NVMe drive on the `h200-lab` profile,
# whose copy-engine, GPU-link and peer-write rates it reuses. The drive's parameters, each with its
# level (published, measured, fitted, assumed) and its source:

# %% id="06-model-params"
params = lab06.storage_params()
display(pd.DataFrame([{"parameter": k, "value": v, "level": lv, "source": s} for k, (v, lv, s) in params.items()]))
model_same = lab06.storage_model()
display(lab06.storage_figure(model_same))

# %% [markdown] id="06-model-reading"
# The next cell prints what the model says, computed when it runs: the ranking at 1 GiB from a
# cold drive and from the page cache, and compat mode's steps. Compat mode reads the file in
# bounce-buffer pieces and pays the drive's first-byte latency again for every piece, so from a
# cold drive it is the slowest of the four, below both plain `read()` paths; GDS proper, which
# never touches host memory, is the fastest.

# %% id="06-model-summary"
from gdrlab.model.storage import STEP_NOTE

_G = 1 << 30
for _cache in (False, True):
    _m = lab06.storage_model(sizes=[_G], page_cache=_cache)
    print(f"{'page cache' if _cache else 'cold drive'}, 1 GiB: "
          + " > ".join(f"{lab06.METHOD_NAMES[k]} {bw:.2f} GB/s" for k, bw in lab06.storage_ranking(_m, _G)))
_b = int(params["bounce_bytes"][0])
_steps = lab06.storage_model(sizes=[_b, _b + 1])
_t = _steps[_steps["method"] == "cufile-compat"].set_index("size")["t_us"]
print(f"{STEP_NOTE}: {_t[_b]:.0f} µs at {_b >> 20} MiB, {_t[_b + 1]:.0f} µs one byte later "
      f"({int(_steps.loc[_steps['method'] == 'cufile-compat', 'chunks'].iloc[-1])} pieces)")

# %% [markdown] id="06-gds-needs"
# ### What GDS proper needs
#
# 1. **A path into GPU memory for the drive**: the `nvidia_fs` module (or, in recent cuFile
#    releases, the kernel's PCI P2PDMA: `use_pci_p2pdma` in `cufile.json`), with the GPU's BAR1
#    as the target, as for GPUDirect RDMA.
# 2. **A filesystem GDS supports**: ext4 or XFS on local NVMe, NFS over RDMA, and parallel
#    filesystems whose vendors support it (Lustre, IBM Storage Scale, WekaFS, BeeGFS and others);
#    not a tmpfs or an overlay filesystem. And the file opened with `O_DIRECT`.
# 3. **A short PCIe path**: the same lesson as lab 05. NVIDIA's GDS guides place the GPU and the
#    NVMe drive (or the storage NIC) under one PCIe switch; across the root complex or the sockets
#    the peer-to-peer rate falls. The model takes the profile's peer-write rate for the placement
#    and GDS proper runs at the slowest link on its route. Whether that hurts depends on what is
#    slower: the cell below prints, for the `h200-lab` profile and for an older two-socket machine
#    (`kepler-snb-2013`), each method at 1 GiB under one switch and across the sockets, and which
#    link limits GDS proper across the sockets.
#
# The next cell runs lab 05's topology code on this machine's devices and keeps the GPU/storage
# pairs. The recorded machines lab 05 ships (DGX-2H, POWER8) were exported without their drives,
# so their GPU-NVMe distance cannot be read from them.

# %% id="06-gpu-nvme"
pairs, pairs_why = lab06.gpu_nvme_pairs()
print(pairs_why)
if not pairs.empty:
    display(pairs)
from gdrlab.model.storage import explain_storage

for _prof in ("h200-lab", "kepler-snb-2013"):
    both = pd.concat([lab06.storage_model(sizes=[1 << 30], placement=_pl, profile=_prof).assign(placement=_pl)
                      for _pl in ("same switch", "cross socket")])
    _why = explain_storage(_prof, "gds", 1 << 30, placement="cross-socket")
    print(f"modelled, {_prof}, 1 GiB, GB/s (GDS proper across the sockets limited by: {_why['slowest_link']}, "
          f"{_why['links_gbps'][_why['slowest_link']]:.1f} GB/s):")
    display(both.pivot(index="method", columns="placement", values="bw_gbps").round(2))

# %% [markdown] id="06-placement-reading"
# On `h200-lab` one PCIe 4.0 x4 drive (7 GB/s) is slower than even the cross-socket peer write, so
# the model finds no placement cost there: the drive is the limit either way. On `kepler-snb-2013`
# the cross-socket peer write is the slowest link, and GDS proper falls below every bounce-buffer
# method. Placement matters once the drive side can outrun the far peer-to-peer path: a slow
# socket link, or (beyond this model, which holds one drive) several drives or a storage NIC
# feeding one GPU.

# %% [markdown] id="06-ex1-intro"
# ## Exercise 1 (3 points): a bounce-buffer loader against GDS proper
#
# A loader without GDS reads a file through **one** host bounce buffer of `chunk` bytes: it reads a
# chunk from the drive (a fixed `setup_us`, then the chunk at `drive_gbps`), then copies it to the
# GPU (a fixed `launch_us`, then the chunk at `copy_gbps`), then the next chunk; nothing overlaps.
# The last chunk may be shorter than `chunk`, and it pays both fixed costs like any other.
# GDS proper pays `setup_us` once and moves the bytes at the slower of the drive and the
# peer-to-peer path (`p2p_gbps`). Rates in GB/s (10^9 B/s), times in µs.
#
# 1. Write `bounce_read_us(size, chunk, drive_gbps, copy_gbps, setup_us, launch_us)` and
#    `gds_read_us(size, drive_gbps, p2p_gbps, setup_us)`.
# 2. A made-up machine: drive 12.0 GB/s, copies 24.0 GB/s, a 4 MiB bounce buffer, 20 µs per read,
#    8 µs per copy launch, and its GPU and drive on different sockets, so the peer-to-peer path
#    carries only 9.0 GB/s. Set `made_up_ratio` to the bounce loader's time over GDS proper's for
#    a 1 GiB file.
#
# Graded: both functions on made-up inputs, and the ratio within 2 %. The lab's model is refused
# in this cell: write your own.

# %% id="ex1-bounce" nbgrader={"grade": false, "grade_id": "ex1-bounce", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"storage_model": "is the lab's model: write your own", "storage_params": "holds another machine's numbers", "storage_figure": "draws the lab's model"}}
import math


def bounce_read_us(size, chunk, drive_gbps, copy_gbps, setup_us, launch_us):
    ### BEGIN SOLUTION
    n = math.ceil(size / chunk)
    return n * (setup_us + launch_us) + size / (drive_gbps * 1e3) + size / (copy_gbps * 1e3)
    ### END SOLUTION


def gds_read_us(size, drive_gbps, p2p_gbps, setup_us):
    ### BEGIN SOLUTION
    return setup_us + size / (min(drive_gbps, p2p_gbps) * 1e3)
    ### END SOLUTION


made_up_ratio = None
### BEGIN SOLUTION
_gib = 1 << 30
made_up_ratio = bounce_read_us(_gib, 4 << 20, 12.0, 24.0, 20.0, 8.0) / gds_read_us(_gib, 12.0, 9.0, 20.0)
### END SOLUTION
if grading.done(made_up_ratio, name="Exercise 1"):
    print(f"bounce loader / GDS proper, made-up machine, 1 GiB: {made_up_ratio:.3f}")

# %% id="ex1-bounce-tests" nbgrader={"grade": true, "grade_id": "ex1-bounce-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Self-checks on other made-up numbers: one chunk, then two chunks, then GDS's slower link.
grading.check_function_cases(bounce_read_us, [((1000, 4096, 1.0, 1.0, 1.0, 1.0), 4.0),
                                              ((4097, 4096, 1.0, 1.0, 1.0, 1.0), 4.0 * 1 + 8.194)],
                             name="bounce_read_us", rel=1e-6)
grading.check_function_cases(gds_read_us, [((2000, 1.0, 2.0, 3.0), 5.0), ((2000, 2.0, 1.0, 3.0), 5.0)],
                             name="gds_read_us", rel=1e-6)
grading.check_true(made_up_ratio is None or 0.5 < made_up_ratio < 5, "made_up_ratio: bounce time over GDS time, "
                   "a ratio near 1 here", answer=made_up_ratio, name="made_up_ratio")
### BEGIN HIDDEN TESTS
_rng = np.random.default_rng(61)
_cases_b, _cases_g = [], []
for _k in range(40):
    _s = int(_rng.integers(1, 1 << 31))
    _c = int(2 ** _rng.integers(12, 24))
    _d, _cp, _p = (float(x) for x in _rng.uniform(0.5, 60.0, 3))
    _su, _la = (float(x) for x in _rng.uniform(0.0, 50.0, 2))
    _n = -(-_s // _c)
    _cases_b.append(((_s, _c, _d, _cp, _su, _la), _n * (_su + _la) + _s / (_d * 1e3) + _s / (_cp * 1e3)))
    _cases_g.append(((_s, _d, _p, _su), _su + _s / (min(_d, _p) * 1e3)))
grading.check_function_cases(bounce_read_us, _cases_b, name="bounce_read_us", rel=1e-6)
grading.check_function_cases(gds_read_us, _cases_g, name="gds_read_us", rel=1e-6)
_G = 1 << 30
_want = ((_G // (4 << 20)) * 28.0 + _G / 12e3 + _G / 24e3) / (20.0 + _G / 9e3)
grading.check_close(made_up_ratio, _want, rel=0.02, name="made_up_ratio")
### END HIDDEN TESTS

# %% [markdown] id="06-ex1-after"
# On that made-up machine GDS proper still wins, but by little: its peer-to-peer path across the
# sockets (9 GB/s, below the drive's 12) gave back most of what skipping the bounce buffer saved,
# as on `kepler-snb-2013` in the model above. Put the drive under the GPU's
# switch (`p2p_gbps` no longer the limit) and try your functions again; then shrink the bounce
# buffer and watch the fixed costs per chunk take over.

# %% [markdown] id="06-ex2-intro"
# ## Exercise 2 (3 points): which mode will cuFile use?
#
# For this exercise, cuFile decides as follows (a summary of NVIDIA's GDS documentation, which
# has more cases):
#
# * no `libcufile`: `"none"`;
# * `force_compat_mode` set in `cufile.json`: `"compat"`;
# * GDS proper, `"gds"`, when the machine has a peer-to-peer path for storage (`nvidia_fs` loaded,
#   **or** `use_pci_p2pdma` set), the filesystem is one of `GDS_FILESYSTEMS` below **and** the file
#   was opened with `O_DIRECT`;
# * otherwise `"compat"` if `allow_compat_mode` is set, else `"fails"` (the read returns an error).
#
# Write `cufile_mode(lib, nvidia_fs, p2pdma, allow_compat, force_compat, filesystem, o_direct)`
# (the first six are `True`/`False` except `filesystem`, a name such as `"xfs"`; `o_direct` is a
# bool). Graded on made-up machines.

# %% id="ex2-mode" nbgrader={"grade": false, "grade_id": "ex2-mode", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"expected_mode": "is the package's rule: write your own", "probe": "answers for this machine, not the made-up ones", "storage_status": "answers for this machine, not the made-up ones"}}
GDS_FILESYSTEMS = {"ext4", "xfs", "nfs", "lustre", "gpfs", "wekafs", "beegfs"}


def cufile_mode(lib, nvidia_fs, p2pdma, allow_compat, force_compat, filesystem, o_direct):
    ### BEGIN SOLUTION
    if not lib:
        return "none"
    if force_compat:
        return "compat"
    if (nvidia_fs or p2pdma) and filesystem in GDS_FILESYSTEMS and o_direct:
        return "gds"
    return "compat" if allow_compat else "fails"
    ### END SOLUTION


# %% id="ex2-mode-tests" nbgrader={"grade": true, "grade_id": "ex2-mode-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Self-check on one made-up machine (the answer's form, not its rule).
_got = cufile_mode(True, False, False, True, False, "tmpfs", False)
grading.check_true(_got in ("none", "compat", "gds", "fails"), "cufile_mode returns one of 'none', 'compat', "
                   "'gds', 'fails'", answer=_got, name="cufile_mode")
### BEGIN HIDDEN TESTS
import itertools

_wrong = []
for _lib, _nv, _p2p, _allow, _force, _od in itertools.product((True, False), repeat=6):
    for _fs in ("ext4", "xfs", "tmpfs", "overlay", "lustre", "nfs", "btrfs"):
        if not _lib:
            _w = "none"
        elif _force:
            _w = "compat"
        elif (_nv or _p2p) and _fs in {"ext4", "xfs", "nfs", "lustre", "gpfs", "wekafs", "beegfs"} and _od:
            _w = "gds"
        else:
            _w = "compat" if _allow else "fails"
        if cufile_mode(_lib, _nv, _p2p, _allow, _force, _fs, _od) != _w:
            _wrong.append((_lib, _nv, _p2p, _allow, _force, _fs, _od))
grading.check_true(not _wrong, f"cufile_mode is wrong on {len(_wrong)} made-up machines, e.g. {_wrong[:2]}",
                   answer=_got, name="cufile_mode")
### END HIDDEN TESTS

# %% [markdown] id="06-ex2-after"
# The package's own version of this rule (`gdrlab.hw.storage.expected_mode`, which `gdrlab doctor`
# prints as "cuFile mode") takes what it finds on the machine; the recorded H200 answers
# "compat" for the reason in section 2.

# %% [markdown] id="06-gin"
# ## 4. GPU-initiated networking, modelled and explained
#
# In lab 04 every message started on the CPU: a `cudaMemcpy` or a verbs post after the GPU was
# done. Libraries for fine-grained GPU work (NVSHMEM, and NCCL's device API from 2.28) let a CUDA
# kernel ask for a transfer in the middle of its work. Somebody must then write the NIC's work
# request and ring its doorbell:
#
# * **a CPU proxy thread** (NVSHMEM's IBRC transport, GIN's proxy backend): the kernel writes a
#   request into host-visible memory, a host thread polls for it and posts it with verbs. Every
#   message crosses PCIe twice before the NIC sees it, and one thread posts them all.
# * **the GPU itself** (NVSHMEM's IBGDA, GIN's GDAKI backend, UCX's GDAKI): the NIC's queues and
#   its doorbell register are mapped into GPU memory space, and GPU threads write work requests
#   and ring the doorbell. Many GPU threads can post at once, and no host thread is in the loop.
#
# Both need an RDMA NIC and GPUDirect RDMA for the data itself; only the control path changes.
# The package's model (`gdrlab.model.initiated`, `gdrlab model gpu-initiated`; docs/model.md) runs
# on the `hopper-ndr` profile, whose NIC and wire it reuses. A message rate is the smallest of the
# wire's rate for that size, the NIC's message rate and the posters' rate (how many post at once
# over the time one post takes). The NIC's message rate is a published figure; every other
# parameter is **assumed**, to show the shape, not measured (the table says which).

# %% id="06-gin-model"
display(lab06.initiated_param_table())
gin = lab06.proxy_model()
display(lab06.proxy_figure(gin))
_at = gin[gin["size"].isin([8, 4096, 1 << 20])]
print(_at.pivot(index="size", columns="initiator", values="limit"))
_r8 = _at[_at["size"] == 8].set_index("initiator")
print(f"8 B: CPU proxy {_r8.loc['CPU proxy', 'mops']:.0f} M msg/s (limit: {_r8.loc['CPU proxy', 'limit']}), "
      f"GPU-initiated {_r8.loc['GPU-initiated', 'mops']:.0f} M msg/s (limit: {_r8.loc['GPU-initiated', 'limit']}), "
      f"{_r8.loc['GPU-initiated', 'mops'] / _r8.loc['CPU proxy', 'mops']:.0f}x; one put's latency "
      f"{_r8.loc['CPU proxy', 'lat_us']:.2f} µs by the proxy, {_r8.loc['GPU-initiated', 'lat_us']:.2f} µs by the GPU")
for _who, _g in gin.groupby("initiator", sort=False):
    print(f"{_who}: the wire limits from {int(_g.loc[_g['limit'] == 'wire', 'size'].min())} B up")

# %% [markdown] id="06-gin-reading"
# With these parameters one proxy thread caps small messages at a few million per second; GPU
# threads posting their own raise the rate many times over, though at the smallest sizes their own
# posting is still the limit, not the NIC; the wire limits the GPU's rate from under 1 KiB and the
# proxy's from above 8 KiB. One message's latency goes the other way: a GPU thread writes a work
# request more slowly than a CPU thread, so the GPU's single put is slower.

# %% [markdown] id="06-gin-published"
# **Published, with its hardware:** NCCL's GIN paper (Hamidouche et al., "GPU-Initiated
# Networking for NCCL", NVIDIA, arXiv:2511.15076, 2025) reports 16.7 µs round-trip latency for
# small messages with the GDAKI backend, on H100 GPUs. Compare: lab 04's staging paths start
# each message with a copy launch of several µs on each side before the wire is touched.
#
# Which backend you got: NVSHMEM uses IBGDA when `NVSHMEM_IB_ENABLE_IBGDA=1` is set and the NIC
# and driver allow it; with NCCL, its `NCCL_DEBUG=INFO` log names the GIN backend each
# communicator got, and `gdrlab nccl parse` explains those lines. Below, eight lines of rank 0
# posted in NCCL issue #2397 (two RoCE NICs, no external GIN plugin; source in
# `gdrlab/data/nccl/plugins/README.md`): a published log, not a measurement of this kit.

# %% id="06-gin-log"
from gdrlab import nccl

gin_log = nccl.parse_log(nccl.plugin_logs()["nccl-issue-2397-gin-gdaki"].read_text())
for r in gin_log["summary"]["reasons"]:
    if r["source"] == "plugin":
        print(f"{r['message']}\n    -> {r['meaning']}")

# %% [markdown] id="06-ex3-intro"
# ## Exercise 3 (2 points): who limits the message rate?
#
# Write `message_rate_mops(size, link_gbps, nic_mops, post_us, posters)`: the messages per second,
# in millions, for messages of `size` bytes, when the link carries `link_gbps` GB/s, the NIC
# handles at most `nic_mops` million messages per second, and `posters` threads each take
# `post_us` µs to post one message (one CPU proxy thread: `posters = 1`; GPU threads: many).
# Graded on made-up NICs.

# %% id="ex3-rate" nbgrader={"grade": false, "grade_id": "ex3-rate", "locked": false, "schema_version": 3, "solution": true} gdrlab={"forbid": {"proxy_model": "is the lab's model: write your own", "proxy_figure": "draws the lab's model"}}
def message_rate_mops(size, link_gbps, nic_mops, post_us, posters):
    ### BEGIN SOLUTION
    return min(link_gbps * 1e3 / size, nic_mops, posters / post_us)
    ### END SOLUTION


# %% id="ex3-rate-tests" nbgrader={"grade": true, "grade_id": "ex3-rate-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Self-check on a made-up NIC: the rate cannot exceed the NIC's, and more posters never hurt.
_r1 = message_rate_mops(8, 10.0, 3.0, 1.0, 1)
grading.check_true(_r1 is not None and _r1 <= 3.0, "message_rate_mops never exceeds nic_mops", answer=_r1,
                   name="message_rate_mops")
grading.check_true(_r1 is None or message_rate_mops(8, 10.0, 3.0, 1.0, 4) >= _r1,
                   "more posters never lower the rate", answer=_r1, name="message_rate_mops")
### BEGIN HIDDEN TESTS
_rng3 = np.random.default_rng(63)
_cases = []
for _k in range(60):
    _s = int(2 ** _rng3.integers(0, 24))
    _l, _m = float(_rng3.uniform(1, 100)), float(_rng3.uniform(1, 500))
    _p, _n = float(_rng3.uniform(0.05, 5)), int(_rng3.integers(1, 512))
    _cases.append(((_s, _l, _m, _p, _n), min(_l * 1e3 / _s, _m, _n / _p)))
grading.check_function_cases(message_rate_mops, _cases, name="message_rate_mops", rel=1e-6)
### END HIDDEN TESTS

# %% [markdown] id="06-written-question" nbgrader={"grade": false, "grade_id": "06-written-question", "locked": true, "schema_version": 3, "solution": false}
# ## Written answer (3 points, graded by hand)
#
# A colleague writes: "Our new cluster has only TCP Ethernet between nodes, no RDMA NICs. Instead of
# GPUDirect RDMA we will use GPUDirect Storage and GPUDirect Async to move activations between the
# nodes' GPUs." In four to six sentences: what is wrong, what does each of the two actually move
# and need, and what will really carry GPU data between those nodes? Say what would have to be
# installed (and where, on the PCIe tree) for GPUDirect Storage to run without the bounce buffer on
# one of those nodes.

# %% [markdown] id="explain-siblings" nbgrader={"grade": true, "grade_id": "explain-siblings", "locked": false, "points": 3, "schema_version": 3, "solution": true}
# Neither sibling moves data between nodes over TCP. GPUDirect Storage moves a file's bytes between
# storage (a local NVMe drive, or a storage NIC for a network filesystem) and GPU memory within one
# node; GPU-initiated networking (GPUDirect Async: IBGDA, GIN, GDAKI) lets a GPU kernel write work
# requests and ring the doorbell of an RDMA NIC, so it needs an RDMA NIC and GPUDirect RDMA just as
# GPUDirect RDMA does; it only removes the CPU from the control path. On a TCP-only cluster GPU data
# between nodes is staged through host memory (cudaMemcpy, then sockets; pipelined, as NCCL's socket
# transport or an MPI library does). For GDS without the bounce buffer a node needs nvidia_fs loaded
# (or the kernel's P2PDMA enabled in cufile.json), a supported filesystem such as ext4/XFS on local
# NVMe opened with O_DIRECT, and ideally the drive and the GPU under one PCIe switch; otherwise
# cuFile runs in compatibility mode.

# %% [markdown] id="06-you-saw"
# ## What you saw
#
# * GPUDirect Storage is storage to GPU memory inside a node; GPU-initiated networking is the GPU
#   driving an RDMA NIC. Neither replaces an RDMA NIC between nodes: that was the seed's error.
# * cuFile's calls are the same in both of its modes; the mode is set by the machine (`nvidia_fs` or
#   P2PDMA, the filesystem, `O_DIRECT`, `cufile.json`), and `gdrlab doctor` says which. In compat
#   mode cuFile is a read through a host buffer plus a copy, like the `read()` paths beside it.
# * GDS proper pays off when the drive can feed the GPU peer to peer; in the model it is the fastest
#   of the four from a cold drive, and compat mode, paying the drive's latency per bounce-buffer
#   piece, the slowest. Across sockets the peer-to-peer rate eats the gain where it is slower than
#   the drive (`kepler-snb-2013` in the model; not one Gen4 drive on `h200-lab`), the placement
#   lesson of lab 05 again.
# * With a CPU proxy, one thread posting every message caps the small-message rate; GPU threads
#   posting their own raise it many times over (section 4 printed by how much at 8 B), still
#   limited by their own posting at the smallest sizes and by the wire from under 1 KiB; one
#   message's latency is a little higher from the GPU.

# %% [markdown] id="06-on-your-cluster"
# ## On your cluster
#
# ```
# lsmod | grep nvidia_fs                                   # GDS's kernel module loaded?
# /usr/local/cuda/gds/tools/gdscheck -p                    # what cuFile supports here, and its settings
# nvidia-smi topo -m                                       # GPU rows; NVMe drives are not in it:
# lspci -tv                                                # find the drive's switch and the GPU's
# /usr/local/cuda/gds/tools/gdsio -f /mnt/nvme/f -d 0 -w 4 -s 1G -i 1M -x 0 -I 0   # GDS read
# /usr/local/cuda/gds/tools/gdsio -f /mnt/nvme/f -d 0 -w 4 -s 1G -i 1M -x 2 -I 0   # CPU + copy
# python3 bench/record_storage.py OUT                      # this lab's three reads, recorded
# ib_write_bw -d mlx5_0 --use_cuda=0 -s 8 -n 100000       # small-message rate from GPU memory
# ```
#
# What to look for:
#
# - `gdscheck -p`: the "NVMe" line says whether local NVMe is supported by GDS proper or only
#   through compat; the `properties.*` lines are the settings cuFile uses.
# - `gdsio` with `-x 0` (GPUDirect) against `-x 2` (CPU, then a copy to the GPU): the gap is what the
#   bounce buffer costs on that node; run it with the drive under the GPU's switch and on the
#   other socket.
# - `ib_write_bw` with tiny messages gives a message rate with the CPU posting; compare it with what
#   NVSHMEM's perftests report with `NVSHMEM_IB_ENABLE_IBGDA=1`.
#
# Two-node runs with gdrlab, and what each failure message means:
# [docs/cluster.md](../docs/cluster.md); all the commands on one page:
# [docs/cheatsheet.md](../docs/cheatsheet.md) (both in the `docs/` folder that `gdrlab lab` puts
# beside your copies of the labs, and in the gdrlab repository's `docs/`).
