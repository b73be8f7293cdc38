"""Record the datasets the labs show on machines without a GPU. Run on a GPU machine:

    python bench/record_h200.py OUTDIR [--prefix h200] [--quick] [--no-storage] [--storage-only]

Writes OUTDIR/<prefix>-*.json, each {"provenance": {...}, "rows": [...]} (doctor: "report").
Provenance names the GPU, its PCIe link, the driver, the host CPU, the date and the command.

The last stage is lab 06's storage recording: bench/record_storage.py's own ``main`` (imported,
not copied) writes OUTDIR/<prefix>-storage-reads.csv with its JSON sidecar (hardware, date, the
command, and which mode cuFile ran in and why) and OUTDIR/cufile.log. ``--storage-only`` runs
just that stage; ``--no-storage`` skips it.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import platform
import sys
import time
from pathlib import Path

import gdrlab
from gdrlab import engine, provenance

MiB = 1 << 20
GiB = 1 << 30


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def nvml_handle():
    try:
        import pynvml
    except ImportError:
        return None, None
    try:
        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as exc:  # NVML missing or refused
        log(f"NVML unavailable: {exc}")
        return None, None


def hardware(nv, h) -> dict:
    gpus = engine.gpus()
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    hw = {"gpu": gpus[0]["name"] if gpus else "none", "gpu_count": len(gpus),
          "pci_bus_id": gpus[0]["pci_bus_id"] if gpus else None,
          "driver_cuda_version": engine.cuda_status()["driver_version"], "cpu": cpu, "host": platform.node()}
    if nv and h:
        try:
            hw["driver"] = nv.nvmlSystemGetDriverVersion()
            hw["pcie_gen"] = nv.nvmlDeviceGetCurrPcieLinkGeneration(h)
            hw["pcie_width"] = nv.nvmlDeviceGetCurrPcieLinkWidth(h)
            hw["pcie_max_gen"] = nv.nvmlDeviceGetMaxPcieLinkGeneration(h)
            hw["bar1_total_bytes"] = nv.nvmlDeviceGetBAR1MemoryInfo(h).bar1Total
        except Exception as exc:
            log(f"NVML query failed: {exc}")
    return hw


def hw_label(hw: dict) -> str:
    link = f", PCIe Gen{hw['pcie_max_gen']} x{hw['pcie_width']}" if "pcie_width" in hw else ""
    drv = f", driver {hw['driver']}" if "driver" in hw else ""
    return f"{hw['gpu']}{link}{drv}, {hw['cpu']}"


def save(out: Path, name: str, hw: dict, command: str, rows=None, report=None) -> None:
    prov = provenance.recorded(hw_label(hw), dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                               hardware_detail=hw, command=command, gdrlab=gdrlab.__version__)
    doc = {"provenance": prov}
    if rows is not None:
        doc["rows"] = rows
    if report is not None:
        doc["report"] = report
    (out / name).write_text(json.dumps(doc, indent=1, default=float))
    log(f"wrote {out / name}")


def storage_stage(out: Path, prefix: str, quick: bool) -> int:
    """Lab 06's storage recording, by bench/record_storage.py's ``main`` (loaded by file path:
    bench/ is not a package). Returns its exit status; a failure is logged, not raised, so the
    other datasets stay written."""
    spec = importlib.util.spec_from_file_location("gdrlab_record_storage", Path(__file__).with_name("record_storage.py"))
    if spec is None or spec.loader is None:
        log("storage stage skipped: bench/record_storage.py not found")
        return 1
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    argv = [str(out), "--prefix", prefix] + (["--quick"] if quick else [])
    saved = sys.argv
    sys.argv = ["bench/record_storage.py", *argv]
    t0 = time.time()
    try:
        rc = int(mod.main() or 0)
    except Exception as exc:  # noqa: BLE001  the storage stage must not lose the datasets already written
        log(f"storage stage failed: {type(exc).__name__}: {exc}")
        rc = 1
    finally:
        sys.argv = saved
    log(f"  storage reads: {time.time() - t0:.1f} s (exit {rc}); files {prefix}-storage-reads.csv/.json")
    return rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--prefix", default="h200")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-storage", action="store_true", help="skip the storage stage (bench/record_storage.py)")
    ap.add_argument("--storage-only", action="store_true", help="run only the storage stage")
    a = ap.parse_args()
    if a.no_storage and a.storage_only:
        ap.error("--no-storage and --storage-only contradict each other")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.storage_only:
        return storage_stage(out, a.prefix, a.quick)
    nv, h = nvml_handle()
    hw = hardware(nv, h)
    log(f"recording on {hw_label(hw)}")
    p = a.prefix
    copy_sizes = "8:16M" if a.quick else "8:256M"
    for direction in ("h2d", "d2h"):
        for memory in ("pinned", "pageable"):
            t0 = time.time()
            df = gdrlab.copy_bench(direction, copy_sizes, memory=memory)
            save(out, f"{p}-copy-{direction}-{memory}.json", hw,
                 f"gdrlab.copy_bench('{direction}', '{copy_sizes}', memory='{memory}')", df.to_dict(orient="records"))
            log(f"  copy {direction} {memory}: {time.time() - t0:.1f} s")
    bench_sizes = "8:4M" if a.quick else "8:64M"
    for path in ("host", "staged", "shared", "pipelined"):
        t0 = time.time()
        df = gdrlab.bench(path=path, sizes=bench_sizes)
        save(out, f"{p}-bench-{path}.json", hw, f"gdrlab bench --path {path} --sizes {bench_sizes}",
             df.to_dict(orient="records"))
        log(f"  bench {path}: {time.time() - t0:.1f} s")
    # The same GPU paths with the peer as a second process sharing the one GPU (time-slicing).
    rows = []
    for path in ("staged", "pipelined"):
        df = gdrlab.bench(path=path, sizes="8,4K,16K,64K,1M", mode="lat", local_peer="process")
        rows += df.to_dict(orient="records")
    save(out, f"{p}-bench-process-peer.json", hw, "gdrlab bench --mode lat --local-peer process", rows)
    # Chunk size of the pipeline at one large message: the knob MVAPICH2-GDR exposes.
    rows = []
    for chunk in ([64 << 10, 256 << 10, 1 << 20] if a.quick else [16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20]):
        df = gdrlab.bench(path="pipelined", sizes=[16 * MiB if a.quick else 64 * MiB], mode="bw", chunk=chunk)
        rows += df.to_dict(orient="records")
    save(out, f"{p}-bench-pipelined-chunks.json", hw, "gdrlab bench --path pipelined --mode bw --chunk C", rows)
    # dma-buf export: what an RDMA NIC would import; the CPU cannot map it.
    rows = []
    for size in (2 * MiB, 64 * MiB, GiB):
        before = nv.nvmlDeviceGetBAR1MemoryInfo(h).bar1Used if nv else None
        buf = engine.Buffer(size, "device")
        mid = nv.nvmlDeviceGetBAR1MemoryInfo(h).bar1Used if nv else None
        try:
            d = engine.export_dmabuf(buf)
            rows.append({"size": size, "fd_size": d.size, "cpu_mmap_errno": d.cpu_mmap_errno,
                         "bar1_used_before": before, "bar1_used_after_alloc": mid,
                         "bar1_used_after": nv.nvmlDeviceGetBAR1MemoryInfo(h).bar1Used if nv else None})
            d.close()
        except gdrlab.errors.GdrlabError as exc:
            rows.append({"size": size, "error": f"{type(exc).__name__}: {exc}"})
        del buf
    save(out, f"{p}-dmabuf.json", hw, "gdrlab.engine.export_dmabuf(Buffer(size, 'device'))", rows)
    # BAR1 used while allocating device memory.
    if nv:
        rows, bufs = [], []
        total = nv.nvmlDeviceGetBAR1MemoryInfo(h).bar1Total
        rows.append({"allocated_bytes": 0, "bar1_used_bytes": nv.nvmlDeviceGetBAR1MemoryInfo(h).bar1Used,
                     "bar1_total_bytes": total})
        for i in range(1, 9):
            bufs.append(engine.Buffer(GiB, "device"))
            time.sleep(0.05)
            rows.append({"allocated_bytes": i * GiB, "bar1_used_bytes": nv.nvmlDeviceGetBAR1MemoryInfo(h).bar1Used,
                         "bar1_total_bytes": total})
        del bufs
        save(out, f"{p}-bar1.json", hw, "allocate 1 GiB device buffers, read NVML BAR1 used after each", rows)
    try:
        from gdrlab import hw as hwmod
        save(out, f"{p}-doctor.json", hw, "gdrlab doctor --json", report=hwmod.doctor_report())
    except Exception as exc:  # discovery module absent or failed: record why, not a fake report
        log(f"doctor report not recorded: {type(exc).__name__}: {exc}")
    if not a.no_storage:
        storage_stage(out, p, a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
