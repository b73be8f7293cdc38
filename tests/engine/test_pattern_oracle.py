"""The verification pattern against its definition, computed here byte by byte: word w of a
message is splitmix64(seed ^ w), byte i is byte i % 8 of word i // 8 (little-endian). Fills and
checks at unaligned offsets and lengths, and a flipped byte is reported at its exact index."""
from __future__ import annotations

import ctypes
import random

from gdrlab import engine

M64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def expected(seed: int, n: int) -> bytes:
    return bytes((splitmix64(seed ^ (i // 8)) >> (8 * (i % 8))) & 0xFF for i in range(n))


def test_fill_and_check_match_the_definition_at_any_offset_and_length():
    rng = random.Random(5)
    buf = engine.native().Buffer("pageable", 8192)
    for _ in range(200):
        off, n, seed = rng.randrange(0, 64), rng.randrange(1, 3000), rng.randrange(0, 1 << 64)
        buf.fill_pattern(seed, off, n)
        got = ctypes.string_at(buf.address + off, n)
        assert got == expected(seed, n), (off, n)
        assert buf.check_pattern(seed, off, n) == -1
        k = rng.randrange(0, n)
        ctypes.memset(buf.address + off + k, got[k] ^ 0x20, 1)
        assert buf.check_pattern(seed, off, n) == k, (off, n, k)


def test_a_message_over_many_words_reports_its_first_bad_byte():
    # Long enough for the checker's blocks of words; the damage at the end of a block, in the
    # middle of one, and in the unaligned tail.
    n = 64 * 8 * 5 + 3
    buf = engine.native().Buffer("pageable", n)
    for k in (64 * 8 - 1, 64 * 8 * 2 + 100, n - 1):
        buf.fill_pattern(9, 0, n)
        ctypes.memset(buf.address + k, ctypes.string_at(buf.address + k, 1)[0] ^ 1, 1)
        assert buf.check_pattern(9, 0, n) == k


# ---------------------------------------------------------------- device memory (the GPU's kernels)
DEVICE_RUN = """
    import ctypes, json, random
    from gdrlab import _native
    fake = ctypes.CDLL("libcuda.so.1")
    rng = random.Random(11)
    out = {"cases": [], "ready": _native.pattern_gpu_ready(0)}
    buf = _native.Buffer("device", (1 << 18) + 64)
    for off, n in ((0, 1 << 17), (8, (1 << 17) + 5), (3, 70000), (0, 100), (16, (1 << 18) + 7)):
        seed = rng.randrange(1 << 64)
        before = fake.fake_cuda_pattern_launches()
        buf.fill_pattern(seed, off, n)
        got = ctypes.string_at(buf.address + off, n)  # the stand-in's device memory is host memory
        ok = buf.check_pattern(seed, off, n)
        flips = []
        for k in (0, n // 2 + 3, n - 1, (n // 8) * 8 - 1):
            if not 0 <= k < n:
                continue
            ctypes.memset(buf.address + off + k, got[k] ^ 0x41, 1)
            flips.append([k, buf.check_pattern(seed, off, n)])
            ctypes.memset(buf.address + off + k, got[k], 1)
        out["cases"].append({"off": off, "n": n, "seed": seed, "bytes": got.hex(), "ok": ok, "flips": flips,
                             "launches": fake.fake_cuda_pattern_launches() - before})
    print(json.dumps(out))
"""


def _device_cases(fake_cuda_dir, **env):
    from standins import run_with_fake_cuda
    return run_with_fake_cuda(fake_cuda_dir, DEVICE_RUN, **env)


def test_device_fill_and_check_through_the_kernels_match_the_definition(fake_cuda_dir):
    """The host side of the GPU pattern kernels, through the stand-in (which runs them from the
    definition): whole words on the GPU, the tail bytes through the host, a flipped byte named at
    its exact index (the GPU names its word, the host its byte); a message that does not start
    8-byte aligned, or is under 64 KiB, goes through host memory (no kernel launch)."""
    out = _device_cases(fake_cuda_dir)
    assert out["ready"] is True
    for c in out["cases"]:
        assert bytes.fromhex(c["bytes"]) == expected(c["seed"], c["n"]), (c["off"], c["n"])
        assert c["ok"] == -1
        assert all(found == k for k, found in c["flips"]), c["flips"]
        kernels = c["off"] % 8 == 0 and c["n"] >= 64 * 1024
        # a fill and a check per clean pass, one check per flip
        assert c["launches"] == ((2 + len(c["flips"])) if kernels else 0), (c["off"], c["n"], c["launches"])


def test_device_patterns_without_the_kernels_go_through_the_host(fake_cuda_dir):
    out = _device_cases(fake_cuda_dir, GDRLAB_FAKE_CUDA_NO_PATTERN="1")
    assert out["ready"] is False
    for c in out["cases"]:
        assert bytes.fromhex(c["bytes"]) == expected(c["seed"], c["n"])
        assert c["ok"] == -1 and all(found == k for k, found in c["flips"])
        assert c["launches"] == 0


def test_the_pattern_kernels_assemble_for_current_gpus(tmp_path):
    import shutil
    import subprocess

    import pytest
    ptxas = shutil.which("ptxas") or shutil.which("ptxas", path="/usr/local/cuda/bin")
    if not ptxas:
        pytest.skip("ptxas (CUDA toolkit) is not installed: the PTX is checked by the driver's JIT on a GPU only")
    ptx = engine.native().pattern_gpu_ptx()
    assert ".version 6.0" in ptx and ".target sm_50" in ptx
    src = tmp_path / "pattern.ptx"
    src.write_text(ptx)
    for arch in ("sm_75", "sm_90"):
        r = subprocess.run([ptxas, "--gpu-name", arch, str(src), "-o", str(tmp_path / f"{arch}.cubin")],
                           check=False, capture_output=True, text=True)
        assert r.returncode == 0, f"ptxas {arch}: {r.stderr}"
