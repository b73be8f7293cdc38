"""``gdrlab doctor --cluster --bundle FILE``: one .tar.gz a learner can attach to a question.

It holds ``doctor.json`` (the report and the cluster checks), ``topology.json`` (``gdrlab topo
--json`` on the same root), and, given ``results`` (an ``rdma_pair.sh`` output directory), its
``rdma_pair/*.json``: gdrlab's and perftest's like-for-like rows. Nothing secret goes in: no
environment, no token (any value of ``GDRLAB_TOKEN`` found is replaced), and, unless asked, no
host name (this machine's name, and the server address rdma_pair.sh was given, become ``<host>``).
"""
from __future__ import annotations

import io
import json
import os
import platform
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

__all__ = ["redact", "write_bundle"]


def redact(obj: Any, secrets: list[str], hosts: list[str]) -> Any:
    """A copy of a JSON value with each secret replaced by ``<redacted>`` and each host name by ``<host>``."""
    if isinstance(obj, dict):
        return {k: (None if k == "host" and hosts and v else redact(v, secrets, hosts)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v, secrets, hosts) for v in obj]
    if isinstance(obj, str):
        for s in secrets:
            if s:
                obj = obj.replace(s, "<redacted>")
        for h in hosts:
            if h:
                obj = re.sub(rf"(?<![\w.-]){re.escape(h)}(?![\w-])", "<host>", obj)
        return obj
    return obj


def _topology(root: str) -> Any:
    args = [sys.executable, "-m", "gdrlab", "topo", "--json"] + ([] if str(Path(root).resolve()) == "/" else
                                                                 ["--sysfs", root])
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        return json.loads(r.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return {"error": f"gdrlab topo failed: {exc}"}


def write_bundle(path: str | os.PathLike, report: dict[str, Any], checks: list[dict], root: str = "/",
                 results: str | os.PathLike | None = None, include_hostnames: bool = False,
                 extra_hosts: list[str] | None = None) -> list[str]:
    """Writes the archive; returns the names it holds."""
    secrets = [v for k, v in os.environ.items() if k.endswith("TOKEN") and v]
    hosts = [] if include_hostnames else [h for h in {platform.node(), *(extra_hosts or [])} if h]
    files: dict[str, Any] = {
        "doctor.json": {**report, "cluster_checks": checks},
        "topology.json": _topology(root),
    }
    if results and not include_hostnames:  # the peers rdma_pair.sh ran against, and recorded host names
        for f in Path(results).rglob("*.json"):
            try:
                text = f.read_text(errors="replace")
            except OSError:
                continue
            hosts += re.findall(r"--peer[ =]([A-Za-z0-9][\w.-]*):\d+", text)
            hosts += re.findall(r'"host": "([^"<][^"]*)"', text)
        hosts = sorted(set(hosts), key=len, reverse=True)
    if results:
        base = Path(results)
        base = base / "rdma_pair" if (base / "rdma_pair").is_dir() else base
        for f in sorted(base.glob("*.json")):
            try:
                files[f"rdma_pair/{f.name}"] = json.loads(f.read_text())
            except (OSError, ValueError):
                files[f"rdma_pair/{f.name}"] = {"error": "not JSON"}
    files["README.txt"] = ("gdrlab first-run bundle, made " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) +
                           "\nNo environment and no token; host names " + ("kept" if include_hostnames else
                           "replaced by <host>") + ".\nSee docs/cluster.md, 'First run'.\n")
    with tarfile.open(path, "w:gz") as tar:
        for name, content in files.items():
            text = content if isinstance(content, str) else json.dumps(redact(content, secrets, hosts), indent=1,
                                                                       default=str)
            data = text.encode()
            info = tarfile.TarInfo(f"gdrlab-bundle/{name}")
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))
    return list(files)
