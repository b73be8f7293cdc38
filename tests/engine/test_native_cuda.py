"""The engine's CUDA layer without a GPU, through a stand-in libcuda.so.1 (tests/fake_cuda/fake_cuda.c)
found first on LD_LIBRARY_PATH by the engine's dlopen: a failing call is reported by its own name
and source line, and an endpoint that fails half way through construction releases what it had
made. Where the CUDA toolkit's cuda.h exists, the constants the engine declares by hand are
compared with it."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import UNDER_ASAN
from standins import CUDA_API_H, ROOT, _required_symbols, run_with_fake_cuda  # noqa: F401

CATCH = """
    import ctypes, json, threading
    from gdrlab import _native, errors
    fake = ctypes.CDLL("libcuda.so.1")
    def attempt(fn):
        try:
            fn()
            return {"raised": None}
        except errors.GdrlabError as e:
            return {"raised": type(e).__name__, "call": e.call, "code": e.code, "message": str(e),
                    "where": getattr(e, "where", "")}
    def report(out):
        _native.release_kept_buffers()  # freed pinned blocks kept for reuse are not leaks
        out.update(streams=fake.fake_cuda_live_streams(), events=fake.fake_cuda_live_events(),
                   allocs=fake.fake_cuda_live_allocs(), pinned=_native.live_pinned_bytes(),
                   device=_native.live_device_bytes())
        print(json.dumps(out))
"""


@pytest.mark.parametrize("call", ["cuStreamCreate", "cuCtxSetCurrent"])
def test_failing_call_is_reported_by_its_own_name_and_line(fake_cuda_dir, call):
    out = run_with_fake_cuda(fake_cuda_dir, CATCH + """
    report(attempt(lambda: _native.copy_samples("h2d", 4096, 1, 0, "pinned", 0)))
    """, GDRLAB_FAKE_CUDA_FAIL=call)
    assert out["raised"] == "CudaError", out
    assert out["call"] == call and out["code"] == 2
    assert f"{call} failed: CUDA_ERROR_OUT_OF_MEMORY" in out["message"]
    # The source line of the failing call, inside the engine's tree, not the build machine's path.
    assert re.fullmatch(r"core/[a-z_]+\.cc:\d+", out["where"]), out["where"]
    assert out["where"] in out["message"]
    assert (out["streams"], out["allocs"]) == (0, 0), "a failed copy benchmark left CUDA objects behind"


TCP_RUN = """
    srv = _native.Server("127.0.0.1", 0, "tok", 5000)
    peer = threading.Thread(target=srv.serve_one, args=(5000,))
    peer.start()
    client = _native.Client("127.0.0.1", srv.port, "tok", 5000)
    out = attempt(lambda: client.run("pipelined", 0, 1 << 16, 2, 0, 1, 4096, 4, 0, 11))
    client.close()  # BYE: the peer returns
    peer.join()
    report(out)
