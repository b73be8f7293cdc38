"""The dashboard's live stream (server-sent events), the model's verdict on every row, the
exports read back, and the labs' submit button."""
from __future__ import annotations

import http.client
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from classroom.conftest import start_class, stop_class
from classroom.helpers import INSTRUCTOR_TOKEN, call, doctor_report, fingerprint, join, result_frame, state
from gdrlab.classroom.store import db_url

pytestmark = pytest.mark.timeout(180)


class EventStream:
    """One ``GET api/events`` read on a thread: each event (or heartbeat comment) into a queue."""

    def __init__(self, base: str, since: int = 0, token: str | None = INSTRUCTOR_TOKEN,
                 last_event_id: str | None = None) -> None:
        u = urllib.parse.urlsplit(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        headers = {"Accept": "text/event-stream"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", f"/api/events?since={since}", headers=headers)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.events: queue.Queue = queue.Queue()
        self.ended = threading.Event()
        if self.status == 200:
            threading.Thread(target=self._read, daemon=True).start()
        else:
            self.body = json.loads(self.resp.read() or b"{}")

    def _read(self) -> None:
        event: dict = {}
        try:
            while True:
                raw = self.resp.readline()
                if not raw:
                    break
                line = raw.decode().rstrip("\n")
                if line == "":
                    if event:
                        self.events.put(event)
                    event = {}
                elif line.startswith(":"):
                    self.events.put({"comment": line[1:].strip()})
                else:
                    field, _, value = line.partition(":")
                    event[field] = value[1:] if value.startswith(" ") else value
        except (OSError, ValueError, AttributeError):  # closed under the reader by close()
            pass
        finally:
            self.ended.set()

    def next(self, kind: str, timeout: float = 20.0) -> dict:
        """The next event named ``kind`` ("state", "bye", or "comment" for a heartbeat)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no {kind} event within {timeout} s"
            ev = self.events.get(timeout=left)
            if kind == "comment" and "comment" in ev:
                return ev
            if ev.get("event") == kind:
                if kind == "state":
                    ev["state"] = json.loads(ev["data"])
                return ev

    def close(self) -> None:
        self.conn.close()


def _submit(base: str, key: str, i: int, *, doctor: bool = True, frames: tuple[str, ...] = ("h200-bench-staged",),
            scale: float = 1.0) -> dict:
    sub: dict = {"fingerprint": fingerprint(i), "frames": [result_frame(n, scale) for n in frames]}
    if doctor:
        sub["doctor"] = doctor_report(i)
    status, doc, _ = call(base, "api/submit", sub, key=key)
    assert status in (200, 201), doc
    return sub


@pytest.fixture
def sqlite_class(tmp_path):
    running = start_class(db_url(str(tmp_path / "live.sqlite")), heartbeat_s=0.3, max_live=2)
    try:
        yield running
    finally:
        stop_class(running)


# --------------------------------------------------------------------------- the stream
def test_event_stream_needs_the_instructor_token(sqlite_class):
    s = EventStream(sqlite_class.url, token=None)
    assert s.status == 401 and "instructor token" in s.body["error"]
    s = EventStream(sqlite_class.url, token="wrong-token")
    assert s.status == 403 and s.body["error"] == "wrong instructor token"
    s = EventStream(sqlite_class.url, since=-1)  # type: ignore[arg-type]
    assert s.status == 400


def test_event_stream_delivers_submissions_and_heartbeats(sqlite_class):
    base = sqlite_class.url
    s = EventStream(base)
    try:
        assert s.status == 200 and s.resp.getheader("content-type").startswith("text/event-stream")
        first = s.next("state")["state"]
        assert first["rows"] == [] and first["max_id"] == 0
        assert s.next("comment")["comment"] == "heartbeat"  # idle: a heartbeat, not silence
        _, key = join(base, "Ada")
        assert s.next("state")["state"]["counts"]["learners"] == 1  # a join is news too
        _submit(base, key, 1)
        got = s.next("state")
        rows = got["state"]["rows"]
        assert len(rows) == 24 and {r["path"] for r in rows} == {"staged"}
        assert int(got["id"]) == got["state"]["max_id"] > 0
    finally:
        s.close()
    # a browser that reconnects sends the last id it saw, and gets only what came later
    again = EventStream(base, last_event_id=got["id"])
    try:
        assert again.next("state")["state"]["rows"] == []
    finally:
        again.close()


def test_event_streams_are_bounded(sqlite_class):
    streams = [EventStream(sqlite_class.url) for _ in range(2)]
    try:
        for s in streams:
            s.next("state")
        extra = EventStream(sqlite_class.url)
        assert extra.status == 503 and "too many live dashboards (2)" in extra.body["error"]
        assert state(sqlite_class.url)["counts"]["learners"] == 0  # polling still answers
    finally:
        for s in streams:
            s.close()
    # a closed stream frees its place (the server notices at the next heartbeat)
    hub = sqlite_class.server.server.class_hub
    deadline = time.monotonic() + 10
    while hub.clients and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hub.clients == 0
    s = EventStream(sqlite_class.url)
    assert s.status == 200
    s.close()


def test_stopping_the_server_ends_open_streams_at_once(tmp_path):
    running = start_class(db_url(str(tmp_path / "stop.sqlite")), heartbeat_s=60.0)
    s = EventStream(running.url)
    s.next("state")
    t0 = time.monotonic()
    stop_class(running)
    took = time.monotonic() - t0
    assert s.next("bye", timeout=5)["data"] == "{}"
    assert s.ended.wait(5)
    s.close()
    assert took < 3.0, f"the server took {took:.1f} s to stop with a stream open (uvicorn's grace is 5 s)"


def test_serve_exits_promptly_on_sigterm_with_a_stream_open(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(INSTRUCTOR_TOKEN)
    token_file.chmod(0o600)
    proc = subprocess.Popen([sys.executable, "-m", "gdrlab", "class", "serve", "--listen", "127.0.0.1:0",
                             "--db", str(tmp_path / "c.sqlite"), "--token-file", str(token_file), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        doc = json.loads(proc.stdout.readline())
        s = EventStream(doc["url"])
        s.next("state")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
        took = time.monotonic() - t0
        assert rc == 128 + signal.SIGTERM
        assert took < 3.0, f"gdrlab class serve took {took:.1f} s to exit with a stream open"
        assert s.ended.wait(5)
        s.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()


# --------------------------------------------------------------------------- is this number normal
def _model_verdicts(sub: dict) -> list[tuple[int, str, str]]:
    """(size, verdict, causes) of the submission's first frame, from gdrlab.model directly."""
    import pandas as pd

    from gdrlab.model import explain_rows, profile_from_machine
    from gdrlab.model.machine import facts_from_doctor
    frame = sub["frames"][0]
    df = pd.DataFrame(frame["rows"])
    df.attrs["provenance"] = frame["provenance"]
    prof = profile_from_machine(facts_from_doctor(sub["doctor"], sub["doctor"]["provenance"]["hardware_detail"]["cpu"]))
    return sorted((int(r["size"]), r["verdict"], r["likely_causes"]) for r in explain_rows(df, prof).to_dict("records"))


@pytest.mark.parametrize("scale", [1.0, 0.3])
def test_each_row_carries_the_verdict_for_its_learners_machine(sqlite_class, scale):
    base = sqlite_class.url
    _, key = join(base, "Ada")
    sub = _submit(base, key, 2, scale=scale)  # learner 2's GPU link trained at x8 (helpers.doctor_report)
    rows = state(base)["rows"]
    got = sorted((r["size"], r["verdict"], r["cause"]) for r in rows)
    assert got == _model_verdicts(sub)
    if scale < 1:
        assert {v for _, v, _ in got} == {"low"}
        assert all("PCIe link trained at Gen5 x8" in c for _, _, c in got)


def test_recorded_rows_a_learner_sends_are_not_compared_with_their_machine(sqlite_class):
    """A lab's recorded H200 sweep sent from a learner's machine is no measurement of that machine:
    it is not rated against the model of the learner's machine; the dashboard says why."""
    from gdrlab import recorded
    from gdrlab.classroom.client import frame_from_df

    base = sqlite_class.url
    _, key = join(base, "Ada")
    frame = frame_from_df(recorded.load("h200-bench-staged"), "04")
    assert frame["provenance"]["kind"] == "recorded"
    status, doc, _ = call(base, "api/submit", {"fingerprint": fingerprint(3), "doctor": doctor_report(3),
                                               "frames": [frame]}, key=key)
    assert status in (200, 201), doc
    rows = state(base)["rows"]
    assert len(rows) == 24 and {r["verdict"] for r in rows} == {"not comparable"}
    assert all(r["cause"].startswith("recorded data (NVIDIA H200") and "not a measurement of this machine"
               in r["cause"] for r in rows), rows[0]["cause"]


def test_rows_sent_before_the_doctor_report_get_their_verdict_when_it_comes(sqlite_class):
    base = sqlite_class.url
    _, key = join(base, "Ada")
    sub = _submit(base, key, 1, doctor=False)
    first = state(base)
    assert {r["verdict"] for r in first["rows"]} == {"not modelled"}
    assert all("doctor report" in r["cause"] for r in first["rows"])
    s = EventStream(base, since=first["max_id"])
    try:
        s.next("state")
        status, doc, _ = call(base, "api/submit", {"fingerprint": fingerprint(1), "doctor": doctor_report(1)}, key=key)
        assert status == 201, doc
        again = s.next("state")["state"]
    finally:
        s.close()
    assert sorted(r["id"] for r in again["rows"]) == sorted(r["id"] for r in first["rows"])  # sent again
    sub["doctor"] = doctor_report(1)
    assert sorted((r["size"], r["verdict"], r["cause"]) for r in again["rows"]) == _model_verdicts(sub)
    assert again["models"]["staged"] and all(len(m["size"]) == 24 for m in again["models"]["staged"])


def test_model_curves_follow_the_machines_in_the_room(sqlite_class):
    base = sqlite_class.url
    for i in (0, 1, 2):  # 0 and 1: the same kind of machine; 2: its GPU link at x8
        _, key = join(base, f"L{i}")
        _submit(base, key, i)
    models = state(base)["models"]
    labels = sorted(m["label"] for m in models["staged"])
    assert len(labels) == 2 and any("x8" in lb for lb in labels) and any("x16" in lb for lb in labels), labels
    x8 = next(m for m in models["staged"] if "x8" in m["label"])
    x16 = next(m for m in models["staged"] if "x16" in m["label"])
    assert x8["bw_gbps"][-1] < x16["bw_gbps"][-1]  # the narrower link is modelled slower


# --------------------------------------------------------------------------- exports
def _filled(tmp_path: Path):
    running = start_class(db_url(str(tmp_path / "export.sqlite")))
    _, key = join(running.url, "=HYPERLINK(\"x\")")
    sub = {"fingerprint": fingerprint(3), "doctor": doctor_report(3),
           "frames": [result_frame("h200-bench-host"), result_frame("h200-bench-staged")]}
    status, doc, _ = call(running.url, "api/submit", sub, key=key)
    assert status == 201, doc
    return running, sub


def test_csv_and_parquet_exports_read_back_alike(tmp_path):
    pytest.importorskip("pyarrow", reason="Parquet needs the 'class' extra's pyarrow")
    from gdrlab.classroom.export import EXPORT_COLUMNS, read_export
    running, sub = _filled(tmp_path)
    try:
        frames = {}
        for fmt in ("csv", "parquet"):
            for anonymise in (False, True):
                status, body = _get_bytes(running.url + f"export.{fmt}" + ("?anonymise=1" if anonymise else ""))
                assert status == 200
                path = tmp_path / f"class-{anonymise}.{fmt}"
                path.write_bytes(body)
                frames[fmt, anonymise] = read_export(path)
        status, body = _get_bytes(running.url + "export.parquet", token=None)
        assert status == 401
    finally:
        stop_class(running)
    want_rows = sum(len(f["rows"]) for f in sub["frames"])
    for (fmt, anonymise), df in frames.items():
        assert list(df.columns) == list(EXPORT_COLUMNS) and len(df) == want_rows, fmt
        assert df.attrs["class_export"]["format"] == fmt
        assert set(df["fingerprint"]) == {fingerprint(3)}
        assert set(df["learner_anon"]) == {"learner-1"}
        assert set(df["learner"]) == ({"learner-1"} if anonymise else {"=HYPERLINK(\"x\")"})  # read back as sent
        dates = {f["provenance"]["date"] for f in sub["frames"]}
        assert set(df["date"]) == dates
        for f in sub["frames"]:
            sent = sorted((r["size"], r["bw_gbps"]) for r in f["rows"])
            part = df[df["path"] == f["rows"][0]["path"]]
            got = sorted(zip(part["size"].astype(int), part["bw_gbps"]))
            assert [s for s, _ in got] == [s for s, _ in sent]
            assert all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) for (_, a), (_, b) in zip(got, sent))
            assert json.loads(part["provenance"].iloc[0]) == f["provenance"]
    csv_df, pq_df = frames["csv", False], frames["parquet", False]
    assert [str(t) for t in csv_df.dtypes] == [str(t) for t in pq_df.dtypes]


