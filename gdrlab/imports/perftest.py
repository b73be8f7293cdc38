"""perftest (linux-rdma/perftest): ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat, ib_read_lat,
ib_send_lat and their atomic siblings, as printed on stdout or written by ``--out_json``.

Units as perftest defines them (src/perftest_parameters.c): bandwidth in "MB/sec" is 2**20 bytes
per second (``format_factor = 0x100000``), with ``--report_gbits`` "Gb/sec" is 10**9 bits per
second (``125000000`` bytes); ``MsgRate[Mpps]`` is millions of messages per second. Latency tests
time a ping-pong and report half of it (``rtt_factor = 2``), except RDMA READ and atomics, where
one operation is itself the round trip (``rtt_factor = 1``): those are halved here. With ``-b``
(bidirectional) the client reports both directions summed.
"""
from __future__ import annotations

import re
from typing import Any

from ..units import one_way_us, to_gbps
from ._common import BadOutput, Result, clean, loads, number, row, whole

TOOL = "perftest"
_TITLE = re.compile(r"^\s*((?:RDMA_)?(?:Write|Read|Send|Atomic)\w*|Send)\s+(.*?)\s*(BW|Latency)\s+Test\s*$")
_LABELS = re.compile(r"#bytes|#iterations|BW peak\[\w+/sec\]|BW average\[\w+/sec\]|MsgRate\[Mpps\]|"
                     r"t_min|t_max|t_typical|t_avg|t_stdev|99\.9% percentile|99% percentile|tps average")
_SETTING = re.compile(r"^\s*([A-Za-z][\w .*/-]*?)\s*:\s*(\S.*?)\s*$")
_KEEP = ("Device", "Number of qps", "Connection type", "Link type", "Transport type", "Mtu", "TX depth")


def _verb(title: str) -> str:
    t = title.lower()
    for verb in ("write", "read", "send", "atomic"):
        if verb in t:
            return verb
    return "send"


def test_name(title: str, kind: str) -> str:
    """``("RDMA_Write", "BW")`` -> ``ib_write_bw``."""
    return f"ib_{_verb(title)}_{'bw' if kind.upper() == 'BW' else 'lat'}"


def _settings(lines: list[str]) -> dict[str, str]:
    """The header's ``Name : value`` pairs (two may share a line, tab or space separated)."""
    found: dict[str, str] = {}
    for line in lines:
        if line.lstrip().startswith("#"):
            break
        for part in re.split(r"\t+|\s{3,}(?=[A-Z][\w .*]*?\s*:)", line):
            m = _SETTING.match(part)
            if m and m.group(1) in _KEEP:
                found.setdefault(m.group(1), clean(m.group(2), 40))
    return found


def read_text(text: str, file: str) -> Result:
    """Rows from perftest's stdout."""
    res = Result(TOOL)
    lines = text.splitlines()
    title = kind = None
    bidir = False
    for line in lines:
        m = _TITLE.match(line)
        if m:
            title, kind, bidir = m.group(1), m.group(3), "Bidirectional" in line
            break
    header_at = next((i for i, line in enumerate(lines) if line.lstrip().startswith("#bytes")), None)
    if header_at is None:
        raise BadOutput(f"{clean(file, 200)}: no '#bytes' results header (perftest output cut short?)")
    labels = _LABELS.findall(lines[header_at])
    if kind is None:
        kind = "BW" if any(lb.startswith("BW") for lb in labels) else "Latency"
    name = test_name(title or "", kind)
    settings = _settings(lines[:header_at])
    res.options = ", ".join(f"{k}: {v}" for k, v in settings.items()) or None
    if bidir:
        res.note(f"{name} -b: bandwidth is both directions summed (perftest's client adds the remote side's)")
    for line in lines[header_at + 1:]:
        tokens = line.split()
        if not tokens or whole(tokens[0]) is None or len(tokens) < 3:
            continue
        values = dict(zip(labels, tokens))
        res.rows.append(_row(res, name, values, bidir))
    return res


def _bw_unit(label: str) -> str:
    return "Gb/s" if "[Gb/sec]" in label else "MiB/s"


