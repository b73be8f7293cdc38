"""Stand-ins for libcuda.so.1 (tests/fake_cuda) and libibverbs (tests/fake_verbs), built on demand
with the machine's C/C++ compiler, and the helpers that run engine code against them in a fresh
interpreter. The fixtures that build them once per run (fake_cuda_dir, stand_ins,
dmabuf_stand_ins) are in conftest.py; every test area imports from here."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import TIME_SCALE

ROOT = Path(__file__).resolve().parents[1]
CUDA_API_H = ROOT / "native" / "src" / "core" / "cuda_api.h"
FAKE_SRC = ROOT / "tests" / "fake_cuda" / "fake_cuda.c"
FAKE_VERBS = ROOT / "tests" / "fake_verbs"


def build_thread_failer(d: Path) -> Path:
    """d/libnothreads.so: preloaded, pthread_create fails with EAGAIN while the file named by
    $FAIL_THREADS_FLAG exists (tests/fault_shims/no_threads.c)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler (cc) to build the pthread_create shim")
    out = d / "libnothreads.so"
    r = subprocess.run([cc, "-shared", "-fPIC", "-O1", str(ROOT / "tests" / "fault_shims" / "no_threads.c"), "-o",
                        str(out), "-ldl"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def _required_symbols() -> list[str]:
    """The exported names of every entry point the engine loads (its REQ/OPT list)."""
    return re.findall(r'(?:REQ|OPT)\(\w+, "(\w+)"', CUDA_API_H.read_text())


def build_fake_cuda(d: Path) -> Path:
    """Builds the stand-in as d/libcuda.so.1 (skips the test without a C compiler); returns d."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler (cc) to build the stand-in libcuda")
    implemented = set(re.findall(r"^int (\w+)\(", FAKE_SRC.read_text(), re.MULTILINE))
    rest = [s for s in _required_symbols() if s not in implemented]
    (d / "rest.c").write_text("".join(f"int {s}(void) {{ return 0; }}\n" for s in rest))
    r = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", str(FAKE_SRC), str(d / "rest.c"),
                        "-o", str(d / "libcuda.so.1")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return d


def run_with_fake_cuda(fake_dir: Path, script: str, **env: str) -> dict:
    """Runs `script` in a fresh interpreter that loads the stand-in; returns the JSON it prints."""
    e = dict(os.environ)
    e["LD_LIBRARY_PATH"] = f"{fake_dir}:{e.get('LD_LIBRARY_PATH', '')}"
    e.update(env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=e,
                       timeout=60 * TIME_SCALE)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def build_verbs_stand_ins(d: Path) -> tuple[Path, str]:
    gxx = shutil.which("g++")
    if not gxx:
        pytest.skip("g++ is not installed: cannot build the stand-in libibverbs")
    build_fake_cuda(d)
    lib = d / "libfakeibverbs.so"
    r = subprocess.run([gxx, "-std=c++17", "-shared", "-fPIC", "-O1", f"-I{ROOT / 'native' / 'src'}",
                        str(FAKE_VERBS / "fake_ibverbs.cc"), f"-Wl,--version-script={FAKE_VERBS / 'fake_ibverbs.map'}",
                        "-o", str(lib)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return d, str(lib)



def build_dmabuf_stand_ins(d: Path) -> tuple[Path, str]:
    """The stand-ins with dma-buf: libcuda exports cuMemGetHandleForAddressRange and the flush
    attributes (tests/fake_verbs/fake_cuda_dmabuf.c), libibverbs exports ibv_reg_dmabuf_mr."""
    gxx, cc = shutil.which("g++"), shutil.which("cc") or shutil.which("gcc")
    if not gxx or not cc:
        pytest.skip("g++ and cc are needed to build the stand-ins")
    build_fake_cuda(d)
    extra = FAKE_VERBS / "fake_cuda_dmabuf.c"
    mine = set(re.findall(r"^int (\w+)\(", extra.read_text(), re.MULTILINE))
    rest = d / "rest.c"
    rest.write_text("".join(line + "\n" for line in rest.read_text().splitlines()
                            if re.match(r"int (\w+)\(", line).group(1) not in mine))
    r = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", str(FAKE_SRC), str(rest), str(extra),
                        "-o", str(d / "libcuda.so.1")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    lib = d / "libfakeibverbs_dmabuf.so"
    r = subprocess.run([gxx, "-std=c++17", "-shared", "-fPIC", "-O1", "-DFAKE_IBV_WITH_DMABUF",
                        f"-I{ROOT / 'native' / 'src'}", str(FAKE_VERBS / "fake_ibverbs.cc"),
                        f"-Wl,--version-script={FAKE_VERBS / 'fake_ibverbs_dmabuf.map'}", "-o", str(lib)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return d, str(lib)


# A verbs test between a Server and a verbs Client in one process, through both stand-ins; format with
# path= and mode=. Prints the outcome and the stand-ins' counters as JSON.
RUN = """
    import ctypes, json, sys, threading
    from gdrlab import _native, errors
    cuda, ibv = ctypes.CDLL("libcuda.so.1"), ctypes.CDLL(_native.verbs.status()["library"])
    path = sys.argv[1] if len(sys.argv) > 1 else "{path}"
    srv = _native.Server("127.0.0.1", 0, "tok", 10000)
    peer = threading.Thread(target=srv.serve_one, args=(10000,))
    peer.start()
    client = _native.verbs.Client("127.0.0.1", srv.port, "tok", 10000)
    out = {{}}
    try:
        samples, _, verified, info = client.run(path, {mode}, 100003, 3, 1, 2, 16384, 3, 0, 9)
        out.update(samples=len(samples), verified=verified, mechanism=info["mechanism"])
    except errors.GdrlabError as e:
        out.update(raised=type(e).__name__, call=e.call, message=str(e))
    client.close()
    peer.join()
    _native.release_kept_buffers()  # freed pinned blocks kept for reuse are not leaks: unlock them first
    out.update(violations=ibv.fake_ibv_order_violations(), qps=ibv.fake_ibv_live_qps(),
               streams=cuda.fake_cuda_live_streams(), events=cuda.fake_cuda_live_events(),
               allocs=cuda.fake_cuda_live_allocs(), pinned=_native.live_pinned_bytes(),
               regions=ibv.fake_ibv_mr_count_with_access(0))
    print(json.dumps(out))
"""
