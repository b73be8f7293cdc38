"""``gdrlab bench --mpi`` as two ranks under mpirun: the result, and failures that end the job
instead of hanging it. Needs ``mpirun`` (Open MPI or MPICH) and mpi4py; CI installs both."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from gdrlab.transfer import mpi
from gdrlab.errors import Unavailable

MPIRUN = shutil.which("mpirun") or shutil.which("mpiexec")


def _mpi_missing() -> str | None:
    if MPIRUN is None:
        return "mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev)"
    try:
        import mpi4py  # noqa: F401
    except ImportError as exc:
        return f"mpi4py not importable ({exc}): pip install mpi4py"
    return None


_MISSING = _mpi_missing()
# On CI a skipped two-rank test would hide a broken launcher: the install script provides mpirun
# and the test extra mpi4py. The sanitizer re-run (bench/asan_tests.sh) has its own venv without
# mpi4py: these tests run once, in the main suite.
_UNDER_ASAN = "asan" in os.environ.get("LD_PRELOAD", "")
if _MISSING is not None and os.environ.get("CI") == "true" and not _UNDER_ASAN:
    pytest.fail(f"mpirun test cannot run in CI: {_MISSING} (see scripts/install-system-deps.sh)",
                pytrace=False)
needs_mpi = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


def mpirun(n: int, *args: str, env: dict | None = None, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """Start ``python -m gdrlab bench --mpi ARGS`` as ``n`` ranks; the whole process group is
    killed if it outlives ``timeout_s`` (a hang fails the test instead of stalling the suite)."""
    version = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True).stdout
    flags = ["--allow-run-as-root", "--oversubscribe"] if "Open MPI" in version or "OpenRTE" in version else []
    cmd = [MPIRUN, *flags, "-n", str(n), sys.executable, "-m", "gdrlab", "bench", "--mpi", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"mpirun -n {n} hung for {timeout_s} s; stderr:\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@needs_mpi
def test_two_ranks_bench_host_path():
    proc = mpirun(2, "--path", "host", "--sizes", "8,64K", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # rank 1 wrote nothing on stdout
    rows = doc["rows"]
    assert [r["size"] for r in rows] == [8, 65536]
    assert all(r["verified"] is True and r["path"] == "host" and r["wire"] == "tcp" for r in rows)
    assert all(r["lat_p50_us"] > 0 and r["bw_gbps"] > 0 for r in rows)
    prov = doc["provenance"]
    assert prov["kind"] == "live" and prov["launcher"] == "mpi" and prov["ranks"] == 2
    assert len(prov["hosts"]) == 2
    assert prov["peer"].startswith("127.0.0.1:")  # both ranks on this host: loopback


@needs_mpi
def test_two_ranks_text_table():
    proc = mpirun(2, "--path", "host", "--sizes", "4K", "--mode", "lat")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["path", "wire", "size"]
    assert len(lines) == 2 and lines[1].split()[:3] == ["host", "tcp", "4096"]


@needs_mpi
@pytest.mark.parametrize("n", [1, 3])
def test_wrong_rank_count_fails_cleanly(n):
    proc = mpirun(n, "--path", "host", "--sizes", "8", "--json")
    assert proc.returncode != 0
    doc = json.loads(proc.stdout)  # one document, from rank 0 only
    assert doc["error"]["type"] == "InvalidArgument" and f"this job has {n}" in doc["error"]["message"]


@needs_mpi
def test_rank0_failure_releases_rank1():
    # 2G is over the tcp wire's 1 GiB maximum: rank 0 fails before connecting
    proc = mpirun(2, "--path", "host", "--sizes", "2G", "--json", timeout_s=90)
    assert proc.returncode != 0
    assert "1 GiB" in json.loads(proc.stdout)["error"]["message"]


@needs_mpi
def test_rank1_failure_releases_rank0():
    # 192.0.2.55 (TEST-NET-1) is no address of this host: rank 1 cannot listen there
    proc = mpirun(2, "--path", "host", "--sizes", "8", env={"GDRLAB_MPI_HOST": "192.0.2.55"}, timeout_s=90)
    assert proc.returncode != 0
    assert "rank 1 could not start its server" in proc.stderr


@needs_mpi
def test_local_peer_option_is_refused():
    proc = mpirun(2, "--path", "host", "--local-peer", "thread", "--json")
    assert proc.returncode != 0 and "--local-peer" in json.loads(proc.stdout)["error"]["message"]


@needs_mpi
def test_warmup_and_window_are_accepted():
    proc = mpirun(2, "--path", "host", "--sizes", "4K", "--warmup", "3", "--window", "2", "--iters", "5", "--json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["rows"]
    assert row["verified"] is True and row["iters"] == 5


@needs_mpi
def test_peer_option_is_refused():
    proc = mpirun(2, "--path", "host", "--peer", "127.0.0.1:1", "--json")
    assert proc.returncode != 0 and "exclude each other" in json.loads(proc.stdout)["error"]["message"]


def test_listen_address(monkeypatch):
    monkeypatch.delenv("GDRLAB_MPI_HOST", raising=False)
    assert mpi.listen_address("nodeA", "nodeA") == "127.0.0.1"
    # the route from this host to "localhost" leaves from a loopback address
    assert mpi.listen_address("this-host", "localhost").startswith("127.")
    monkeypatch.setenv("GDRLAB_MPI_HOST", "10.1.2.3")
    assert mpi.listen_address("nodeA", "nodeA") == "10.1.2.3"


def test_missing_mpi4py_is_unavailable_with_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # makes `from mpi4py import MPI` fail
    with pytest.raises(Unavailable, match="pip install mpi4py"):
        mpi.import_mpi()


def test_importing_gdrlab_does_not_import_mpi4py():
    code = "import sys, gdrlab, gdrlab.cli, gdrlab.commands.bench; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_listen_address_prefers_the_reported_peer_addresses(monkeypatch):
    monkeypatch.delenv("GDRLAB_MPI_HOST", raising=False)
    # an unresolvable peer name, but the peer reported 127.0.0.1: the route to it is loopback
    assert mpi.listen_address("a", "no-such-host.invalid", ["127.0.0.1"]).startswith("127.")
    assert all(not a.startswith("127.") for a in mpi.own_addresses())
