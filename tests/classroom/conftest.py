"""Fixtures of the class view's tests.

``backend`` runs a test once on SQLite (a file in the test's temporary folder) and once on a real
PostgreSQL server: ``postgres_server`` starts one (``initdb`` + ``pg_ctl`` from Debian's
``postgresql`` package, found on PATH or in /usr/lib/postgresql/*/bin) in a temporary folder, on
127.0.0.1 and a free port, once per session; each test gets a database of its own. As root (a
container) the server runs as the ``postgres`` user through ``runuser``, since PostgreSQL refuses
to run as root. Without PostgreSQL the PostgreSQL half skips with the reason, except under ``CI``,
where it fails (CI installs it: scripts/install-system-deps.sh).
"""
from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the class view needs the 'class' extra (starlette, uvicorn, SQLAlchemy)")
pytest.importorskip("uvicorn", reason="the class view needs the 'class' extra (starlette, uvicorn, SQLAlchemy)")
pytest.importorskip("sqlalchemy", reason="the class view needs the 'class' extra (starlette, uvicorn, SQLAlchemy)")

from classroom.helpers import INSTRUCTOR_TOKEN, JOIN_TOKEN  # noqa: E402
from gdrlab.classroom.app import ClassConfig  # noqa: E402
from gdrlab.classroom.server import BackgroundServer  # noqa: E402
from gdrlab.classroom.store import Store, db_url  # noqa: E402


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL tests cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    port: int
    user: str
    counter: itertools.count

    def new_database(self) -> str:
        import psycopg
        name = f"gdrlab_class_{next(self.counter)}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{name}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        _skip_or_fail("PostgreSQL is not installed (no initdb/pg_ctl on PATH or in /usr/lib/postgresql/*/bin): "
                      "apt-get install postgresql")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _skip_or_fail("psycopg is not installed: pip install 'gdrlab[postgres]'")
    prefix: list[str] = []
    base = Path(tempfile.mkdtemp(prefix="gdrlab-pg-"))
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            _skip_or_fail("running as root and there is no 'postgres' user to run PostgreSQL as")
        runuser = shutil.which("runuser")
        if not runuser:
            _skip_or_fail("running as root and runuser is missing (PostgreSQL refuses to run as root)")
        os.chown(base, pw.pw_uid, pw.pw_gid)
        prefix = [runuser, "-u", "postgres", "--"]
    data, log = base / "data", base / "postgres.log"
    port, user = _free_port(), "gdrlab"

    def run(*cmd: str) -> None:
        done = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120, cwd=base)
        if done.returncode != 0:
            tail = log.read_text()[-2000:] if log.exists() else ""
            pytest.fail(f"{' '.join(cmd[:2])} failed ({done.returncode}): {done.stderr.strip()} {tail}")

    run(initdb, "-D", str(data), "-A", "trust", "-U", user, "-E", "UTF8", "--no-sync")
    run(pg_ctl, "-D", str(data), "-l", str(log), "-w", "-t", "60",
        "-o", f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", "start")
    try:
        yield PostgresServer(port, user, itertools.count(1))
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database's URL: an SQLite file, or a fresh database on the session's PostgreSQL."""
    if request.param == "sqlite":
        return db_url(str(tmp_path / "class.sqlite"))
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return db_url(server.new_database())


@dataclass
class RunningClass:
    url: str
    store: Store
    server: BackgroundServer


def start_class(url: str, **config: object) -> RunningClass:
    store = Store(url)
    cfg = ClassConfig(instructor_token=INSTRUCTOR_TOKEN, join_token=JOIN_TOKEN, **config)  # type: ignore[arg-type]
    server = BackgroundServer(store, cfg).start()
    return RunningClass(server.url, store, server)


def stop_class(running: RunningClass) -> None:
    running.server.stop()
    running.store.close()


@pytest.fixture
def running_class(backend: str) -> Iterator[RunningClass]:
    """The class view on a thread of this process, on 127.0.0.1, over ``backend``."""
    running = start_class(backend)
    try:
        yield running
    finally:
        stop_class(running)
