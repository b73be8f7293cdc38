"""The verification pattern written and checked by the GPU's own kernels (core/pattern_gpu.cc, PTX
JIT-compiled by the driver), held to the pattern's definition computed here with numpy: word w
is splitmix64(seed ^ w), little-endian. The bytes are read back and damaged with the driver's own
calls (ctypes), not through the engine under test."""
from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

from gdrlab import engine

pytestmark = pytest.mark.gpu
MIB = 1 << 20


def expected(seed: int, n: int) -> bytes:
    words = (n + 7) // 8
    x = np.arange(words, dtype=np.uint64) ^ np.uint64(seed)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return x.astype("<u8").tobytes()[:n]


@pytest.fixture
def driver(gpu):
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    cu.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]
    return cu


def read(cu, address: int, n: int) -> bytes:
    out = ctypes.create_string_buffer(n)
    assert cu.cuMemcpyDtoH_v2(out, address, n) == 0
    return out.raw


def test_the_kernels_load_on_this_gpu(gpu):
    assert engine.native().pattern_gpu_ready(0) is True, "the driver did not load the pattern kernels"


@pytest.mark.parametrize("off,n", [(0, 64 * MIB), (8, 5 * MIB + 3), (256, 64 * 1024 + 7)])
def test_fill_writes_the_definition_and_check_names_the_first_bad_byte(driver, off, n):
    nat = engine.native()
    buf = nat.Buffer("device", off + n)
    seed = 0xC0FFEE ^ n
    buf.fill_pattern(seed, off, n)
    assert read(driver, buf.address + off, n) == expected(seed, n)
    assert buf.check_pattern(seed, off, n) == -1
    assert buf.check_pattern(seed + 1, off, n) == 0
    # damage late, then early too: the first one is named, whichever thread saw it
    for k in (n - 1, (n // 8) * 8 - 3, n // 2 + 5, 9):  # each before the last
        good = read(driver, buf.address + off + k, 1)[0]
        assert driver.cuMemsetD8_v2(buf.address + off + k, good ^ 0x80, 1) == 0
        assert buf.check_pattern(seed, off, n) == k
    # every byte damaged above stays damaged: one before them all is the answer now
    assert driver.cuMemsetD8_v2(buf.address + off + 3, expected(seed, 4)[3] ^ 1, 1) == 0
    assert buf.check_pattern(seed, off, n) == 3


def test_many_checks_at_once(driver):
    """More checks in flight than the module keeps result words for (64): the rest go through
    host memory and every answer is still right."""
    nat = engine.native()
    n = 256 * 1024
    bufs = [nat.Buffer("device", n) for _ in range(80)]
    for i, b in enumerate(bufs):
        b.fill_pattern(i, 0, n)
        if i % 3 == 0:
            assert driver.cuMemsetD8_v2(b.address + i * 1000, 0, 1) == 0
    answers: dict[int, int] = {}

    def check(i: int) -> None:
        for _ in range(5):
            answers[i] = bufs[i].check_pattern(i, 0, n)

    threads = [threading.Thread(target=check, args=(i,)) for i in range(len(bufs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i in range(len(bufs)):
        damaged = i % 3 == 0 and expected(i, i * 1000 + 1)[i * 1000] != 0
        assert answers[i] == (i * 1000 if damaged else -1), i
