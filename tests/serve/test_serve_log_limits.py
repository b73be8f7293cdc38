"""Authenticated sessions cannot flood the server's log (classroom-serve issue, D3).

A client that reconnects in a loop, or sessions that fail the same way again and again, log a few
lines of each kind ("connected", "done", "ended with <error class>", and "refused <error class>"
for a test the server refuses while the session goes on) per address and interval;
the rest are counted in one summary line per kind once the interval is over, or when the server
stops. The first line of a kind is never hidden by another kind's flood, and lines come again
after the interval (a limit, not a ban).
"""
from __future__ import annotations

import re
import socket
import struct
import time

import pytest
from conftest import SERVED_TOKEN as TOKEN, TIME_SCALE, wait_until

from gdrlab import engine
from gdrlab.errors import Unavailable
from test_serve_verbs_budget import _session

pytestmark = pytest.mark.timeout(120)
MAGIC, VERSION = 0x4C524447, 1
HELLO, WELCOME = 1, 2
PER_KIND = 3  # lines of one kind per address and interval (docs/hardening.md)
MiB = 1 << 20


def _frame(ftype: int, body: bytes) -> bytes:
    return struct.pack("<IHHII", MAGIC, VERSION, ftype, 0, len(body)) + body


def _protocol_error_session(port: int) -> None:
    """Authenticates, then sends a frame of a type no server knows: the session ends with a
    protocol error."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        tok = TOKEN.encode()
        s.sendall(_frame(HELLO, struct.pack("<II", 1, len(tok)) + tok))
        head = s.recv(16, socket.MSG_WAITALL)
        assert struct.unpack("<IHHII", head)[2] == WELCOME
        s.recv(struct.unpack("<IHHII", head)[4], socket.MSG_WAITALL)
        s.sendall(_frame(999, b""))
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass


def _count(lines: list[str], what: str) -> int:
    return sum(1 for ln in lines if ln.endswith(what))


def _left_out(lines: list[str], kind: str) -> int:
    return sum(int(m.group(1)) for ln in lines for m in [re.search(rf": (\d+) more '{kind}' lines left out", ln)] if m)


def test_reconnect_loop_logs_a_few_lines_of_each_kind_and_counts_the_rest(served):
    s = served(log_interval_ms=600_000)
    for _ in range(40):
        with s.connect():
            pass
    s.quiet()
    lines = s.server.take_log()
    assert _count(lines, ": connected") == PER_KIND and _count(lines, ": done") == PER_KIND, lines
    assert len(lines) == 2 * PER_KIND, lines  # the interval is not over: no summary yet
    final = s.server.take_log(final=True)  # the server stops: what was left out is counted
    assert _left_out(final, "connected") == 40 - PER_KIND, final
    assert _left_out(final, "done") == 40 - PER_KIND, final
    assert all(ln.startswith("clients from 127.0.0.0/8: ") for ln in final), final
    assert s.server.take_log(final=True) == []  # counted once


def test_one_kinds_flood_does_not_hide_another_kinds_first_line(served):
    s = served(log_interval_ms=600_000, idle_ms=200)
    for _ in range(12):
        _protocol_error_session(s.server.port)
    s.quiet()
    with s.connect():
        time.sleep(0.2 + 0.5 * TIME_SCALE)  # idle past --idle-timeout: the server closes the session
    s.quiet()
    lines = s.server.take_log()
    protocol = [ln for ln in lines if ": ended with ProtocolError: " in ln]
    idle = [ln for ln in lines if ": ended with PeerClosed: " in ln]
    assert len(protocol) == PER_KIND, lines
    assert len(idle) == 1 and "without a request (--idle-timeout)" in idle[0], lines
    assert _count(lines, ": connected") == PER_KIND, lines  # 13 sessions
    final = s.server.take_log(final=True)
    assert _left_out(final, "ended with ProtocolError") == 12 - PER_KIND, final
    assert _left_out(final, "connected") == 13 - PER_KIND, final


def test_after_the_interval_the_count_is_logged_and_lines_come_again(served):
    interval_ms = int(1500 * TIME_SCALE)
    s = served(log_interval_ms=interval_ms)
    t0 = time.monotonic()
    for _ in range(PER_KIND + 4):
        with s.connect():
            pass
    s.quiet()
    took = time.monotonic() - t0
    first = s.server.take_log()
    if took < interval_ms / 1000:  # all in one interval (the usual case)
        assert _count(first, ": connected") == PER_KIND, first
    time.sleep(interval_ms / 1000 + 0.1)
    summary = s.server.take_log()  # the interval is over: its count comes without waiting for a line
    shown = _count(first, ": connected") + _count(summary, ": connected")
    assert shown + _left_out(first + summary, "connected") == PER_KIND + 4, (first, summary)
    assert _left_out(summary, "connected") >= 1, summary
    with s.connect():
        pass
    s.quiet()
    again = s.server.take_log()
    assert _count(again, ": connected") == 1 and _count(again, ": done") == 1, again


def _refused_over_budget(port: int, times: int) -> list[str]:
    """Asks `times` times in one session for a test over a 1 MiB --max-pinned; each is refused and
    the session goes on. Returns the refusals' texts."""
    texts = []
    with engine.Connection("127.0.0.1", port, TOKEN, timeout_s=10) as c:
        for _ in range(times):
            with pytest.raises(Unavailable) as exc:
                c.run("host", 2 * MiB, iters=1, warmup=0)
            texts.append(str(exc.value))
        assert c.run("host", 4096, iters=1, warmup=0)[2]  # the session went on
    return texts


def _budget_lines(lines: list[str]) -> list[str]:
    """The lines about a client's request over --max-pinned (not serve's own startup note)."""
    return [ln for ln in lines if "client 127.0.0.1" in ln and "(--max-pinned)" in ln]


