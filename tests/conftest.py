"""Shared pytest fixtures for the gdrlab test suite.

Fixtures
--------
``serve_process``
    A real ``python -m gdrlab serve`` subprocess on 127.0.0.1 with a random token and a 1 s
    timeout; yields a :class:`ServeProcess` (``port``, ``token``, ``address``, ``proc``,
    ``fd_count()``, ``stderr_text()``). Stopped (and reaped) after the test.
``serve_factory``
    Starts more such processes with custom arguments: ``serve_factory(token=..., timeout_s=...,
    extra=[...])``; all are stopped after the test.
``native_server``
    The engine's ``Server`` in this process, serving clients one after another in a background
    thread; yields a :class:`NativeServer` (``port``, ``token``, ``errors``, ``served``).
``gpu``
    Skips the test with the reason from ``gdrlab.engine.cuda_status()`` when no CUDA GPU is usable.
``fake_verbs_lib``
    The stand-in libibverbs of tests/fake_verbs, built once per session with g++ (skips without
    g++); point ``GDRLAB_IBVERBS_LIB`` at it.

Markers
-------
``gpu``, ``multigpu`` and ``rdma`` skip the test, with the reason, on machines without a usable
CUDA GPU, without two of them, or without an RDMA device (:func:`pytest_runtest_setup`).
``run_cli``
    Runs ``python -m gdrlab ARGS...`` and returns the ``subprocess.CompletedProcess`` (text mode).
``fd_count`` / ``vmlck_kb``
    Callables: open file descriptors of a process (default: this one), and its locked memory
    (``VmLck`` of /proc/PID/status) in KiB.
"""
from __future__ import annotations

import json
import os
import secrets
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

__all__ = ["TIME_SCALE", "UNDER_ASAN", "NativeServer", "ServeProcess", "child_processes", "count_fds", "read_vmlck_kb",
           "wait_until"]

SERVE_START_TIMEOUT_S = 30.0
# Under AddressSanitizer (bench/asan_tests.sh preloads libasan) a Python process starts and exits
# several times slower; waits for whole processes are scaled by this, protocol deadlines are not.
UNDER_ASAN = "asan" in os.environ.get("LD_PRELOAD", "")
TIME_SCALE = 4.0 if UNDER_ASAN else 1.0


# --------------------------------------------------------------------------- plain helpers
def wait_until(predicate: Callable[[], object], within_s: float, what: str) -> object:
    """Polls ``predicate`` until it returns something true, for at most ``within_s`` x TIME_SCALE
    seconds; fails the test naming ``what`` otherwise. Tests wait on state this way, not on time."""
    deadline = time.monotonic() + within_s * TIME_SCALE
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within_s * TIME_SCALE:.0f} s waiting for {what}")
        time.sleep(0.01)


def count_fds(pid: int | str = "self") -> int:
    """Number of open file descriptors of ``pid`` (Linux /proc)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def read_vmlck_kb(pid: int | str = "self") -> int:
    """Locked (page-locked) memory of ``pid`` in KiB, from ``VmLck`` in /proc/PID/status."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    return 0


def child_processes(pid: int | None = None) -> list[tuple[int, str, str]]:
    """Direct children of ``pid`` (default: this process) as ``(pid, state, cmdline)``; a
    zombie has state ``"Z"``."""
    parent = os.getpid() if pid is None else pid
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        # comm may contain spaces and parentheses: the fields after the last ')' are fixed.
        rest = stat[stat.rfind(")") + 2:].split()
        if int(rest[1]) == parent:
            out.append((int(entry), rest[0], cmd))
    return out


