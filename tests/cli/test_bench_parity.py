"""`gdrlab bench`'s perftest/OSU parity options change what they should: --bidir moves bytes both
ways, --rate rows carry messages per second, --csv has --json's fields, --duration bounds the wall
time, --gbits is GB/s in bits, --json names each column's perftest/OSU counterpart, and a bad
combination is refused with one line."""
from __future__ import annotations

import csv
import io
import json
import time

import pytest
from conftest import TIME_SCALE

from gdrlab.cli import main
from gdrlab.transfer.buffers import native
from gdrlab.transfer.driver import bench
from gdrlab.transfer.lanes import Parity

THREAD = ["--local-peer", "thread"]


def _run(capsys, *argv: str) -> str:
    status = main(["bench", *argv])
    out = capsys.readouterr()
    assert status == 0, out.err
    return out.out


def _refused(capsys, *argv: str) -> str:
    status = main(["bench", *argv])
    out = capsys.readouterr()
    if "--json" in argv:  # the refusal is the one JSON document on stdout
        assert status != 0, out
        return json.loads(out.out)["error"]["message"]
    assert status != 0 and out.out == "", (status, out)
    lines = out.err.splitlines()
    assert len(lines) == 1, out.err
    return lines[0]


def _lo_bytes() -> int:
    """Bytes the loopback interface has carried (received side; on lo every byte sent is received)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[0])
    pytest.skip("no loopback interface counters in /proc/net/dev")


# ------------------------------------------------------------------------------ --bidir
def test_bidir_moves_the_bytes_of_both_directions_over_loopback():
    size, window, iters = 1 << 20, 4, 40
    payload = size * window * iters  # one direction, timed windows only
    before = _lo_bytes()
    df = bench("host", [size], iters=iters, window=window, warmup=0, mode="bw", local_peer="thread",
               parity=Parity(bidir=True))
    moved = _lo_bytes() - before
    row = df.iloc[0]
    assert bool(row["verified"]) and bool(row["bidir"])
    # One direction alone would carry payload (+ the 2 verification messages): both ways carry twice.
    assert moved >= 2 * payload, (moved, payload)


def test_bidir_counts_both_directions_in_its_rate():
    """A both-ways sample moves 2 x window x size: the engine says so in bytes_per_sample."""
    import secrets
    import threading

    tok = secrets.token_hex(8)
    srv = native().Server("127.0.0.1", 0, tok, 10000)
    t = threading.Thread(target=srv.serve_one, args=(10000,))
    t.start()
    try:
        c = native().Client("127.0.0.1", srv.port, tok, 10000)
        from gdrlab.transfer.tcp_wire import BOTH_WAYS_FLAG
        samples, per_sample, ok = c.run("host", 1 | BOTH_WAYS_FLAG, 65536, 10, 1, 8, 65536, 2, 0, 5)
        assert ok and len(samples) == 10 and per_sample == 2 * 8 * 65536
        samples, per_sample, ok = c.run("host", 1, 65536, 10, 1, 8, 65536, 2, 0, 5)
        assert ok and per_sample == 8 * 65536
        c.close()
    finally:
        t.join(15)


# ------------------------------------------------------------------------------ --rate, --gbits
def test_rate_rows_carry_messages_per_second(capsys):
    doc = json.loads(_run(capsys, *THREAD, "--sizes", "8,64K", "--mode", "bw", "--window", "16", "--rate",
                          "--gbits", "--json"))
    for r in doc["rows"]:
        assert r["msg_rate_mps"] > 0
        # both at the median window time: messages/s x bytes per message is the byte rate
        assert r["msg_rate_mps"] * r["size"] == pytest.approx(r["bw_gbps"] * 1e9, rel=1e-6)
        assert r["bw_gbits"] == pytest.approx(r["bw_gbps"] * 8, rel=1e-9)
    names = {c["name"]: c for c in doc["columns"]}
    assert "MsgRate" in names["msg_rate_mps"]["perftest"] and "osu_mbw_mr" in names["msg_rate_mps"]["osu"]
    assert "report_gbits" in names["bw_gbits"]["perftest"]
    assert [c["name"] for c in doc["columns"]] == list(doc["rows"][0])


# ------------------------------------------------------------------------------ --csv
def test_csv_has_the_fields_of_json(capsys):
    argv = [*THREAD, "--sizes", "8,4K", "--iters", "5", "--rate", "--gbits"]
    rows = json.loads(_run(capsys, *argv, "--json"))["rows"]
    table = list(csv.DictReader(io.StringIO(_run(capsys, *argv, "--csv"))))
    assert list(table[0]) == list(rows[0])
    assert [(r["path"], r["wire"], int(r["size"]), r["verified"]) for r in table] == \
           [(r["path"], r["wire"], r["size"], str(r["verified"])) for r in rows]


# ------------------------------------------------------------------------------ --duration
def test_duration_bounds_the_wall_time_and_adapts_the_count(capsys):
    sizes = "8:256K"  # 16 sizes
    t0 = time.monotonic()
    rows = json.loads(_run(capsys, *THREAD, "--sizes", sizes, "--duration", "0.02", "--json"))["rows"]
    took = time.monotonic() - t0
    assert len(rows) == 16
    # the fixed method takes 1000 latency iterations per size here; a 20 ms budget cannot
    assert all(r["iters"] < 1000 for r in rows), [r["iters"] for r in rows]
    assert all(r["ci_rel"] is None or r["ci_rel"] >= 0 for r in rows)
    # per size: the budget, a batch that may overrun it, and one test's set-up; plus the peer's start
    assert took < (16 * 0.02 * 4 + 3.0) * TIME_SCALE, took


# ------------------------------------------------------------------------------ memory kinds
def test_memory_kinds_are_reported_per_side(capsys):
    doc = json.loads(_run(capsys, *THREAD, "--sizes", "8", "--iters", "3", "--src-mem", "pageable",
                          "--dst-mem", "pageable", "--json"))
    assert (doc["rows"][0]["src_mem"], doc["rows"][0]["dst_mem"]) == ("pageable", "pageable")


# ------------------------------------------------------------------------------ --cpu-affinity
def test_cpu_affinity_pins_this_process(capsys):
    import os
    allowed = sorted(os.sched_getaffinity(0))
    try:
        doc = json.loads(_run(capsys, *THREAD, "--sizes", "8", "--iters", "3", "--cpu-affinity", str(allowed[0]),
                              "--json"))
        assert os.sched_getaffinity(0) == {allowed[0]}
        assert any(f"CPU affinity: {allowed[0]}" in n for n in doc["notes"])
    finally:
        os.sched_setaffinity(0, allowed)


# ------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("argv,needle", [
    (["--bidir", "--mode", "lat"], "--bidir measures bandwidth"),
    (["--rate", "--mode", "lat"], "--rate measures bandwidth"),
    (["--csv", "--json"], "--csv and --json exclude each other"),
    (["--duration", "1", "--iters", "5"], "--duration and --iters exclude each other"),
    (["--duration", "0"], "--duration"),
    (["--streams", "2", "--wire", "verbs"], "on the verbs wire use --qps"),
    (["--qps", "2"], "add --wire verbs"),
    (["--streams", "0"], "--streams"),
    (["--streams", "2", "--mode", "lat"], "spread bandwidth over lanes"),
    (["--streams", "17"], "--streams"),
    (["--bidir", "--wire", "verbs"], "--bidir runs on the tcp wire only"),
    (["--src-mem", "device"], "use a GPU path"),
    (["--dst-mem", "pinned"], "the peer allocates pageable memory"),
    (["--path", "staged", "--src-mem", "pageable"], "use --path host"),
    (["--cpu-affinity", "3-x"], "--cpu-affinity"),
    (["--cpu-affinity", "100000"], "--cpu-affinity 100000: none of those CPUs is allowed here"),
])
def test_bad_combinations_get_one_line(capsys, argv, needle):
    line = _refused(capsys, "--sizes", "8", *argv)
    assert needle in line, line
