"""GPUDirect Storage probe (gdrlab/hw/storage.py) and the storage recorder (bench/record_storage.py).

The probe reads cufile.json (comments and all), /sys/module/nvidia_fs and the nvidia-fs stats from
a recorded root, and says which mode cuFile will use. The recorder runs end to end here against
two stand-ins built with cc: a libcuda.so.1 whose "device" memory is host memory and a
libcufile.so.0 whose cuFileRead is a pread (what compatibility mode does, minus the copy).
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gdrlab.hw import storage

ROOT = Path(__file__).resolve().parents[2]

STOCK = """// cufile.json as shipped: comments, a URL in a string, a trailing comma
{
    "logging": { "dir": "/var/log", /* where */ "level": "ERROR" },
    "properties": {
        // compat mode: POSIX reads through a bounce buffer
        "allow_compat_mode": true,
        "use_pci_p2pdma": false,
        "note": "see https://docs.nvidia.com/gpudirect-storage/",
    },
}
"""


def _root(tmp_path: Path, cufile: str | None = STOCK, nvfs: bool = False, reads: int | None = None) -> Path:
    r = tmp_path / "root"
    (r / "etc").mkdir(parents=True)
    (r / "proc").mkdir()
    (r / "proc/modules").write_text("nvidia 1 0 - Live 0x0\n" + ("nvidia_fs 1 0 - Live 0x0\n" if nvfs else ""))
    if cufile is not None:
        (r / "etc/cufile.json").write_text(cufile)
    if nvfs:
        (r / "sys/module/nvidia_fs").mkdir(parents=True)
        (r / "sys/module/nvidia_fs/version").write_text("2.26.6\n")
    if reads is not None:
        (r / "proc/driver/nvidia-fs").mkdir(parents=True)
        (r / "proc/driver/nvidia-fs/stats").write_text(
            f"GDS Version: 1.15\nNVFS statistics(ver: 4.0)\nReads\t\t\t: n={reads} ok={reads} err=0 readMiB=1\n")
    return r


def test_cufile_json_with_comments_parses():
    doc = storage.parse_cufile_json(STOCK)
    assert doc["properties"]["allow_compat_mode"] is True
    assert doc["properties"]["note"].startswith("see https://")       # // inside a string is kept
    with pytest.raises(ValueError, match="not valid JSON"):
        storage.parse_cufile_json("{ nope }")


def test_h200_like_machine_runs_in_compat_mode(tmp_path):
    # the H200 of the curriculum: libcufile and /etc/cufile.json, nvidia_fs not loaded
    r = _root(tmp_path)
    fs = storage.nvidia_fs_status(str(r))
    assert fs["loaded"] is False and "not loaded" in fs["reason"]
    cfg = storage.cufile_config(str(r))
    assert cfg["found"] and cfg["properties"] == {"allow_compat_mode": True, "use_pci_p2pdma": False}
    mode, why = storage.expected_mode(True, fs["loaded"], cfg["properties"])
    assert mode == "compat" and "bounce buffer" in why


@pytest.mark.parametrize("lib,nvfs,props,want", [
    (False, True, {}, "none"),
    (True, True, {}, "gds"),
    (True, True, {"force_compat_mode": True}, "compat"),
    (True, False, {"use_pci_p2pdma": True}, "gds or compat"),
    (True, False, {}, "compat"),                       # allow_compat_mode defaults to true
    (True, False, {"allow_compat_mode": False}, "refuses"),
])
def test_expected_mode_table(lib, nvfs, props, want):
    assert storage.expected_mode(lib, nvfs, props)[0] == want


def test_nvidia_fs_loaded_with_version_and_read_counter(tmp_path):
    r = _root(tmp_path, nvfs=True, reads=42)
    fs = storage.nvidia_fs_status(str(r))
    assert fs == {"loaded": True, "version": "2.26.6", "reason": "loaded"}
    assert storage.nvidia_fs_reads(str(r)) == 42
    assert storage.nvidia_fs_reads(str(tmp_path)) is None


def test_probe_of_a_recorded_root_and_doctor_lines(tmp_path):
    rep = storage.probe(str(_root(tmp_path, cufile=None)))
    assert rep["libcufile"]["found"] is False and "not probed" in rep["libcufile"]["reason"]
    assert rep["mode"] == "none"
    lines = storage.doctor_lines(rep)
    assert lines[1].startswith("Storage") and any("cuFile mode: none" in ln for ln in lines)
    assert any("not readable" in ln for ln in lines)
    assert storage.doctor_lines(None) == []


def test_probe_of_this_machine_says_something():
    rep = storage.probe()
    assert rep["mode"] in ("none", "compat", "gds", "gds or compat", "refuses") and rep["why"]
    if not rep["libcufile"]["found"]:
        assert rep["libcufile"]["reason"]


def test_doctor_prints_the_storage_section():
    r = subprocess.run([sys.executable, "-m", "gdrlab", "doctor"], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Storage (GPUDirect Storage, cuFile)" in r.stdout and "cuFile mode:" in r.stdout


# ----------------------------------------------------------------------------- the recorder, on stand-ins
FAKE_CUDA = r"""
#include <stdlib.h>
#include <string.h>
static int ctx;
int cuInit(unsigned f) { (void)f; return 0; }
int cuGetErrorName(int r, const char** s) { (void)r; *s = "CUDA_ERROR_UNKNOWN"; return 0; }
int cuDeviceGet(int* d, int o) { if (o) return 101; *d = 0; return 0; }
int cuDevicePrimaryCtxRetain(void** c, int d) { (void)d; *c = &ctx; return 0; }
int cuDevicePrimaryCtxRelease(int d) { (void)d; return 0; }
int cuCtxSetCurrent(void* c) { (void)c; return 0; }
int cuCtxSynchronize(void) { return 0; }
int cuMemAlloc_v2(unsigned long long* p, size_t n) { *p = (unsigned long long)aligned_alloc(4096, (n + 4095) / 4096 * 4096); return 0; }
int cuMemFree_v2(unsigned long long p) { free((void*)p); return 0; }
int cuMemHostAlloc(void** p, size_t n, unsigned f) { (void)f; *p = malloc(n); return 0; }
int cuMemFreeHost(void* p) { free(p); return 0; }
int cuMemcpyHtoD_v2(unsigned long long d, const void* s, size_t n) { memcpy((void*)d, s, n); return 0; }
int cuMemcpyDtoH_v2(void* d, unsigned long long s, size_t n) { memcpy(d, (void*)s, n); return 0; }
int cuMemsetD8_v2(unsigned long long d, unsigned char v, size_t n) { memset((void*)d, v, n); return 0; }
"""

FAKE_CUFILE = r"""
#include <stddef.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>
typedef struct { int err; int cu_err; } E;
typedef struct { unsigned major, minor; size_t poll, maxio; unsigned dstatus, dcontrol; } N;
typedef struct { N nvfs; unsigned fflags, cache, per_buf, pinned, batch, timeout; } P;
typedef struct { int type; union { int fd; void* h; } handle; const void* ops; } D;
static int opened, registered;
E cuFileDriverOpen(void) { E e = {0, 0}; opened = 1; return e; }
E cuFileDriverClose_v2(void) { E e = {0, 0}; opened = 0; return e; }
E cuFileDriverGetProperties(P* p) { E e = {0, 0}; p->nvfs.major = 0; p->nvfs.minor = 0;
  p->nvfs.dcontrol = 1u << 1; p->nvfs.dstatus = 0; p->cache = 131072; p->per_buf = 1024; return e; }
