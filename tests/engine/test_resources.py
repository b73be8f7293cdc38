"""Resources stay flat: file descriptors, locked memory, resident memory and (GPU) pinned and
device bytes over many create/destroy cycles; an interrupted sweep stops cleanly, leaves gdrlab
usable and leaves no ``gdrlab serve`` process behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import TIME_SCALE, UNDER_ASAN, child_processes, count_fds, read_vmlck_kb, wait_until
from gdrlab import engine

pytestmark = pytest.mark.timeout(300)
CYCLES = 1000
MIB = 1 << 20


def _rss_kb(pid="self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _serve_children(pid: int | None = None) -> list[tuple[int, str, str]]:
    return [c for c in child_processes(pid) if "gdrlab" in c[2] and " serve" in c[2]]


# --------------------------------------------------------------------------- host cycles
def test_connections_and_buffers_cycle_without_growth(native_server):
    """1,000 connections (each running a verified transfer) and 1,000 touched 1 MiB buffers."""
    def one_cycle(i: int) -> None:
        with engine.Connection("127.0.0.1", native_server.port, native_server.token, timeout_s=5) as c:
            buf = engine.Buffer(MIB)
            buf.fill_pattern(i)  # touch every page: a leaked buffer would show in RSS
            assert c.transfer(buf, "host", size=1 + i % 4096, offset=i % 512)
            arr = np.empty(4096 + 3, np.uint8)
            assert engine.Buffer.from_array(arr[3:]).size == 4096

    for i in range(20):  # warm-up: first allocations, import-time caches
        one_cycle(i)
    fds0, lck0, rss0 = count_fds(), read_vmlck_kb(), _rss_kb()
    for i in range(CYCLES):
        one_cycle(i)
    # the server thread closes the last socket just after its session: wait for it, then measure
    wait_until(lambda: count_fds() <= fds0, 10, f"the fd count to come back to {fds0}")
    fds1, lck1, rss1 = count_fds(), read_vmlck_kb(), _rss_kb()
    assert fds1 <= fds0, f"fd count grew from {fds0} to {fds1} over {CYCLES} cycles"
    assert lck1 <= lck0, f"VmLck grew from {lck0} to {lck1} KiB"
    # 1,000 leaked 1 MiB buffers would be ~1 GiB; allow allocator slack (and, under ASan, its
    # 256 MiB quarantine of freed blocks).
    slack_kb = (64 + (320 if UNDER_ASAN else 0)) * 1024
    assert (rss1 - rss0) < slack_kb, f"RSS grew by {(rss1 - rss0) / 1024:.0f} MiB over {CYCLES} cycles"
    assert not native_server.errors, native_server.errors[:3]


def test_serve_process_fds_flat_over_many_clients(serve_process):
    def one():
        with engine.Connection("127.0.0.1", serve_process.port, serve_process.token, timeout_s=5) as c:
            c.run("host", 512, iters=2, warmup=0)

    for _ in range(5):
        one()
    time.sleep(0.2)
    before = serve_process.fd_count()
    for _ in range(300):
        one()
    deadline = time.monotonic() + 3
    while serve_process.fd_count() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert serve_process.fd_count() <= before


# --------------------------------------------------------------------------- interrupts
def _interrupt_checks(before_children: list) -> None:
    # LocalPeer.stop waits for (reaps) its process: no child serve, running or zombie, remains.
    left = [c for c in _serve_children() if c not in before_children]
    assert not left, f"gdrlab serve children left behind: {left}"
    df = engine.bench("host", sizes="8,4K", iters=5)  # gdrlab is still usable
    assert list(df["size"]) == [8, 4096] and df["verified"].all()
    assert not [c for c in _serve_children() if c not in before_children]


def test_keyboard_interrupt_from_progress_callback_stops_sweep_cleanly():
    before = _serve_children()
    calls = []

    def progress(done, total, row):
        calls.append(done)
        raise KeyboardInterrupt

    fds0 = count_fds()
    with pytest.raises(KeyboardInterrupt):
        engine.bench("host", sizes="8,64K,1M", iters=3, progress=progress)
    assert calls == [1], "the sweep went on after the interrupt"
    assert count_fds() <= fds0
    _interrupt_checks(before)


def test_sigint_during_sweep_stops_it_cleanly():
    """SIGINT (what Ctrl-C or a notebook's interrupt sends) arriving mid-sweep, from another
    process, while this one is inside the engine's timing loop."""
    _assert_sigint_deliverable()
    before = _serve_children()
    killer: list[subprocess.Popen] = []

    def progress(done, total, row):
        if not killer:  # arm only once the sweep is under way, so the signal lands inside it
            killer.append(subprocess.Popen(["sh", "-c", f"sleep 0.2; kill -INT {os.getpid()}"]))

    t0 = time.monotonic()
    in_bench = False
    try:
        try:
            engine.bench("host", sizes="8,1M,2M,4M,8M,16M,32M", iters=300, mode="lat", progress=progress)
        except KeyboardInterrupt:
            in_bench = True
        finally:
            for k in killer:
                k.wait()  # a late signal is raised here, inside the outer try
    except KeyboardInterrupt:
        pass
    assert killer, "the sweep never reported progress"
    assert in_bench, "the sweep finished before the interrupt arrived; make it longer"
    assert time.monotonic() - t0 < 60 * TIME_SCALE
    _interrupt_checks(before)


@pytest.mark.parametrize("to_group", [False, True], ids=["bench-only", "process-group"])
def test_cli_bench_interrupted_exits_130_and_stops_its_peer(to_group):
    """Ctrl-C in a terminal signals the whole process group (the local peer too); a notebook
    interrupt signals only the kernel. Both must end with exit 130 and no serve left running."""
    _assert_sigint_deliverable()
    p = subprocess.Popen([sys.executable, "-m", "gdrlab", "bench", "--sizes", "8,1M,4M,16M,32M", "--iters", "400",
                          "--mode", "lat"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        first = p.stderr.readline().decode()  # "[1/5] ..." once the sweep is under way
        assert first.startswith("[1/"), first
        peers = [pid for pid, _, _ in _serve_children(p.pid)]
        assert len(peers) == 1, f"expected one local peer, found {peers}"
        if to_group:
            os.killpg(p.pid, signal.SIGINT)
        else:
            p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=30 * TIME_SCALE)
        err = p.stderr.read().decode()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()
    assert rc == 130, (rc, err)
    assert "Traceback" not in err, err
    assert "interrupted" in err
    deadline = time.monotonic() + 10 * TIME_SCALE
    while time.monotonic() < deadline and any(_alive(pid) for pid in peers):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in peers), f"local peer {peers} still running after the interrupt"


def _sig_mask_field(name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1], 16)
    return 0


