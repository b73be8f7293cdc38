"""``gdrlab serve`` on the command line (classroom-serve issue, D1/D4/D6/D9/D11 CLI parts).

The token comes from --token-file or $GDRLAB_TOKEN; --token is warned about off loopback; off
loopback a token has at least 16 characters; --gen-token prints a strong one once; bad text in
flags and variables, IPv6 without brackets and a negative --device are one clear line each.
"""
from __future__ import annotations

import json
import os
import select
import socket
import struct
import subprocess
import sys

import pytest

from conftest import TIME_SCALE
from gdrlab import engine

pytestmark = pytest.mark.timeout(120)
GOOD_TOKEN = "classroom-token-0123456789"  # 26 characters
MAGIC, VERSION, ERROR = 0x4C524447, 1, 6


def _serve(args: list, env: dict | None = None, timeout: float = 30 * TIME_SCALE):
    """Run `gdrlab serve ARGS` expected to fail at once: (returncode, stdout, stderr lines)."""
    full_env = dict(os.environb)
    full_env.pop(b"GDRLAB_TOKEN", None)
    full_env.update({k.encode() if isinstance(k, str) else k: v.encode() if isinstance(v, str) else v
                     for k, v in (env or {}).items()})
    argv = [sys.executable.encode(), b"-m", b"gdrlab", b"serve"] + [a.encode() if isinstance(a, str) else a
                                                                     for a in args]
    r = subprocess.run(argv, capture_output=True, timeout=timeout, env=full_env, stdin=subprocess.DEVNULL)
    err = r.stderr.decode(errors="replace")
    return r.returncode, r.stdout.decode(errors="replace"), [ln for ln in err.splitlines() if ln.strip()]


def _one_line(rc: int, lines: list[str], pattern: str) -> None:
    assert rc != 0
    assert len(lines) == 1 and pattern in lines[0], lines
    assert "Traceback" not in lines[0]


# --------------------------------------------------------------------------- D9: bad text
@pytest.mark.parametrize("args,env,named", [
    ([b"--token", b"\xff\xfe-not-utf8-token-123"], None, "--token"),
    ([], {"GDRLAB_TOKEN": b"\xff\xfe-not-utf8-token-123"}, "$GDRLAB_TOKEN"),
    ([b"--listen", b"\xff:18515"], None, "--listen"),
])
def test_invalid_utf8_is_one_line_naming_its_source(args, env, named):
    rc, _, lines = _serve(list(args) + ["--once", "--timeout", "1"], env)
    _one_line(rc, lines, f"{named} is not valid UTF-8")


def test_invalid_utf8_token_file(tmp_path):
    f = tmp_path / "token"
    f.write_bytes(b"\xff\xfe" * 10)
    rc, _, lines = _serve(["--token-file", str(f), "--once"])
    _one_line(rc, lines, f"--token-file {f}: the token is not valid UTF-8")


def test_missing_token_file(tmp_path):
    rc, _, lines = _serve(["--token-file", str(tmp_path / "absent"), "--once"])
    _one_line(rc, lines, "No such file")


# --------------------------------------------------------------------------- D4: token rules
@pytest.mark.parametrize("source", ["--token", "GDRLAB_TOKEN"])
def test_short_token_refused_off_loopback(source):
    args, env = (["--token", "short"], None) if source == "--token" else ([], {"GDRLAB_TOKEN": "x"})
    rc, _, lines = _serve(["--listen", "0.0.0.0:0"] + args, env)
    _one_line(rc, lines, "requires a token of at least 16 characters")


def test_json_error_document_for_a_short_token():
    rc, out, _ = _serve(["--listen", "0.0.0.0:0", "--json"], {"GDRLAB_TOKEN": "tiny"})
    assert rc != 0
    assert "at least 16 characters" in json.loads(out)["error"]["message"]


