"""The class view's storage, the same tests on SQLite and on a real PostgreSQL server: schema
version and migration, idempotent submissions, one transaction per submission (a failure or a
killed process mid-write leaves nothing half-stored), and everything kept across a reopen."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import sqlalchemy as sa

from classroom.helpers import doctor_report, fingerprint, result_frame
from gdrlab.classroom import schema
from gdrlab.classroom.app import submission_items
from gdrlab.classroom.store import SCHEMA_VERSION, Store, _define

pytestmark = pytest.mark.timeout(120)


def _items(i: int = 0) -> list[dict]:
    doc = schema.validate_submission({"fingerprint": fingerprint(i), "doctor": doctor_report(i),
                                      "frames": [result_frame(), result_frame("h200-bench-staged")]})
    return submission_items(doc)


def test_a_new_database_is_at_the_current_schema(backend):
    store = Store(backend)
    try:
        assert store.version() == SCHEMA_VERSION
        names = set(sa.inspect(store.engine).get_table_names())
        assert {"schema_version", "settings", "learners", "submissions", "rows", "machines"} <= names
        if store.dialect == "sqlite":
            with store.engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
                assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        assert Store(backend).migrate() == []  # opening again migrates nothing
    finally:
        store.close()


def test_migration_from_version_1_keeps_the_data(backend):
    old = Store(backend, upto=1)
    assert old.version() == 1
    v1 = _define(sa.MetaData(), 1)
    body = {"doctor": doctor_report(3), "topology": None}
    with old.engine.begin() as conn:
        lid = conn.execute(v1["learners"].insert().values(name="Ada", key_hash="k" * 64, joined="2026-01-01")
                           .returning(v1["learners"].c.id)).scalar_one()
        conn.execute(v1["submissions"].insert().values(
            learner_id=lid, fingerprint=fingerprint(3), content_hash="h" * 64, kind="doctor", received="2026-01-01",
            provenance="{}", body=json.dumps(body)))
        assert "lab" not in {c["name"] for c in sa.inspect(conn).get_columns("submissions")}
    old.close()
    store = Store(backend)
    try:
        assert store.version() == SCHEMA_VERSION
        assert [x["name"] for x in store.learners()] == ["Ada"]
        machines = store.machines()  # version 2 filled the machines table from the stored reports
        assert len(machines) == 1 and machines[0]["host"] == "node03"
        assert machines[0]["gpus"][0]["name"] == "NVIDIA H200"
    finally:
        store.close()


def test_a_newer_database_is_refused(backend):
    store = Store(backend)
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE schema_version SET version = 99"))
    store.close()
    with pytest.raises(RuntimeError, match="schema version 99, newer"):
        Store(backend)


def test_resending_the_same_content_stores_nothing_new(backend):
    store = Store(backend)
    try:
        lid = store.add_learner("Ada", "a" * 64)
        first = store.add_items(lid, fingerprint(0), _items())
        assert [o.duplicate for o in first] == [False, False, False]
        counts = store.counts()
        again = store.add_items(lid, fingerprint(0), _items())
        assert [o.duplicate for o in again] == [True, True, True]
        assert [o.submission_id for o in again] == [o.submission_id for o in first]
        assert store.counts() == counts
        # the same content from another machine of the same learner, or from another learner, is theirs
        store.add_items(lid, fingerprint(1), _items())
        other = store.add_learner("Bob", "b" * 64)
        store.add_items(other, fingerprint(0), _items())
        assert store.counts()["submissions"] == 3 * counts["submissions"]
        assert store.counts()["machines"] == 3
    finally:
        store.close()


def test_a_failing_item_leaves_the_whole_submission_unstored(backend):
    store = Store(backend)
    try:
        lid = store.add_learner("Ada", "a" * 64)
        items = _items()
        items[2]["rows"] = items[2]["rows"] + [{"path": "host"}]  # no size: fails inside the transaction
        with pytest.raises(KeyError):
            store.add_items(lid, fingerprint(0), items)
        assert store.counts() == {"learners": 1, "submissions": 0, "rows": 0, "machines": 0}
    finally:
        store.close()


_KILLED_MID_WRITE = textwrap.dedent("""
    import sys, os
    import sqlalchemy as sa
    from gdrlab.classroom.store import Store, submissions, rows
    store = Store(sys.argv[1])
    lid = store.add_learner("Ada", "a" * 64)
    with store.engine.begin() as conn:  # committed
        conn.execute(submissions.insert().values(learner_id=lid, fingerprint="f" * 32, content_hash="1" * 64,
                     kind="frame", received="t", provenance="{}", body="{}"))
    conn = store.engine.connect()
    tx = conn.begin()  # never committed: the process dies inside it
    sid = conn.execute(submissions.insert().values(learner_id=lid, fingerprint="f" * 32, content_hash="2" * 64,
                       kind="frame", received="t", provenance="{}", body="{}").returning(submissions.c.id)).scalar_one()
    conn.execute(rows.insert(), [{"submission_id": sid, "learner_id": lid, "fingerprint": "f" * 32, "path": "host",
                                  "size": 8 + i, "data": "{}"} for i in range(1000)])
    print("inside", flush=True)
    sys.stdin.read()
""")


def test_a_process_killed_mid_write_loses_only_the_unfinished_submission(backend):
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_MID_WRITE, backend], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # blocks until the child is inside its transaction
        assert line.strip() == "inside", proc.stderr.read()
        proc.kill()  # SIGKILL: no rollback, no close, as a crash or a power cut of the process
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()
    store = Store(backend)
    try:
        assert store.counts() == {"learners": 1, "submissions": 1, "rows": 0, "machines": 0}
        if store.dialect == "sqlite":
            with store.engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    finally:
        store.close()


def test_a_reopened_database_holds_everything(backend):
    store = Store(backend)
    lid = store.add_learner("Ada <b>", "a" * 64)
    store.add_items(lid, fingerprint(0), _items())
    store.setting("join_token", lambda: "jt")
    before = store.dump()
    store.close()
    again = Store(backend)
    try:
        assert again.dump() == before
        assert again.setting("join_token") == "jt"
        assert again.learner_by_key_hash("a" * 64) == {"id": lid, "name": "Ada <b>"}
    finally:
        again.close()