def _assert_sigint_deliverable() -> None:
    """Precondition: nothing earlier in this process blocked or ignored SIGINT (a child would
    inherit that and never see Ctrl-C)."""
    bit = 1 << (signal.SIGINT - 1)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, signal.getsignal(signal.SIGINT)
    assert not _sig_mask_field("SigBlk") & bit, "SIGINT is blocked in this thread"
    assert not _sig_mask_field("SigIgn") & bit, "SIGINT is ignored by this process"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# --------------------------------------------------------------------------- GPU
def _nvml_used_bytes(index: int = 0) -> int | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        return int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
    except Exception:  # noqa: BLE001 - NVML may be missing even where CUDA works
        return None


@pytest.mark.gpu
def test_gpu_buffers_cycle_without_growth(gpu):
    nat = engine.native()
    for _ in range(5):
        engine.Buffer(MIB, kind="pinned")
        engine.Buffer(MIB, kind="device")
    nat.release_kept_buffers()
    pin0, dev0, lck0, nvml0 = nat.live_pinned_bytes(), nat.live_device_bytes(), read_vmlck_kb(), _nvml_used_bytes()
    for i in range(CYCLES):
        p = engine.Buffer(MIB + i, kind="pinned")
        d = engine.Buffer(MIB + i, kind="device")
        assert nat.live_pinned_bytes() == pin0 + MIB + i and nat.live_device_bytes() == dev0 + MIB + i
        del p, d
    assert nat.live_pinned_bytes() == pin0 and nat.live_device_bytes() == dev0
    nat.release_kept_buffers()  # freed pinned blocks kept for reuse are locked by design: unlock them
    assert nat.kept_pinned_bytes() == 0
    assert read_vmlck_kb() <= lck0 + 1024
    nvml1 = _nvml_used_bytes()
    if nvml0 is not None and nvml1 is not None:
        assert nvml1 - nvml0 < 64 * MIB, f"NVML used memory grew by {(nvml1 - nvml0) / MIB:.0f} MiB"


