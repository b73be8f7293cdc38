"""Record lab 06's storage dataset: a file read into GPU memory three ways. Run on a GPU machine:

    python3 bench/record_storage.py OUTDIR [--prefix h200] [--quick]

For each size (4 KiB to 1 GiB, powers of 4; median of several repetitions) it times

* ``cufile``: ``cuFileRead`` of the file into GPU memory (libcufile, GPUDirect Storage's API);
* ``pinned_read_copy``: ``read()`` into pinned (page-locked) host memory, then a host-to-device copy;
* ``pageable_read_copy``: ``read()`` into ordinary (pageable) host memory, then the same copy;

with the file on a tmpfs (``/dev/shm``: the bytes are already in memory) and on a disk-backed
filesystem, there both ``cold`` (the file's pages dropped from the page cache before every read,
with ``posix_fadvise(DONTNEED)``, which needs no root; ``mincore`` checks it worked) and ``warm``
(the file read once first, so it sits in the page cache).

It writes OUTDIR/<prefix>-storage-reads.csv (one row per storage, cache state, method and size)
and OUTDIR/<prefix>-storage-reads.json, the provenance sidecar in the form of
``gdrlab/data/recorded`` (``{"provenance": {...}, "report": {...}}``: hardware, date, command, and
which mode cuFile ran in and why). Copy both into gdrlab/data/recorded/; lab 06 reads them.

**Why libcufile through ctypes, not KvikIO.** The script must run with the machine's plain
``python3`` and nothing installed: ctypes opens ``libcufile.so.0`` and ``libcuda.so.1`` with
dlopen the way the engine opens its libraries (gdrlab/hw/storage.py, stdlib only, is loaded by
file path). It also reaches ``cuFileDriverGetProperties``, which says whether the nvidia-fs
driver answered and whether compatibility mode is allowed. KvikIO (``kvikio-cu13`` on PyPI) is a
better library for applications (thread pool, its own compat mode), but it is an extra wheel and
its own compat mode would hide which mode *cuFile* used.

**The mode cuFile used** is reported from four sources: the library's driver properties (the
nvidia-fs version it saw: 0 when the module is absent; the compat-mode flag), ``cufile.json``
(``allow_compat_mode``, ``force_compat_mode``, ``use_pci_p2pdma``), whether ``nvidia_fs`` is
loaded, and, where it is, whether its read counter (/proc/driver/nvidia-fs/stats) grew during
the cuFile reads (it grows only for GDS proper). ``gdscheck -p`` is run where it is installed and
cuFile's own log is kept (OUTDIR/cufile.log); the sidecar carries both.

Exit status 0 whenever it could write the files; every step it could not do is printed at the end
and listed in the sidecar (``report.could_not``). Finishes in under 4 minutes (``--budget-s``).
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import glob
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gdrlab import __version__, provenance  # light: the standard library only

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = [4 * KiB * 4 ** k for k in range(10)]          # 4 KiB ... 1 GiB
QUICK_SIZES = [4 * KiB * 4 ** k for k in range(7)]     # 4 KiB ... 16 MiB
COLUMNS = {
    "storage": "tmpfs (/dev/shm) or disk (a disk-backed filesystem, see report.locations)",
    "cache": "memory (tmpfs), cold (page cache dropped before every read) or warm (file in the page cache)",
    "method": "cufile, pinned_read_copy or pageable_read_copy",
    "size": "bytes read (the file's first bytes) into GPU memory",
    "reps": "repetitions timed",
    "t_p50_us": "median time of one read into GPU memory, microseconds",
    "t_min_us": "fastest repetition, microseconds",
    "t_max_us": "slowest repetition, microseconds",
    "bw_gbps": "size / t_p50_us, GB/s (10^9 B/s)",
    "read_p50_us": "read() part of the two host paths, median, microseconds",
    "copy_p50_us": "host-to-device copy part of the two host paths, median, microseconds",
    "cufile_mode": "cufile rows: compat or gds (see report.mode_evidence)",
    "o_direct": "cufile rows: the file was opened with O_DIRECT (bypasses the page cache)",
    "resident_before": "disk rows: fraction of the bytes in the page cache just before the last read (mincore)",
    "verified": "bytes at three offsets of GPU memory equal the file's after the last read",
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_storage_module():
    spec = importlib.util.spec_from_file_location("gdrlab_hw_storage", ROOT / "gdrlab" / "hw" / "storage.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def hardware() -> dict:
    hw: dict = {"host": platform.node(), "kernel": platform.release()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                hw["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    q = "name,driver_version,pcie.link.gen.max,pcie.link.width.current,pci.bus_id,memory.total"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits"],
                             check=False, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        name, drv, gen, width, bus, mem = [x.strip() for x in out[0].split(",")]
        hw.update(gpu=name, driver=drv, pcie_max_gen=int(gen), pcie_width=int(width), pci_bus_id=bus,
                  gpu_memory_mib=int(mem), gpu_count=len(out))
    except (OSError, IndexError, ValueError, subprocess.TimeoutExpired) as exc:
        hw["gpu"] = f"unknown GPU (nvidia-smi: {exc})"
    return hw


def hw_label(hw: dict) -> str:
    link = f", PCIe Gen{hw['pcie_max_gen']} x{hw['pcie_width']}" if "pcie_width" in hw else ""
    drv = f", driver {hw['driver']}" if "driver" in hw else ""
    return f"{hw['gpu']}{link}{drv}, {hw.get('cpu', 'unknown CPU')}"


def gdscheck() -> list[str]:
    cands = [shutil.which("gdscheck"), "/usr/local/cuda/gds/tools/gdscheck",
             *sorted(glob.glob("/usr/local/cuda-*/gds/tools/gdscheck"))]
    for c in cands:
        if c and os.access(c, os.X_OK):
            try:
                p = subprocess.run([c, "-p"], check=False, capture_output=True, text=True, timeout=60)
                return [f"$ {c} -p (exit {p.returncode})"] + (p.stdout + p.stderr).splitlines()[:200]
            except (OSError, subprocess.TimeoutExpired) as exc:
                return [f"{c} -p failed: {exc}"]
    return []


def write_file(path: Path, size: int) -> None:
    """A file of ``size`` bytes: a random 64 MiB block repeated, each MiB stamped with its index."""
    block = bytearray(os.urandom(min(size, 64 * MiB)))
    with open(path, "wb") as f:
        done = 0
        while done < size:
            n = min(len(block), size - done)
            for m in range(0, n, MiB):
                block[m:m + 8] = ((done + m) // MiB).to_bytes(8, "little")
            f.write(memoryview(block)[:n])
            done += n
        f.flush()
        os.fsync(f.fileno())


def pick_disk_dir(st, wanted: int, given: str | None) -> tuple[str | None, str]:
    cands = [given] if given else [str(ROOT), "/var/tmp", os.path.expanduser("~"), "/tmp"]
    why = []
    for d in cands:
        if not d or not os.path.isdir(d) or not os.access(d, os.W_OK):
            why.append(f"{d}: not a writable folder")
            continue
        fs = st.filesystem_of(d)
        if fs["fstype"] in ("tmpfs", "ramfs", "devtmpfs"):
            why.append(f"{d}: on {fs['fstype']}, not a disk")
            continue
        free = shutil.disk_usage(d).free
        if free < wanted + 2 * GiB:
            why.append(f"{d}: {free / GiB:.1f} GiB free, too little")
            continue
        return d, f"{d} ({fs['fstype']} on {fs['device']}, mounted at {fs['mount']})"
    return None, "; ".join(why)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--prefix", default="h200")
    ap.add_argument("--quick", action="store_true", help="sizes up to 16 MiB, fewer repetitions")
    ap.add_argument("--tmpfs-dir", default="/dev/shm")
    ap.add_argument("--disk-dir", default=None, help="a folder on a disk-backed filesystem (default: the "
                                                     "repository, /var/tmp, ~ or /tmp, the first on a disk)")
    ap.add_argument("--budget-s", type=float, default=200.0, help="stop measuring after this many seconds")
    a = ap.parse_args()
    start = time.monotonic()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("CUFILE_LOGFILE_PATH", str((out / "cufile.log").resolve()))
    st = load_storage_module()
    could_not: list[str] = []
    notes: list[str] = []
    sizes = QUICK_SIZES if a.quick else SIZES
    hw = hardware()
    log(f"recording storage reads on {hw_label(hw)}")
    status = st.probe()
    log(f"cuFile: {status['mode']}: {status['why']}")
    report: dict = {"cufile_probe": status, "columns": COLUMNS, "locations": {}, "could_not": could_not,
                    "notes": notes, "mode_evidence": {}}
    report["gdscheck"] = gdscheck() or ["gdscheck not found (looked in PATH and /usr/local/cuda*/gds/tools)"]
    rows: list[dict] = []

    # where the files go, and how big they can be
    locations = []
    sh = a.tmpfs_dir
    if os.path.isdir(sh) and os.access(sh, os.W_OK):
        free = shutil.disk_usage(sh).free
        cap = max([s for s in sizes if s <= free - 256 * MiB], default=0)
        if cap < max(sizes):
            could_not.append(f"tmpfs {sh} has {free / MiB:.0f} MiB free: sizes above {cap} B skipped there")
        if cap:
            locations.append(("tmpfs", sh, cap, ["memory"]))
    else:
        could_not.append(f"no writable tmpfs at {sh}: tmpfs rows skipped")
    disk, why = pick_disk_dir(st, max(sizes), a.disk_dir)
    if disk:
        locations.append(("disk", disk, max(sizes), ["cold", "warm"]))
    else:
        could_not.append(f"no disk-backed folder with room: disk rows skipped ({why})")

    try:
        reader = st.StorageReader(max(sizes))
    except RuntimeError as exc:
        could_not.append(f"no GPU measurement: {exc}")
        reader = None
    if reader is not None:
        report["driver_properties"] = reader.props
        report["buf_registered"] = reader.buf_registered
        notes.extend(reader.notes)
        if reader.cufile is None:
            could_not.append(f"cuFile rows skipped: {reader.cufile_why}")
        props = reader.props
        if props:
            report["mode_evidence"]["driver_properties"] = (
                f"cuFileDriverGetProperties: nvidia-fs version {props['nvfs_major_version']}."
                f"{props['nvfs_minor_version']} (0.0: the library found no nvidia-fs driver), compat mode "
                f"{'allowed' if props['allow_compat_mode'] else 'not allowed'}")
    deadline = start + a.budget_s
    for storage, folder, cap, states in locations if reader is not None else []:
        path = Path(folder) / f"gdrlab-storage-{os.getpid()}.bin"
        fs = st.filesystem_of(folder)
        # the checkout's own path says where someone keeps it, not what was measured
        shown = "the gdrlab checkout" if Path(folder).resolve() == Path(ROOT).resolve() else folder
        loc = {"folder": shown, "fstype": fs["fstype"], "device": fs["device"], "mount": fs["mount"], "file_bytes": cap}
        report["locations"][storage] = loc
        try:
            t0 = time.monotonic()
            write_file(path, cap)
            log(f"{storage}: wrote {cap} B to {path} ({fs['fstype']}) in {time.monotonic() - t0:.1f} s")
            fd = os.open(path, os.O_RDONLY)
            try:
                cfd, o_direct = os.open(path, os.O_RDONLY | os.O_DIRECT), True
            except OSError as exc:
                cfd, o_direct = fd, False
                notes.append(f"{storage}: O_DIRECT open refused ({exc.strerror}): cuFile reads a buffered file there")
            loc["o_direct_for_cufile"] = o_direct
            fh = None
            if reader.cufile is not None:
                try:
                    fh = reader.register(cfd)
                except RuntimeError as exc:
                    could_not.append(f"{storage}: cuFile rows skipped: {exc}")
            for cache in states:
                if cache == "cold":
                    st.drop_file_cache(fd)
                    frac = st.resident_fraction(fd, cap)
                    loc["cold_drop"] = ("posix_fadvise(DONTNEED) before every read; resident after a drop: "
                                        + ("unknown (mincore failed)" if frac is None else f"{frac:.1%}"))
                    if frac is not None and frac > 0.05:
                        could_not.append(f"{storage}: the page cache kept {frac:.0%} of the file after DONTNEED: "
                                         "'cold' rows are partly warm")
                for method in st.METHODS:
                    if method == "cufile" and fh is None:
                        continue
                    for size in sizes:
                        if size > cap:
                            continue
                        if time.monotonic() > deadline:
                            could_not.append(f"time budget spent: {storage}/{cache}/{method} from {size} B on skipped")
                            break
                        try:
                            rows.append(measure(st, reader, storage, cache, method, size, fd, fh, o_direct, a.quick))
                        except (RuntimeError, OSError) as exc:
                            could_not.append(f"{storage}/{cache}/{method} at {size} B: {exc}")
                            break
                    log(f"  {storage} {cache} {method}: done at {time.monotonic() - start:.0f} s")
            if fh is not None:
                reader.deregister(fh)
            if cfd != fd:
                os.close(cfd)
            os.close(fd)
        except OSError as exc:
            could_not.append(f"{storage}: {exc}")
        finally:
            try:
                path.unlink()
            except OSError:
                pass
    if reader is not None:
        reader.close()
    modes = sorted({r["cufile_mode"] for r in rows if r["method"] == "cufile"})
    report["mode_evidence"]["per_row"] = (
        "cufile_mode is 'gds' when nvidia_fs's read counter (/proc/driver/nvidia-fs/stats) grew during the "
        "row's reads and 'compat' when it did not; without the module it is the mode cuFile's settings "
        "leave (report.cufile_probe)")
    report["mode_evidence"]["nvidia_fs"] = status["nvidia_fs"]["reason"]
    report["mode_evidence"]["cufile_json"] = status["cufile_json"]
    report["cufile_modes_seen"] = modes
    logf = out / "cufile.log"
    if logf.is_file():
        report["cufile_log_tail"] = logf.read_text(errors="replace").splitlines()[-60:]
    name = f"{a.prefix}-storage-reads"
    with open(out / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(rows)
    command = "python3 bench/record_storage.py OUTDIR" + (" --quick" if a.quick else "")
    prov = provenance.recorded(hw_label(hw), dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                               hardware_detail=hw, command=command, gdrlab=__version__,
                               csv=f"{name}.csv")
    (out / f"{name}.json").write_text(json.dumps({"provenance": prov, "report": report}, indent=1, default=str))
    log(f"wrote {out / (name + '.csv')} ({len(rows)} rows) and {out / (name + '.json')} in "
        f"{time.monotonic() - start:.0f} s; cuFile mode(s) seen: {', '.join(modes) or 'none'}")
    print("could not do:" if could_not else "could not do: nothing (every step ran)")
    for c in could_not:
        print(f"  - {c}")
    return 0


def measure(st, reader, storage, cache, method, size, fd, fh, o_direct, quick) -> dict:
    reps = (5 if size <= MiB else 3 if size <= 64 * MiB else 2) if quick else \
        (20 if size <= MiB else 10 if size <= 64 * MiB else 5)
    times, reads, copies = [], [], []
    nvfs_before = st.nvidia_fs_reads()
    resident = None
    t_cell = time.monotonic()
    if cache == "warm":
        reader.read_host(fd, size, "pageable")              # bring the bytes into the page cache
    for i in range(reps):
        last = i == reps - 1 or (i >= 2 and time.monotonic() - t_cell > 10.0)
        if cache == "cold":
            st.drop_file_cache(fd)
        if last:
            reader.clear_device(size)
            if storage == "disk":
                resident = st.resident_fraction(fd, size)
        if method == "cufile":
            times.append(reader.read_cufile(fh, size))
        else:
            r, c = reader.read_host(fd, size, "pinned" if method.startswith("pinned") else "pageable")
            reads.append(r)
            copies.append(c)
            times.append(r + c)
        if last:
            break
    ok = all(reader.device_bytes(off) == os.pread(fd, 8, off) for off in (0, (size // 2) & ~7, size - 8))
    mode = ""
    if method == "cufile":
        after = st.nvidia_fs_reads()
        if nvfs_before is not None and after is not None:
            mode = "gds" if after > nvfs_before else "compat"
        else:
            # no nvidia_fs read counter: the mode cuFile's settings and modules leave it
            mode = {"compat": "compat", "gds": "gds (nvidia_fs counter unreadable)"}.get(
                _expected_mode_cache(st), "unknown (see cufile.log)")
    p50 = statistics.median(times)
    return {"storage": storage, "cache": cache, "method": method, "size": size, "reps": len(times),
            "t_p50_us": round(p50 * 1e6, 3), "t_min_us": round(min(times) * 1e6, 3),
            "t_max_us": round(max(times) * 1e6, 3), "bw_gbps": round(size / p50 / 1e9, 6),
            "read_p50_us": round(statistics.median(reads) * 1e6, 3) if reads else "",
            "copy_p50_us": round(statistics.median(copies) * 1e6, 3) if copies else "",
            "cufile_mode": mode, "o_direct": o_direct if method == "cufile" else "",
            "resident_before": "" if resident is None else round(resident, 4), "verified": ok}


_MODE: dict = {}


def _expected_mode_cache(st) -> str:
    if "mode" not in _MODE:
        _MODE["mode"] = st.probe()["mode"]
    return _MODE["mode"]


if __name__ == "__main__":
    sys.exit(main())
