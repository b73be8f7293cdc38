"""Other tools' results as the kit's rows: ``read(path)`` detects the tool (perftest, nccl-tests,
OSU, nvbandwidth, ucx_perftest, or the class view's export) and returns a DataFrame with the bench
columns (size, one-way latency in µs, bandwidth in GB/s = 1e9 B/s) and ``imported`` provenance that
names the tool, its version, options and host where the output says them, and every unit
conversion made (``df.attrs["provenance"]["converted"]``)."""
from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from typing import Any

from .. import provenance
from ..errors import Unavailable
from . import nccl_tests, nvbandwidth, osu, perftest, ucx_perftest
from ._common import MAX_BYTES, BadOutput, Result, clean, frame, read_text

__all__ = ["EXTRA_SHOWN", "MAX_BYTES", "TOOLS", "BadOutput", "detect", "export_reader", "read"]

#: The tools ``--tool`` accepts; ``class`` is the class view's CSV/Parquet export.
TOOLS = ("perftest", "nccl-tests", "osu", "nvbandwidth", "ucx_perftest", "class")
_EXPORT_MODULE = "gdrlab.classroom.export"
#: Columns beyond the bench table that the CLI table shows when a tool fills them.
EXTRA_SHOWN = ("lat_mean_us", "busbw_gbps", "direction", "in_place", "src", "dst")


def _is_json(text: str) -> bool:
    return text.lstrip().startswith("{")


def detect(text: str) -> str | None:
    """The tool whose output ``text`` is, or None."""
    head = text[:200_000]
    if _is_json(head):
        if re.search(r'"nvbandwidth"\s*:', head):
            return "nvbandwidth"
        if re.search(r'"?test_info"?\s*:', head) or re.search(r'"MsgSize"', head):
            return "perftest"
        if re.search(r'"nccl_version"\s*:|"out_of_place"\s*:|"alg_bw"\s*:', head):
            return "nccl-tests"
        return None
    if re.search(r"^#\s*OSU\b", head, re.MULTILINE):
        return "osu"
    if "nvbandwidth Version" in head or re.search(r"(CPU|GPU)\(row\).*\(column\)", head):
        return "nvbandwidth"
    if "bandwidth (MB/s)" in head and "message rate (msg/s)" in head:
        return "ucx_perftest"
    if re.search(r"^\s*#bytes\s+#iterations", head, re.MULTILINE) or re.search(
            r"^\s*(?:RDMA_\w+|Send|Atomic)\b[\w ]*?\b(?:BW|Latency) Test\s*$", head, re.MULTILINE):
        return "perftest"
    if "algbw" in head and "busbw" in head:
        return "nccl-tests"
    return None


def _readers(gbits: bool) -> dict[str, tuple[Callable[[str, str], Result], Callable[[str, str], Result] | None]]:
    return {
        "perftest": (perftest.read_text, lambda t, f: perftest.read_json(t, f, gbits=gbits)),
        "nccl-tests": (nccl_tests.read_text, nccl_tests.read_json),
        "osu": (osu.read_text, None),
        "nvbandwidth": (nvbandwidth.read_text, nvbandwidth.read_json),
        "ucx_perftest": (ucx_perftest.read_text, None),
    }


def export_reader() -> Callable[[str], Any] | None:
    """The class view's ``read_export(path)`` when this build has it, else None."""
    try:
        mod = importlib.import_module(_EXPORT_MODULE)
    except ImportError:
        return None
    fn = getattr(mod, "read_export", None)
    return fn if callable(fn) else None


def _read_class(path: str) -> Any:
    reader = export_reader()
    if reader is None:
        raise Unavailable("reading the class view's export needs gdrlab.classroom.export.read_export, "
                          "which this build does not have yet")
    df = reader(path)
    if provenance.of(df) is None:
        provenance.attach(df, provenance.imported("gdrlab class export", file=os.path.basename(path)))
    return df


def read(path: str | os.PathLike[str], tool: str | None = None, *, gbits: bool = False) -> Any:
    """The rows of the tool output at ``path`` as a DataFrame with ``imported`` provenance.

    ``tool`` is one of :data:`TOOLS`, detected from the text when None; ``gbits`` says a perftest
    ``--out_json`` file came from a ``--report_gbits`` run (its JSON does not say). Raises
    :class:`BadOutput` (a ValueError) with one line for anything that is not such an output."""
    file = os.fspath(path)
    if tool is not None and tool not in TOOLS:
        raise BadOutput(f"unknown tool {clean(tool, 40)!r}; known: {', '.join(TOOLS)}")
    if tool == "class" or (tool is None and file.lower().endswith(".parquet")):
        return _read_class(file)
    text = read_text(file)
    found = tool or detect(text)
    if found is None and file.lower().endswith(".csv") and export_reader() is not None:
        return _read_class(file)
    if found is None or found == "class":
        raise BadOutput(f"cannot tell which tool wrote {clean(os.path.basename(file), 120)}: not the output of "
                        f"perftest, nccl-tests, OSU, nvbandwidth or ucx_perftest (give --tool to say)")
    text_reader, json_reader = _readers(gbits)[found]
    if _is_json(text):
        if json_reader is None:
            raise BadOutput(f"{found} writes no JSON; {clean(os.path.basename(file), 120)} starts with '{{'")
        result = json_reader(text, file)
    else:
        result = text_reader(text, file)
    return frame(result, file)