@pytest.mark.gpu
def test_gpu_registered_host_arrays_cycle(gpu):
    lck0 = read_vmlck_kb()
    for _ in range(200):
        arr = np.zeros(MIB, np.uint8)
        b = engine.Buffer.from_array(arr, pin=True)
        assert b.kind == "pinned"
        del b, arr
    assert read_vmlck_kb() <= lck0 + 1024


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["staged", "shared", "pipelined"])
def test_gpu_path_connections_cycle(gpu, native_server, path):
    nat = engine.native()
    dev = engine.Buffer(4 * MIB, kind="device")
    with engine.Connection("127.0.0.1", native_server.port, native_server.token, timeout_s=10) as c:
        c.transfer(dev, path)
    # the server's side of the warm-up session frees its buffers just after the client returns
    wait_until(lambda: nat.live_pinned_bytes() == 0, 10, "the warm-up session's pinned buffers to be freed")
    nat.release_kept_buffers()
    pin0, dev0, fds0, lck0 = nat.live_pinned_bytes(), nat.live_device_bytes(), count_fds(), read_vmlck_kb()
    for i in range(200):
        with engine.Connection("127.0.0.1", native_server.port, native_server.token, timeout_s=10) as c:
            assert c.transfer(dev, path, size=1 + (i * 7919) % (4 * MIB))
    # the server's side of the last session closes its socket and frees its buffers just after it
    wait_until(lambda: nat.live_pinned_bytes() == pin0 and nat.live_device_bytes() == dev0 and count_fds() <= fds0,
               10, "pinned and device bytes and descriptors back where they were (a path endpoint leaked them otherwise)")
    nat.release_kept_buffers()  # the staging blocks kept for the next test of their size
    assert read_vmlck_kb() <= lck0 + 1024


def test_large_pageable_blocks_are_kept_for_the_next_buffer_and_zeroed():
    """A sweep allocates the same large sizes test after test: a freed pageable block of 1 MiB and
    more is handed to the next buffer of its size, so touching it faults no fresh page in; it is
    zeroed, so the last test's pattern cannot pass for a message that never arrived. Not under
    ASan (nothing is kept there) and not with GDRLAB_KEEP_PAGEABLE=0."""
    import ctypes
    import resource

    nat = engine.native()
    size = 48 * MIB + 4096  # a size no other test allocates: the first block is a fresh one

    def faults_to_fill(seed: int):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        buf = nat.Buffer("pageable", size)
        buf.fill_pattern(seed, 0, size)
        return buf, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    a, fresh = faults_to_fill(7)
    assert a.check_pattern(7, 0, size) == -1
    del a
    b = nat.Buffer("pageable", size)
    assert ctypes.string_at(b.address + size // 2, MIB) == bytes(MIB)
    assert ctypes.string_at(b.address + size - 4096, 4096) == bytes(4096)
    assert b.check_pattern(7, 0, size) != -1, "the previous buffer's pattern is still there"
    del b
    _, reused = faults_to_fill(8)
    if fresh < size // 4096 // 4:
        pytest.skip(f"filling a fresh {size >> 20} MiB block faulted only {fresh} pages in (huge pages): "
                    "reuse is not visible in fault counts here")
    if UNDER_ASAN or os.environ.get("GDRLAB_KEEP_PAGEABLE") == "0":
        assert reused > size // 4096 // 2, f"a block was kept although keeping is off ({reused} faults)"
    else:
        assert reused < fresh / 8, f"the freed block was not reused: {reused} faults, {fresh} for a fresh one"