E cuFileHandleRegister(void** fh, D* d) { E e = {0, 0}; if (d->type != 1 || d->handle.fd < 0) e.err = 5005;
  if (getenv("FAKE_CUFILE_REFUSE")) e.err = 5027;  /* as in a container without udev: no volume attributes */
  *fh = (void*)(long)(d->handle.fd + 1); return e; }
void cuFileHandleDeregister(void* fh) { (void)fh; }
E cuFileBufRegister(const void* p, size_t n, int f) { E e = {0, 0}; (void)p; (void)n; (void)f; registered = 1; return e; }
E cuFileBufDeregister(const void* p) { E e = {0, 0}; (void)p; registered = 0; return e; }
ssize_t cuFileRead(void* fh, void* dev, size_t n, off_t foff, off_t doff) {
  if (!opened) return -5001;
  int fd = (int)(long)fh - 1; size_t done = 0;
  while (done < n) { ssize_t r = pread(fd, (char*)dev + doff + done, n - done, foff + done); if (r <= 0) return -1; done += r; }
  return (ssize_t)n; }
"""


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler for the stand-in libraries")
    d = tmp_path_factory.mktemp("storage_stand_ins")
    for name, src in (("libcuda.so.1", FAKE_CUDA), ("libcufile.so.0", FAKE_CUFILE)):
        (d / f"{name}.c").write_text(src)
        r = subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-Wl,-soname,{name}", str(d / f"{name}.c"), "-o",
                            str(d / name)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    return d


def test_recorder_end_to_end_on_stand_ins(stand_ins, tmp_path):
    out = tmp_path / "out"
    disk = tmp_path / "disk"
    disk.mkdir()
    fs = storage.filesystem_of(str(disk))
    if fs["fstype"] in ("tmpfs", "ramfs"):
        pytest.skip(f"{disk} is on {fs['fstype']}: the recorder wants a disk-backed folder")
    cfg = tmp_path / "cufile.json"
    cfg.write_text(STOCK)
    env = dict(os.environ, LD_LIBRARY_PATH=f"{stand_ins}:{os.environ.get('LD_LIBRARY_PATH', '')}",
               CUFILE_ENV_PATH_JSON=str(cfg))
    tmpfs = "/dev/shm" if os.access("/dev/shm", os.W_OK) else str(tmp_path / "noshm")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "record_storage.py"), str(out), "--quick",
                        "--disk-dir", str(disk), "--tmpfs-dir", tmpfs, "--budget-s", "100"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "could not do:" in r.stdout
    rows = list(csv.DictReader((out / "h200-storage-reads.csv").read_text().splitlines()))
    doc = json.loads((out / "h200-storage-reads.json").read_text())
    assert doc["provenance"]["kind"] == "recorded" and doc["provenance"]["csv"] == "h200-storage-reads.csv"
    rep = doc["report"]
    assert rep["cufile_probe"]["mode"] == "compat" and rep["cufile_probe"]["cufile_json"]["path"] == str(cfg)
    assert rep["driver_properties"]["nvfs_major_version"] == 0 and rep["driver_properties"]["allow_compat_mode"]
    kinds = {(x["storage"], x["cache"], x["method"]) for x in rows}
    for cache in ("cold", "warm"):
        for method in storage.METHODS:
            assert ("disk", cache, method) in kinds
    assert all(x["verified"] == "True" for x in rows), [x for x in rows if x["verified"] != "True"][:2]
    assert {x["cufile_mode"] for x in rows if x["method"] == "cufile"} == {"compat"}
    assert all(float(x["t_p50_us"]) > 0 and int(x["reps"]) >= 2 for x in rows)
    host = [x for x in rows if x["method"] != "cufile"]
    assert all(float(x["read_p50_us"]) > 0 and float(x["copy_p50_us"]) > 0 for x in host)
    assert not list(disk.iterdir()), "the recorder removes its scratch files"
    # the lab reads what the recorder wrote
    from gdrlab.labsupport import lab06
    df, why = lab06.recorded_storage(str(out))
    assert df is not None and len(df) == len(rows) and "recorded" in why


def test_the_lab_measures_without_cufile_where_cufile_refuses_the_file(stand_ins, tmp_path):
    """A container without udev: cuFile loads but cuFileHandleRegister fails (error 5027 on the
    H200 host, 2026-12-04). The lab's live cell still measures read() + copy and says why there
    are no cuFile rows, instead of stopping Run All."""
    code = ("import json; from gdrlab.labsupport import lab06\n"
            f"df, why = lab06.live_storage([4096, 65536], folder={str(tmp_path)!r})\n"
            "print(json.dumps({'methods': sorted(set(df['method'])), 'why': why}))")
    env = dict(os.environ, LD_LIBRARY_PATH=f"{stand_ins}:{os.environ.get('LD_LIBRARY_PATH', '')}",
               FAKE_CUFILE_REFUSE="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert "cufile" not in doc["methods"] and len(doc["methods"]) == 2, doc
    assert "cuFile refused the file" in doc["why"] and "5027" in doc["why"], doc
