"""The engine's GPU paths. These run on a machine with an NVIDIA GPU and skip elsewhere."""
import os

import numpy as np
import pytest

import gdrlab
from gdrlab import engine, errors

pytestmark = pytest.mark.gpu
nat = engine.native()


def test_gpus_reported_with_gpudirect_attributes():
    infos = engine.gpus()
    assert infos, "CUDA usable but no GPU listed"
    g = infos[0]
    assert g["name"] and g["pci_bus_id"].count(":") == 2
    assert isinstance(g["gdr_supported"], bool) and isinstance(g["dmabuf_supported"], bool)
    assert g["total_mem_bytes"] > 1 << 30


def test_device_pattern_roundtrip_and_detection():
    buf = engine.Buffer(3 * (8 << 20) + 5, "device")  # more than one 8 MiB slice, odd tail
    buf.fill_pattern(11)
    assert buf.check_pattern(11) == -1
    assert buf.check_pattern(12) >= 0
    # Overwrite 3 bytes in the middle of the second slice from a host buffer.
    conn_off = (8 << 20) + 17
    nat_buf = buf._b
    # Corrupt one byte behind the engine's back, through CuPy.
    cupy = pytest.importorskip("cupy")
    arr = cupy.ndarray((buf.size,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(
        cupy.cuda.UnownedMemory(buf.address, buf.size, nat_buf), 0))
    expected_byte = int(arr[conn_off].get())
    arr[conn_off] = (expected_byte + 1) % 256
    cupy.cuda.Device().synchronize()
    assert buf.check_pattern(11) == conn_off


@pytest.mark.parametrize("path", ["staged", "shared", "pipelined"])
def test_gpu_paths_verified(path):
    df = gdrlab.bench(path=path, sizes=[1, 4097, (1 << 20) + 3, 16 << 20], iters=5, chunk=256 << 10, depth=3)
    assert df["verified"].all()
    assert (df["bw_gbps"] > 0).all() and (df["lat_p50_us"] > 0).all()


@pytest.mark.parametrize("chunk,depth", [(4096, 1), (4097, 2), (1 << 20, 8), (64 << 20, 4)])
def test_pipelined_chunking(chunk, depth):
    df = gdrlab.bench(path="pipelined", sizes=[(3 << 20) + 7], iters=3, chunk=chunk, depth=depth)
    assert bool(df["verified"].iloc[0])


def test_a_pipelined_chunk_below_4_kib_is_refused_on_the_gpu():
    with pytest.raises(gdrlab.errors.InvalidArgument, match="at least 4096 bytes"):
        gdrlab.bench(path="pipelined", sizes=[1 << 20], iters=3, chunk=1000)


def test_random_sizes_offsets_on_gpu_paths():
    rng = np.random.default_rng(1)
    dev = engine.Buffer(8 << 20, "device")
    with engine.LocalPeer() as peer, engine.Connection("127.0.0.1", peer.port, peer.token) as conn:
        for _ in range(60):
            path = ["staged", "shared", "pipelined"][rng.integers(3)]
            off = int(rng.integers(0, 4096))
            size = int(rng.integers(1, (8 << 20) - off))
            assert conn.transfer(dev, path, size=size, offset=off, chunk=int(rng.integers(1, 1 << 20)),
                                 depth=int(rng.integers(1, 6)))


def test_wrong_memory_kinds_rejected():
    host = engine.Buffer(4096, "pageable")
    dev = engine.Buffer(4096, "device")
    with engine.LocalPeer() as peer, engine.Connection("127.0.0.1", peer.port, peer.token) as conn:
        with pytest.raises(errors.InvalidArgument, match="moves GPU memory"):
            conn.transfer(host, "staged")
        with pytest.raises(errors.InvalidArgument, match="is GPU memory"):
            conn.transfer(dev, "host")
        # The connection is still usable after the refusals.
        assert conn.transfer(dev, "shared")


def test_wrap_host_pointer_as_device_refused():
    arr = np.zeros(4096, dtype=np.uint8)
    with pytest.raises(errors.InvalidArgument, match="not GPU memory"):
        nat.Buffer.wrap("device", arr.ctypes.data, arr.nbytes, 0, False)


def test_cupy_array_in_without_copy():
    cupy = pytest.importorskip("cupy")
    a = cupy.zeros(1 << 20, dtype=cupy.uint8)
    buf = engine.Buffer.from_array(a)
    assert buf.kind == "device" and buf.address == a.data.ptr
    buf.fill_pattern(5)
    assert cupy.asnumpy(a).tobytes() == nat.pattern_bytes(5, 1 << 20)
    b = cupy.asarray(buf)  # __cuda_array_interface__ out
    assert int(b.data.ptr) == buf.address


def test_copy_bench_rows():
    df = gdrlab.copy_bench("h2d", "8,1M,64M", memory="pinned")
    assert list(df["size"]) == [8, 1 << 20, 64 << 20]
    assert (df["bw_gbps"] > 0).all()
    assert df["bw_gbps"].iloc[2] > df["bw_gbps"].iloc[0]  # 64 MiB moves more bytes per second than 8 B


def test_dmabuf_export_cpu_cannot_map():
    if not engine.gpus()[0]["dmabuf_supported"]:
        pytest.skip("GPU reports DMA_BUF_SUPPORTED = 0")
    buf = engine.Buffer(64 << 20, "device")
    d = engine.export_dmabuf(buf)
    try:
        assert d.fd >= 0
        assert d.size >= 64 << 20
        assert d.cpu_mmap_errno != 0, "the CPU mapped a dma-buf of GPU memory"
    finally:
        d.close()
    with pytest.raises(errors.InvalidArgument):
        engine.export_dmabuf(engine.Buffer(4096, "pageable"))


def test_no_leak_over_1000_cycles():
    base_dev, base_pin = nat.live_device_bytes(), nat.live_pinned_bytes()
    free0 = None
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        free0 = pynvml.nvmlDeviceGetMemoryInfo(h).used
    except Exception:
        pynvml = None
    for _ in range(1000):
        d = engine.Buffer(1 << 20, "device")
        p = engine.Buffer(1 << 16, "pinned")
        del d, p
    assert nat.live_device_bytes() == base_dev and nat.live_pinned_bytes() == base_pin
    if pynvml is not None:
        used = pynvml.nvmlDeviceGetMemoryInfo(h).used
        assert used - free0 < 64 << 20, f"GPU memory in use grew by {used - free0} bytes"


def test_p2p_needs_two_gpus():
    n = len(engine.gpus())
    if n >= 2:
        df = gdrlab.engine.p2p_bench(0, 1, "8,64M", peer_access=True)
        assert (df["bw_gbps"] > 0).all()
    else:
        with pytest.raises(errors.Unavailable, match=f"has {n}"):
            gdrlab.engine.p2p_bench(0, 1, "8")


def test_device_out_of_range():
    with pytest.raises(errors.Unavailable, match="does not exist"):
        engine.Buffer(4096, "device", device=99)
