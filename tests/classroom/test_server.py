"""The class view over loopback HTTP: 64 learners submitting at once lose nothing (SQLite and
PostgreSQL holding the same rows), bad input gets one clear 4xx line and stores nothing, keys and
tokens are checked, every learner string comes back escaped, and a restart keeps everything."""
from __future__ import annotations

import json
import os
import select
import socket
import threading
import time
from pathlib import Path

import pytest

from classroom.conftest import start_class, stop_class
from classroom.helpers import INSTRUCTOR_TOKEN, JOIN_TOKEN, call, fingerprint, join, result_frame, state, submission

pytestmark = pytest.mark.timeout(300)

LEARNERS = 64


def _load(base: str) -> tuple[float, list[str]]:
    """64 threads: each joins, then all submit at once (a barrier), each its doctor report and two
    result frames. Returns (seconds from the barrier to the last reply, errors)."""
    errors: list[str] = []
    done: list[float] = []
    go = threading.Barrier(LEARNERS + 1)
    lock = threading.Lock()
    payloads = [json.dumps(submission(i, frames=2)).encode() for i in range(LEARNERS)]

    def learner(i: int) -> None:
        try:
            _, key = join(base, f"learner {i:02d}")
            go.wait(60)
            status, doc, _ = call(base, "api/submit", key=key, raw=payloads[i])
            if status != 201 or doc["stored"] != 3 or doc["rows"] != 48:
                raise AssertionError(f"learner {i}: {status} {doc}")
            with lock:
                done.append(time.monotonic())
        except BaseException as exc:  # noqa: BLE001 - collected, reported by the test
            with lock:
                errors.append(f"{type(exc).__name__}: {exc}")
            go.abort()

    threads = [threading.Thread(target=learner, args=(i,)) for i in range(LEARNERS)]
    for t in threads:
        t.start()
    try:
        go.wait(120)
    except threading.BrokenBarrierError:
        pass
    start = time.monotonic()
    for t in threads:
        t.join(240)
    assert not any(t.is_alive() for t in threads), "a submitter never finished"
    return (max(done) - start if done else 0.0), errors


def _canonical(store) -> list[tuple]:
    """The stored rows as the learners sent them: learner name, machine, path, size, bandwidth."""
    return sorted((r["learner"], r["fingerprint"], r["path"], r["size"], r["bw_gbps"], r["lat_p50_us"], r["source"])
                  for r in store.rows_after(0))


def test_64_concurrent_submitters_lose_nothing_on_sqlite_and_postgresql(tmp_path, postgres_server, request):
    from gdrlab.classroom.store import db_url

    figures, held = {}, {}
    for name, url in (("sqlite", db_url(str(tmp_path / "load.sqlite"))),
                      ("postgresql", db_url(postgres_server.new_database()))):
        running = start_class(url)
        try:
            seconds, errors = _load(running.url)
            assert errors == []
            assert running.store.counts() == {"learners": LEARNERS, "submissions": 3 * LEARNERS,
                                              "rows": 48 * LEARNERS, "machines": LEARNERS}
            snap = state(running.url)
            assert len(snap["rows"]) == 48 * LEARNERS and len(snap["machines"]) == LEARNERS
            held[name] = _canonical(running.store)
            figures[name] = {"learners": LEARNERS, "requests": LEARNERS, "rows": 48 * LEARNERS,
                             "seconds_barrier_to_last_reply": round(seconds, 3)}
        finally:
            stop_class(running)
    assert held["sqlite"] == held["postgresql"]  # the two databases hold the same rows
    _report(request, "classroom-load.json", figures)


def _report(request: pytest.FixtureRequest, name: str, doc: dict) -> None:
    """Writes figures under $GDRLAB_ARTIFACTS/classroom (or pytest's temporary base) and prints the path."""
    env = os.environ.get("GDRLAB_ARTIFACTS")
    folder = Path(env) / "classroom" if env else request.config._tmp_path_factory.getbasetemp() / "classroom"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc, indent=2) + "\n")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(f"class view figures: {folder / name}: {json.dumps(doc)}")


# --------------------------------------------------------------------------- bad input
def _nothing_more(running, before) -> None:
    assert running.store.counts() == before


