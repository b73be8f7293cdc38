"""What the server counts over all sources together (serve probe E4, E12 and the session-log
policy), with many real source addresses: each case runs netns_sources.py in a private network
namespace where all of 10.0.0.0/8 is local (on 127.0.0.0/8 every address is one source, on
purpose, so loopback alone cannot show these limits). Skipped where namespaces cannot be made.

- Refused tokens from sources never seen before get 64 answers at once, then 16 a second.
- The source table keeps 4,096 sources and forgets the least recently used: a source in use keeps
  its failures, a forgotten one has its left-out count said first.
- Authenticated sessions' lines: at most 100 an interval from all sources together.
- Lines naming a source's left-out count: at most 20 an interval from all sources together, the
  rest pooled into one line, so rotating sources cannot flood the log through their summaries.

And, in a time namespace, a server on a machine up for more than 24.8 days (2^31 ms of the
monotonic clock) still starts new log intervals.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TIME_SCALE

pytestmark = pytest.mark.timeout(300)
HELPER = Path(__file__).with_name("netns_sources.py")
REJECT, ERROR = 3, 6


def _namespaces_work(*flags: str) -> bool:
    try:
        return subprocess.run(["unshare", *flags, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_netns = pytest.mark.skipif(not _namespaces_work("-rn"), reason="network namespaces (unshare -rn) unavailable")


def _case(name: str) -> dict:
    run = subprocess.run(["unshare", "-rn", sys.executable, str(HELPER), name], capture_output=True, text=True,
                         timeout=240 * TIME_SCALE)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


@needs_netns
def test_guessers_rotating_through_many_addresses_share_one_budget():
    got = _case("rotating")
    # 64 guessers, each guess from an address never seen: before the budget every one was
    # answered at once (1,164 a second in the probe); now 64, then 16 a second.
    assert 64 <= got["rejects"] <= 64 + 16 * got["seconds"] + 8, got
    assert set(got["answers"]) <= {str(REJECT), str(ERROR)}, got  # answers, never resets


@needs_netns
def test_a_source_in_use_keeps_its_failures_when_thousands_of_others_come():
    got = _case("forgetting")
    # A's 6 failures are remembered: its next guesses wait past the 1 s limit and are told busy,
    # naming the count (6, or 7 when the flood outlasted A's wait and one more was refused).
    # Before, the table was cleared wholesale at 4,096: A started again at 1 failure, 50 ms.
    busy = [body for ftype, body in got["after"] if ftype == ERROR]
    assert busy and re.search(r"server busy: [67] refused tokens from address 10\.200\.0\.1", busy[-1]), got["after"]
    assert all(ftype in (REJECT, ERROR) for ftype, _ in got["after"]), got["after"]
    # B, forgotten, has its two refusals left out said as it goes: by name, or (past the 20 lines
    # naming a source's count an interval) in the pooled count of all sources
    assert any(re.search(r"client 10\.201\.0\.1: 2 more lines left out \(forgotten: 4096 sources", ln)
               for ln in got["b_lines"]) or got["pooled"], got["b_lines"]


@needs_netns
def test_sessions_from_many_addresses_write_at_most_100_lines_an_interval():
    got = _case("session_lines")
    assert got["welcomed"] == 150
    log = got["log"]
    sessions = [ln for ln in log if ln.endswith((": connected", ": done"))]
    assert len(sessions) == 100, log[-5:]
    assert "200 more session lines left out (at most 100 an interval from all addresses)" in log, log[-5:]


@needs_netns
def test_refusals_from_many_addresses_are_summarised_in_a_few_lines():
    got = _case("refusal_lines")
    log = got["log"]
    refusals = [ln for ln in log if "refused before authentication" in ln]
    pooled = [ln for ln in log if re.fullmatch(r"\d+ more lines left out from \d+ more sources .*", ln)]
    # 600 sources, one refusal each: 20 named lines, 20 named counts, one pooled line (600 before)
    assert len(log) <= 45 and len(refusals) <= 40 and len(pooled) == 1, log[:3] + log[-3:]
    told = sum(1 for ln in refusals if ": refused before authentication: " in ln)
    told += sum(int(m.group(1)) for ln in refusals if (m := re.search(r": (\d+) more refused before", ln)))
    told += sum(int(ln.split()[0]) for ln in pooled)
    assert told == 600, log  # every refusal is counted somewhere


TIME_NS_CODE = r"""
import json, socket, struct, sys, time
from gdrlab.engine import native
TOKEN = "uptime-token-0123456789"
srv = native().Server("127.0.0.1", 0, TOKEN, 5000, log_interval_ms=300)
body = struct.pack("<I", 1) + struct.pack("<I", len(TOKEN)) + TOKEN.encode()
hello = struct.pack("<IHHII", 0x4C524447, 1, 1, 0, len(body)) + body
import threading
stop = threading.Event()
t = threading.Thread(target=lambda: [srv.serve_for(50) for _ in iter(stop.is_set, True)], daemon=True)
t.start()
log, deadline = [], time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(hello)
        s.recv(16, socket.MSG_WAITALL)
    while srv.session_threads:
        time.sleep(0.005)
    log += srv.take_log()
    if sum(ln.endswith(": connected") for ln in log) > 3:
        break  # a line after the first interval's three: the interval rolled over
    time.sleep(0.05)
stop.set(); t.join(10)
print(json.dumps({"monotonic_s": time.monotonic(), "log": log + list(srv.take_log(final=True))}))
"""


@pytest.mark.skipif(not _namespaces_work("-rT"), reason="time namespaces (unshare -rT) unavailable")
def test_log_intervals_roll_over_on_a_machine_up_for_more_than_24_days():
    offset = 2_600_000 - int(time.clock_gettime(time.CLOCK_MONOTONIC))  # monotonic ~30 days: 2^31 ms < it < 2^32 ms
    run = subprocess.run(["unshare", "-rT", "--monotonic", str(offset), sys.executable, "-c", TIME_NS_CODE,
                          str(20 * TIME_SCALE)], capture_output=True, text=True, timeout=120 * TIME_SCALE)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout)
    assert 2**31 / 1e3 < got["monotonic_s"] < 2**32 / 1e3, got["monotonic_s"]
    connected = [ln for ln in got["log"] if ln.endswith(": connected")]
    # Before: a time point never set read as a negative age (int overflow), so the interval of
    # the first three lines never ended and every later line was left out.
    assert len(connected) > 3, got["log"][-6:]
