"""``gdrlab bench --wire mpi`` between the two ranks of ``mpirun -n 2``: host rows measured and
verified here, GPU memory refused with what is missing (this machine's Open MPI is built without
CUDA and has no GPU), and the CUDA-awareness check on its own."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_mpi import (  # the same mpirun and mpi4py checks as the --mpi tests
    MPIRUN,
    _mpi_missing,
)

from gdrlab.transfer import mpi

_MISSING = _mpi_missing()
if _MISSING is not None and os.environ.get("CI") == "true" and "asan" not in os.environ.get("LD_PRELOAD", ""):
    pytest.fail(f"mpirun test cannot run in CI: {_MISSING}", pytrace=False)
needs_mpi = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


def mpirun(n: int, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """``python -m gdrlab bench --wire mpi ARGS`` as ``n`` ranks; a hang kills the group and fails."""
    version = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True).stdout
    flags = ["--allow-run-as-root", "--oversubscribe"] if "Open MPI" in version or "OpenRTE" in version else []
    cmd = [MPIRUN, *flags, "-n", str(n), sys.executable, "-m", "gdrlab", "bench", "--wire", "mpi", *args]
    # a process that ran MPI_Init (an earlier in-process mpi4py import) leaves OMPI_/PMIX_ variables
    # that would make this mpirun join it instead of starting a job of its own
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            cwd=Path(__file__).resolve().parents[2], env=env)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"mpirun -n {n} hung for {timeout_s} s; stderr:\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _in_a_child(code: str) -> str:
    """Run ``code`` in a fresh interpreter: importing mpi4py.MPI here would initialise MPI in the
    test process itself, and the mpirun jobs started after it would not start cleanly."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _library_is_cuda_aware() -> bool:
    return _in_a_child("from gdrlab.transfer import mpi; print(mpi.cuda_support()[0])") == "True"


@needs_mpi
def test_host_memory_rows_are_measured_and_verified():
    proc = mpirun(2, "--src-mem", "pageable", "--dst-mem", "pageable", "--sizes", "8,4K,1M", "--iters", "20",
                  "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # rank 0 alone prints: one document
    rows = doc["rows"]
    assert [r["size"] for r in rows] == [8, 4096, 1 << 20]
    for r in rows:
        assert (r["path"], r["wire"], r["verified"], r["src_mem"], r["dst_mem"]) == ("mpi", "mpi", True, "pageable",
                                                                                     "pageable")
        assert 0 < r["lat_min_us"] <= r["lat_p50_us"] <= r["lat_p99_us"] and r["bw_gbps"] > 0
        assert r["protocol"].startswith("chosen by ")
    assert doc["provenance"]["kind"] == "live" and doc["provenance"]["ranks"] == 2


@needs_mpi
def test_gpu_memory_is_refused_naming_what_is_missing():
    if _library_is_cuda_aware():
        pytest.skip("this MPI library is CUDA-aware: the refusal cannot be shown here (the GPU test covers it)")
    proc = mpirun(2, "--src-mem", "device", "--dst-mem", "device", "--sizes", "8", "--json")
    assert proc.returncode != 0
    err = json.loads(proc.stdout)["error"]
    assert err["type"] == "Unavailable"
    assert "not CUDA-aware" in err["message"] or "cannot tell whether" in err["message"]
    assert "rank 0 (device memory) and rank 1 (device memory)" in err["message"]  # said once for both


@needs_mpi
def test_one_rank_or_a_foreign_option_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "gdrlab", "bench", "--wire", "mpi", "--sizes", "8"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0 and "exactly 2 ranks" in proc.stderr
    proc = mpirun(2, "--peer", "h:1", "--sizes", "8")
    assert "does not take --peer" in proc.stderr
    assert proc.stderr.count("does not take --peer") == 1  # rank 0 alone says it


@needs_mpi
def test_cuda_support_asks_the_loaded_library():
    out = json.loads(_in_a_child(
        "import json\nfrom mpi4py import MPI\nfrom gdrlab.transfer import mpi\n"
        "print(json.dumps([mpi.loaded_mpi_libraries(), mpi.cuda_support(MPI), mpi.cuda_support(MPI, libraries=[])]))"))
    libs, (aware, why), (unknown, _) = out
    assert libs and all("libmpi" in os.path.basename(p) for p in libs)
    assert aware in (True, False) and "MPIX_Query_cuda_support()" in why
    assert unknown is None  # without a library that has the function, it cannot tell: None, not False


def test_loaded_libraries_read_from_a_memory_map(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1234    /opt/ompi/lib/libmpi.so.40.30.4\n"
                    "7f01-7f02 r-xp 00000000 08:01 1235    /opt/ompi/lib/libmpi.so.40.30.4\n"
                    "7f02-7f03 r-xp 00000000 08:01 99      /usr/lib/libc.so.6\n"
                    "7f03-7f04 rw-p 00000000 00:00 0 \n"
                    "7f04-7f05 r-xp 00000000 08:01 77      /opt/my dir/libmpi_mpifh.so.40\n")
    assert mpi.loaded_mpi_libraries(str(maps)) == ["/opt/ompi/lib/libmpi.so.40.30.4", "/opt/my dir/libmpi_mpifh.so.40"]
    assert mpi.loaded_mpi_libraries(str(tmp_path / "absent")) == []
