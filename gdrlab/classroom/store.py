"""The class view's storage, on SQLAlchemy Core: SQLite by default, PostgreSQL by URL.

- **SQLite** (``--db class.sqlite``, one file): WAL journal (the dashboard reads while learners
  write), ``synchronous=FULL`` (a committed submission survives a power cut, not only a crash),
  foreign keys on, a busy timeout; writes go through one lock of this process, so they never meet
  ``database is locked``.
- **PostgreSQL** (``--db postgresql://user@host/db``, through psycopg 3): the same tables; every
  write transaction takes one advisory lock, so row ids are committed in the order they were given
  and a dashboard that asks for "rows after id N" never misses one committed late.

Every submission is one transaction (its rows, its machine summary): a crash mid-write leaves
the submission whole or absent, never half. A ``schema_version`` table holds the version and
:data:`MIGRATIONS` the steps from one version to the next, each run in its own transaction with
the version bump, so an interrupted migration is re-run whole on the next start.

Idempotency: a submission is keyed by (learner, machine fingerprint, content hash); re-sending
the same content returns the first one's id and stores nothing.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Store", "SubmitOutcome", "db_url", "open_store"]

SCHEMA_VERSION = 2

# --------------------------------------------------------------------------- tables
def _define(m: sa.MetaData, version: int) -> dict[str, sa.Table]:
    """The tables as they are at schema ``version`` (1 or 2), in ``m``."""
    t = {}
    t["settings"] = sa.Table(
        "settings", m,
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False))
    t["learners"] = sa.Table(
        "learners", m,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("joined", sa.String(40), nullable=False))
    t["submissions"] = sa.Table(
        "submissions", m,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("learner_id", sa.Integer, sa.ForeignKey("learners.id"), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),  # "doctor" or "frame"
        sa.Column("received", sa.String(40), nullable=False),
        sa.Column("provenance", sa.Text, nullable=False),  # JSON
        sa.Column("body", sa.Text, nullable=False),  # JSON, as validated
        *([sa.Column("lab", sa.String(64), nullable=True)] if version >= 2 else []),
        sa.UniqueConstraint("learner_id", "fingerprint", "content_hash", name="uq_submission_identity"))
    t["rows"] = sa.Table(
        "rows", m,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("submission_id", sa.Integer, sa.ForeignKey("submissions.id"), nullable=False, index=True),
        sa.Column("learner_id", sa.Integer, sa.ForeignKey("learners.id"), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("path", sa.String(64), nullable=False),
        sa.Column("wire", sa.String(64), nullable=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("lat_p50_us", sa.Float, nullable=True),
        sa.Column("bw_gbps", sa.Float, nullable=True),
        sa.Column("verified", sa.Boolean, nullable=True),
        sa.Column("source", sa.String(256), nullable=True),
        sa.Column("data", sa.Text, nullable=False))  # the whole row, JSON
    if version >= 2:  # the latest doctor summary of each learner's machine
        t["machines"] = sa.Table(
            "machines", m,
            sa.Column("learner_id", sa.Integer, sa.ForeignKey("learners.id"), primary_key=True),
            sa.Column("fingerprint", sa.String(64), primary_key=True),
            sa.Column("submission_id", sa.Integer, sa.ForeignKey("submissions.id"), nullable=False),
            sa.Column("updated", sa.String(40), nullable=False),
            sa.Column("summary", sa.Text, nullable=False))  # JSON
    return t


metadata = sa.MetaData()
schema_version = sa.Table("schema_version", metadata, sa.Column("version", sa.Integer, nullable=False))
_current = _define(metadata, SCHEMA_VERSION)
settings, learners, submissions, rows, machines = (
    _current[k] for k in ("settings", "learners", "submissions", "rows", "machines"))


# --------------------------------------------------------------------------- migrations
def _v1(conn: Connection) -> None:
    """Version 1: settings, learners, submissions (without ``lab``), rows."""
    m = sa.MetaData()
    _define(m, 1)
    m.create_all(conn)


def _v2(conn: Connection) -> None:
    """Version 2: submissions gain ``lab`` (the per-lab progress view); ``machines`` holds each
    learner's machine summary, filled from the doctor reports already stored."""
    conn.execute(sa.text("ALTER TABLE submissions ADD COLUMN lab VARCHAR(64)"))
    machines.create(conn)
    from .schema import machine_summary
    old = sa.MetaData()
    subs = _define(old, 1)["submissions"]
    for sub in conn.execute(sa.select(subs.c.id, subs.c.learner_id, subs.c.fingerprint, subs.c.received,
                                      subs.c.body).where(subs.c.kind == "doctor").order_by(subs.c.id)):
        _put_machine(conn, sub.learner_id, sub.fingerprint, sub.id, sub.received,
                     machine_summary(json.loads(sub.body)))


