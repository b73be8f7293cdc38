"""What a learner may send the class view, checked before anything is stored.

A submission is one JSON object::

    {"fingerprint": "<hex>",              # the machine (gdrlab.classroom.client.fingerprint)
     "doctor": {...} | null,              # `gdrlab doctor --json`
     "topology": {...} | null,            # `gdrlab topo --json` (for the GDR verdict)
     "frames": [{"rows": [...], "provenance": {...}, "lab": "04"}, ...]}

Each frame is a result frame of the result schema (:data:`gdrlab.vocab.BENCH_COLUMNS`) with its
provenance (:mod:`gdrlab.provenance`: ``kind`` one of live, recorded, modelled, imported), as
``gdrlab bench --json`` prints it. Anything else is refused with one line naming the first place
that is wrong (``frames[2].rows[5].size: ...``); nothing of a refused submission is stored.
Learner data is only ever parsed as JSON and stored; it is never executed, imported or evaluated.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from .. import provenance as _prov
from ..vocab import BENCH_COLUMNS

__all__ = [
    "Limits",
    "SchemaError",
    "canonical",
    "content_hash",
    "machine_summary",
    "validate_name",
    "validate_submission",
]


class SchemaError(ValueError):
    """A submission the class view refuses: one line saying where and why."""


class Limits:
    """Caps on one submission (the body size cap is the app's: :data:`MAX_BODY_BYTES`)."""

    max_frames = 64
    max_rows = 20_000  # all frames together
    max_depth = 12
    max_string = 4096
    max_nodes = 200_000  # JSON values in the doctor report and topology together
    max_extra_columns = 32


MAX_BODY_BYTES = 8 << 20  # one submission, as sent
NAME_MAX = 64
_NAME_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_FINGERPRINT = re.compile(r"[0-9a-f]{16,64}")
_LAB = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_PATH = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
_EXTRA_COLUMN = re.compile(r"[a-z][a-z0-9_]{0,63}")

_NUMERIC = tuple(c.name for c in BENCH_COLUMNS if c.unit and c.name != "size")
_KNOWN = {c.name for c in BENCH_COLUMNS}


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value) if not isinstance(value, str) else value
    text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit] + "..."


def validate_name(name: Any) -> str:
    """A learner's display name: 1-64 characters, no control characters. Any other text (``<script>``
    included) is kept as written and shown escaped."""
    if not isinstance(name, str):
        raise SchemaError("name: must be text")
    name = name.strip()
    if not name:
        raise SchemaError("name: must not be empty")
    if len(name) > NAME_MAX:
        raise SchemaError(f"name: at most {NAME_MAX} characters, got {len(name)}")
    if _NAME_FORBIDDEN.search(name):
        raise SchemaError(f"name: control characters are not allowed ({_shown(name)})")
    return name