def _start(args: list, env: dict | None = None) -> tuple[subprocess.Popen, dict]:
    """Start a serve process and read its announce document (the first stdout line)."""
    full_env = {k: v for k, v in os.environ.items() if k != "GDRLAB_TOKEN"}
    full_env.update(env or {}, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "gdrlab", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=full_env)
    ready, _, _ = select.select([proc.stdout], [], [], 30 * TIME_SCALE)
    if not ready:
        proc.kill()
        pytest.fail("serve did not announce its port")
    line = proc.stdout.readline()
    if not line:
        proc.wait()
        pytest.fail(f"serve exited: {proc.stderr.read().decode(errors='replace')}")
    return proc, json.loads(line)


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    return err.decode(errors="replace")


def _served(port: int, token: str) -> bool:
    with engine.Connection("127.0.0.1", port, token, timeout_s=10) as c:
        return bool(c.run("host", 64, iters=1)[2])


def test_token_on_the_command_line_is_warned_off_loopback_in_the_json_document():
    proc, doc = _start(["--listen", "0.0.0.0:0", "--token", GOOD_TOKEN, "--json", "--timeout", "2"])
    try:
        assert any("--token-file" in w and "ps" in w for w in doc["warnings"]), doc
        assert _served(doc["port"], GOOD_TOKEN)
    finally:
        err = _stop(proc)
    assert "warning" not in err  # stderr is not a terminal here: --json keeps it in the document


def test_token_on_the_command_line_is_warned_on_loopback_too():
    """On a shared lab machine every local user reaches 127.0.0.1 and reads `ps` (probe E11)."""
    proc, doc = _start(["--listen", "127.0.0.1:0", "--token", "loopback-any-length", "--announce"])
    try:
        assert any("--token-file" in w and "ps" in w for w in doc["warnings"]), doc
    finally:
        assert "warning: --token puts the secret on the command line" in _stop(proc)


def test_token_file_serves_and_keeps_the_secret_off_the_command_line(tmp_path):
    f = tmp_path / "token"
    f.write_text(GOOD_TOKEN + "\n")  # a trailing newline, as `echo > file` writes it
    f.chmod(0o600)
    proc, doc = _start(["--listen", "0.0.0.0:0", "--token-file", str(f), "--announce", "--timeout", "2"])
    try:
        assert "warnings" not in doc
        assert GOOD_TOKEN.encode() not in open(f"/proc/{proc.pid}/cmdline", "rb").read()
        assert _served(doc["port"], GOOD_TOKEN)
    finally:
        _stop(proc)


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "127.0.0.1:0"])
def test_token_file_readable_by_others_is_warned(tmp_path, listen):
    f = tmp_path / "token"
    f.write_text(GOOD_TOKEN)
    f.chmod(0o644)
    proc, doc = _start(["--listen", listen, "--token-file", str(f), "--json"])
    _stop(proc)
    assert any("chmod 600" in w for w in doc["warnings"]), doc


def test_generated_token_is_strong_printed_once_and_works():
    proc, doc = _start(["--listen", "0.0.0.0:0", "--gen-token", "--json", "--timeout", "2"])
    try:
        token = doc["token"]
        assert len(token) >= 32 and len(set(token)) > 10
        assert _served(doc["port"], token)
    finally:
        err = _stop(proc)
    assert token not in err


def test_generated_tokens_differ():
    tokens = []
    for _ in range(2):
        proc, doc = _start(["--gen-token", "--json", "--listen", "127.0.0.1:0"])
        tokens.append(doc["token"])
        _stop(proc)
    assert tokens[0] != tokens[1]


# --------------------------------------------------------------------------- D6/D11: flags
@pytest.mark.parametrize("args,pattern", [
    (["--listen", "::18515"], "[::]:18515"),
    (["--listen", "fe80::1:18515"], "in brackets"),
    (["--listen", "[::1]18515"], "[ADDRESS]:PORT"),
    (["--listen", "127.0.0.1:70000"], "out of range"),
])
def test_listen_errors_give_a_hint(args, pattern):
    rc, _, lines = _serve(args + ["--once"])
    _one_line(rc, lines, pattern)