def _one_line(doc) -> str:
    assert isinstance(doc, dict) and set(doc) == {"error"}, doc
    assert "\n" not in doc["error"] and doc["error"]
    return doc["error"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_bad_submissions_get_one_clear_line_and_store_nothing(running_class):
    base = running_class.url
    _, key = join(base, "Ada")
    good = submission(0)
    before = running_class.store.counts()
    no_prov = {**good, "frames": [{"rows": good["frames"][0]["rows"]}]}
    bad_kind = {**good, "frames": [{**good["frames"][0], "provenance": {"kind": "made-up"}}]}
    bad_size = json.loads(json.dumps(good))
    bad_size["frames"][0]["rows"][5]["size"] = "a lot"
    deep: object = 1
    for _ in range(40):
        deep = [deep]
    cases = [
        (b"{not json", 400, "malformed JSON"),
        (b'{"fingerprint": NaN}', 400, "malformed JSON"),
        (b"\xff\xfe", 400, "not UTF-8"),
        (json.dumps([1, 2]).encode(), 422, "must be a JSON object"),
        (json.dumps({**good, "extra": 1}).encode(), 422, "unknown field"),
        (json.dumps({**good, "fingerprint": "../../etc"}).encode(), 422, "fingerprint"),
        (json.dumps(no_prov).encode(), 422, "carries its provenance"),
        (json.dumps(bad_kind).encode(), 422, "frames[0].provenance.kind"),
        (json.dumps(bad_size).encode(), 422, "frames[0].rows[5].size"),
        (json.dumps({**good, "doctor": {**good["doctor"], "x": deep}}).encode(), 422, "nested deeper"),
        (json.dumps({**good, "frames": [good["frames"][0]] * 65}).encode(), 422, "at most 64"),
    ]
    for raw, status, words in cases:
        got, doc, _ = call(base, "api/submit", key=key, raw=raw)
        assert got == status, (raw[:60], got, doc)
        assert words in _one_line(doc), (words, doc)
    _nothing_more(running_class, before)


def _raw_post(port: int, headers: str, chunks, within_s: float = 60.0) -> bytes:
    """Sends a request by hand, body chunk by chunk, and stops as soon as the server answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=within_s) as s:
        s.sendall(headers.encode())
        got = b""
        for chunk in chunks:
            readable, _, _ = select.select([s], [], [], 0)
            if readable:
                break
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        deadline = time.monotonic() + within_s
        while b"\r\n\r\n" not in got or len(got) < got.find(b"\r\n\r\n") + 4 + _length(got):
            if time.monotonic() > deadline:
                break
            try:
                part = s.recv(65536)
            except ConnectionResetError:
                break
            if not part:
                break
            got += part
        return got


def _length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_100_mb_payload_is_refused_before_it_is_read(running_class):
    _, key = join(running_class.url, "Ada")
    before = running_class.store.counts()
    port = int(running_class.url.rsplit(":", 1)[1].strip("/"))
    mb = b"x" * (1 << 20)
    head = (f"POST /api/submit HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {100 << 20}\r\n\r\n")
    reply = _raw_post(port, head, (mb for _ in range(100)))
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    body = json.loads(reply.split(b"\r\n\r\n", 1)[1])
    assert "payload too large: 104857600 bytes" in _one_line(body)
    # the same without Content-Length (chunked): cut off while it streams
    head = (f"POST /api/submit HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n")
    reply = _raw_post(port, head, (b"%x\r\n%s\r\n" % (len(mb), mb) for _ in range(100)))
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert "payload too large" in _one_line(json.loads(reply.split(b"\r\n\r\n", 1)[1]))
    _nothing_more(running_class, before)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_tokens_and_keys_are_checked(running_class):
    base = running_class.url
    status, doc, _ = call(base, "api/join", {"join_token": "wrong", "name": "Eve"})
    assert status == 403 and "wrong join token" in _one_line(doc)
    status, doc, _ = call(base, "api/join", {"join_token": JOIN_TOKEN, "name": "bell\x07"})
    assert status == 422 and "control characters" in _one_line(doc)
    a_id, a_key = join(base, "Ada")
    _, b_key = join(base, "Bob")
    assert call(base, "api/submit", submission(0))[0] == 401  # no key, no write
    assert call(base, "api/submit", submission(0), key="not-a-key")[0] == 403
    assert call(base, "api/state")[0] == 401
    assert call(base, "api/state", key=a_key)[0] == 403  # a learner key is not the instructor's
    assert call(base, "export.csv", key="wrong-instructor")[0] == 403
    assert call(base, "api/submit", submission(0), key=a_key)[0] == 201
    mine = [r for r in running_class.store.rows_after(0) if r["learner_id"] == a_id]
    # Bob sends the same content for the same machine, then different numbers: stored as Bob's, Ada's untouched
    assert call(base, "api/submit", submission(0), key=b_key)[0] == 201
    changed = submission(0)
    changed["frames"][0]["rows"][0]["bw_gbps"] = 999.0
    assert call(base, "api/submit", changed, key=b_key)[0] == 201
    assert [r for r in running_class.store.rows_after(0) if r["learner_id"] == a_id] == mine
    assert {r["learner"] for r in running_class.store.rows_after(0)} == {"Ada", "Bob"}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_hostile_strings_come_back_escaped(running_class):
    base = running_class.url
    names = ["<script>alert(1)</script>", '"><img src=x onerror=alert(2)>', "=HYPERLINK(\"http://x\")"]
    keys = [join(base, n)[1] for n in names]
    for i, key in enumerate(keys):
        sub = submission(i)
        sub["doctor"]["gpus"][0]["name"] = "<svg onload=alert(3)>"
        sub["frames"][0]["rows"][0]["source"] = "<b>bold</b>"
        assert call(base, "api/submit", sub, key=key)[0] == 201
    status, page, headers = call(base, "dashboard", key=INSTRUCTOR_TOKEN)
    assert status == 200
    for raw in ("<script>alert", "<img src=x", "<svg onload"):
        assert raw not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    assert "&lt;svg onload=alert(3)&gt;" in page
    assert "script-src 'self'" in headers["content-security-policy"] and "unsafe-inline" not in \
        headers["content-security-policy"].split("script-src")[1].split(";")[0]
    status, csv_text, _ = call(base, "export.csv", key=INSTRUCTOR_TOKEN)
    assert status == 200
    assert "'=HYPERLINK" in csv_text and ",=HYPERLINK" not in csv_text  # no formula a spreadsheet would run
    status, anon, _ = call(base, "export.csv?anonymise=1", key=INSTRUCTOR_TOKEN)
    assert "<script>" not in anon and "learner-1" in anon


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_resending_is_idempotent_over_http(running_class):
    _, key = join(running_class.url, "Ada")
    first = call(running_class.url, "api/submit", submission(0), key=key)
    counts = running_class.store.counts()
    again = call(running_class.url, "api/submit", submission(0), key=key)
    assert first[0] == 201 and again[0] == 200
    assert again[1]["stored"] == 0 and again[1]["duplicates"] == 2
    assert again[1]["submissions"] == first[1]["submissions"]
    assert running_class.store.counts() == counts


def test_rate_limit_is_per_learner(tmp_path):
    from gdrlab.classroom.store import db_url
    running = start_class(db_url(str(tmp_path / "rate.sqlite")), rate_per_minute=6, rate_burst=3)
    try:
        _, a = join(running.url, "Ada")
        _, b = join(running.url, "Bob")
        frames = [{"fingerprint": fingerprint(0), "frames": [result_frame(scale=1 + k)]} for k in range(4)]
        got = [call(running.url, "api/submit", f, key=a) for f in frames]
        assert [g[0] for g in got] == [201, 201, 201, 429]
        assert "too many submissions" in _one_line(got[3][1]) and int(got[3][2]["retry-after"]) >= 1
        assert call(running.url, "api/submit", frames[3], key=b)[0] == 201  # Bob has his own bucket
        assert running.store.counts()["submissions"] == 4
    finally:
        stop_class(running)


def test_a_restart_keeps_everything(backend):
    running = start_class(backend)
    try:
        _, key = join(running.url, "Ada")
        assert call(running.url, "api/submit", submission(0), key=key)[0] == 201
        before = state(running.url)
    finally:
        stop_class(running)
    running = start_class(backend)
    try:
        after = state(running.url)
        assert after == before
        # the learner's key still works, and the re-send is still recognised
        again = call(running.url, "api/submit", submission(0), key=key)
        assert again[0] == 200 and again[1]["duplicates"] == 2
    finally:
        stop_class(running)
