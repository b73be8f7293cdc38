"""The learner's side of the class view: join once, then submit the doctor report and results.

Standard library only (urllib): a learner's environment needs nothing beyond gdrlab itself. The
class URL and the learner's key live in ``class.json`` in the learner's config folder
(``$GDRLAB_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/gdrlab``, else ``~/.config/gdrlab``), readable by
the learner only.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import GdrlabError

__all__ = [
    "ClassError",
    "build_submission",
    "config_dir",
    "fingerprint",
    "frame_from_df",
    "join",
    "load_config",
    "parse_join_url",
    "post_submission",
    "read_result_file",
    "submit",
]

CONFIG_FILE = "class.json"
DEFAULT_TIMEOUT_S = 30.0


class ClassError(GdrlabError):
    """The class view refused or could not be reached; the message is one line."""


def config_dir() -> Path:
    env = os.environ.get("GDRLAB_CONFIG_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "gdrlab"


def load_config(where: Path | None = None) -> dict[str, Any]:
    path = (where or config_dir()) / CONFIG_FILE
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise ClassError(f"not in a class yet ({path} does not exist): run `gdrlab class join URL --name NAME` "
                         "with the URL your instructor gave") from None
    except (OSError, ValueError) as exc:
        raise ClassError(f"{path}: cannot be read ({exc}); join again with `gdrlab class join URL --name NAME`") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("url"), str) or not isinstance(doc.get("key"), str):
        raise ClassError(f"{path}: not a class file; join again with `gdrlab class join URL --name NAME`")
    return doc


def _save_config(doc: dict[str, Any], where: Path | None) -> Path:
    d = where or config_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / CONFIG_FILE
    tmp = d / (CONFIG_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # a crash leaves the old file or the new one, never half of one
    return path


def parse_join_url(url: str) -> tuple[str, str]:
    """``http://HOST:PORT/?join=TOKEN`` -> (the server's base URL ending in /, the join token)."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ClassError(f"not a class URL: {url!r} (expected http://HOST:PORT/?join=TOKEN, as the instructor's "
                         "`gdrlab class serve` printed it)")
    token = (urllib.parse.parse_qs(parts.query).get("join") or [""])[0]
    if not token:
        raise ClassError("the URL has no join token (…/?join=TOKEN): copy the whole join URL your instructor shared")
    path = parts.path if parts.path.endswith("/") else parts.path.rsplit("/", 1)[0] + "/"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path or "/", "", "")), token