def test_a_refused_test_is_logged_naming_the_client_and_the_flag(served):
    s = served(log_interval_ms=600_000, max_host_bytes=1 * MiB)
    (text,) = _refused_over_budget(s.server.port, 1)
    assert "refused: session needs 2.0 MiB host memory" in text and "(--max-pinned)" in text, text
    s.quiet()
    lines = s.server.take_log()
    refused = _budget_lines(lines)
    assert len(refused) == 1, lines
    assert re.fullmatch(r"client 127\.0\.0\.1:\d+: refused Unavailable: refused: session needs 2\.0 MiB host memory"
                        r" .*server budget 1\.0 MiB \(--max-pinned\)", refused[0]), refused
    assert all(ln.isascii() and ln.isprintable() for ln in lines), lines
    assert s.server.take_log(final=True) == []  # nothing left out


def test_ten_refusals_from_one_address_log_three_lines_and_a_count(served):
    s = served(log_interval_ms=600_000, max_host_bytes=1 * MiB)
    _refused_over_budget(s.server.port, 6)  # two sessions from one address share its limit
    _refused_over_budget(s.server.port, 4)
    s.quiet()
    lines = s.server.take_log()
    assert len(_budget_lines(lines)) == PER_KIND, lines
    assert _left_out(lines, "refused Unavailable") == 0, lines  # the interval is not over
    assert _count(lines, ": connected") == 2 and _count(lines, ": done") == 2, lines  # other kinds unaffected
    final = s.server.take_log(final=True)
    assert _left_out(final, "refused Unavailable") == 10 - PER_KIND, final
    assert _budget_lines(final) == [], final
    assert all(ln.startswith("clients from 127.0.0.0/8: ") for ln in final), final


def test_the_verbs_wire_logs_its_refusals_the_same_way(stand_ins):
    out = _session(stand_ins, {"max_host_bytes": 1 * MiB, "log_interval_ms": 600_000},
                   [{"path": "host", "size": 2 * MiB}] * (PER_KIND + 2) + [{"path": "host", "size": 4096}])
    assert all(r.get("raised") == "Unavailable" for r in out["runs"][:-1]) and out["runs"][-1] == {"verified": True}, out
    refused = _budget_lines(out["log"])
    assert len(refused) == PER_KIND, out["log"]
    assert all(re.match(r"client 127\.0\.0\.1:\d+: refused Unavailable: refused: session needs 2\.0 MiB host memory", ln)
               for ln in refused), refused
    assert _left_out(out["log"], "refused Unavailable") == 2, out["log"]  # take_log(final=True) counts the rest


def test_serve_logs_a_refused_test(serve_factory):
    sp = serve_factory(timeout_s=5, extra=["--max-pinned", "1M"])
    with engine.Connection("127.0.0.1", sp.port, sp.token, timeout_s=10) as c:
        with pytest.raises(Unavailable, match=r"\(--max-pinned\)"):
            c.run("host", 2 * MiB, iters=1, warmup=0)
    err = sp.stderr_text().splitlines()  # serve lets its sessions write their last lines before it stops
    refused = _budget_lines(err)
    assert len(refused) == 1, err
    assert re.match(r"gdrlab serve: client 127\.0\.0\.1:\d+: refused Unavailable: refused: session needs", refused[0]), err


def test_serve_counts_left_out_lines_when_it_stops(serve_factory):
    sp = serve_factory(timeout_s=5)
    t0 = time.monotonic()
    for _ in range(30):
        with engine.Connection("127.0.0.1", sp.port, sp.token, timeout_s=10):
            pass
    windows = 1 + int((time.monotonic() - t0) / 10) + 1  # the default interval is 10 s
    err = sp.stderr_text().splitlines()  # serve lets its sessions write their last lines before it stops
    connected = _count(err, ": connected")
    assert connected <= PER_KIND * windows, err
    assert connected + _left_out(err, "connected") == 30, err


def test_refusals_before_authentication_left_out_are_counted_when_the_interval_ends(served):
    """A burst of refused connections from one address, then quiet: the count of those left out
    comes in a line of its own once the interval is over (not only in a next refusal that may never
    come), and at the stop (probe E12)."""
    s = served(log_interval_ms=int(400 * TIME_SCALE))
    for _ in range(5):  # bad magic: refused from the header, each answered and logged (or counted)
        with socket.create_connection(("127.0.0.1", s.server.port), timeout=5) as sock:
            sock.sendall(b"\0" * 16)
            while sock.recv(4096):
                pass
    s.quiet()
    lines: list[str] = []

    def summarised() -> bool:
        lines.extend(s.server.take_log())
        return any("more refused before authentication left out" in ln for ln in lines)

    wait_until(summarised, 10, "the summary of the refusals left out")
    refused = [ln for ln in lines if ": refused before authentication: " in ln]
    summary = [ln for ln in lines if "more refused before authentication left out" in ln]
    assert len(refused) == 1 and summary == ["clients from 127.0.0.0/8: 4 more refused before authentication left out "
                                             "(one line per address per interval)"], lines
    assert s.server.take_log(final=True) == []  # counted once, not again at the stop


def test_refusals_left_out_are_counted_at_the_stop(served):
    s = served(log_interval_ms=600_000)
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", s.server.port), timeout=5) as sock:
            sock.sendall(b"\0" * 16)
            while sock.recv(4096):
                pass
    s.quiet()
    lines = s.server.take_log()
    assert len([ln for ln in lines if ": refused before authentication: " in ln]) == 1, lines
    assert "clients from 127.0.0.0/8: 2 more refused before authentication left out (one line per address per interval)" \
        in s.server.take_log(final=True)
