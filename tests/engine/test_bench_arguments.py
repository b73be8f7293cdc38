"""Every argument of ``bench`` on every wire: honoured (it reaches the test the engine runs, or
changes the result) or refused with one line that names it.

tcp runs for real against a local peer; verbs runs against the stand-in libibverbs
(tests/fake_verbs) in a child process; the GPU-to-GPU paths (wire "none") run with the engine's
copy loop replaced by a recorder, because they need two GPUs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gdrlab.engine import bench
from gdrlab.errors import InvalidArgument
from gdrlab.transfer import tcp_wire

ROOT = Path(__file__).resolve().parents[2]

# What each argument must change in the tests the driver asks the engine for.
CASES = {
    "window": ({"window": 3, "mode": "bw"}, lambda calls, df: [c["window"] for c in calls if c["mode"] == "bw"] == [3]),
    "warmup": ({"warmup": 7}, lambda calls, df: [c["warmup"] for c in calls[1:]] == [7, 7]),
    "iters": ({"iters": 5}, lambda calls, df: [c["iters"] for c in calls[1:]] == [5, 5] and df["iters"][0] == 5),
    "keep_samples": ({"keep_samples": True, "iters": 6},
                     lambda calls, df: len(df.attrs["samples"][64]["lat_us"]) == 6
                     and len(df.attrs["samples"][64]["bw_gbps"]) == 6),
    "mode": ({"mode": "lat"}, lambda calls, df: {c["mode"] for c in calls} == {"lat"}
             and np.isnan(df["bw_gbps"][0])),
    "chunk+depth": ({"path": "host", "chunk": 4096, "depth": 2},
                    lambda calls, df: all(c["chunk"] == 4096 and c["depth"] == 2 for c in calls)),
    "local_peer=process": ({"local_peer": "process"}, lambda calls, df: df.attrs["provenance"]["peer"]
                           == "local process"),
    "local_peer=thread": ({"local_peer": "thread"}, lambda calls, df: df.attrs["provenance"]["peer"]
                          == "local thread"),
    "progress": ({"progress": "record"}, lambda calls, df: df.attrs["progress"] == [[1, 1, 64]]),
}


def _record_calls(monkeypatch) -> list[dict]:
    calls: list[dict] = []
    real = tcp_wire.Connection.measure

    def spy(self, path, size, **kw):
        calls.append(dict(kw, path=path, size=size))
        return real(self, path, size, **kw)

    monkeypatch.setattr(tcp_wire.Connection, "measure", spy)
    return calls


def _with_progress(kw: dict) -> tuple[dict, list]:
    seen: list = []
    if kw.get("progress") == "record":
        kw = dict(kw, progress=lambda done, total, row: seen.append([done, total, row["size"]]))
    return kw, seen


@pytest.mark.parametrize("name", sorted(CASES))
def test_tcp_honours(name, monkeypatch):
    kw, check = CASES[name]
    calls = _record_calls(monkeypatch)
    kw, seen = _with_progress(dict(kw))
    df = bench(**{"path": "host", "sizes": "64", "timeout_s": 20, **kw})
    df.attrs["progress"] = seen
    assert check(calls, df), calls
    assert df["verified"].all()


VERBS_SCRIPT = r"""
import json, sys
import numpy as np
from gdrlab.engine import bench
from gdrlab.transfer import tcp_wire
kw = json.loads(sys.argv[1])
calls, seen = [], []
real = tcp_wire.Connection.measure
def spy(self, path, size, **k):
    calls.append(dict(k, path=path, size=size))
    return real(self, path, size, **k)
tcp_wire.Connection.measure = spy
if kw.get("progress") == "record":
    kw["progress"] = lambda done, total, row: seen.append([done, total, row["size"]])
# the stand-in HCA copies inside one process: its peer must be a thread of this one
df = bench(**{"path": "host", "sizes": "64", "timeout_s": 20, "wire": "verbs", "local_peer": "thread", **kw})
samples = {str(k): {n: len(v) for n, v in s.items()} for k, s in df.attrs.get("samples", {}).items()}
print(json.dumps({"calls": calls, "rows": df.to_dict(orient="records"), "peer": df.attrs["provenance"]["peer"],
                  "samples": samples, "progress": seen}, default=str))
