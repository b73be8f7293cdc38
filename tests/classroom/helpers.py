"""Simulated learners for the class view's tests: HTTP calls over loopback (standard library
only, as the real client) and submissions built from gdrlab's recorded data."""
from __future__ import annotations

import copy
import hashlib
import json
import urllib.error
import urllib.request
from typing import Any

INSTRUCTOR_TOKEN = "instructor-token-for-tests-0123456789"
JOIN_TOKEN = "join-token-for-tests"


def call(base: str, route: str, body: Any = None, *, key: str | None = None, raw: bytes | None = None,
         method: str | None = None, timeout: float = 60.0) -> tuple[int, Any, dict[str, str]]:
    """(status, parsed JSON or text, headers) of one request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(base + route, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, text, hdrs = resp.status, resp.read().decode(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        status, text, hdrs = exc.code, exc.read().decode(), dict(exc.headers)
    try:
        return status, json.loads(text), hdrs
    except ValueError:
        return status, text, hdrs


def join(base: str, name: str) -> tuple[int, str]:
    status, doc, _ = call(base, "api/join", {"join_token": JOIN_TOKEN, "name": name})
    assert status == 201, (status, doc)
    return doc["learner_id"], doc["key"]


def state(base: str, since: int = 0) -> dict[str, Any]:
    status, doc, _ = call(base, f"api/state?since={since}", key=INSTRUCTOR_TOKEN)
    assert status == 200, (status, doc)
    return doc


def doctor_report(variant: int = 0) -> dict[str, Any]:
    """The recorded H200 doctor report, its host and link width varied per learner."""
    from gdrlab import recorded
    report = copy.deepcopy(recorded.load_report("h200-doctor"))
    report["provenance"] = {**report.get("provenance", {}), "host": f"node{variant:02d}"}
    if variant % 3 == 2 and report.get("gpus"):  # a link trained below its maximum, as on real clusters
        report["gpus"][0]["pcie_width"] = 8
    return report


def result_frame(name: str = "h200-bench-host", scale: float = 1.0, lab: str | None = "04") -> dict[str, Any]:
    """A recorded sweep as a result frame (rows + provenance), its bandwidth scaled."""
    from gdrlab import recorded
    from gdrlab.classroom.client import frame_from_df
    df = recorded.load(name)
    df["bw_gbps"] = df["bw_gbps"] * scale
    frame = frame_from_df(df, lab)
    # A stand-in for the learner's own measurement: the class view does not compare recorded rows
    # with the sender's machine (tests/classroom/test_live.py has a recorded frame as it is).
    frame["provenance"] = dict(frame["provenance"], kind="live")
    return frame


def fingerprint(i: int) -> str:
    return hashlib.sha256(f"machine-{i}".encode()).hexdigest()[:32]


def submission(i: int, frames: int = 1) -> dict[str, Any]:
    paths = ("h200-bench-host", "h200-bench-staged", "h200-bench-shared", "h200-bench-pipelined")
    return {"fingerprint": fingerprint(i), "doctor": doctor_report(i),
            "frames": [result_frame(paths[k % len(paths)], 1.0 - 0.01 * i) for k in range(frames)]}