#: Step ``i`` takes a database from version ``i`` to ``i + 1``.
MIGRATIONS: list[Callable[[Connection], None]] = [_v1, _v2]
assert len(MIGRATIONS) == SCHEMA_VERSION


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def db_url(db: str) -> str:
    """``--db`` as an SQLAlchemy URL: a URL stays (``postgresql://`` means psycopg 3), anything
    else is a path to an SQLite file."""
    if "://" in db:
        if db.startswith(("postgresql://", "postgres://")):
            return "postgresql+psycopg://" + db.split("://", 1)[1]
        return db
    return "sqlite:///" + str(Path(db).expanduser().resolve())


@dataclass(frozen=True)
class SubmitOutcome:
    """What :meth:`Store.add_submission` did: the submission's id, whether it was already there
    (an identical re-send), and how many rows it holds."""

    submission_id: int
    duplicate: bool
    rows: int


class Store:
    """The class's database. Thread-safe: the ASGI app calls it from its thread pool."""

    def __init__(self, url: str, *, upto: int = SCHEMA_VERSION) -> None:
        self.url = url
        self.engine: Engine = _make_engine(url)
        self.dialect = self.engine.dialect.name
        self._write_lock = threading.Lock() if self.dialect == "sqlite" else None
        self.migrate(upto)

    # ------------------------------------------------------------------ schema
    def version(self) -> int:
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table("schema_version"):
                return 0
            got = conn.execute(sa.select(schema_version.c.version)).scalar()
            return int(got or 0)

    def migrate(self, upto: int = SCHEMA_VERSION) -> list[int]:
        """Runs the steps from the stored version to ``upto``; returns the versions reached."""
        done = []
        with self._writing():
            with self.engine.begin() as conn:
                self._lock(conn)
                schema_version.create(conn, checkfirst=True)
                if conn.execute(sa.select(sa.func.count()).select_from(schema_version)).scalar() == 0:
                    conn.execute(schema_version.insert().values(version=0))
            current = self.version()
            if current > SCHEMA_VERSION:
                raise RuntimeError(f"the class database is at schema version {current}, newer than this gdrlab "
                                   f"({SCHEMA_VERSION}): upgrade gdrlab")
            for v in range(current, upto):
                with self.engine.begin() as conn:
                    self._lock(conn)
                    stored = conn.execute(sa.select(schema_version.c.version)).scalar()
                    if stored != v:  # another server migrated meanwhile
                        continue
                    MIGRATIONS[v](conn)
                    conn.execute(schema_version.update().values(version=v + 1))
                done.append(v + 1)
        return done

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ writes
    def _writing(self) -> Any:
        return self._write_lock if self._write_lock is not None else _nullcontext()

    def _lock(self, conn: Connection) -> None:
        if self.dialect == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(31031)"))

    def setting(self, key: str, make: Callable[[], str] | None = None) -> str | None:
        """The stored value of ``key``; with ``make``, stores ``make()`` first when absent."""
        with self.engine.connect() as conn:
            got = conn.execute(sa.select(settings.c.value).where(settings.c.key == key)).scalar()
        if got is not None or make is None:
            return got
        with self._writing(), self.engine.begin() as conn:
            self._lock(conn)
            got = conn.execute(sa.select(settings.c.value).where(settings.c.key == key)).scalar()
            if got is None:
                got = make()
                conn.execute(settings.insert().values(key=key, value=got))
        return got

    def set_setting(self, key: str, value: str) -> None:
        with self._writing(), self.engine.begin() as conn:
            self._lock(conn)
            conn.execute(settings.delete().where(settings.c.key == key))
            conn.execute(settings.insert().values(key=key, value=value))

    def add_learner(self, name: str, key_hash: str) -> int:
        with self._writing(), self.engine.begin() as conn:
            self._lock(conn)
            return int(conn.execute(learners.insert().values(name=name, key_hash=key_hash, joined=_now())
                                    .returning(learners.c.id)).scalar_one())

    def learner_by_key_hash(self, key_hash: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            got = conn.execute(sa.select(learners.c.id, learners.c.name).where(learners.c.key_hash == key_hash)).first()
        return {"id": got.id, "name": got.name} if got else None

    def count_learners(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(learners)).scalar_one())

    def add_submission(self, learner_id: int, fingerprint: str, content_hash: str, kind: str,
                       provenance: dict[str, Any], body: Any, lab: str | None,
                       result_rows: Iterable[dict[str, Any]] = (), summary: dict[str, Any] | None = None,
                       ) -> SubmitOutcome:
        """Stores one submission and its rows, or finds the identical one (see :meth:`add_items`)."""
        return self.add_items(learner_id, fingerprint, [{
            "kind": kind, "content_hash": content_hash, "provenance": provenance, "body": body, "lab": lab,
            "rows": list(result_rows), "summary": summary}])[0]

    def add_items(self, learner_id: int, fingerprint: str, items: list[dict[str, Any]]) -> list[SubmitOutcome]:
        """Stores the items of one submission (each: kind, content_hash, provenance, body, lab, rows,
        summary) in one transaction: all of them or, on any failure, none. An item already stored
        for this learner and machine with the same content hash is not stored again."""
        for attempt in range(3):
            try:
                with self._writing(), self.engine.begin() as conn:
                    self._lock(conn)
                    return [self._add(conn, learner_id, fingerprint, item) for item in items]
            except sa.exc.IntegrityError:  # a concurrent identical submission won the race
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _add(self, conn: Connection, learner_id: int, fingerprint: str, item: dict[str, Any]) -> SubmitOutcome:
        found = conn.execute(sa.select(submissions.c.id).where(
            submissions.c.learner_id == learner_id, submissions.c.fingerprint == fingerprint,
            submissions.c.content_hash == item["content_hash"])).scalar()
        if found is not None:
            n = conn.execute(sa.select(sa.func.count()).select_from(rows)
                             .where(rows.c.submission_id == found)).scalar_one()
            return SubmitOutcome(int(found), True, int(n))
        received = _now()
        sid = int(conn.execute(submissions.insert().values(
            learner_id=learner_id, fingerprint=fingerprint, content_hash=item["content_hash"], kind=item["kind"],
            received=received, provenance=json.dumps(item["provenance"], sort_keys=True),
            body=json.dumps(item["body"], sort_keys=True), lab=item.get("lab")).returning(submissions.c.id)).scalar_one())
        result_rows = item.get("rows") or []
        if result_rows:
            conn.execute(rows.insert(), [_row_values(sid, learner_id, fingerprint, r) for r in result_rows])
        if item.get("summary") is not None:
            _put_machine(conn, learner_id, fingerprint, sid, received, item["summary"])
        return SubmitOutcome(sid, False, len(result_rows))

    # ------------------------------------------------------------------ reads
    def learners(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            subs: dict[Any, Any] = dict(conn.execute(sa.select(submissions.c.learner_id, sa.func.count())
                                     .group_by(submissions.c.learner_id)).all())
            return [{"id": r.id, "name": r.name, "joined": r.joined, "submissions": int(subs.get(r.id, 0))}
                    for r in conn.execute(sa.select(learners).order_by(learners.c.id))]

    def machines(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            q = (sa.select(machines, learners.c.name).join(learners, learners.c.id == machines.c.learner_id)
                 .order_by(machines.c.learner_id, machines.c.fingerprint))
            return [{"learner_id": r.learner_id, "learner": r.name, "fingerprint": r.fingerprint,
                     "updated": r.updated, **json.loads(r.summary)} for r in conn.execute(q)]

    def progress(self) -> list[dict[str, Any]]:
        """Per learner and lab: how many result frames and rows came."""
        with self.engine.connect() as conn:
            q = (sa.select(submissions.c.learner_id, submissions.c.lab, sa.func.count(sa.distinct(submissions.c.id)),
                           sa.func.count(rows.c.id))
                 .select_from(submissions.outerjoin(rows, rows.c.submission_id == submissions.c.id))
                 .where(submissions.c.kind == "frame")
                 .group_by(submissions.c.learner_id, submissions.c.lab)
                 .order_by(submissions.c.learner_id, submissions.c.lab))
            return [{"learner_id": r[0], "lab": r[1], "frames": int(r[2]), "rows": int(r[3])} for r in conn.execute(q)]

    def machine_reports(self) -> dict[tuple[int, str], int]:
        """(learner, machine fingerprint) -> the id of the latest doctor report stored for it."""
        with self.engine.connect() as conn:
            return {(r.learner_id, r.fingerprint): int(r.submission_id)
                    for r in conn.execute(sa.select(machines.c.learner_id, machines.c.fingerprint,
                                                    machines.c.submission_id))}

    def submission_body(self, submission_id: int) -> Any:
        """The stored body (JSON, as validated) of one submission; None when there is none."""
        with self.engine.connect() as conn:
            got = conn.execute(sa.select(submissions.c.body).where(submissions.c.id == submission_id)).scalar()
        return json.loads(got) if got is not None else None

    def row_keys(self, upto: int | None = None) -> list[dict[str, Any]]:
        """The distinct (learner, fingerprint, path, wire, size) of the stored rows (of submissions
        up to ``upto``): what the dashboard's model curves cover."""
        with self.engine.connect() as conn:
            q = sa.select(rows.c.learner_id, rows.c.fingerprint, rows.c.path, rows.c.wire, rows.c.size).distinct()
            if upto is not None:
                q = q.where(rows.c.submission_id <= upto)
            return [dict(r._mapping) for r in conn.execute(q)]

    def rows_of_machine(self, learner_id: int, fingerprint: str, upto: int) -> list[dict[str, Any]]:
        """The rows :meth:`rows_after` gives, of one learner's machine, in submissions up to ``upto``."""
        return [r for r in self._rows_query(0, None, (learner_id, fingerprint, upto))]

    def max_submission_id(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(submissions.c.id), 0))).scalar_one())

    def rows_after(self, submission_id: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
        """Result rows of submissions after ``submission_id``, with their learner and lab."""
        return self._rows_query(submission_id, limit, None)

    def _rows_query(self, submission_id: int, limit: int | None,
                    machine: tuple[int, str, int] | None) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            q = (sa.select(rows.c.id, rows.c.submission_id, rows.c.learner_id, learners.c.name, rows.c.fingerprint,
                           rows.c.path, rows.c.wire, rows.c.size, rows.c.lat_p50_us, rows.c.bw_gbps,
                           rows.c.verified, rows.c.source, submissions.c.lab, submissions.c.received,
                           submissions.c.provenance, rows.c.data)
                 .select_from(rows.join(learners, learners.c.id == rows.c.learner_id)
                              .join(submissions, submissions.c.id == rows.c.submission_id))
                 .where(rows.c.submission_id > submission_id).order_by(rows.c.id))
            if machine is not None:
                q = q.where(rows.c.learner_id == machine[0], rows.c.fingerprint == machine[1],
                            rows.c.submission_id <= machine[2])
            if limit:
                q = q.limit(limit)
            out = []
            for r in conn.execute(q):
                d = dict(r._mapping)
                d["learner"] = d.pop("name")
                d["provenance"] = json.loads(d["provenance"])
                d["data"] = json.loads(d["data"])
                out.append(d)
            return out

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            return {t.name: int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one())
                    for t in (learners, submissions, rows, machines)}

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every stored row of every table, ordered, for comparing two databases in tests."""
        out = {}
        with self.engine.connect() as conn:
            for t in (learners, submissions, rows, machines, settings):
                cols = [c for c in t.columns]
                out[t.name] = [tuple(r) for r in conn.execute(sa.select(*cols).order_by(*t.primary_key.columns))]
        return out


def _row_values(sid: int, learner_id: int, fingerprint: str, r: dict[str, Any]) -> dict[str, Any]:
    return {"submission_id": sid, "learner_id": learner_id, "fingerprint": fingerprint, "path": r["path"],
            "wire": r.get("wire"), "size": int(r["size"]), "lat_p50_us": r.get("lat_p50_us"),
            "bw_gbps": r.get("bw_gbps"), "verified": r.get("verified"), "source": r.get("source"),
            "data": json.dumps(r, sort_keys=True)}


def _put_machine(conn: Connection, learner_id: int, fingerprint: str, sid: int, when: str,
                 summary: dict[str, Any]) -> None:
    key = (machines.c.learner_id == learner_id) & (machines.c.fingerprint == fingerprint)
    values = {"submission_id": sid, "updated": when, "summary": json.dumps(summary, sort_keys=True)}
    if conn.execute(sa.select(machines.c.learner_id).where(key)).first():
        conn.execute(machines.update().where(key).values(**values))
    else:
        conn.execute(machines.insert().values(learner_id=learner_id, fingerprint=fingerprint, **values))


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            if not os.path.exists(path):  # created private: it holds the learners' key hashes
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    return sa.create_engine(url, pool_size=8, max_overflow=16, pool_pre_ping=True)


def open_store(db: str, **kw: Any) -> Store:
    """A :class:`Store` on ``--db`` (a path or a URL), migrated to the current schema."""
    return Store(db_url(db), **kw)