def _json_sane(value: Any, where: str, limits: Limits, budget: list[int], depth: int = 0) -> None:
    """Plain JSON only, of bounded depth, string length and node count."""
    budget[0] -= 1
    if budget[0] < 0:
        raise SchemaError(f"{where}: too large (more than {limits.max_nodes} JSON values)")
    if depth > limits.max_depth:
        raise SchemaError(f"{where}: nested deeper than {limits.max_depth} levels")
    if isinstance(value, dict):
        for k, v in value.items():
            if len(k) > 256:
                raise SchemaError(f"{where}: a key longer than 256 characters")
            _json_sane(v, f"{where}.{_shown(k, 40)}", limits, budget, depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _json_sane(v, f"{where}[{i}]", limits, budget, depth + 1)
    elif isinstance(value, str):
        if len(value) > limits.max_string:
            raise SchemaError(f"{where}: text longer than {limits.max_string} characters")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise SchemaError(f"{where}: not a finite number")
    elif value is not None and not isinstance(value, (bool, int)):
        raise SchemaError(f"{where}: not a JSON value")


def _number(value: Any, where: str) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(f"{where}: must be a number or null, got {_shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SchemaError(f"{where}: must be finite")
    if abs(value) > 1e18:
        raise SchemaError(f"{where}: out of range ({value!r})")
    return value


def _text(value: Any, where: str, limit: int, nullable: bool = True) -> str | None:
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise SchemaError(f"{where}: must be text, got {_shown(value)}")
    if len(value) > limit:
        raise SchemaError(f"{where}: at most {limit} characters, got {len(value)}")
    return value


def _row(row: Any, where: str, limits: Limits) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise SchemaError(f"{where}: must be an object (one result row)")
    out: dict[str, Any] = {}
    path = row.get("path")
    if not isinstance(path, str) or not _PATH.fullmatch(path):
        raise SchemaError(f"{where}.path: must be a path name such as 'host' or 'gdr', got {_shown(path)}")
    out["path"] = path
    size = row.get("size")
    if isinstance(size, float) and size.is_integer():
        size = int(size)
    if isinstance(size, bool) or not isinstance(size, int) or not 0 < size <= 1 << 50:
        raise SchemaError(f"{where}.size: must be a whole number of bytes from 1 to 2^50, got {_shown(size)}")
    out["size"] = size
    out["wire"] = _text(row.get("wire"), f"{where}.wire", 64)
    out["source"] = _text(row.get("source"), f"{where}.source", 256)
    verified = row.get("verified")
    if verified is not None and not isinstance(verified, bool):
        raise SchemaError(f"{where}.verified: must be true, false or null, got {_shown(verified)}")
    out["verified"] = verified
    for name in _NUMERIC:
        if name in row:
            out[name] = _number(row[name], f"{where}.{name}")
    extra = [k for k in row if k not in _KNOWN]
    if len(extra) > limits.max_extra_columns:
        raise SchemaError(f"{where}: more than {limits.max_extra_columns} columns outside the result schema")
    for k in extra:
        if not isinstance(k, str) or not _EXTRA_COLUMN.fullmatch(k):
            raise SchemaError(f"{where}: column name {_shown(k)} is not lower-case letters, digits and _")
        v = row[k]
        if isinstance(v, str):
            _text(v, f"{where}.{k}", 256)
        elif v is not None and not isinstance(v, bool):
            _number(v, f"{where}.{k}")
        out[k] = v
    return out


def _provenance(prov: Any, where: str, limits: Limits) -> dict[str, Any]:
    if not isinstance(prov, dict):
        raise SchemaError(f"{where}: a result frame carries its provenance (gdrlab.provenance), none found")
    if prov.get("kind") not in _prov.KINDS:
        raise SchemaError(f"{where}.kind: must be one of {', '.join(_prov.KINDS)}, got {_shown(prov.get('kind'))}")
    _json_sane(prov, where, limits, [2000])
    try:
        _prov.label(prov)
    except ValueError as exc:
        raise SchemaError(f"{where}: {exc}") from None
    return prov


def validate_lab(lab: Any, where: str = "lab") -> str | None:
    if lab is None:
        return None
    if not isinstance(lab, str) or not _LAB.fullmatch(lab):
        raise SchemaError(f"{where}: letters, digits, '.', '_' or '-', at most 64, got {_shown(lab)}")
    return lab


def validate_submission(doc: Any, limits: Limits | None = None) -> dict[str, Any]:
    """The submission, checked and normalised; :class:`SchemaError` otherwise."""
    limits = limits or Limits()
    if not isinstance(doc, dict):
        raise SchemaError("the submission must be a JSON object")
    unknown = set(doc) - {"fingerprint", "doctor", "topology", "frames", "lab", "client"}
    if unknown:
        raise SchemaError(f"unknown field {_shown(min(unknown))} (fingerprint, doctor, topology, frames, lab)")
    fp = doc.get("fingerprint")
    if not isinstance(fp, str) or not _FINGERPRINT.fullmatch(fp):
        raise SchemaError("fingerprint: must be 16-64 lower-case hex digits (gdrlab.classroom.client.fingerprint)")
    lab = validate_lab(doc.get("lab"))
    budget = [limits.max_nodes]
    doctor = doc.get("doctor")
    if doctor is not None:
        if not isinstance(doctor, dict) or not isinstance(doctor.get("paths"), dict) \
                or not isinstance(doctor.get("gpus"), list):
            raise SchemaError("doctor: must be the report of `gdrlab doctor --json` (with 'gpus' and 'paths')")
        _json_sane(doctor, "doctor", limits, budget)
    topology = doc.get("topology")
    if topology is not None:
        if not isinstance(topology, dict):
            raise SchemaError("topology: must be the document of `gdrlab topo --json`")
        _json_sane(topology, "topology", limits, budget)
    frames = doc.get("frames", [])
    if not isinstance(frames, list):
        raise SchemaError("frames: must be a list of result frames")
    if len(frames) > limits.max_frames:
        raise SchemaError(f"frames: at most {limits.max_frames} per submission, got {len(frames)}")
    if doctor is None and not frames:
        raise SchemaError("nothing to submit: no doctor report and no result frames")
    total = 0
    out_frames = []
    for i, f in enumerate(frames):
        where = f"frames[{i}]"
        if not isinstance(f, dict) or not isinstance(f.get("rows"), list):
            raise SchemaError(f"{where}: must be an object with 'rows' (a list) and 'provenance'")
        if set(f) - {"rows", "provenance", "lab"}:
            raise SchemaError(f"{where}: unknown field {_shown(min(set(f) - {'rows', 'provenance', 'lab'}))}")
        total += len(f["rows"])
        if total > limits.max_rows:
            raise SchemaError(f"{where}: more than {limits.max_rows} result rows in one submission")
        if not f["rows"]:
            raise SchemaError(f"{where}.rows: empty")
        prov = _provenance(f.get("provenance"), f"{where}.provenance", limits)
        out_frames.append({"provenance": prov, "lab": validate_lab(f.get("lab"), f"{where}.lab") or lab,
                           "rows": [_row(r, f"{where}.rows[{j}]", limits) for j, r in enumerate(f["rows"])]})
    return {"fingerprint": fp, "doctor": doctor, "topology": topology, "frames": out_frames, "lab": lab}


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def content_hash(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def doctor_identity(doctor: dict[str, Any], topology: dict[str, Any] | None) -> dict[str, Any]:
    """What makes two doctor reports "the same" for idempotency: the report without its date (a
    re-run of ``class submit`` on an unchanged machine stores nothing new)."""
    def undated(d: Any) -> Any:
        if isinstance(d, dict):
            return {k: undated(v) for k, v in d.items() if k != "date"}
        if isinstance(d, list):
            return [undated(v) for v in d]
        return d
    return {"doctor": undated(doctor), "topology": undated(topology)}


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def machine_summary(body: dict[str, Any]) -> dict[str, Any]:
    """The dashboard's line for one machine, from a stored doctor body (``{"doctor", "topology"}``):
    plain values only, every string shown escaped by the page."""
    doctor = body.get("doctor") if "doctor" in body else body
    topology = body.get("topology") if isinstance(body.get("topology"), dict) else None
    doctor = doctor if isinstance(doctor, dict) else {}
    gpus = []
    for g in doctor.get("gpus") or []:
        if not isinstance(g, dict):
            continue
        gpus.append({k: g.get(k) for k in ("index", "name", "pci_bus_id", "pcie_gen", "pcie_width", "pcie_max_gen",
                                           "pcie_max_width", "numa_node", "gdr_supported", "dmabuf_supported")})
    nics = []
    for d in doctor.get("rdma_devices") or []:
        if not isinstance(d, dict):
            continue
        ports = [p for p in d.get("ports") or [] if isinstance(p, dict)]
        nics.append({"name": d.get("name"), "pci_bus_id": d.get("pci_bus_id"),
                     "link_layer": ports[0].get("link_layer") if ports else None,
                     "state": ports[0].get("state") if ports else None,
                     "rate": ports[0].get("rate") if ports else None})
    paths = {k: bool(_get(v, "available")) for k, v in (doctor.get("paths") or {}).items() if isinstance(k, str)}
    pm: dict[str, Any] = doctor["peer_memory"] if isinstance(doctor.get("peer_memory"), dict) else {}
    gdr = []
    if topology and isinstance(topology.get("gdr"), dict):
        for g, per_nic in topology["gdr"].items():
            if isinstance(per_nic, dict):
                for n, d in per_nic.items():
                    if isinstance(d, dict):
                        gdr.append({"gpu": g, "nic": n, "code": d.get("code"), "use_gdr": d.get("use_gdr"),
                                    "reason": d.get("reason")})
    numa = {}
    if topology and isinstance(topology.get("numa"), dict):
        numa = {g: _get(v, "numa_node") for g, v in topology["numa"].items()}
    return {"host": _get(doctor, "provenance", "host"), "source": doctor.get("source"),
            "driver_version": _get(doctor, "cuda", "driver_version"), "gpus": gpus, "nics": nics,
            "peer_memory": pm.get("peer_memory_module"), "dmabuf_usable": pm.get("dmabuf_usable"),
            "paths": paths, "gdr": gdr, "numa": numa,
            "nearest_nic": topology.get("nearest_nic") if isinstance(topology, dict) else None}
