"""Growth of the text parsers with their input (hostile-input probe E5-E7): doubling the input
must not square the time, and bitmaps must not blow up in memory.

Each test builds inputs of size n, 2n and 4n and compares consecutive sizes: the fastest of 5
interleaved runs (garbage collector off) and the tracemalloc peaks. Runs take over 50 ms, and
the bounds are generous: 3.0 a doubling where linear is 2; 6.0 a doubling and 24 from n to 4n
where the output itself is n x n (quadratic: 4 and 16). Measured on 2 busy cores, n / 2n / 4n:

* WARN lines with distinct ``[dev]`` (20k / 40k / 80k): before 2.75 / 13.0 s (a list-membership
  test per line, 4.7 a doubling); after 0.20 / 0.43 / 0.96 s.
* distinct ``Pattern`` lines (10k / 20k / 40k): before 1.9 / 11.8 s (6.2); after 0.11 / 0.27 / 0.59 s.
* ``from_hwloc(...).to_json()`` of 128 / 256 / 512 GPUs: before 0.34 / 2.35 s (7.0; 0.60 / 3.4 /
  21.7 s by a median of 3: 36 from n to 4n; a scan of the device list per cell, the matrix built
  twice: cubic); after 0.04 / 0.13 / 0.42 s.
* 14 cpusets of 16k / 32k / 64k words: before 1.3 / 2.5 / 7.0 s and 430 / 861 / 1722 MB, 179 bytes
  a character of XML (a list and frozensets of every set bit; a 1M-word one took 4.9 GB); after
  0.06 / 0.08 / 0.27 s and 5 / 11 / 21 MB, 2.2 bytes a character.
"""
from __future__ import annotations

import gc
import itertools
import random
import time
import tracemalloc
from collections.abc import Callable

import pytest
from conftest import TIME_SCALE

from gdrlab.errors import InvalidArgument
from gdrlab.nccl import parse_log
from gdrlab.topology import from_hwloc, from_sysfs
from gdrlab.topology._topo import MAX_DEVICES
from gdrlab.topology._tree import Node, PairCodes, assign_bridge_roles, parse_cpulist
from gdrlab.topology.hwloc import MAX_BITMAP_WORDS, bitmap_value, parse_bitmap

LINEAR = 3.0  # time(2n) / time(n) and peak(2n) / peak(n) of a linear parser: 2, with room
LINEAR_4N = 8.0  # the same from n to 4n: 4, with room; quadratic is 16
SQUARE = 6.0  # what makes an n x n matrix: 4, with room
SQUARE_4N = 24.0  # the same from n to 4n: 16, with room; the old cubic code took 36 times as long
MB = 1 << 20


ROUNDS = 5


def _measure(run: Callable[[object], object], inputs: list, mem_inputs: list | None = None) -> list[tuple[float, int]]:
    """(fastest wall time of ROUNDS, tracemalloc peak) of ``run(x)`` for each input; the peaks of
    ``mem_inputs`` instead where given (smaller: tracemalloc slows a parser ten times).

    Robust on a busy machine: the rounds are interleaved (n, 2n, 4n, n, 2n, ...), so a burst of
    load elsewhere does not land on one size only, and the fastest of them is the parser's own
    cost (a median of 3 in a row still gave 3.3 for a linear parser beside a test run). The
    garbage collector is off while timing: a full collection walks the whole test process,
    whose size has nothing to do with the input."""
    runs: list[list[float]] = [[] for _ in inputs]
    gc.collect()
    gc.disable()
    try:
        for _ in range(ROUNDS):
            for i, x in enumerate(inputs):
                t0 = time.perf_counter()
                run(x)
                runs[i].append(time.perf_counter() - t0)
    finally:
        gc.enable()
    times = [min(r) for r in runs]
    peaks = []
    for x in mem_inputs or inputs:
        gc.collect()
        tracemalloc.start()
        try:
            run(x)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    return list(zip(times, peaks))