def _request(base: str, route: str, body: bytes, key: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
             ) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "gdrlab-class"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(urllib.parse.urljoin(base, route), data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            doc = json.loads(exc.read() or b"{}")
        except ValueError:
            doc = {}
        if not isinstance(doc, dict):
            doc = {}
        doc.setdefault("error", f"HTTP {exc.code} {exc.reason}")
        doc["_retry_after"] = exc.headers.get("Retry-After") if exc.headers else None
        return exc.code, doc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ClassError(f"the class view at {base} cannot be reached: {reason}") from None


def join(url: str, name: str, *, where: Path | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Joins the class at ``url`` (the instructor's join URL) as ``name``; keeps the key in the
    config folder and returns what was saved (with ``config``: the file's path)."""
    base, token = parse_join_url(url)
    status, doc = _request(base, "api/join", json.dumps({"join_token": token, "name": name}).encode(), timeout=timeout)
    if status != 201:
        raise ClassError(f"join refused ({status}): {doc.get('error')}")
    saved = {"url": base, "key": doc["key"], "learner_id": doc["learner_id"], "name": doc["name"]}
    path = _save_config(saved, where)
    return {**saved, "config": str(path)}


def fingerprint(doctor: dict[str, Any] | None = None) -> str:
    """This machine, as 32 hex digits: /etc/machine-id, the host name, and the GPUs' and RDMA
    devices' bus ids and names from the doctor report. Two learners on one node share it (their
    keys tell them apart); one learner on two nodes has two."""
    try:
        machine_id = Path("/etc/machine-id").read_text().strip()
    except OSError:
        machine_id = ""
    doctor = doctor or {}
    parts = {"machine_id": machine_id, "host": platform.node(),
             "gpus": sorted(f"{g.get('pci_bus_id')} {g.get('name')}" for g in doctor.get("gpus") or []
                            if isinstance(g, dict)),
             "nics": sorted(f"{d.get('pci_bus_id')} {d.get('name')}" for d in doctor.get("rdma_devices") or []
                            if isinstance(d, dict))}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is not None and not isinstance(value, (str, int, float, bool)):
        return str(value)
    return value


def frame_from_df(df: Any, lab: str | None = None) -> dict[str, Any]:
    """A result frame (rows + provenance) from a DataFrame that carries its provenance."""
    from .. import provenance as _prov
    prov = _prov.of(df)
    if prov is None:
        raise ClassError("this DataFrame carries no provenance (df.attrs['provenance']): submit frames that "
                         "gdrlab made (bench, copy, p2p, recorded, import)")
    rows = [{str(k): _plain(v) for k, v in r.items()} for r in df.to_dict("records")]
    frame: dict[str, Any] = {"rows": rows, "provenance": {str(k): _plain(v) for k, v in prov.items()}}
    if lab:
        frame["lab"] = lab
    return frame


def read_result_file(path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """("frame" | "doctor" | "topology", document) from a file a gdrlab command wrote with --json."""
    p = Path(path)
    if p.suffix.lower() == ".csv":
        raise ClassError(f"{p}: a CSV file carries no provenance; submit the --json output of the command instead")
    try:
        with open(p, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise ClassError(f"{p}: not a JSON document a gdrlab command wrote ({exc})") from None
    if isinstance(doc, dict) and isinstance(doc.get("rows"), list) and isinstance(doc.get("provenance"), dict):
        return "frame", {"rows": doc["rows"], "provenance": doc["provenance"]}
    if isinstance(doc, dict) and isinstance(doc.get("paths"), dict) and isinstance(doc.get("gpus"), list):
        return "doctor", doc
    if isinstance(doc, dict) and "matrix" in doc and "devices" in doc:
        return "topology", doc
    raise ClassError(f"{p}: neither a result frame ('rows' and 'provenance', as `gdrlab bench --json` writes), "
                     "nor a doctor report, nor a topology")


def build_submission(frames: Iterable[dict[str, Any]] = (), doctor: dict[str, Any] | None = None,
                     topology: dict[str, Any] | None = None, lab: str | None = None,
                     machine: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"fingerprint": machine or fingerprint(doctor), "frames": list(frames)}
    if doctor is not None:
        doc["doctor"] = doctor
    if topology is not None:
        doc["topology"] = topology
    if lab:
        doc["lab"] = lab
    return doc


def post_submission(doc: dict[str, Any], *, url: str, key: str, timeout: float = DEFAULT_TIMEOUT_S,
                    max_bytes: int | None = None) -> dict[str, Any]:
    """Sends one submission; waits out "too many submissions" (429) within ``timeout``."""
    from ..commands._common import _clean
    from .schema import MAX_BODY_BYTES
    body = json.dumps(_clean(doc), separators=(",", ":")).encode()
    cap = max_bytes or MAX_BODY_BYTES
    if len(body) > cap:
        raise ClassError(f"submission too large: {len(body)} bytes, the class view takes at most {cap}; "
                         "submit fewer files at once")
    deadline = time.monotonic() + timeout
    while True:
        status, reply = _request(url, "api/submit", body, key=key, timeout=timeout)
        if status in (200, 201):
            return reply
        retry = reply.get("_retry_after")
        if status in (429, 503) and retry and str(retry).isdigit() and time.monotonic() + int(retry) < deadline:
            time.sleep(int(retry))
            continue
        raise ClassError(f"submission refused ({status}): {reply.get('error')}")


def _doctor_and_topology() -> tuple[dict[str, Any], dict[str, Any] | None]:
    from ..hw import discover
    doctor = discover("/")
    try:
        from ..topology import from_sysfs
        topology = from_sysfs("/").to_json()
    except Exception:  # noqa: BLE001 - the doctor report alone still describes the machine
        topology = None
    return doctor, topology


def submit(df: Any = None, *, files: Iterable[str | os.PathLike[str]] = (), doctor: bool = True,
           lab: str | None = None, where: Path | None = None, timeout: float = DEFAULT_TIMEOUT_S,
           machine: str | None = None) -> dict[str, Any]:
    """Sends this machine's doctor report and results to the class view joined with
    ``gdrlab class join``: ``df`` (a result DataFrame, or a list of them), the result ``files``
    (``--json`` output of gdrlab commands), tagged with ``lab``. Re-sending the same results
    stores nothing new. Returns the server's reply (``stored``, ``duplicates``, ``rows``)."""
    cfg = load_config(where)
    frames = []
    dfs = [] if df is None else (list(df) if isinstance(df, (list, tuple)) else [df])
    for one in dfs:
        frames.append(frame_from_df(one, lab))
    report = topology = None
    for f in files:
        kind, doc = read_result_file(f)
        if kind == "frame":
            if lab:
                doc["lab"] = lab
            frames.append(doc)
        elif kind == "doctor":
            report = doc
        else:
            topology = doc
    if doctor and report is None:
        report, found_topology = _doctor_and_topology()
        topology = topology or found_topology
    sub = build_submission(frames, report, topology, lab, machine)
    reply = post_submission(sub, url=cfg["url"], key=cfg["key"], timeout=timeout)
    return {**reply, "url": cfg["url"], "learner_id": cfg.get("learner_id"), "fingerprint": sub["fingerprint"],
            "frames": len(frames), "doctor": report is not None}
