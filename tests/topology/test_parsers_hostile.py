"""Hostile input to the text parsers: NCCL logs and hwloc XML (classroom-serve issue, D7-D9, D11).

Before this, a 40 KB NCCL log line without spaces took 11 s (quadratic backtracking), 1 MB of
``<!DOCTYPE`` took 100 s, a 700 KB cpuset 43 s, a comment holding ``<!DOCTYPE x>`` let internal
entities expand, and a 5000-deep XML raised RecursionError. Each case here must finish far
inside its bound (generous, scaled by TIME_SCALE) and fail, where it fails, with one clear line.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import TIME_SCALE
from gdrlab.errors import InvalidArgument
from gdrlab.nccl import parse_log
from gdrlab.topology import from_hwloc
from gdrlab.topology.hwloc import parse_bitmap

PARSE_BOUND_S = 2.0 * TIME_SCALE  # the fixed parsers take well under 0.5 s on every case below
CLI_BOUND_S = 30.0 * TIME_SCALE  # a whole `python -m gdrlab` process: start-up plus the parse
DGX2 = (Path(__file__).resolve().parents[2] / "gdrlab" / "data" / "hwloc" / "nvidiaDGX2.xml").read_text()
MB = 1 << 20


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def _refused(text, pattern: str) -> str:
    """from_hwloc(text) must raise InvalidArgument matching ``pattern``, within the bound, in one line."""
    t0 = time.perf_counter()
    with pytest.raises(InvalidArgument, match=pattern) as info:
        from_hwloc(text)
    assert time.perf_counter() - t0 < PARSE_BOUND_S
    message = str(info.value)
    assert "\n" not in message and len(message) < 600, message
    return message


# --------------------------------------------------------------------------- D7: NCCL logs
NCCL_HOSTILE = {
    "no spaces": "a" * MB,
    "colons": "a:1:" * (MB // 4),
    "prefix repeated": "host:1:1 [0] " * (MB // 13) + "NCCL INFO x",
    "level repeated": "NCCL INFO " * (MB // 10),
    "via spaces": "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via " + " " * MB + "x",
    "via hex run": "NCCL INFO Channel 00/0 : 0[" + "a" * MB,
    "env value run": "NCCL INFO NCCL_X set by environment to " + "1" * MB + " ",
    "env repeated": "NCCL INFO " + "NCCL_X set by environment to " * (MB // 30),
    "topology hops": "NCCL INFO GPU/0-0 :" + "GPU/0-0 (0/" * (MB // 12),
    "gdr gpu run": "NCCL INFO GPU Direct RDMA Enabled for GPU " + "a" * MB,
    "hca quote run": "NCCL INFO GPU Direct RDMA Disabled for HCA 0 '" + "a" * MB,
    "gdr literal repeated": "NCCL INFO " + "GPU Direct RDMA " * (MB // 16),
    "gdr distance digits": "NCCL INFO GPU Direct RDMA Disabled for GPU a / HCA 0 (distance " + "7" * MB,
    "transport before gdr": "NCCL INFO " + "NET/IB : " * (MB // 9) + "GPU Direct RDMA Enabled for HCA 0 'x'",
    "result spaces": " allreduce " + " " * MB,
    "result digits": "allreduce 1 B " + "1." * (MB // 2),
    "rank run": "NCCL INFO ncclCommInitRank comm " + "x" * MB,
}


@pytest.mark.parametrize("name", list(NCCL_HOSTILE))
def test_nccl_hostile_lines_parse_in_linear_time(name):
    parsed, seconds = _timed(parse_log, NCCL_HOSTILE[name])
    assert seconds < PARSE_BOUND_S, f"{name}: {seconds:.1f} s"
    # only "via spaces" is a well-formed connection line (to a transport called "x")
    assert [c["via"] for c in parsed["connections"]] == (["x"] if name == "via spaces" else [])


def test_nccl_ten_megabyte_line_without_spaces():
    _, seconds = _timed(parse_log, "x" * (10 * MB))
    assert seconds < PARSE_BOUND_S, f"{seconds:.1f} s"


def test_nccl_using_network_with_40k_spaces_keeps_its_meaning():
    line = "node1:1:1 [0] NCCL INFO Using network " + " " * 40_000 + "IB"
    parsed, seconds = _timed(parse_log, line)
    assert seconds < PARSE_BOUND_S
    assert parsed["network"] == "IB"
    parsed, _ = _timed(parse_log, "node1:1:1 [0] NCCL INFO Using network Socket" + " " * 40_000)
    assert parsed["network"] == "Socket"


def test_nccl_long_via_tail_is_still_a_connection():
    line = "n:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM" + " " * 100_000
    parsed = parse_log(line)
    assert [(c["src"], c["dst"], c["via"], c["transport"]) for c in parsed["connections"]] == \
        [(0, 1, "P2P/CUMEM", "P2P/CUMEM")]


def test_nccl_parse_cli_on_a_ten_megabyte_line(tmp_path, run_cli):
    log = tmp_path / "hostile.log"
    log.write_text("x" * (10 * MB) + "\n" + "NCCL INFO Using network " + " " * 40_000 + "\n")
    t0 = time.perf_counter()
    r = run_cli("nccl", "parse", log, "--json", timeout=CLI_BOUND_S + 30)
    assert time.perf_counter() - t0 < CLI_BOUND_S
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------- D7/D8: hwloc XML
def test_unterminated_doctype_fails_fast():
    message = _refused(b"<!DOCTYPE" + b"a" * MB, "inline XML is not well-formed")
    assert "lstopo" in message
    _refused(b"<!DOCTYPE" * (MB // 9), "not well-formed")


def test_unterminated_doctype_file_through_the_cli(tmp_path, run_cli):
    bad = tmp_path / "doctype.xml"
    bad.write_bytes(b"<!DOCTYPE " + b" " * MB)
    t0 = time.perf_counter()
    r = run_cli("topo", "--hwloc-xml", bad, timeout=CLI_BOUND_S + 30)
    assert time.perf_counter() - t0 < CLI_BOUND_S
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_billion_laughs_is_refused_naming_the_file(tmp_path):
    levels = "".join(f'<!ENTITY l{i} "' + f"&l{i - 1};" * 10 + '">' for i in range(1, 10))
    doc = f'<?xml version="1.0"?><!DOCTYPE topology [<!ENTITY l0 "lol">{levels}]><topology>&l9;</topology>'
    path = tmp_path / "laughs.xml"
    path.write_text(doc)
    message = _refused(path, "laughs.xml declares the XML entity")
    assert "entit" in message


def test_doctype_inside_a_comment_does_not_open_a_door():
    # The old regex stripped the first "<!DOCTYPE ...>", here the one inside the comment, and the
    # real DOCTYPE's internal entity then expanded. defusedxml refuses the declaration itself.
    doc = ('<?xml version="1.0"?><!-- <!DOCTYPE x> --><!DOCTYPE topology [<!ENTITY e "expanded">]>'
           '<topology version="2.0"><object type="Machine"><info name="x" value="&e;"/></object></topology>')
    _refused(doc, "declares the XML entity 'e'")


def test_external_entity_is_refused():
    doc = '<!DOCTYPE topology [<!ENTITY x SYSTEM "file:///etc/passwd">]><topology>&x;</topology>'
    _refused(doc, "refused")


def test_real_exports_with_their_doctype_still_load():
    # lstopo writes a DOCTYPE naming hwloc's DTD; it is allowed and never fetched
    assert '<!DOCTYPE topology SYSTEM "hwloc2.dtd">' in DGX2[:200]
    assert len(from_hwloc(DGX2).gpus) == 16


def test_huge_cpuset_is_read_in_linear_time():
    words = ",".join(["0xffffffff"] * 64_000)  # 700 KB: 2,048,000 CPUs
    text = DGX2.replace('cpuset="0x', f'cpuset="{words},0x', 1)
    topo, seconds = _timed(from_hwloc, text)
    assert seconds < PARSE_BOUND_S * 2, f"{seconds:.1f} s"
    assert len(topo.gpus) == 16
    bits, seconds = _timed(parse_bitmap, words)
    assert seconds < PARSE_BOUND_S and len(bits) == 64_000 * 32 and bits[-1] == 64_000 * 32 - 1


@pytest.mark.parametrize("text,expected", [
    ("0x00000303,0x03030000,,0x03030303", [0, 1, 8, 9, 16, 17, 24, 25, 80, 81, 88, 89, 96, 97, 104, 105]),
    ("0xf...f,0x00000001", [0]),
    ("", []),
    ("0x80000000", [31]),
])
def test_bitmap_words(text, expected):
    # worked by hand: words are 32 bits, most significant first; an empty word is zero
    assert parse_bitmap(text) == expected


# --------------------------------------------------------------------------- D9: depth
def test_five_thousand_deep_xml_is_one_clear_error():
    deep = '<topology version="2.0">' + '<object type="Group">' * 5000 + "</object>" * 5000 + "</topology>"
    _refused(deep, "nests elements more than")


def test_two_hundred_deep_groups_still_load():
    """Deep but within the limit: the walk is iterative, so nothing recurses 200 levels."""
    machine_open = DGX2.index(">", DGX2.index('<object type="Machine"')) + 1
    machine_close = DGX2.rindex("</object>")  # the Machine's own end tag
    deep = (DGX2[:machine_open] + '<object type="Group">' * 200 + DGX2[machine_open:machine_close]
            + "</object>" * 200 + DGX2[machine_close:])
    topo = from_hwloc(deep)
    assert len(topo.gpus) == 16 and topo.pcie_code("GPU0", "GPU1")[0] == "PIX"


# --------------------------------------------------------------------------- D11: bad attributes
@pytest.mark.parametrize("old,new,attribute", [
    ('cpuset="0x', 'cpuset="0xZZ', "cpuset"),
    ('nodeset="0x', 'nodeset="zz0x', "nodeset"),
    ('pci_busid="0000:', 'pci_busid="zz:', "pci_busid"),
    ('bridge_pci="0000:[', 'bridge_pci="0000:(', "bridge_pci"),
    ('pci_link_speed="', 'pci_link_speed="nan', "pci_link_speed"),
    ('type="Package" os_index="', 'type="Package" os_index="-', "os_index"),
])
def test_bad_attribute_names_file_and_attribute(tmp_path, old, new, attribute):
    path = tmp_path / "damaged.xml"
    path.write_text(DGX2.replace(old, new, 1))
    message = _refused(path, rf"damaged\.xml: attribute {attribute}=")
    assert str(path) in message


def test_bad_nvlink_values_name_the_file(tmp_path):
    start = DGX2.index(">", DGX2.index("<u64values", DGX2.index('name="NVLinkBandwidth"'))) + 1
    path = tmp_path / "nvlink.xml"
    path.write_text(DGX2[:start] + "junk " + DGX2[start:])
    _refused(path, r"nvlink\.xml: the NVLinkBandwidth")


def test_invalid_utf8_in_the_file_is_one_line(tmp_path):
    path = tmp_path / "bytes.xml"
    path.write_bytes(DGX2.encode().replace(b"NVIDIA", b"\xff\xfe", 1))
    _refused(path, r"bytes\.xml is not well-formed")


def test_nccl_parse_escapes_control_characters_from_the_log(tmp_path, run_cli):
    log = tmp_path / "escapes.log"
    log.write_text("h:1:1 [0] NCCL WARN bad \x1b[31mred\x07 thing\r\n")
    r = run_cli("nccl", "parse", log, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "bad \\x1b[31mred\\x07 thing" in r.stdout


def test_oversized_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "huge.xml"
    with open(path, "wb") as f:
        f.truncate(65 * MB)  # sparse: nothing is written, and nothing may be read
    _refused(path, r"huge\.xml: \d+ bytes is larger than any hwloc export")
