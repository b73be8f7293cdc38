"""On two real GPUs: every peer measures on the GPU it is asked for (the checks one GPU cannot make).

``bench(device=1)`` must put both sides' GPU buffers on GPU 1, through the thread peer, the
process peer and MPI rank 1; ``serve --device 1`` serves GPU tests on GPU 1 under its
``--max-gpu-mem`` budget; a PyTorch tensor on ``cuda:1`` becomes a buffer on GPU 1 and a
mismatch is one clear error. Where the bytes went is read from NVML, device-wide: each test
sizes its buffers (1 GiB per side) well above what a CUDA context costs, and compares the peak
of used memory on each GPU during the run with its level before.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from conftest import TIME_SCALE

pytestmark = [pytest.mark.multigpu, pytest.mark.timeout(int(600 * TIME_SCALE))]
GiB = 1 << 30
SIZE = 1 * GiB


@contextmanager
def _peaks(interval_s: float = 0.01) -> Iterator[dict[int, int]]:
    """{GPU index: peak used bytes above the level at entry}, filled in when the block ends."""
    pynvml = pytest.importorskip("pynvml")
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    base = [pynvml.nvmlDeviceGetMemoryInfo(h).used for h in handles]
    peak = list(base)
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            for i, h in enumerate(handles):
                peak[i] = max(peak[i], pynvml.nvmlDeviceGetMemoryInfo(h).used)
            done.wait(interval_s)

    out: dict[int, int] = {}
    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        done.set()
        thread.join()
        out.update({i: peak[i] - base[i] for i in range(2)})
        pynvml.nvmlShutdown()


def _on_gpu1(rise: dict[int, int], sides: int, size: int = SIZE) -> None:
    """Both sides' buffers on GPU 1: it rose by at least their bytes; GPU 0 by less than half as
    much (a CUDA context, at most; one side's buffer there would make the two rises alike)."""
    print(f"used memory rose by GPU 0: {rise[0] / 2**20:.0f} MiB, GPU 1: {rise[1] / 2**20:.0f} MiB")
    assert rise[1] >= sides * size * 0.9, f"GPU 1 rose by {rise[1] / GiB:.2f} GiB, {sides} x {size / GiB:.2f} GiB expected: {rise}"
    assert rise[0] < rise[1] / 2, f"GPU 0 rose by {rise[0] / GiB:.2f} GiB: a side measured there: {rise}"


@pytest.mark.parametrize("local_peer", ["thread", "process"])
def test_bench_on_device_1_keeps_both_sides_on_gpu_1(local_peer):
    import gdrlab

    with _peaks() as rise:
        df = gdrlab.bench(path="staged", sizes=[SIZE], iters=2, warmup=0, mode="bw", device=1,
                          local_peer=local_peer)
    assert bool(df["verified"].all()), df
    _on_gpu1(rise, sides=2)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun on this machine")
def test_mpi_rank_1_serves_on_the_device_asked_for():
    pytest.importorskip("mpi4py")
    flags = ["--allow-run-as-root", "--oversubscribe"] if "Open MPI" in subprocess.run(
        ["mpirun", "--version"], capture_output=True, text=True, check=False).stdout else []
    with _peaks() as rise:
        proc = subprocess.run(["mpirun", *flags, "-n", "2", sys.executable, "-m", "gdrlab", "bench", "--mpi",
                               "--path", "staged", "--sizes", "1G", "--iters", "2", "--mode", "bw", "--device", "1",
                               "--json"], capture_output=True, text=True, timeout=300 * TIME_SCALE, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    rows = doc["rows"]
    assert rows and all(r["verified"] for r in rows), doc
    _on_gpu1(rise, sides=2)


def _serve(*args: str) -> tuple[subprocess.Popen, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "GDRLAB_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "gdrlab", "serve", "--listen", "127.0.0.1:0", "--announce",
                             "--token", "multigpu-test-token-0123", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=dict(env, PYTHONUNBUFFERED="1"))
    ready, _, _ = select.select([proc.stdout], [], [], 60 * TIME_SCALE)
    if not ready:
        proc.kill()
        pytest.fail("serve did not announce its port")
    return proc, json.loads(proc.stdout.readline())


def test_serve_device_1_serves_gpu_tests_on_gpu_1_within_its_budget():
    from gdrlab import engine
    from gdrlab.errors import Unavailable

    proc, doc = _serve("--device", "1", "--max-gpu-mem", "1000M")
    try:
        with engine.Connection("127.0.0.1", doc["port"], "multigpu-test-token-0123", timeout_s=60) as conn:
            with pytest.raises(Unavailable, match=r"--max-gpu-mem"):
                conn.run("staged", SIZE, mode="bw", iters=1, warmup=0, device=1)
            with _peaks() as rise:
                verified = conn.run("staged", 768 << 20, mode="bw", iters=2, warmup=0, device=1)[2]
        assert verified
        _on_gpu1(rise, sides=2, size=768 << 20)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_a_torch_tensor_on_cuda_1_is_a_buffer_on_gpu_1_and_a_mismatch_is_one_line():
    torch = pytest.importorskip("torch")
    from gdrlab.errors import InvalidArgument
    from gdrlab.transfer.buffers import Buffer

    t = torch.arange(1 << 20, dtype=torch.int32, device="cuda:1")
    buf = Buffer.from_array(t)
    assert buf.kind == "device" and buf.device == 1
    back = torch.from_dlpack(buf)  # the engine's buffers are bytes: the same memory, seen as uint8
    assert back.device == torch.device("cuda:1") and bool(torch.equal(back.view(torch.int32), t))
    with pytest.raises(InvalidArgument, match=r"array is on cuda:1 but the buffer was asked for GPU 0"):
        Buffer.from_array(t, device=0)