"""


@pytest.mark.parametrize("call,after", [("cuStreamCreate", 0), ("cuEventCreate", 2), ("cuMemHostAlloc", 3)])
def test_endpoint_failing_half_way_releases_what_it_made(fake_cuda_dir, call, after):
    # The tcp pipelined endpoint makes its GPU buffer, 4 pinned slots, a stream, then 4 events:
    # whichever of them fails, nothing made before it stays behind.
    out = run_with_fake_cuda(fake_cuda_dir, CATCH + TCP_RUN, GDRLAB_FAKE_CUDA_FAIL=call, GDRLAB_FAKE_CUDA_FAIL_AFTER=str(after))
    assert out["raised"] == "CudaError" and out["call"] == call, out
    assert (out["streams"], out["events"], out["allocs"]) == (0, 0, 0), out
    assert (out["pinned"], out["device"]) == (0, 0), out


def test_gpu_paths_move_and_verify_data_through_the_stand_in(fake_cuda_dir):
    # With no failure injected the same run completes: the staging code of every tcp GPU path
    # moves the verification pattern both ways (the stand-in's device memory is host memory).
    out = run_with_fake_cuda(fake_cuda_dir, CATCH + """
    results = []
    for path in ("staged", "shared", "pipelined"):
        srv = _native.Server("127.0.0.1", 0, "tok", 5000)
        peer = threading.Thread(target=srv.serve_one, args=(5000,))
        peer.start()
        client = _native.Client("127.0.0.1", srv.port, "tok", 5000)
        samples, _, verified = client.run(path, 0, 70001, 3, 1, 1, 8192, 3, 0, 5)
        results.append([path, len(samples), verified])
        client.close()
        peer.join()
    print(json.dumps({"results": results}))
    """)
    assert out["results"] == [["staged", 3, True], ["shared", 3, True], ["pipelined", 3, True]]


def _find_cuda_h() -> Path | None:
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda", "/usr"]
    for r in roots:
        if r and (Path(r) / "include" / "cuda.h").exists():
            return Path(r) / "include"
    return None


def test_hand_declared_constants_match_cuda_h(tmp_path):
    inc = _find_cuda_h()
    if inc is None:
        pytest.skip("cuda.h not found (CUDA_HOME, /usr/local/cuda, /usr): the CUDA toolkit is not installed here")
    cxx = shutil.which("c++") or shutil.which("g++")
    if not cxx:
        pytest.skip("no C++ compiler")
    text = CUDA_API_H.read_text()
    enums = "\n".join(re.findall(r"enum : \w+ \{(.*?)\};", text, re.DOTALL))
    consts = dict(re.findall(r"\b((?:CUDA|CU)_[A-Z0-9_]+) = (0x[0-9a-fA-F]+|\d+)", enums))
    assert len(consts) > 20, "the constant parser found too few entries"
    prog = ["#include <cuda.h>", "#include <cstdio>", "int main() {"]
    prog += [f'  std::printf("%s %lld\\n", "{n}", (long long){n});' for n in consts]
    prog += ["  return 0;", "}"]
    (tmp_path / "consts.cc").write_text("\n".join(prog))
    # Every exported name the engine resolves must be declared by the header (compiled, not
    # linked: taking a function's address needs its declaration only).
    (tmp_path / "symbols.cc").write_text("#include <cuda.h>\nvoid check() {\n" +
                                         "".join(f"  (void)&{s};\n" for s in _required_symbols()) + "}\n")
    r = subprocess.run([cxx, f"-I{inc}", "-c", str(tmp_path / "symbols.cc"), "-o", str(tmp_path / "symbols.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"a symbol the engine loads is not declared by {inc}/cuda.h:\n{r.stderr}"
    exe = tmp_path / "consts"
    r = subprocess.run([cxx, f"-I{inc}", str(tmp_path / "consts.cc"), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = dict(line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                       check=True).stdout.splitlines())
    wrong = {n: (v, got[n]) for n, v in consts.items() if int(v, 0) != int(got[n])}
    assert not wrong, f"declared vs cuda.h: {wrong}"


KEEP_PINNED = """
    import ctypes, json
    from gdrlab import _native
    fake = ctypes.CDLL("libcuda.so.1")
    MIB = 1 << 20
    out = {}
    a = _native.Buffer("pinned", 2 * MIB)
    first = a.address
    ctypes.memset(first, 0x5A, 2 * MIB)
    del a
    out["after_free"] = [fake.fake_cuda_live_allocs(), _native.kept_pinned_bytes(), _native.live_pinned_bytes()]
    b = _native.Buffer("pinned", 2 * MIB)
    out["reused"] = b.address == first
    out["zeroed"] = ctypes.string_at(b.address, 2 * MIB) == bytes(2 * MIB)
    out["while_used"] = [fake.fake_cuda_live_allocs(), _native.kept_pinned_bytes(), _native.live_pinned_bytes()]
    c = _native.Buffer("pinned", 2 * MIB + 1)  # another size: a block of its own
    out["other_size"] = c.address != b.address
    d = _native.Buffer("pinned", 2 * MIB, 1)  # another GPU: not the GPU 0 block
    del b
    e = _native.Buffer("pinned", 2 * MIB, 1)
    out["other_gpu_fresh"] = _native.kept_pinned_bytes() == 2 * MIB
    del c, d, e
    small = [_native.Buffer("pinned", 4096) for _ in range(3)]
    del small  # under 1 MiB: freed at once
    many = [_native.Buffer("pinned", (40 + i) * MIB) for i in range(10)]
    while many:
        many.pop(0)  # freed in order of size: 40 MiB first
    out["cap"] = [_native.kept_pinned_bytes(), fake.fake_cuda_live_allocs()]
    _native.release_kept_buffers()
    out["released"] = [fake.fake_cuda_live_allocs(), _native.kept_pinned_bytes()]
    print(json.dumps(out))
"""


def test_freed_pinned_blocks_are_kept_by_gpu_and_size_and_zeroed(fake_cuda_dir):
    """A GPU path's staging is page-locked afresh by every test unless freed blocks are kept: a
    freed pinned block of 1 MiB or more goes to the next buffer of the same GPU and size, zeroed;
    at most 8 blocks and 256 MiB stay locked (the oldest unlocked first); release_kept_buffers()
    unlocks them all; live_pinned_bytes() counts only buffers in use."""
    out = run_with_fake_cuda(fake_cuda_dir, KEEP_PINNED, GDRLAB_FAKE_CUDA_DEVICES="2")
    if UNDER_ASAN:  # the sanitizer build keeps nothing, so a use after free stays visible
        assert out["after_free"] == [0, 0, 0] and out["cap"] == [0, 0], out
        return
    mib = 1 << 20
    assert out["after_free"] == [1, 2 * mib, 0], out
    assert out["reused"] and out["zeroed"], out
    assert out["while_used"] == [1, 0, 2 * mib], out
    assert out["other_size"] and out["other_gpu_fresh"], out
    kept, allocs = out["cap"]
    # the 10 blocks of 40-49 MiB: the newest that fit 256 MiB (45-49 MiB, 5 blocks); nothing else
    assert kept == sum(range(45, 50)) * mib and allocs == 5, out
    assert out["released"] == [0, 0], out


def test_keep_pinned_off_unlocks_at_once(fake_cuda_dir):
    out = run_with_fake_cuda(fake_cuda_dir, KEEP_PINNED, GDRLAB_FAKE_CUDA_DEVICES="2", GDRLAB_KEEP_PINNED="0")
    assert out["after_free"] == [0, 0, 0] and out["cap"] == [0, 0], out