# --------------------------------------------------------------------------- serve subprocess
@dataclass
class ServeProcess:
    """A running ``gdrlab serve`` subprocess."""

    proc: subprocess.Popen
    port: int
    token: str
    host: str = "127.0.0.1"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def fd_count(self) -> int:
        return count_fds(self.proc.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f and not f.closed:
                f.close()

    def stderr_text(self) -> str:
        """Everything the server wrote to stderr (stops the server first)."""
        self.stop_keep_stderr()
        return self._stderr

    def stop_keep_stderr(self) -> None:
        if getattr(self, "_stderr", None) is not None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        self._stderr = err.decode(errors="replace") if err else ""


def start_serve(token: str | None = None, timeout_s: float = 1.0, extra: list[str] | None = None,
                listen: str = "127.0.0.1:0", env: dict[str, str] | None = None) -> ServeProcess:
    """Start ``python -m gdrlab serve --announce`` (with ``env`` added to the environment) and wait
    for its ``{"port": N}`` line."""
    token = secrets.token_hex(8) if token is None else token
    env = dict(os.environ, **(env or {}), GDRLAB_TOKEN=token, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "gdrlab", "serve", "--listen", listen, "--announce",
           "--timeout", str(timeout_s)] + list(extra or [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env)
    deadline = time.monotonic() + SERVE_START_TIMEOUT_S
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([proc.stdout], [], [], max(left, 0))
        if not ready:
            proc.kill()
            proc.wait()
            raise RuntimeError("gdrlab serve did not announce its port in time")
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            err = proc.stderr.read().decode(errors="replace")
            proc.wait()
            raise RuntimeError(f"gdrlab serve exited before announcing: {err}")
        buf += chunk
    port = int(json.loads(buf.split(b"\n", 1)[0])["port"])
    return ServeProcess(proc=proc, port=port, token=token)


@pytest.fixture
def serve_factory() -> Iterator[Callable[..., ServeProcess]]:
    started: list[ServeProcess] = []

    def make(**kw) -> ServeProcess:
        sp = start_serve(**kw)
        started.append(sp)
        return sp

    yield make
    for sp in started:
        sp.stop()


@pytest.fixture
def serve_process(serve_factory) -> ServeProcess:
    return serve_factory()


# --------------------------------------------------------------------------- in-process server
@dataclass
class NativeServer:
    """The engine's Server serving clients in a background thread of this process."""

    token: str
    timeout_ms: int
    server: object = None
    errors: list = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def served(self) -> int:
        return int(self.server.clients_served)

    def start(self) -> NativeServer:
        from gdrlab.engine import native

        self.server = native().Server("127.0.0.1", 0, self.token, self.timeout_ms)
        self._thread = threading.Thread(target=self._loop, name="gdrlab-native-server", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            came, err = self.server.serve_one(100)
            if came and err:
                self.errors.append(err)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.server = None


SERVED_TOKEN = "served-token-0123456789"


class ConcurrentServer:
    """The engine's concurrent Server with the given limits (budgets, device, log interval...),
    accepting with serve_for on a thread of this process: many sessions at once, as `gdrlab serve`."""

    def __init__(self, **limits: object) -> None:
        from gdrlab.engine import native

        self.server = native().Server("127.0.0.1", 0, SERVED_TOKEN, 5000, **limits)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.server.serve_for(100)

    def connect(self):  # -> gdrlab.engine.Connection
        from gdrlab import engine

        return engine.Connection("127.0.0.1", self.server.port, SERVED_TOKEN, timeout_s=10)

    def quiet(self) -> None:
        """Waits until no connection is left: none authenticating or draining, and no session
        thread (a session thread writes its last log line before it ends)."""
        srv = self.server
        wait_until(lambda: srv.session_threads == 0 and srv.handshakes_in_progress == 0, 10,
                   "the server's sessions and handshakes to end")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def served() -> Iterator[Callable[..., ConcurrentServer]]:
    """Makes ConcurrentServers; all are stopped when the test ends."""
    made: list[ConcurrentServer] = []

    def make(**limits: object) -> ConcurrentServer:
        made.append(ConcurrentServer(**limits))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.fixture
def native_server() -> Iterator[NativeServer]:
    ns = NativeServer(token=secrets.token_hex(8), timeout_ms=1000).start()
    yield ns
    ns.stop()


# --------------------------------------------------------------------------- hardware markers
_HARDWARE: dict[str, str | None] = {}


def _hardware_missing(marker: str) -> str | None:
    """Why this machine cannot run tests marked ``marker`` (None when it can); asked once."""
    if marker not in _HARDWARE:
        from gdrlab.engine import cuda_status, gpus, native

        st = cuda_status()
        if marker == "gpu":
            _HARDWARE[marker] = None if st["usable"] else "no CUDA GPU: " + st["reason"]
        elif marker == "multigpu":
            n = len(gpus())
            _HARDWARE[marker] = None if n >= 2 else f"needs 2 or more CUDA GPUs, found {n}" + (
                f" ({st['reason']})" if not st["usable"] else "")
        else:
            vs = native().verbs.status()
            _HARDWARE[marker] = None if vs["devices"] else "no RDMA device: " + vs["reason"]
    return _HARDWARE[marker]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked gpu, multigpu or rdma skip, saying why, where that hardware is missing."""
    for marker in ("gpu", "multigpu", "rdma"):
        if item.get_closest_marker(marker) is not None:
            why = _hardware_missing(marker)
            if why:
                pytest.skip(why)


# --------------------------------------------------------------------------- misc fixtures
@pytest.fixture(scope="session")
def fake_verbs_lib(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Path of the stand-in libibverbs (tests/fake_verbs), built once with g++."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    gxx = shutil.which("g++")
    if not gxx:
        pytest.skip("g++ is not installed: cannot build the stand-in libibverbs")
    out = tmp_path_factory.mktemp("fakeibv") / "libfakeibverbs.so"
    r = subprocess.run([gxx, "-std=c++17", "-shared", "-fPIC", "-O1", f"-I{root / 'native' / 'src'}",
                        str(root / "tests" / "fake_verbs" / "fake_ibverbs.cc"),
                        f"-Wl,--version-script={root / 'tests' / 'fake_verbs' / 'fake_ibverbs.map'}", "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return str(out)


@pytest.fixture
def gpu() -> dict:
    """Skip unless a CUDA GPU is usable; returns ``gdrlab.engine.cuda_status()``."""
    from gdrlab.engine import cuda_status

    st = cuda_status()
    if not st["usable"]:
        pytest.skip("no CUDA GPU: " + st["reason"])
    return st


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess]:
    def run(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
        full_env = dict(os.environ, **(env or {}))
        return subprocess.run([sys.executable, "-m", "gdrlab", *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, env=full_env, stdin=subprocess.DEVNULL)

    return run


@pytest.fixture
def fd_count() -> Callable[..., int]:
    return count_fds


@pytest.fixture
def vmlck_kb() -> Callable[..., int]:
    return read_vmlck_kb


def pytest_sessionfinish(session, exitstatus):
    """Free what the tests left for the garbage collector (and CuPy's memory pool) before the
    interpreter exits, so a memory checker's leak report at exit shows only real leaks. With
    GDRLAB_REPORT_LIVE=1, print the engine's own live pinned/device bytes afterwards."""
    import gc
    import sys

    gc.collect()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.get_default_memory_pool().free_all_blocks()
            cupy.get_default_pinned_memory_pool().free_all_blocks()
        except Exception:
            pass
    if os.environ.get("GDRLAB_REPORT_LIVE"):
        from gdrlab import engine
        nat = engine.native()
        print(f"\ngdrlab engine at exit: {nat.live_device_bytes()} device bytes, "
              f"{nat.live_pinned_bytes()} pinned bytes still allocated", flush=True)


# --------------------------------------------------------------------------- stand-in libraries
# Built once per run (tests/standins.py): libcuda alone, libcuda with libibverbs, and both with
# dma-buf. Each skips the tests that use it where no compiler is installed.
@pytest.fixture(scope="session")
def fake_cuda_dir(tmp_path_factory: pytest.TempPathFactory):  # -> Path
    from standins import build_fake_cuda
    return build_fake_cuda(tmp_path_factory.mktemp("fake_cuda"))


@pytest.fixture(scope="session")
def stand_ins(tmp_path_factory: pytest.TempPathFactory):  # -> tuple[Path, str]
    from standins import build_verbs_stand_ins
    return build_verbs_stand_ins(tmp_path_factory.mktemp("stand_ins"))


@pytest.fixture(scope="session")
def dmabuf_stand_ins(tmp_path_factory: pytest.TempPathFactory):  # -> tuple[Path, str]
    from standins import build_dmabuf_stand_ins
    return build_dmabuf_stand_ins(tmp_path_factory.mktemp("dmabuf_stand_ins"))