def _assert_growth(name: str, sizes: list[int], got: list[tuple[float, int]], time_bound: float | None,
                   mem_bound: float, span_bound: float | None = None) -> None:
    """Each doubling within ``time_bound`` (time) and ``mem_bound`` (peak); n to 4n within
    ``span_bound`` where given."""
    shown = ", ".join(f"n={n}: {t * 1e3:.0f} ms {m / MB:.1f} MB" for n, (t, m) in zip(sizes, got))
    for (t1, m1), (t2, m2) in itertools.pairwise(got):
        assert time_bound is None or t2 / t1 <= time_bound * TIME_SCALE, f"{name}: time grows too fast ({shown})"
        assert m2 / m1 <= mem_bound, f"{name}: memory grows too fast ({shown})"
    if span_bound is not None:
        assert got[-1][0] / got[0][0] <= span_bound * TIME_SCALE, f"{name}: time grows too fast ({shown})"


# --------------------------------------------------------------------------- generators
def hwloc_gpus(n_gpus: int, per_switch: int = 64) -> str:
    """hwloc 2 XML: ``n_gpus`` GPUs, each below its own downstream port of a PCIe switch with
    ``per_switch`` ports; one PCI domain per switch (so bus numbers stay valid), the switches
    spread over four host bridges in two packages (NUMA nodes 0 and 1)."""
    hbs: list[list[str]] = [[] for _ in range(4)]
    g = 0
    for s in range(-(-n_gpus // per_switch)):
        dom, ports = s + 1, []
        for p in range(min(per_switch, n_gpus - g)):
            bus = 3 + p
            ports.append(
                f'<object type="Bridge" pci_busid="{dom:04x}:02:{p:02x}.0" pci_type="0604 [10b5:9797] [0000:0000] ca" '
                f'bridge_type="1-1" bridge_pci="{dom:04x}:[{bus:02x}-{bus:02x}]">'
                f'<object type="PCIDev" pci_busid="{dom:04x}:{bus:02x}:00.0" pci_type="0302 [10de:2335] [10de:18be] a1" '
                f'pci_link_speed="31.5"/></object>')
            g += 1
        last = 3 + len(ports) - 1
        hbs[s % 4].append(
            f'<object type="Bridge" bridge_type="0-1" bridge_pci="{dom:04x}:[00-{last:02x}]">'
            f'<object type="Bridge" pci_busid="{dom:04x}:00:01.0" pci_type="0604 [8086:2f02] [0000:0000] 02" '
            f'bridge_type="1-1" bridge_pci="{dom:04x}:[01-{last:02x}]">'
            f'<object type="Bridge" pci_busid="{dom:04x}:01:00.0" pci_type="0604 [10b5:9797] [0000:0000] ca" '
            f'bridge_type="1-1" bridge_pci="{dom:04x}:[02-{last:02x}]">' + "".join(ports) + "</object></object></object>")
    pkgs = "".join(
        f'<object type="Package" os_index="{p}" cpuset="0x{0xff << (8 * p):08x}" nodeset="0x{1 << p:08x}">'
        f'<object type="NUMANode" os_index="{p}" cpuset="0x{0xff << (8 * p):08x}" nodeset="0x{1 << p:08x}"/>'
        + "".join(hbs[2 * p] + hbs[2 * p + 1]) + "</object>" for p in range(2))
    return ('<?xml version="1.0" encoding="UTF-8"?><topology version="2.0">'
            '<object type="Machine" os_index="0" cpuset="0x0000ffff" nodeset="0x00000003">' + pkgs + "</object></topology>")


def cpuset_xml(words: int, numa_words: int = 1, bridges: int = 1) -> str:
    """A small topology whose Machine, Package and ``bridges`` host bridges (a GPU below each)
    have cpusets of ``words`` full 32-bit words and whose NUMA node has one of ``numa_words``."""
    big, numa = ",".join(["0xffffffff"] * words), ",".join(["0xffffffff"] * numa_words)
    io = "".join(
        f'<object type="Bridge" bridge_type="0-1" bridge_pci="{d:04x}:[00-01]" cpuset="{big}">'
        f'<object type="Bridge" pci_busid="{d:04x}:00:01.0" pci_type="0604 [8086:2f02] [0000:0000] 02" '
        f'bridge_type="1-1" bridge_pci="{d:04x}:[01-01]">'
        f'<object type="PCIDev" pci_busid="{d:04x}:01:00.0" pci_type="0302 [10de:2335] [10de:18be] a1"/>'
        "</object></object>" for d in range(bridges))
    return (f'<topology version="2.0"><object type="Machine" os_index="0" cpuset="{big}" nodeset="0x1">'
            f'<object type="Package" os_index="0" cpuset="{big}" nodeset="0x1">'
            f'<object type="NUMANode" os_index="0" cpuset="{numa}" nodeset="0x1"/>'
            + io + "</object></object></topology>")


def warn_lines(n: int) -> str:
    """One warning logged by ``n`` distinct devices: one reason whose ranks list grows to n."""
    return "".join(f"node1:{i}:{i} [{i}] NCCL WARN NET/IB : Got async event : port error\n" for i in range(n))


def pattern_lines(n: int) -> str:
    """``n`` distinct graphs (NCCL prints a few; a hostile log, any number)."""
    return "".join(f"node1:1:1 [0] NCCL INFO Pattern {i}, crossNic 0, nChannels 2, bw 40.000000/40.000000, "
                   "type NVL/PIX, sameChannels 1\n" for i in range(n))


# --------------------------------------------------------------------------- E7: NCCL logs
def test_nccl_warnings_from_many_devices_grow_linearly():
    sizes = [20_000, 40_000, 80_000]
    got = _measure(parse_log, [warn_lines(n) for n in sizes], [warn_lines(n // 4) for n in sizes])
    _assert_growth("WARN lines", sizes, got, LINEAR, LINEAR)
    parsed = parse_log(warn_lines(1000))
    (reason,) = [r for r in parsed["summary"]["reasons"] if r["source"] == "warning"]
    assert reason["ranks"] == list(range(1000))  # order kept: first seen first


def test_nccl_distinct_graphs_grow_linearly():
    sizes = [10_000, 20_000, 40_000]
    got = _measure(parse_log, [pattern_lines(n) for n in sizes], [pattern_lines(n // 4) for n in sizes])
    _assert_growth("Pattern lines", sizes, got, LINEAR, LINEAR)
    graphs = parse_log(pattern_lines(3) + pattern_lines(3))["graphs"]  # repeats dropped, order kept
    assert [g["pattern"] for g in graphs] == [0, 1, 2]
    assert graphs[0] == {"pattern": 0, "cross_nic": 0, "nchannels": 2, "bw_intra": 40.0, "bw_inter": 40.0,
                         "type_intra": "NVL", "type_inter": "PIX"}


BIG = "7" * 5000  # Python's int() refuses more than 4,300 digits ("use sys.set_int_max_str_digits()")


@pytest.mark.parametrize("line", [
    f"h:1:1 [{BIG}] NCCL WARN x",
    f"h:1:1 [0] NCCL INFO cudaDriverVersion {BIG}",
    f"h:1:1 [0] NCCL INFO NCCL version 2.{BIG}",
    f"h:1:1 [0] NCCL INFO Channel {BIG}/0 : 0[0] -> 1[1] via P2P/CUMEM",
    f"h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> {BIG}[1] via P2P/CUMEM",
    f"h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x1 rank {BIG} nranks 2 cudaDev 0 busId 1000",
    f"h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes {BIG} localRanks 2",
    f"h:1:1 [0] NCCL INFO Connected all rings, use ring PXN {BIG} GDR 0",
    f"h:1:1 [0] NCCL INFO Pattern {BIG}, crossNic 0, nChannels 1, bw 1.0/1.0, type NVL/PIX",
    "h:1:1 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 1, bw 1.2.3/1.0, type NVL/PIX",
    f"h:1:1 [0] NCCL INFO GPU/0-0 : GPU/0-1 (1/{BIG}.0/NVL)",
    f"allreduce {BIG} B 1.0 us algbw 1.0 GB/s busbw 1.0 GB/s",
    "allreduce 8 B 1.2.3 us algbw 1.0 GB/s busbw 1.0 GB/s",
])
def test_nccl_numbers_too_long_to_be_numbers_are_skipped(line):
    # the line is read as any line that does not match: its fact is left out, nothing raises
    parsed = parse_log(line + "\nh:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n")
    assert [c["via"] for c in parsed["connections"]] == ["P2P/CUMEM"]
    assert parsed["graphs"] == [] and parsed["results"] == [] and parsed["topology"] == {}
    assert parsed["cuda_driver_version"] is None and parsed["ranks"] == []


# --------------------------------------------------------------------------- E6: hwloc GPUs
def test_topology_matrix_grows_as_its_cells():
    sizes = [128, 256, 512]
    got = _measure(lambda x: from_hwloc(x).to_json(), [hwloc_gpus(n) for n in sizes])
    _assert_growth("GPU matrix", sizes, got, SQUARE, SQUARE, SQUARE_4N)


def test_matrix_of_the_generated_machine():
    topo = from_hwloc(hwloc_gpus(130))
    m = topo.matrix()
    assert len(topo.gpus) == 130 and m == topo.to_json()["matrix"] == topo.pcie_matrix()
    assert m["GPU0"]["GPU1"] == "PIX" and m["GPU0"]["GPU64"] == "NODE" and m["GPU0"]["GPU128"] == "SYS"
    assert topo.pcie_code("GPU0", "GPU1") == ("PIX", "through one PCIe switch or bridge (PCI bridge (0001:01:00.0))")


def test_512_gpus_parse_and_print_in_seconds():
    text = hwloc_gpus(MAX_DEVICES)
    t0 = time.perf_counter()
    doc = from_hwloc(text).to_json()
    assert time.perf_counter() - t0 < 5.0 * TIME_SCALE
    assert len(doc["matrix"]) == MAX_DEVICES


def test_2000_gpus_are_refused_at_once():
    text = hwloc_gpus(2000)
    assert 300_000 < len(text) < 1_000_000  # the probe's file was 388 KB
    t0 = time.perf_counter()
    with pytest.raises(InvalidArgument, match=rf"more than {MAX_DEVICES} GPUs and RDMA NICs") as info:
        from_hwloc(text)
    assert time.perf_counter() - t0 < 2.0 * TIME_SCALE
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


def test_pair_codes_match_the_path_walk_on_random_trees():
    """PairCodes (binary search for the common ancestor, unit counts by prefix) against the path
    walk it replaced, on random trees of switches, bridges and devices."""
    rng = random.Random(7)
    for _ in range(40):
        root = Node("machine", "m")
        pkgs = [root.add(Node("package", f"P{i}", numa_nodes=frozenset({i}), socket=i)) for i in range(2)]
        hbs = [rng.choice(pkgs + [root]).add(Node("hostbridge", f"HB{i}", numa_nodes=rng.choice(
            [frozenset(), frozenset({0}), frozenset({1}), frozenset({0, 1})]))) for i in range(3)]
        nodes: list[Node] = list(hbs)
        devices = []
        for i in range(60):
            parent = rng.choice(nodes)
            kind = "device" if rng.random() < 0.4 else "bridge"
            n = parent.add(Node(kind, f"n{i}", bus_id=f"0000:{i:02x}:00.0"))
            nodes.append(n)
            if kind == "device":
                devices.append(n)
        assign_bridge_roles(root)
        codes = PairCodes()
        for a in devices:
            for b in devices:
                assert codes.code(a, b) == _walked_code(a, b), (a.label, b.label)


def _walked_code(a: Node, b: Node) -> tuple[str, str]:
    """The code as the old pcie_code found it: the whole path a..b, every bridge on it a unit."""
    from gdrlab.topology._tree import format_cpulist, path_between
    if a is b:
        return "X", "same device"
    path, lca = path_between(a, b)
    if lca.kind in ("bridge", "device"):
        units = {("switch", n.switch_id) if n.role in ("usp", "dsp") else ("bridge", id(n))
                 for n in path if n.kind == "bridge"}
        if len(units) <= 1:
            return "PIX", f"through one PCIe switch or bridge ({lca.describe()})"
        return "PXB", f"through {len(units)} PCIe switches, no host bridge (meet at {lca.describe()})"
    if lca.kind == "hostbridge":
        return "PHB", f"through PCIe host bridge {lca.describe()}"
    loc_a, loc_b = (a.host_bridge() or a).locality(), (b.host_bridge() or b).locality()
    if loc_a and loc_a == loc_b and len(loc_a) == 1:
        return "NODE", f"between two host bridges of NUMA node {next(iter(loc_a))}"
    if loc_a and loc_b:
        return "SYS", (f"across the SMP interconnect (NUMA {format_cpulist(sorted(loc_a))} to "
                       f"{format_cpulist(sorted(loc_b))})")
    return "SYS", "between host bridges whose NUMA locality is unknown (assumed across the SMP interconnect)"


# --------------------------------------------------------------------------- E5: bitmaps
def test_cpusets_near_the_cap_grow_linearly_and_stay_compact():
    sizes = [MAX_BITMAP_WORDS // 4, MAX_BITMAP_WORDS // 2, MAX_BITMAP_WORDS - 1]
    texts = [cpuset_xml(n, bridges=12) for n in sizes]  # 14 bitmaps of n words
    got = _measure(from_hwloc, texts)
    # Time from n to 4n only: the XML parser's own time for one attribute jumps between 0.36 and
    # 0.72 MB (28, 31, 107 ms here), and the old code was linear in time too; it was the memory.
    _assert_growth("cpusets", sizes, got, None, LINEAR, LINEAR_4N)
    for text, (_, peak) in zip(texts, got):
        # a bit per PU is kept, not a list entry: the old code peaked at ~140 bytes a character
        assert peak < 12 * len(text), f"{peak / MB:.0f} MB for {len(text) / MB:.1f} MB of XML"
    assert len(from_hwloc(texts[-1]).gpus) == 12


def test_bitmap_over_the_cap_is_refused_from_its_length():
    words = ",".join(["0xffffffff"] * (MAX_BITMAP_WORDS + 1))
    with pytest.raises(ValueError, match=rf"{MAX_BITMAP_WORDS + 1} words .* wider than {MAX_BITMAP_WORDS}"):
        parse_bitmap(words)
    assert bitmap_value(words[:-11]) == (1 << (32 * MAX_BITMAP_WORDS)) - 1  # at the cap: read


def test_probe_cpuset_of_a_million_words_is_one_line_in_little_memory(tmp_path):
    bitmap = ",".join(["0xffffffff"] * 1_000_000)  # the probe's case: 11 MB, was 12 s and 4.87 GB
    text = cpuset_xml(1).replace('cpuset="0xffffffff"', f'cpuset="{bitmap}"', 1)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(InvalidArgument, match=r"inline XML: attribute cpuset=.* of Machine object is refused: "
                                                  r"1000000 words") as info:
            from_hwloc(text)
        seconds, peak = time.perf_counter() - t0, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seconds < 5.0 * TIME_SCALE and peak < 50 * MB, (seconds, peak / MB)  # mostly the XML parser's copy
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


def test_cpuset_file_near_the_reader_cap_is_one_line(tmp_path):
    path = tmp_path / "wide.xml"  # 54 MB, inside the 64 MiB reader cap: was a MemoryError at 7.2 GB
    path.write_text(cpuset_xml(1).replace('cpuset="0xffffffff"', 'cpuset="' + ",".join(
        ["0xffffffff"] * 4_900_000) + '"', 1))
    with pytest.raises(InvalidArgument, match=r"wide\.xml: attribute cpuset=.* is refused: 4900000 words") as info:
        from_hwloc(path)
    assert "\n" not in str(info.value)


def test_numa_cpu_lists_are_bounded_in_all():
    # a bitmap is kept as an int; what is listed (NUMA nodes' CPUs) is MAX_LISTED entries in all
    with pytest.raises(InvalidArgument, match=r"NUMA nodes' cpusets list more than 262144 CPUs"):
        from_hwloc(cpuset_xml(1, numa_words=10_000))
    assert from_hwloc(cpuset_xml(1, numa_words=256)).devices[0]["cpus"] == "0-8191"


def test_memory_error_while_reading_is_one_line(monkeypatch):
    from gdrlab.topology import hwloc

    def exhausted(*_a: object) -> None:
        raise MemoryError

    monkeypatch.setattr(hwloc._Builder, "build", exhausted)
    with pytest.raises(InvalidArgument, match=r"inline XML: not enough memory to read these \d+ bytes") as info:
        from_hwloc(cpuset_xml(1))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text", ["0-4294967295", "7" * 5000, "0-2097151,0-2097151"])
def test_cpulists_are_bounded_before_they_are_expanded(text):
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="CPU"):
        parse_cpulist(text)
    assert time.perf_counter() - t0 < 1.0 * TIME_SCALE


@pytest.mark.parametrize("cpulist", ["0-4294967295", "7" * 5000, "0-200000,0-200000"])
def test_sysfs_cpulist_is_one_line_before_it_is_expanded(tmp_path, cpulist):
    node = tmp_path / "sys/devices/system/node/node0"
    node.mkdir(parents=True)
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    (node / "cpulist").write_text(cpulist + "\n")  # the old reader built range(0, 2**32) for the first
    with pytest.raises(InvalidArgument, match=r"node0/cpulist: .* is not a CPU list") as info:
        from_sysfs(tmp_path)
    assert "\n" not in str(info.value) and "set_int_max_str_digits" not in str(info.value)


@pytest.mark.parametrize("attribute,value,pattern", [
    ("os_index", "7" * 5000, "is not a non-negative integer"),
    ("pci_link_speed", "7" * 5000, "is not a link speed"),
])
def test_hwloc_numbers_of_5000_digits_are_one_line(attribute, value, pattern):
    text = cpuset_xml(1)
    if attribute == "pci_link_speed":
        text = text.replace('"0302 [10de:2335] [10de:18be] a1"', f'"0302 [10de:2335] [10de:18be] a1" {attribute}="{value}"')
    else:
        text = text.replace('type="Package" os_index="0"', f'type="Package" {attribute}="{value}"')
    with pytest.raises(InvalidArgument, match=rf"attribute {attribute}=.*{pattern}") as info:
        from_hwloc(text)
    assert "set_int_max_str_digits" not in str(info.value) and "\n" not in str(info.value)


def test_nvlink_values_of_5000_digits_are_one_line():
    text = hwloc_gpus(2).replace("</object></topology>", "</object>"
                                 '<distances2 type="PCIDev" nbobjs="2" kind="5" name="NVLinkBandwidth" indexing="gp">'
                                 f"<indexes length=\"4\">a b</indexes><u64values length=\"4\">0 {BIG} 0 0</u64values>"
                                 "</distances2></topology>")
    with pytest.raises(InvalidArgument, match="not a 64-bit integer") as info:
        from_hwloc(text)
    assert "set_int_max_str_digits" not in str(info.value)