"""


class _Frame(dict):
    """Just enough of a DataFrame for the CASES checks, rebuilt from the child's JSON."""

    def __init__(self, doc: dict):
        super().__init__({k: [r[k] for r in doc["rows"]] for k in doc["rows"][0]})
        self["bw_gbps"] = [np.nan if v is None else v for v in self["bw_gbps"]]
        self.attrs = {"provenance": {"peer": doc["peer"]}, "progress": doc["progress"],
                      "samples": {int(k): {n: [0] * c for n, c in v.items()} for k, v in doc["samples"].items()}}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(CASES))
def test_verbs_honours(name, fake_verbs_lib):
    if name == "local_peer=process":
        pytest.skip("the stand-in libibverbs moves bytes inside one process only; a process peer over "
                    "verbs runs on a real HCA (tests/verbs/test_verbs_gpu.py)")
    kw, check = CASES[name]
    r = subprocess.run([sys.executable, "-c", VERBS_SCRIPT, json.dumps(kw)], capture_output=True, text=True,
                       timeout=240, cwd=ROOT, env=dict(os.environ, GDRLAB_IBVERBS_LIB=fake_verbs_lib))
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert check(doc["calls"], _Frame(doc)), doc["calls"]
    assert all(row["verified"] is True and row["wire"] == "verbs" for row in doc["rows"])


@pytest.mark.parametrize("kw,names", [
    ({"peer": "127.0.0.1:1"}, "peer, token and local_peer"),
    ({"token": "t"}, "peer, token and local_peer"),
    ({"local_peer": "thread"}, "peer, token and local_peer"),
    ({"chunk": 4096}, "chunk, depth and window"),
    ({"depth": 2}, "chunk, depth and window"),
    ({"window": 2}, "chunk, depth and window"),
    ({"wire": "tcp"}, "crosses no wire"),
    ({"wire": "verbs"}, "crosses no wire"),
])
@pytest.mark.parametrize("path", ["p2p", "p2p-staged"])
def test_gpu_to_gpu_refuses_what_has_no_meaning(path, kw, names):
    with pytest.raises(InvalidArgument, match=names):
        bench(path, sizes="8", **kw)


def test_gpu_to_gpu_honours_iters_warmup_mode_and_samples(monkeypatch):
    from gdrlab import _engine
    from gdrlab.transfer import copies, p2p

    calls = []

    class FakeEngine:
        @staticmethod
        def peer_samples(src, dst, size, iters, warmup, peer_access, bidir):
            calls.append({"src": src, "dst": dst, "iters": iters, "warmup": warmup, "peer_access": peer_access})
            return np.full(iters, 2e-6)

    usable = {"usable": True, "reason": "", "driver_version": 13000}
    monkeypatch.setattr(copies, "cuda_status", lambda: usable)
    monkeypatch.setattr(_engine, "cuda_status", lambda: usable)
    monkeypatch.setattr(_engine, "native", lambda: type("N", (), {"gpu_infos": staticmethod(
        lambda: [{"name": "stand-in"}, {"name": "stand-in"}])}))
    monkeypatch.setattr(p2p, "native", lambda: FakeEngine)
    seen = []
    df = bench("p2p-staged", sizes="1K", iters=9, warmup=4, mode="lat", keep_samples=True, device=1,
               progress=lambda d, t, row: seen.append((d, t)))
    assert calls == [{"src": 1, "dst": 0, "iters": 9, "warmup": 4, "peer_access": False}]
    assert df["wire"][0] == "none" and df["iters"][0] == 9 and seen == [(1, 1)]
    assert df["lat_p50_us"][0] == pytest.approx(2.0) and np.isnan(df["bw_gbps"][0])
    assert len(df.attrs["samples"][1024]["lat_us"]) == 9
    df = bench("p2p", sizes="1K", iters=3, mode="bw")
    # 1 KiB every 2 us is 0.512 GB/s; latency columns are not reported in bandwidth mode
    assert df["bw_gbps"][0] == pytest.approx(1024 / 2e-6 / 1e9) and np.isnan(df["lat_p50_us"][0])


@pytest.mark.parametrize("wire", ["tcp", "verbs"])
@pytest.mark.parametrize("kw,pattern", [
    ({"window": 0}, "window must be at least 1"),
    ({"warmup": -1}, "warmup must be at least 0"),
    ({"iters": 0}, "iters must be at least 1"),
    ({"timeout_s": 0}, "timeout must be between"),
    ({"local_peer": "cloud"}, "local_peer must be"),
    ({"mode": "fast"}, "unknown mode 'fast'"),
])
def test_bad_values_are_refused_on_every_wire(wire, kw, pattern):
    with pytest.raises(InvalidArgument, match=pattern):
        bench("host", sizes="8", wire=wire, **kw)