@pytest.mark.parametrize("args,pattern", [
    (["--device", "one"], "argument --device: invalid int value"),
    (["--max-clients", "0"], "argument --max-clients: must be between 1 and 4096"),
    (["--max-pinned", "lots"], "argument --max-pinned: not a size"),
    (["--token", GOOD_TOKEN, "--token-file", "f"], "not allowed with argument"),
])
def test_usage_errors_name_the_flag(args, pattern):
    rc, _, lines = _serve(args)
    assert rc == 2 and pattern in lines[-1], lines


def test_negative_device_is_one_line():
    rc, _, lines = _serve(["--device", "-5"])
    _one_line(rc, lines, "--device must be a GPU ordinal (0 or more), got -5")


def test_limits_and_interference_are_stated():
    proc, doc = _start(["--listen", "127.0.0.1:0", "--json", "--max-clients", "8", "--max-pinned", "1G",
                        "--max-gpu-mem", "512M"])
    _stop(proc)
    assert any("up to 8 clients" in n and "interfere" in n for n in doc["notes"])
    assert any("host 1.0 GiB (--max-pinned)" in n and "GPU 0.5 GiB (--max-gpu-mem)" in n for n in doc["notes"])


# --------------------------------------------------------------------------- D1/D3 (Python side)
@pytest.mark.parametrize("text", [b"\xff\xfe\x1b[31mred\nforged log line", b"\x1b[31mred\nforged log line"],
                         ids=["not-utf8", "escape-codes"])
def test_client_error_text_neither_ends_the_server_nor_reaches_the_log_raw(text):
    proc, doc = _start(["--listen", "127.0.0.1:0", "--announce", "--timeout", "2"], {"GDRLAB_TOKEN": GOOD_TOKEN})
    try:
        body = b"\x01" + struct.pack("<I", len(text)) + text  # ERROR: kind, then a string
        with socket.create_connection(("127.0.0.1", doc["port"]), timeout=5) as s:
            s.sendall(struct.pack("<IHHII", MAGIC, VERSION, ERROR, 0, len(body)) + body)
            s.settimeout(5)
            try:
                while s.recv(4096):
                    pass
            except OSError:
                pass
        assert _served(doc["port"], GOOD_TOKEN)  # served after the ERROR frame was read and logged
        assert proc.poll() is None, "serve ended on a client's ERROR frame"
    finally:
        err = _stop(proc)
    assert "\x1b" not in err, err
    assert not any(line.startswith("forged log line") for line in err.splitlines()), err
    assert "refused before authentication" in err and "127.0.0.1" in err


# --------------------------------------------------------------------------- the serve probe's E8, E11
@pytest.mark.parametrize("args,env,said", [
    (["--token", os.fsdecode(b"a\xffb")], {}, "--token is not valid UTF-8 text (a\\xffb)"),
    ([], {"GDRLAB_TOKEN": os.fsdecode(b"\xff")}, "$GDRLAB_TOKEN is not valid UTF-8 text (\\xff)"),
], ids=["--token", "GDRLAB_TOKEN"])
def test_bench_refuses_a_token_that_is_not_utf8_in_one_line(run_cli, args, env, said):
    r = run_cli("bench", "--peer", "127.0.0.1:1", "--sizes", "8", *args, env=env)
    assert r.returncode != 0 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bench_refuses_a_peer_host_that_is_not_utf8_in_one_line(run_cli):
    r = run_cli("bench", "--peer", os.fsdecode(b"h\xff:1"), "--sizes", "8")
    assert r.returncode != 0 and "--peer is not valid UTF-8 text (h\\xff:1)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("content", [b"", b"  \n\t\n"], ids=["empty", "whitespace"])
def test_an_empty_token_file_is_refused_even_on_loopback(run_cli, tmp_path, content):
    f = tmp_path / "token"
    f.write_bytes(content)
    r = run_cli("serve", "--token-file", str(f), "--listen", "127.0.0.1:0", timeout=30)
    assert r.returncode != 0 and f"--token-file {f} holds no token" in r.stderr, r.stderr
    assert "listening" not in r.stderr