def _row(res: Result, name: str, values: dict[str, str], bidir: bool) -> dict[str, Any]:
    """One row from the values of one results line, keyed by header label."""
    get = {k.split("[")[0]: number(v) for k, v in values.items()}
    size = whole(values.get("#bytes", ""))
    iters = whole(values.get("#iterations", ""))
    direction = "bidir" if bidir else "uni"
    avg_label = next((k for k in values if k.startswith("BW average")), None)
    if avg_label is not None:
        unit = _bw_unit(avg_label)
        res.convert(f"bandwidth: perftest {'Gb/sec (10^9 bit/s)' if unit == 'Gb/s' else 'MB/sec (2^20 B/s)'} "
                    "-> GB/s (10^9 B/s)")
        peak = get.get("BW peak")
        if peak == 0.0:
            res.note("BW peak printed as 0.00: perftest did not measure it in this run (e.g. with -D)")
            peak = None
        return row(path=name, test=name, size=size, iters=iters, direction=direction,
                   bw_gbps=_rate(get.get("BW average"), unit), bw_peak_gbps=_rate(peak, unit),
                   msg_rate_mps=get.get("MsgRate"))
    return _lat_row(res, name, size, iters, get)


def _rate(value: float | None, unit: str) -> float | None:
    return None if value is None else to_gbps(value, unit)


def _lat_row(res: Result, name: str, size: int | None, iters: int | None,
             get: dict[str, float | None]) -> dict[str, Any]:
    full_rtt = name.startswith(("ib_read", "ib_atomic"))
    if full_rtt:
        res.convert(f"latency: {name} reports one READ/atomic, a full round trip (perftest's rtt_factor 1); "
                    "halved to one-way")
    else:
        res.note(f"latency: {name} reports half the round trip already (one-way, as the kit does)")

    def t(key: str) -> float | None:
        v = get.get(key)
        return None if v is None else (one_way_us(v) if full_rtt else v)

    return row(path=name, test=name, size=size, iters=iters, lat_min_us=t("t_min"), lat_max_us=t("t_max"),
               lat_p50_us=t("t_typical"), lat_mean_us=t("t_avg"), lat_p99_us=t("99% percentile"))


_BARE_KEY = re.compile(r"^(\s*)([A-Za-z_][\w.%]*)(\s*):", re.MULTILINE)
_BARE_VALUE = re.compile(r":\s*([A-Za-z_][\w.\-]*)\s*,")
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def _loose(text: str) -> str:
    """perftest before 2023 wrote ``--out_json`` with bare words (``test: RDMA_Write_Latency_Test,``,
    linux-rdma/perftest#216) and trailing commas: quote them so JSON can read it."""
    text = _BARE_KEY.sub(r'\1"\2"\3:', text)
    text = _BARE_VALUE.sub(lambda m: f': "{m.group(1)}",', text)
    return _TRAILING_COMMA.sub(r"\1", text)


def read_json(text: str, file: str, gbits: bool = False) -> Result:
    """Rows from a ``--out_json`` file. Its ``BW_*`` fields carry no unit: MB/sec (2^20) unless
    the run used ``--report_gbits`` (``gbits=True``)."""
    try:
        doc = loads(text, clean(file, 200))
    except BadOutput:
        doc = loads(_loose(text), clean(file, 200))
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), dict):
        raise BadOutput(f"{clean(file, 200)}: no 'results' object (not perftest --out_json output?)")
    found = doc.get("test_info")
    info: dict[str, Any] = found if isinstance(found, dict) else {}
    test = clean(info.get("test", ""), 60)
    kind = "BW" if "_BW_" in f"_{test}_" or "BW_average" in doc["results"] else "Latency"
    name = test_name(test, kind)
    res = Result(TOOL)
    res.options = ", ".join(f"{k}: {clean(v, 40)}" for k, v in info.items()
                            if k in ("Device", "Number_of_qps", "Connection_type", "Link_type", "Mtu")) or None
    r = doc["results"]
    bidir = "Bidirectional" in test
    values = {"#bytes": str(r.get("MsgSize", "")), "#iterations": str(r.get("n_iterations", ""))}
    if "BW_average" in r:
        unit = "[Gb/sec]" if gbits else "[MB/sec]"
        values.update({f"BW peak{unit}": str(r.get("BW_peak")), f"BW average{unit}": str(r.get("BW_average")),
                       "MsgRate[Mpps]": str(r.get("MsgRate"))})
        res.note("perftest's JSON does not say its bandwidth unit: read as "
                 + ("Gb/sec (--report_gbits given)" if gbits else "MB/sec (pass --gbits if the run used --report_gbits)"))
    else:
        values.update({k: str(r.get(k)) for k in ("t_min", "t_max", "t_typical", "t_avg", "t_stdev")})
        values["99% percentile"] = str(r.get("percentile_99"))
    if bidir:
        res.note(f"{name} -b: bandwidth is both directions summed (perftest's client adds the remote side's)")
    res.rows.append(_row(res, name, values, bidir))
    return res
