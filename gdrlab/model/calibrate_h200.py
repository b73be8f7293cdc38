"""Regenerate ``profiles/h200-lab.json`` from the recorded H200 measurements.

Run ``python -m gdrlab.model.calibrate_h200`` after adding recorded files to
``gdrlab/data/recorded/``: ``h200-bench-<path>.json`` (rows of ``gdrlab bench``) and
``h200-copy-<direction>-<memory>.json`` (rows of ``copy_bench``), each
``{"provenance": {...}, "rows": [...]}``. ``h200-curriculum.json`` holds the figures of the kit's
curriculum notes; a dedicated file supersedes its rows for whatever that file measures.
"""
from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

from .core import NETWORK_PATHS
from .fit import calibrate, row_target
from .profile import PROFILE_DIR, Profile, _cache

__all__ = ["RECORDED_DIR", "CURRICULUM_FILE", "recorded_files", "load_recorded", "build_h200_lab", "main"]

RECORDED_DIR = Path(__file__).resolve().parent.parent / "data" / "recorded"
CURRICULUM_FILE = "h200-curriculum.json"

_TOPOLOGY = {
    "sockets": 1,
    "peer_access": True,
    "note": "GPU0 is the single-H200 machine the copies were measured on; GPU1 is the second GPU of the "
            "2x H200 NVLink (NV18) machine the P2P rows come from. No RDMA NIC on either.",
    "devices": {
        "GPU0": {"kind": "gpu", "name": "NVIDIA H200 (PCIe Gen5 x16)", "socket": 0, "host_bridge": "socket0",
                 "switch": None},
        "GPU1": {"kind": "gpu", "name": "NVIDIA H200 (NVLink peer)", "socket": 0, "host_bridge": "socket0",
                 "switch": None},
    },
}

_DESCRIPTION = (
    "Fitted to recorded NVIDIA H200 measurements (copies on one H200 with PCIe Gen5 x16, P2P on a 2x H200 "
    "NVLink machine). The machine has no RDMA NIC (/sys/class/infiniband empty), so network paths run "
    "over the tcp wire and gdr is unavailable; gdrlab.model.borrow_nic('h200-lab', 'hopper-ndr') adds "
    "hopper-ndr's ConnectX-7 as a labelled what-if. Shows the small-message fixed cost of cudaMemcpy "
    "(about 6 us) that seed error 1's hybrid policy is really about, pageable vs pinned copies, and P2P "
    "over NVLink vs staging through host memory (about 10x the bandwidth).")


_GPU_PATHS = tuple(p for p in NETWORK_PATHS if p != "host")  # the paths that move GPU memory
SHARED_GPU_REASON = (
    "compared, not fitted: both ends of this GPU-path benchmark ran on one GPU (a local peer), so "
    "their CUDA work contended for it (see h200-peer-context.json); the model describes two "
    "endpoints with a GPU each")


def recorded_files(directory: Path | str = RECORDED_DIR) -> list[Path]:
    """The recorded H200 files present (one H200 and the 2x H200 machine), curriculum figures first."""
    d = Path(directory)
    files = sorted(set(d.glob("h200-*.json")) | set(d.glob("h200x2-*.json")))
    return sorted(files, key=lambda p: (p.name != CURRICULUM_FILE, p.name))


def _one_gpu_local_peer(prov: dict) -> bool:
    detail = prov.get("hardware_detail", {})
    one_gpu = detail.get("gpu_count", 1) == 1
    return one_gpu and "--peer" not in str(prov.get("command", ""))


def load_recorded(directory: Path | str = RECORDED_DIR) -> tuple[list[dict], dict]:
    """All rows to fit, each tagged with ``_file``, and a record of what was superseded."""
    per_file: dict[str, list[dict]] = {}
    for path in recorded_files(directory):
        doc = json.loads(path.read_text())
        shared_gpu = _one_gpu_local_peer(doc.get("provenance", {}))
        # Rows tagged with local_peer come from the peer-placement diagnosis (the same sizes
        # measured with the peer as a process and as a thread): not calibration data.
        rows = [r for r in doc.get("rows", []) if "size" in r and "local_peer" not in r and row_target(r) is not None]
        for r in rows:
            r["_file"] = path.name
            if shared_gpu and str(r.get("path")) in _GPU_PATHS:
                r["_fit"] = False
                r["_why_not_fitted"] = SHARED_GPU_REASON
        per_file[path.name] = rows
    measured_elsewhere = {row_target(r) for name, rows in per_file.items() if name != CURRICULUM_FILE
                          for r in rows} - {None}
    used, superseded = [], []
    for name, rows in per_file.items():
        for r in rows:
            tgt = row_target(r)
            if name == CURRICULUM_FILE and tgt is not None and tgt in measured_elsewhere:
                superseded.append(tgt[1])
                continue
            used.append(r)
    return used, {"files": list(per_file), "superseded_curriculum_targets": sorted(set(superseded))}


def build_h200_lab(directory: Path | str = RECORDED_DIR) -> tuple[Profile, dict]:
    """Fit ``h200-lab`` to the recorded files (does not save it)."""
    import pandas as pd

    rows, record = load_recorded(directory)
    if not rows:
        raise FileNotFoundError(f"no recorded h200-*.json files in {directory}")
    df = pd.DataFrame(rows)
    prof, report = calibrate(df, base="hopper-ndr", name="h200-lab", description=_DESCRIPTION,
                             label="recorded NVIDIA H200 measurements", topology=_TOPOLOGY)
    prof.placement = "same-host-bridge"
    for k in prof.sources:
        if k.startswith(("nic_", "p2p_read_", "p2p_write_")) or k in (
                "pcie_eff", "doorbell_us", "completion_us", "gdr_extra_us", "xsocket_hop_us"):
            prof.sources[k] = "unused (no RDMA NIC on this machine); " + prof.sources[k]
    prof.sources["bar1_bytes"] = "measured: BAR1 256 GiB (nvidia-smi, NVML) on the H200"
    prof.sources["gpu_pcie_gbps"] = "measured link PCIe Gen5 x16 (32 GT/s): 63.0 GB/s per direction"
    prof.follows = "recorded NVIDIA H200 measurements (least-squares fit)"
    prof.calibration = {**(prof.calibration or {}), **record,
                        "fitted_on": _dt.datetime.now(_dt.timezone.utc).date().isoformat(),
                        "regenerate": "python -m gdrlab.model.calibrate_h200"}
    return prof, report


def main(argv: list[str] | None = None) -> int:
    out = PROFILE_DIR / "h200-lab.json"
    prof, report = build_h200_lab()
    prof.save(out)
    _cache.pop("h200-lab", None)
    print(f"wrote {out}: {report['n']} comparisons, max |relative error| {report['max_abs_rel_err']:.1%}, "
          f"rms {report['rms_rel_err']:.1%}", file=sys.stderr)
    for e in sorted(report["rows"], key=lambda e: -abs(e["rel_err"]))[:5]:
        print(f"  {e['target']:<20} {e['size']:>10} {e['metric']:<8} measured {e['measured']:.4g} "
              f"model {e['predicted']:.4g} ({e['rel_err']:+.1%})", file=sys.stderr)
    for s in report["skipped"]:
        print(f"  skipped: {s['reason']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
