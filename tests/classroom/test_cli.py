"""``gdrlab class serve|join|submit|export`` as commands, and ``gdrlab.classroom.submit(df)``."""
from __future__ import annotations

import csv
import io
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from classroom.helpers import INSTRUCTOR_TOKEN, call, state

pytestmark = pytest.mark.timeout(180)


def _gdrlab(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gdrlab", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def served(tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text(INSTRUCTOR_TOKEN + "\n")
    token_file.chmod(0o600)
    db = tmp_path / "class.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "gdrlab", "class", "serve", "--listen", "127.0.0.1:0", "--db", str(db),
                             "--token-file", str(token_file), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # printed once the socket listens
        assert line, proc.stderr.read()
        yield json.loads(line), db, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        proc.stdout.close()
        proc.stderr.close()


def test_serve_join_submit_export(served, tmp_path):
    doc, db, proc = served
    assert doc["db"] == "sqlite" and doc["schema_version"] == 2 and "token" not in doc
    assert doc["join_url"].startswith(doc["url"] + "?join=")
    env = {"GDRLAB_CONFIG_DIR": str(tmp_path / "learner")}
    joined = _gdrlab("class", "join", doc["join_url"], "--name", "Ada Lovelace", "--json", env=env)
    assert joined.returncode == 0, joined.stderr
    info = json.loads(joined.stdout)
    cfg = Path(info["config"])
    assert cfg.is_file() and stat.S_IMODE(cfg.stat().st_mode) == 0o600
    assert json.loads(cfg.read_text())["key"]
    # a result file as `gdrlab bench --json` writes it (here: the recorded H200 sweep)
    from gdrlab import recorded
    bench = recorded.load_document("h200-bench-staged")
    (tmp_path / "bench.json").write_text(json.dumps({"rows": bench["rows"], "provenance": bench["provenance"]}))
    sent = _gdrlab("class", "submit", str(tmp_path / "bench.json"), "--lab", "04", "--json", env=env)
    assert sent.returncode == 0, sent.stderr
    reply = json.loads(sent.stdout)
    assert reply["stored"] == 2 and reply["rows"] == len(bench["rows"]) and reply["doctor"] is True
    again = _gdrlab("class", "submit", str(tmp_path / "bench.json"), "--lab", "04", "--json", env=env)
    assert json.loads(again.stdout)["stored"] == 0  # the same machine, the same results: nothing new
    snap = state(doc["url"])
    assert [m["learner"] for m in snap["machines"]] == ["Ada Lovelace"]
    assert snap["progress"] == [{"learner_id": 1, "lab": "04", "frames": 1, "rows": len(bench["rows"])}]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 128 + signal.SIGTERM  # a graceful stop, as `gdrlab serve` reports it
    out = tmp_path / "class.csv"
    exported = _gdrlab("class", "export", "--db", str(db), "-o", str(out), "--json")
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == len(bench["rows"]) and {r["learner"] for r in rows} == {"Ada Lovelace"}
    assert {r["path"] for r in rows} == {"staged"} and rows[0]["provenance_kind"] == "recorded"


def test_clear_lines_for_learner_mistakes(served, tmp_path):
    doc, _, _ = served
    env = {"GDRLAB_CONFIG_DIR": str(tmp_path / "nobody")}
    notjoined = _gdrlab("class", "submit", "--json", env=env)
    assert notjoined.returncode == 1
    assert "not in a class yet" in json.loads(notjoined.stdout)["error"]["message"]
    wrong = _gdrlab("class", "join", doc["url"] + "?join=wrong", "--name", "Eve", env=env)
    assert wrong.returncode == 1 and "wrong join token" in wrong.stderr and len(wrong.stderr.splitlines()) == 1
    nourl = _gdrlab("class", "join", "ftp://x/", "--name", "Eve", env=env)
    assert nourl.returncode == 1 and "not a class URL" in nourl.stderr
    ok = _gdrlab("class", "join", doc["join_url"], "--name", "Eve", env=env)
    assert ok.returncode == 0, ok.stderr
    (tmp_path / "r.csv").write_text("path,size\nhost,8\n")
    csvfile = _gdrlab("class", "submit", str(tmp_path / "r.csv"), "--no-doctor", env=env)
    assert csvfile.returncode == 1 and "carries no provenance" in csvfile.stderr


def test_off_loopback_needs_a_long_token(tmp_path):
    short = tmp_path / "short"
    short.write_text("abc")
    short.chmod(0o600)
    got = _gdrlab("class", "serve", "--listen", "0.0.0.0:0", "--db", str(tmp_path / "c.sqlite"),
                  "--token-file", str(short))
    assert got.returncode == 1 and "at least 16 characters" in got.stderr


def test_help_names_every_subcommand():
    got = _gdrlab("class", "--help")
    for word in ("serve", "join", "submit", "export", "gdrlab.classroom.submit(df)"):
        assert word in got.stdout


def test_a_lab_submits_a_dataframe_in_one_call(served, tmp_path, monkeypatch):
    doc, _, _ = served
    import gdrlab.classroom
    from gdrlab import recorded
    monkeypatch.setenv("GDRLAB_CONFIG_DIR", str(tmp_path / "lab-learner"))
    gdrlab.classroom.join(doc["join_url"], "Grace")
    df = recorded.load("h200-bench-host")
    reply = gdrlab.classroom.submit(df, lab="04", doctor=False, machine="ab" * 16)
    assert reply["stored"] == 1 and reply["rows"] == len(df)
    assert gdrlab.classroom.submit(df, lab="04", doctor=False, machine="ab" * 16)["duplicates"] == 1
    status, snap, _ = call(doc["url"], "api/state", key=INSTRUCTOR_TOKEN)
    assert {r["learner"] for r in snap["rows"]} == {"Grace"} and len(snap["rows"]) == len(df)
