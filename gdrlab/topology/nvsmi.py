"""Reading the text of ``nvidia-smi topo -m``: the code of every GPU/NIC pair, each GPU's CPU and
NUMA affinity, the code legend and the NIC legend.

A matrix is what a learner can copy from a cluster node or a forum post; it holds the codes
nvidia-smi computed, not the PCIe tree behind them (for that, :func:`gdrlab.topology.from_sysfs` or
:func:`gdrlab.topology.from_hwloc`). :func:`parse_topo_matrix` reads one line at a time with string
methods and fixed-width token checks, so its time is linear in the text; anything it cannot read
is one :class:`gdrlab.errors.InvalidArgument` naming the line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from .. import provenance
from ..errors import InvalidArgument
from ._topo import MAX_DEVICES, _natural_key, gdr_verdict
from ._tree import CODE_ORDER

__all__ = ["TopoMatrix", "parse_topo_matrix", "recorded_matrices", "matrix_report", "MAX_MATRIX_CHARS"]

_DATA = Path(__file__).resolve().parent.parent / "data" / "topo-matrix"
MAX_MATRIX_CHARS = 1 << 20          # a 64-GPU, 64-NIC matrix is about 40 kB
# nvidia-smi's codes; SOC is the name drivers before 2017 printed for SYS.
_CODES = frozenset(CODE_ORDER) | {"SOC"}
_NV = re.compile(r"NV[0-9]{1,3}")            # applied with fullmatch to one short token
_ANSI = re.compile(r"\x1b\[[0-9;]{0,16}m")    # nvidia-smi underlines its header on a terminal
_EXTRA = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_DEVICE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class TopoMatrix:
    """One ``nvidia-smi topo -m`` matrix.

    ``columns`` are the device names of the header in order (``GPU0``..., ``NIC0``... or, from
    drivers before about 2021, ``mlx5_0``...); ``codes[row][column]`` the code of each pair a row
    gives; ``cpu_affinity``, ``numa_affinity`` and ``gpu_numa_id`` the GPU rows' last columns as
    printed (``"48-63,176-191"``, ``"3"``, ``"N/A"``); ``legend`` the code legend
    (``{"PXB": "Connection traversing multiple PCIe bridges ..."}``) and ``nic_legend`` the NIC
    legend (``{"NIC0": "mlx5_0"}``) when the text has them.
    """

    columns: tuple[str, ...]
    codes: dict[str, dict[str, str]]
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    gpu_numa_id: dict[str, str] = field(default_factory=dict)
    legend: dict[str, str] = field(default_factory=dict)
    nic_legend: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> list[str]:
        """The GPU columns, in header order."""
        return [c for c in self.columns if _is_gpu(c)]

    @property
    def nics(self) -> list[str]:
        """The NIC columns (every column that is not a GPU), in header order."""
        return [c for c in self.columns if not _is_gpu(c)]

    @property
    def rows(self) -> list[str]:
        """The devices whose row the text holds (an excerpt may hold fewer than ``columns``)."""
        return list(self.codes)

    def code(self, a: str, b: str) -> str | None:
        """The code between ``a`` and ``b`` from ``a``'s row, else from ``b``'s; None when neither
        row is in the text. Unknown names raise InvalidArgument."""
        for name in (a, b):
            if name not in self._column_set:
                raise InvalidArgument(f"no device {name!r} in this matrix (devices: {', '.join(self.columns)})")
        if a in self.codes:
            return self.codes[a][b]
        if b in self.codes:
            return self.codes[b][a]
        return None

    @cached_property
    def _column_set(self) -> frozenset[str]:
        return frozenset(self.columns)

    def nic_device(self, column: str) -> str:
        """The RDMA device name of a NIC column (``NIC0`` -> ``mlx5_0`` through the NIC legend);
        the column itself when the legend is absent or the header already names the device."""
        return self.nic_legend.get(column, column)

    def asymmetric_pairs(self) -> list[tuple[str, str, str, str]]:
        """``(a, b, code a->b, code b->a)`` for every pair both of whose rows are present and
        disagree; nvidia-smi's matrix is symmetric, so a real one gives ``[]``."""
        out = []
        rows = self.rows
        for i, a in enumerate(rows):
            for b in rows[i + 1:]:
                if self.codes[a][b] != self.codes[b][a]:
                    out.append((a, b, self.codes[a][b], self.codes[b][a]))
        return out


def _is_gpu(name: str) -> bool:
    return name.startswith("GPU") and name[3:].isdecimal()


def _is_code(token: str) -> bool:
    return token in _CODES or (len(token) <= 5 and _NV.fullmatch(token) is not None)


