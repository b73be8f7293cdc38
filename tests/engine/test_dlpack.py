"""DLPack in and out of engine buffers, and which device an array handed in is on.

Device type codes are DLPack's (dlpack.h): kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLROCM = 10.
"""
import gc
import re
import shutil
import subprocess
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
from standins import FAKE_SRC, _required_symbols, run_with_fake_cuda

from gdrlab import engine
from gdrlab.errors import InvalidArgument, Unavailable
from gdrlab.transfer import buffers

KDLCPU, KDLCUDA, KDLCUDAHOST, KDLROCM = 1, 2, 3, 10


class Stub:
    """An array-like that says where it is through DLPack and optionally records a device and
    exposes a CUDA array interface; it has no memory of its own."""

    def __init__(self, dl_device=None, cai=None, device=None):
        if dl_device is not None:
            self.__dlpack_device__ = lambda: dl_device
        if cai is not None:
            self.__cuda_array_interface__ = cai
        if device is not None:
            self.device = device


class DLPackOnly:
    """Wraps a numpy array but exposes nothing except the two DLPack methods."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, **kwargs):
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


@pytest.fixture
def no_engine(monkeypatch):
    """Any call into the compiled engine (and so into CUDA) fails the test."""
    def refuse():
        raise AssertionError("the engine was called")
    monkeypatch.setattr(buffers, "native", refuse)


@pytest.fixture
def fake_engine(monkeypatch):
    """An engine whose wrap records its arguments and whose CUDA is missing."""
    calls = []

    def pointer_device(address):
        raise Unavailable("libcuda.so.1 is not installed")

    fake = SimpleNamespace(Buffer=SimpleNamespace(wrap=lambda *a: calls.append(a) or "wrapped"),
                           pointer_device=pointer_device)
    monkeypatch.setattr(buffers, "native", lambda: fake)
    return calls


def cai_of(address, nbytes):
    return {"shape": (nbytes,), "typestr": "|u1", "data": (address, False), "version": 3, "strides": None}


# --------------------------------------------------------------------------- host buffers out
def test_host_buffer_is_kdlcpu_and_numpy_view_shares_memory():
    buf = engine.Buffer(4096)
    assert buf.__dlpack_device__() == (KDLCPU, 0)
    view = np.from_dlpack(buf)
    assert view.shape == (4096,) and view.dtype == np.uint8
    assert view.ctypes.data == buf.address
    buf.fill_pattern(7)
    assert bytes(view) == engine.native().pattern_bytes(7, 4096)
    view[100] ^= 0xFF  # written through numpy, seen by the engine
    assert buf.check_pattern(7) == 100


def test_dlpack_view_keeps_the_buffer_alive():
    buf = engine.Buffer(64)
    alive = weakref.ref(buf)
    view = np.from_dlpack(buf)
    del buf
    gc.collect()
    assert alive() is not None
    view[:] = 3  # memory still owned by the live buffer
    del view
    gc.collect()
    assert alive() is None


def test_dlpack_refuses_copy_and_another_device():
    buf = engine.Buffer(64)
    with pytest.raises(BufferError):
        buf.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        buf.__dlpack__(dl_device=(KDLCUDA, 0))
    asks_for_cpu = SimpleNamespace(__dlpack__=lambda **kw: buf.__dlpack__(dl_device=(KDLCPU, 0), stream=None),
                                   __dlpack_device__=buf.__dlpack_device__)
    assert np.from_dlpack(asks_for_cpu).ctypes.data == buf.address


# --------------------------------------------------------------------------- arrays in
def test_numpy_round_trip_through_from_array_and_dlpack():
    arr = np.zeros(1000, np.uint8)
    buf = engine.Buffer.from_array(arr)
    assert (buf.kind, buf.size, buf.address) == ("pageable", 1000, arr.ctypes.data)
    back = np.from_dlpack(buf)
    assert np.shares_memory(back, arr)
    back[10] = 42
    assert arr[10] == 42
    arr[11] = 43
    assert back[11] == 43


def test_object_with_only_dlpack_methods_is_wrapped_in_place():
    arr = np.arange(256, dtype=np.float32)
    buf = engine.Buffer.from_array(DLPackOnly(arr))
    assert (buf.kind, buf.size, buf.address) == ("pageable", arr.nbytes, arr.ctypes.data)
    buf.fill_pattern(9)
    assert arr.tobytes() == engine.native().pattern_bytes(9, arr.nbytes)


def test_read_only_and_non_contiguous_arrays_are_refused():
    ro = np.zeros(64, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(InvalidArgument, match="read-only"):
        engine.Buffer.from_array(ro)
    with pytest.raises(InvalidArgument, match="C-contiguous"):
        engine.Buffer.from_array(DLPackOnly(np.zeros((8, 8), np.uint8)[:, ::2]))
    with pytest.raises(InvalidArgument, match="empty"):
        engine.Buffer.from_array(DLPackOnly(np.zeros(0, np.uint8)))


# --------------------------------------------------------------------------- devices, on any machine
def test_cuda_1_array_asked_for_gpu_0_is_a_clear_error_without_cuda(no_engine):
    with pytest.raises(InvalidArgument) as err:
        engine.Buffer.from_array(Stub(dl_device=(KDLCUDA, 1)), device=0)
    assert str(err.value) == "array is on cuda:1 but the buffer was asked for GPU 0"


@pytest.mark.parametrize("dl_device,where", [((99, 0), "an unknown DLPack device type 99"),
                                             ((KDLROCM, 2), "rocm:2")])
def test_device_the_engine_cannot_move_is_a_clear_error(no_engine, dl_device, where):
    with pytest.raises(InvalidArgument, match=f"^array is on {where}; gdrlab moves CPU and CUDA memory only$"):
        engine.Buffer.from_array(Stub(dl_device=dl_device))


def test_dlpack_device_disagreeing_with_recorded_device_is_an_error(no_engine):
    torch_like = SimpleNamespace(type="cuda", index=0)
    with pytest.raises(InvalidArgument, match="on cuda:1 but its .device says GPU 0"):
        engine.Buffer.from_array(Stub(dl_device=(KDLCUDA, 1), device=torch_like))


@pytest.mark.parametrize("got", [("cuda", 1), 2, (2,)])
def test_malformed_dlpack_device_is_a_clear_error(no_engine, got):
    with pytest.raises(InvalidArgument, match="not \\(device type, device id\\)"):
        engine.Buffer.from_array(Stub(dl_device=got))


@pytest.mark.parametrize("device", ["0", -1, 1.0, True])
def test_bad_device_argument(no_engine, device):
    with pytest.raises(InvalidArgument, match="device must be a GPU number"):
        engine.Buffer.from_array(Stub(dl_device=(KDLCUDA, 0)), device=device)


def test_cuda_1_array_is_wrapped_on_gpu_1(fake_engine):
    # The old code read array.device.id, which this array does not have, and wrapped it on GPU 0.
    buf = engine.Buffer.from_array(Stub(dl_device=(KDLCUDA, 1), cai=cai_of(0x7F0000000000, 4096)))
    assert fake_engine == [("device", 0x7F0000000000, 4096, 1, False)]
    assert buf._b == "wrapped"


def test_without_dlpack_device_the_recorded_torch_device_is_used(fake_engine):
    torch_like = SimpleNamespace(type="cuda", index=1)
    engine.Buffer.from_array(Stub(cai=cai_of(0x7F0000000000, 64), device=torch_like))
    assert fake_engine == [("device", 0x7F0000000000, 64, 1, False)]
    with pytest.raises(InvalidArgument, match="records no device"):
        engine.Buffer.from_array(Stub(cai=cai_of(0x7F0000000000, 64)))


def test_pin_of_a_device_array_is_refused(fake_engine):
    with pytest.raises(InvalidArgument, match="pin=True page-locks host memory"):
        engine.Buffer.from_array(Stub(dl_device=(KDLCUDA, 0), cai=cai_of(0x7F0000000000, 64)), pin=True)
    assert fake_engine == []


# --------------------------------------------------------------------------- the engine's own check
# A stand-in libcuda whose pointer attributes call any address device memory on GPU
# $FAKE_ORDINAL (cuda.h: CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2, _DEVICE_ORDINAL = 9).
POINTER_ATTRIBUTES_C = r"""
#include <stdlib.h>
int cuPointerGetAttribute(void* out, int attr, unsigned long long ptr) {
  (void)ptr;
  if (attr == 2) { *(unsigned*)out = 2; return 0; }
  if (attr == 9) { *(int*)out = atoi(getenv("FAKE_ORDINAL")); return 0; }
  return 1;
}
"""

WRAP_SCRIPT = """
    import json
    import numpy as np
    from gdrlab import _native, engine, errors
    host = np.zeros(64, np.uint8)  # the stand-in's "GPU memory" is host memory
    cai = {"shape": (64,), "typestr": "|u1", "data": (host.ctypes.data, False), "version": 3}
    stub = type("Stub", (), {"__cuda_array_interface__": cai})()
    def attempt(fn):
        try:
            return {"device": fn().device}
        except errors.GdrlabError as e:
            return {"raised": type(e).__name__, "message": str(e)}
    print(json.dumps({"ordinal": _native.pointer_device(host.ctypes.data),
                      "native": attempt(lambda: _native.Buffer.wrap("device", host.ctypes.data, 64, 0, False)),
                      "python": attempt(lambda: engine.Buffer.from_array(stub, device=0))}))