def test_the_csv_file_itself_is_safe_in_a_spreadsheet(tmp_path):
    running, _ = _filled(tmp_path)
    try:
        status, body = _get_bytes(running.url + "export.csv")
    finally:
        stop_class(running)
    assert status == 200 and "'=HYPERLINK" in body.decode() and "\n=HYPERLINK" not in body.decode()


def test_read_export_refuses_what_is_not_an_export(tmp_path):
    from gdrlab.classroom.export import ExportError, read_export
    bad = tmp_path / "other.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ExportError, match="not a class export: columns .* missing"):
        read_export(bad)
    fake = tmp_path / "fake.parquet"
    fake.write_bytes(b"PAR1 not really")
    with pytest.raises(ExportError, match="not a readable Parquet file"):
        read_export(fake)
    with pytest.raises(ExportError, match="cannot be read"):
        read_export(tmp_path / "absent.csv")


def test_export_command_writes_parquet(tmp_path):
    pytest.importorskip("pyarrow", reason="Parquet needs the 'class' extra's pyarrow")
    from gdrlab.classroom.export import read_export
    running, sub = _filled(tmp_path)
    stop_class(running)
    out = tmp_path / "class.parquet"
    run = subprocess.run([sys.executable, "-m", "gdrlab", "class", "export", "--db", str(tmp_path / "export.sqlite"),
                          "-o", str(out), "--anonymise", "--json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"output": str(out), "rows": 48, "format": "parquet"}
    df = read_export(out)
    assert len(df) == 48 and set(df["learner"]) == {"learner-1"}
    bad = subprocess.run([sys.executable, "-m", "gdrlab", "class", "export", "--db", str(tmp_path / "export.sqlite"),
                          "--format", "parquet"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "-o FILE" in bad.stderr


def _get_bytes(url: str, token: str | None = INSTRUCTOR_TOKEN) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


# --------------------------------------------------------------------------- the labs' button
def test_submit_button_says_when_not_joined_and_sends_once_joined(sqlite_class, tmp_path):
    pytest.importorskip("ipywidgets", reason="the button is an ipywidgets widget")
    from gdrlab import recorded
    from gdrlab.classroom import join as class_join
    from gdrlab.classroom import submit_button
    where = tmp_path / "learner-config"
    df = recorded.load("h200-bench-staged")
    button = submit_button(df, lab="04", doctor=False, where=where)
    assert button.state == "not-joined" and "gdrlab class join URL --name NAME" in button.status.value
    assert button.send() is None and button.state == "not-joined"  # pressing it says the same, raises nothing
    class_join(sqlite_class.url + "?join=" + __import__("classroom.helpers", fromlist=["JOIN_TOKEN"]).JOIN_TOKEN,
               "Ada", where=where)
    assert button.refresh() and button.state == "ready"
    reply = button.send()
    assert reply is not None and reply["rows"] == 24 and button.state == "sent"
    assert state(sqlite_class.url)["counts"]["rows"] == 24
    assert button.send()["duplicates"] == 1  # the same result again stores nothing
    assert state(sqlite_class.url)["counts"]["rows"] == 24


def test_submit_button_never_raises(sqlite_class, tmp_path, monkeypatch):
    pytest.importorskip("ipywidgets", reason="the button is an ipywidgets widget")
    from gdrlab.classroom import submit_button
    from gdrlab.classroom.client import _save_config
    where = tmp_path / "cfg"
    _save_config({"url": sqlite_class.url, "key": "not-a-key", "learner_id": 9, "name": "Eve"}, where)
    b = submit_button({"rows": [{"path": "host", "size": 8}], "provenance": None}, doctor=False, where=where)
    assert b.send() is None and b.state == "error" and "Not sent" in b.status.value
    b = submit_button(object(), doctor=False, where=where)
    assert b.send() is None and "cannot send a object" in b.status.value
    _save_config({"url": "http://127.0.0.1:9/", "key": "k", "learner_id": 1, "name": "x"}, where)
    b = submit_button(None, doctor=False, where=where, timeout=2)
    assert b.send() is None and "cannot be reached" in b.status.value
    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    note = submit_button(None)
    assert "needs ipywidgets" in repr(note) and "<p" in note._repr_html_()


# --------------------------------------------------------------------------- under load
def test_live_dashboards_see_every_row_of_64_concurrent_submitters(tmp_path, request):
    """4 dashboards stream while 64 learners submit at once: each stream ends up with every
    stored row, each with a verdict; the figures (time to the last row on the stream, time for a
    full state with verdicts) go beside the load test's."""
    from classroom.test_server import LEARNERS, _load, _report
    running = start_class(db_url(str(tmp_path / "live-load.sqlite")), max_live=8)
    streams = [EventStream(running.url) for _ in range(4)]
    try:
        for s in streams:
            s.next("state")
        t0 = time.monotonic()
        seconds, errors = _load(running.url)
        assert errors == []
        want = {r["id"] for r in running.store.rows_after(0)}
        assert len(want) == 48 * LEARNERS
        last = []
        for s in streams:
            seen: dict[int, dict] = {}
            while set(seen) != want:
                for r in s.next("state", timeout=60)["state"]["rows"]:
                    seen[r["id"]] = r
            last.append(time.monotonic() - t0)
            assert all(r["verdict"] in ("normal", "low", "high", "not comparable") for r in seen.values())
        t1 = time.monotonic()
        full = state(running.url)
        full_s = time.monotonic() - t1
        assert len(full["rows"]) == 48 * LEARNERS
    finally:
        for s in streams:
            s.close()
        stop_class(running)
    _report(request, "classroom-live-load.json", {
        "learners": LEARNERS, "rows": 48 * LEARNERS, "dashboards_streaming": len(streams),
        "seconds_barrier_to_last_reply": round(seconds, 3),
        "seconds_start_to_every_row_on_every_stream": round(max(last), 3),
        "seconds_full_state_with_verdicts_cached": round(full_s, 3)})


def test_gdrlab_import_reads_a_class_export_back_as_imported_rows(tmp_path):
    """Issue 31 item 3: `gdrlab import EXPORT --tool class` turns a class's export into a dataset
    with provenance (through the same read_export), so next year's labs can plot it."""
    from gdrlab import imports, provenance
    running, sub = _filled(tmp_path)
    try:
        status, body = _get_bytes(running.url + "export.csv?anonymise=1")
    finally:
        stop_class(running)
    assert status == 200
    path = tmp_path / "class-2026.csv"
    path.write_bytes(body)
    df = imports.read(path, "class")
    assert len(df) == sum(len(f["rows"]) for f in sub["frames"])
    assert provenance.label(df).startswith("imported from gdrlab class export")
    assert set(df["learner"]) == {"learner-1"}