def _header(tokens: list[str], rest: str, lineno: int) -> tuple[tuple[str, ...], list[str]]:
    """Device names and the extra columns (``CPU Affinity``...) of a header line."""
    names: list[str] = []
    for tok in tokens:
        if tok in ("CPU", "NUMA"):
            break
        if _DEVICE_NAME.fullmatch(tok) is None:
            raise InvalidArgument(f"line {lineno}: {tok[:40]!r} is not a device name of an nvidia-smi matrix header")
        names.append(tok)
    if len(names) > MAX_DEVICES:
        raise InvalidArgument(f"line {lineno}: {len(names)} devices in the header; at most {MAX_DEVICES} are read")
    if len(set(names)) != len(names):
        raise InvalidArgument(f"line {lineno}: a device name appears twice in the header")
    extras = [label for label in _EXTRA if label in rest]
    return tuple(names), extras


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Read the text ``nvidia-smi topo -m`` printed (tabs or spaces, with or without its legends,
    a whole matrix or an excerpt of its first rows).

    The header is the first line whose first word is ``GPU0``; a row is a line whose first word
    is one of the header's devices, followed by one code per device (``X`` on the diagonal) and,
    for GPU rows, the affinity columns the header names. ``Legend:`` lines (``  PXB  = ...``) and
    ``NIC Legend:`` lines (``  NIC0: mlx5_0``) are read when present; other lines (a shell prompt,
    blank lines) are skipped.
    """
    if not isinstance(text, str):
        raise InvalidArgument("parse_topo_matrix needs the matrix's text (str); read the file first")
    if len(text) > MAX_MATRIX_CHARS:
        raise InvalidArgument(f"{len(text)} characters is not an nvidia-smi matrix (at most {MAX_MATRIX_CHARS} are read)")
    columns: tuple[str, ...] = ()
    known: frozenset[str] = frozenset()  # the columns, for a lookup per line that does not scan them
    extras: list[str] = []
    codes: dict[str, dict[str, str]] = {}
    cpu: dict[str, str] = {}
    numa: dict[str, str] = {}
    numa_id: dict[str, str] = {}
    legend: dict[str, str] = {}
    nic_legend: dict[str, str] = {}
    section = ""
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _ANSI.sub("", raw) if "\x1b" in raw else raw
        tokens = line.split()
        if not tokens:
            continue
        first = tokens[0]
        if line.strip() in ("Legend:", "NIC Legend:"):
            section = line.strip()
            continue
        if not columns:
            if first == "GPU0":
                columns, extras = _header(tokens, line, lineno)
                known = frozenset(columns)
                section = ""
            continue
        if first in known and section == "":
            if first in codes:
                raise InvalidArgument(f"line {lineno}: a second row for {first}")
            n = len(columns)
            row = tokens[1:1 + n]
            if len(row) < n:
                raise InvalidArgument(f"line {lineno}: row {first} has {len(row)} codes for {n} devices")
            for col, tok in zip(columns, row):
                if not _is_code(tok):
                    raise InvalidArgument(f"line {lineno}: {tok[:40]!r} (row {first}, column {col}) is not an "
                                          "nvidia-smi topology code (X, PIX, PXB, PHB, NODE, SYS, NV#)")
                if (col == first) != (tok == "X"):
                    raise InvalidArgument(f"line {lineno}: row {first}, column {col}: 'X' belongs on the diagonal only")
            codes[first] = dict(zip(columns, row))
            tail = tokens[1 + n:]
            if _is_gpu(first) and tail:
                values = dict(zip(extras, tail))
                if "CPU Affinity" in values:
                    cpu[first] = values["CPU Affinity"]
                if "NUMA Affinity" in values:
                    numa[first] = values["NUMA Affinity"]
                if "GPU NUMA ID" in values:
                    numa_id[first] = values["GPU NUMA ID"]
            continue
        if section == "Legend:" and "=" in line:
            key, _, meaning = line.partition("=")
            if key.strip():
                legend[key.strip()] = meaning.strip()
        elif section == "NIC Legend:" and ":" in line:
            key, _, dev = line.partition(":")
            if key.strip() in known:
                nic_legend[key.strip()] = dev.strip()
    if not columns:
        raise InvalidArgument("no nvidia-smi topo -m header (a line starting with GPU0) in this text")
    if not codes:
        raise InvalidArgument("an nvidia-smi topo -m header but no device row under it")
    return TopoMatrix(columns=columns, codes=codes, cpu_affinity=cpu, numa_affinity=numa, gpu_numa_id=numa_id,
                      legend=legend, nic_legend=nic_legend)


def recorded_matrices() -> dict[str, Path]:
    """The shipped matrices of real machines: ``{name: path}`` (each cited in the folder's README)."""
    return {p.stem: p for p in sorted(_DATA.glob("*.txt"))}


# What each code means, in nvidia-smi's own legend's words (shortened), for the matrix's GDR reasons.
_MEANING = {
    "PIX": "at most a single PCIe bridge between them",
    "PXB": "multiple PCIe bridges, without the PCIe host bridge",
    "PHB": "PCIe and a PCIe host bridge (typically the CPU)",
    "NODE": "PCIe and the interconnect between PCIe host bridges within one NUMA node",
    "SYS": "PCIe and the SMP interconnect between NUMA nodes (e.g. QPI/UPI, AMD's Infinity Fabric)",
    "SOC": "PCIe and the SMP interconnect between NUMA nodes (SOC: drivers before 2017 wrote SYS so)",
}


def matrix_report(matrix: TopoMatrix, source: str, level: object = None) -> dict:
    """What ``gdrlab topo`` reports for a tree, read from a matrix instead: the codes as printed,
    each GPU's nearest NIC, NCCL's GDR decision for every GPU/NIC pair whose code the text holds,
    and each GPU's NUMA binding. Keys as :meth:`gdrlab.topology.Topology.to_json` has them
    (``matrix``, ``nearest_nic``, ``gdr``, ``numa``), plus ``rows`` (the devices whose row the
    text holds), ``nic_legend`` and ``notes`` (what an excerpt leaves out). ``level`` is
    ``NCCL_NET_GDR_LEVEL`` (None: NCCL's default, PXB)."""

    gpus, nics = matrix.gpus, sorted(matrix.nics, key=_natural_key)
    full: dict[str, dict[str, str | None]] = {a: {b: matrix.code(a, b) for b in matrix.columns}
                                              for a in matrix.columns}
    gdr: dict[str, dict[str, dict]] = {}
    nearest: dict[str, str | None] = {}
    numa: dict[str, dict] = {}
    missing: list[str] = []
    for g in gpus:
        gdr[g] = {}
        best: tuple[int, str] | None = None
        for nic in nics:
            code = full[g][nic]
            if code is None:
                continue
            shown = nic if matrix.nic_device(nic) == nic else f"{nic} ({matrix.nic_device(nic)})"
            gdr[g][nic] = gdr_verdict(g, shown, code, _MEANING.get(code, "as nvidia-smi printed it"), level)
            rank = CODE_ORDER.index(gdr[g][nic]["code"])
            if best is None or rank < best[0]:
                best = (rank, nic)
        nearest[g] = best[1] if best else None
        if nics and best is None:
            missing.append(g)
        node = matrix.numa_affinity.get(g, "")
        cpus = matrix.cpu_affinity.get(g, "")
        if node.isdecimal() and len(node) <= 6:
            numa[g] = {"numa_node": int(node), "cpus": cpus,
                       "numactl": f"numactl --cpunodebind={node} --membind={node}",
                       "reason": f"{g} hangs off NUMA node {node}: run its process on that node's cores "
                                 "and memory so copies do not cross the SMP interconnect"}
        else:
            numa[g] = {"numa_node": None, "cpus": cpus, "numactl": "",
                       "reason": f"the NUMA node of {g} is not in this matrix"}
    notes = []
    if missing:
        notes.append(f"this text holds no row for {', '.join(missing)} (nor the NIC rows), so their distance "
                     "to the NICs is unknown here: an excerpt, or paste the whole `nvidia-smi topo -m`")
    if not nics:
        notes.append("this matrix has no NIC column, so no GPUDirect RDMA decision (NCCL's rule is about a "
                     "GPU and a NIC)")
    asym = matrix.asymmetric_pairs()
    if asym:
        notes.append("the matrix is not symmetric (a real one is): "
                     + ", ".join(f"{a}->{b} {x} but {b}->{a} {y}" for a, b, x, y in asym[:5]))
    return {
        "source": source,
        "provenance": provenance.recorded(source),
        "devices": [{"name": c, "kind": "gpu" if c in gpus else "nic",
                     **({"rdma_device": matrix.nic_device(c)} if c not in gpus else {})} for c in matrix.columns],
        "rows": matrix.rows,
        "matrix": full,
        "nic_legend": dict(matrix.nic_legend),
        "nearest_nic": nearest,
        "gdr": gdr,
        "numa": numa,
        "notes": notes,
    }
