"""GPU memory for an HCA: the dma-buf export (needs a GPU) and, where an HCA exists too,
registration through dma-buf or nvidia-peermem and the verbs wire's paths over a real queue pair.

Every test skips with the precise reason on machines without the hardware it needs (the gpu and
rdma markers, tests/conftest.py).
"""
from __future__ import annotations

import errno
import os

import pytest

from gdrlab.engine import Buffer, export_dmabuf
from gdrlab.errors import Unavailable, VerbsError


@pytest.mark.gpu
def test_dmabuf_export_of_gpu_memory():
    import gdrlab.verbs as gv
    size = 4 << 20
    buf = Buffer(size, "device")
    before = gv.bar1_usage(0)
    try:
        d = export_dmabuf(buf)
    except Unavailable as exc:
        pytest.skip(f"dma-buf export unavailable on this GPU/driver: {exc}")
    after = gv.bar1_usage(0)
    try:
        assert d.fd >= 0
        assert "dmabuf" in os.readlink(f"/proc/self/fd/{d.fd}"), "the fd is not a dma-buf"
        assert d.size == size, "cuMemAlloc returns 2 MiB-aligned memory: the export covers exactly the buffer"
        # dma-buf is for device importers: the CPU may not map GPU memory through it.
        assert d.cpu_mmap_errno != 0
        assert d.cpu_mmap_errno in (errno.EINVAL, errno.ENODEV, errno.EPERM, errno.EACCES, errno.ENOTSUP, 524)
        if before["used_bytes"] is not None:
            assert before["total_bytes"] > 0 and after["total_bytes"] == before["total_bytes"]
            assert 0 <= before["used_bytes"] <= before["total_bytes"]
            assert 0 <= after["used_bytes"] <= after["total_bytes"]
            print(f"BAR1 used before export {before['used_bytes']}, after {after['used_bytes']} "
                  f"of {before['total_bytes']} bytes")
        else:
            print("BAR1 not measured:", before["reason"])
    finally:
        fd = d.fd
        d.close()
    with pytest.raises(OSError):
        os.fstat(fd)


@pytest.mark.gpu
@pytest.mark.rdma
def test_gpu_registration_through_dmabuf_or_peermem():
    import gdrlab.verbs as gv
    pm = gv.peer_memory_status()
    buf = Buffer(8 << 20, "device")
    with gv.Device() as dev, dev.alloc_pd() as pd:
        try:
            mr = pd.reg_gpu(buf)
        except Unavailable as exc:
            pytest.skip(f"GPU memory cannot be registered here: {exc}")
        assert mr.mechanism in ("dmabuf", "peermem")
        if mr.mechanism == "peermem":
            assert pm["peer_memory_loaded"] and mr.fallback_reason
        assert mr.length == buf.size and mr.address == buf.address and mr.reg_us > 0
        mr.close()
        if not pm["peer_memory_loaded"]:
            # Without a peer-memory client, ibv_reg_mr cannot pin GPU pages.
            with pytest.raises(VerbsError) as ei:
                pd.reg_mr(buf)
            assert ei.value.errno == errno.EFAULT and "nvidia_peermem" in str(ei.value)


@pytest.mark.gpu
@pytest.mark.rdma
def test_registration_cost_of_gpu_memory():
    import gdrlab.verbs as gv
    try:
        df = gv.registration_cost("64K,16M", memory="device", repeats=3)
    except Unavailable as exc:
        pytest.skip(f"GPU memory cannot be registered here: {exc}")
    assert list(df["size"]) == [65536, 16 << 20]
    assert set(df["mechanism"]) <= {"dmabuf", "peermem"}
    assert (df["reg_us_p50"] > 0).all()


@pytest.mark.rdma
def test_host_path_over_a_real_queue_pair():
    from gdrlab.engine import bench
    for local_peer in ("process", "thread"):
        df = bench(path="host", sizes="8,64K", iters=50, wire="verbs", local_peer=local_peer)
        assert df["verified"].all()
        assert df.attrs["provenance"]["registration"] == "host"
        assert df.attrs["provenance"]["peer"] == f"local {local_peer}"


@pytest.mark.gpu
@pytest.mark.rdma
@pytest.mark.parametrize("path", ["gdr", "staged", "shared", "pipelined"])
def test_gpu_paths_over_a_real_queue_pair(path):
    from gdrlab.engine import bench
    try:
        df = bench(path=path, sizes="8,1M", iters=20, chunk=256 * 1024, depth=4, wire="verbs")
    except Unavailable as exc:
        pytest.skip(f"{path} over verbs unavailable: {exc}")
    assert df["verified"].all()
    if path == "gdr":
        assert df.attrs["provenance"]["registration"] in ("dmabuf", "peermem")