"""


@pytest.fixture(scope="module")
def pointer_fake(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler (cc) to build the stand-in libcuda")
    d = tmp_path_factory.mktemp("fake_pointer_cuda")
    (d / "pointer.c").write_text(POINTER_ATTRIBUTES_C)
    have = {"cuPointerGetAttribute"} | set(re.findall(r"^int (\w+)\(", FAKE_SRC.read_text(), re.MULTILINE))
    (d / "rest.c").write_text("".join(f"int {s}(void) {{ return 0; }}\n" for s in _required_symbols()
                                      if s not in have))
    r = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", str(FAKE_SRC), str(d / "pointer.c"),
                        str(d / "rest.c"), "-o", str(d / "libcuda.so.1")], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return d


def test_engine_refuses_a_device_pointer_on_another_gpu(pointer_fake):
    out = run_with_fake_cuda(pointer_fake, WRAP_SCRIPT, FAKE_ORDINAL="1")
    assert out["ordinal"] == 1
    assert out["native"] == {"raised": "InvalidArgument",
                             "message": "memory at this address is on GPU 1 but the buffer was asked for GPU 0"}
    assert out["python"] == {"raised": "InvalidArgument",
                             "message": "array is on cuda:1 but the buffer was asked for GPU 0"}


def test_engine_accepts_a_device_pointer_on_the_gpu_asked_for(pointer_fake):
    out = run_with_fake_cuda(pointer_fake, WRAP_SCRIPT, FAKE_ORDINAL="0")
    assert out == {"ordinal": 0, "native": {"device": 0}, "python": {"device": 0}}


def test_pinned_buffer_is_kdlcudahost_and_numpy_shares_it(pointer_fake):
    out = run_with_fake_cuda(pointer_fake, """
        import json
        import numpy as np
        from gdrlab import engine
        b = engine.Buffer(64, "pinned")
        v = np.from_dlpack(b)
        b.fill_pattern(3)
        print(json.dumps({"dl": b.__dlpack_device__(), "same": v.ctypes.data == b.address,
                          "seen": bytes(v) == engine.native().pattern_bytes(3, 64)}))
    """, FAKE_ORDINAL="0")
    assert out == {"dl": [KDLCUDAHOST, 0], "same": True, "seen": True}


# --------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
def test_device_buffer_mismatch_is_caught_by_the_driver(gpu):
    # One GPU is enough: GPU 0's memory claimed as GPU 1's, first through Python with no DLPack
    # and no recorded device (the driver's pointer attribute answers), then by the engine itself.
    dev = engine.Buffer(4096, kind="device")
    assert dev.__dlpack_device__() == (KDLCUDA, 0)
    with pytest.raises(InvalidArgument, match="^array is on cuda:0 but the buffer was asked for GPU 1$"):
        engine.Buffer.from_array(Stub(cai=cai_of(dev.address, 4096)), device=1)
    with pytest.raises(InvalidArgument, match="memory at this address is on GPU 0 but the buffer was asked for GPU 1"):
        engine.native().Buffer.wrap("device", dev.address, 4096, 1, False)
    assert engine.native().pointer_device(dev.address) == 0
    assert engine.Buffer.from_array(Stub(cai=cai_of(dev.address, 4096))).device == 0


@pytest.mark.gpu
def test_pinned_buffer_is_kdlcudahost_and_numpy_reads_it(gpu):
    buf = engine.Buffer(4096, kind="pinned")
    assert buf.__dlpack_device__() == (KDLCUDAHOST, 0)
    view = np.from_dlpack(buf)
    buf.fill_pattern(4)
    assert view.ctypes.data == buf.address
    assert bytes(view) == engine.native().pattern_bytes(4, 4096)


@pytest.mark.gpu
def test_cupy_round_trip_and_device_mismatch(gpu):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    buf = engine.Buffer(4096, kind="device")
    arr = cupy.from_dlpack(buf)
    assert arr.data.ptr == buf.address and arr.device.id == 0
    buf.fill_pattern(5)
    assert cupy.asnumpy(arr).tobytes() == engine.native().pattern_bytes(5, 4096)
    arr[17] ^= 0xFF
    assert buf.check_pattern(5) == 17

    own = cupy.zeros(1 << 20, cupy.uint8)
    wrapped = engine.Buffer.from_array(own)
    assert (wrapped.kind, wrapped.device, wrapped.address) == ("device", 0, own.data.ptr)
    wrapped.fill_pattern(6)
    assert cupy.asnumpy(own).tobytes() == engine.native().pattern_bytes(6, 1 << 20)
    with pytest.raises(InvalidArgument, match="^array is on cuda:0 but the buffer was asked for GPU 1$"):
        engine.Buffer.from_array(own, device=1)


@pytest.mark.gpu
def test_torch_reads_a_device_buffer(gpu):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    buf = engine.Buffer(4096, kind="device")
    t = torch.from_dlpack(buf)
    assert t.device == torch.device("cuda", 0) and t.data_ptr() == buf.address
    back = engine.Buffer.from_array(t)
    assert (back.device, back.address) == (0, buf.address)
