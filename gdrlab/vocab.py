"""The vocabulary of DESIGN.md, defined once: paths and their categories, wires, modes, placements,
memory kinds, defaults and the result schema.

Everything that names a transfer path, a wire, a test mode or a result column reads it from here:
the transfer layer, the CLI, the model, the plots and the importers. This module is pure Python
(the model and ``gdrlab model`` work without the compiled engine); the engine carries the same
table in C++ (``_native.PATH_NAMES``, ``WIRE_NAMES``, ``MODE_NAMES``, ``MEMORY_KIND_NAMES``,
``DEFAULT_CHUNK_BYTES``, ``DEFAULT_PIPELINE_DEPTH``) and a test checks that the two agree. A
literal list of two or more of these names anywhere else is refused by a test
(tests/package/test_package.py); code asks for a category here instead.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "PathInfo", "PATH_TABLE", "PATHS", "ENGINE_PATHS", "NETWORK_PATHS", "GPU_PATHS", "P2P_PATHS", "COPY_PATHS",
    "HOST_BUFFER_PATHS", "WIRES", "MODES", "BENCH_MODES", "PLACEMENTS", "MEMORY_KINDS", "HOST_MEMORY_KINDS",
    "CUDA_MEMORY_KINDS",
    "DEFAULT_CHUNK_BYTES", "DEFAULT_PIPELINE_DEPTH", "Column", "BENCH_COLUMNS",
    "BENCH_TABLE_COLUMNS", "paths_over", "path_info", "column_unit", "wants_latency", "wants_bandwidth",
]


@dataclass(frozen=True)
class PathInfo:
    """One transfer path: its ``name``, whether its data lives in GPU memory (``gpu``), the wires
    the engine runs it over (``wires``; ``()`` when only the model covers it, ``("none",)`` for
    copies inside one machine), the history it stands for (``seed``), how its bytes leave the
    sender's buffer (``route``: ``host`` memory as is, a ``copy`` engine copy into host memory,
    the copy engine in ``chunks``, the ``hca`` reading GPU memory, the CPU through ``bar1``, a
    ``peer`` DMA, or ``host-staged`` between GPUs), what the machine needs for it (``needs``:
    ``gpu``, ``two-gpus``, ``rdma``, ``gdrcopy``; :mod:`gdrlab.hw.availability` checks each) and
    one line on what it does (``summary``)."""

    name: str
    gpu: bool
    wires: tuple[str, ...]
    seed: str
    route: str = "host"
    needs: tuple[str, ...] = ()
    summary: str = ""


#: The transfer paths, in the order of the engine's Path enum.
PATH_TABLE: tuple[PathInfo, ...] = (
    PathInfo("host", False, ("tcp", "verbs"), "baseline", "host", (), "host buffers over the wire"),
    PathInfo("staged", True, ("tcp", "verbs"), "pre-2010: D2H into a pinned bounce buffer, memcpy, wire", "copy",
             ("gpu",), "D2H into a pinned bounce buffer, CPU memcpy, wire"),
    PathInfo("shared", True, ("tcp", "verbs"), "GPUDirect 1.0 (2010): D2H into the wire's pinned buffer", "copy",
             ("gpu",), "D2H straight into the wire's pinned buffer"),
    PathInfo("pipelined", True, ("tcp", "verbs"), "MVAPICH2-GDR large messages: shared, in chunks", "chunks",
             ("gpu",), "shared, cut into overlapping chunks"),
    PathInfo("gdr", True, ("verbs",), "GPUDirect RDMA (2013): the HCA reads GPU memory", "hca", ("gpu", "rdma"),
             "the HCA reads and writes GPU memory"),
    PathInfo("gdrcopy", True, (), "MVAPICH2-GDR tiny messages: CPU copies through BAR1", "bar1", ("gpu", "gdrcopy"),
             "the CPU copies through the GPU's BAR1"),
    PathInfo("p2p", True, ("none",), "GPUDirect P2P (2011): peer DMA between GPUs", "peer", ("two-gpus",),
             "peer DMA between them (peer access checked per pair)"),
    PathInfo("p2p-staged", True, ("none",), "GPU to GPU through host memory", "host-staged", ("two-gpus",),
             "copies staged through host memory"),
)

PATHS: tuple[str, ...] = tuple(p.name for p in PATH_TABLE)
#: Paths that cross a network between two hosts (everything but the GPU-to-GPU copies).
NETWORK_PATHS: tuple[str, ...] = tuple(p.name for p in PATH_TABLE if "none" not in p.wires)
#: Paths whose buffers are in GPU memory on a network wire (need a usable GPU).
GPU_PATHS: tuple[str, ...] = tuple(p.name for p in PATH_TABLE if p.gpu and "none" not in p.wires)
#: Paths the engine's tcp/verbs wires run: the engine's Path enum, in its order.
ENGINE_PATHS: tuple[str, ...] = tuple(p.name for p in PATH_TABLE if p.wires and "none" not in p.wires)
#: GPU-to-GPU paths inside one machine.
P2P_PATHS: tuple[str, ...] = tuple(p.name for p in PATH_TABLE if "none" in p.wires)
#: Paths whose GPU data the copy engine moves into host memory before the wire (whole or in chunks).
COPY_PATHS: tuple[str, ...] = tuple(p.name for p in PATH_TABLE if p.route in ("copy", "chunks"))
#: Paths whose wire moves one host buffer per message (no chunks, no HCA reading GPU memory).
HOST_BUFFER_PATHS: tuple[str, ...] = tuple(p.name for p in PATH_TABLE if p.route in ("host", "copy", "bar1"))

#: Wires, in the order of the engine's Wire enum.
WIRES: tuple[str, ...] = ("tcp", "verbs")
#: Wires the engine drives through a library it loads at run time (UCX's libucp), outside the
#: engine's Wire enum: `gdrlab bench --wire` takes these too.
LIBRARY_WIRES: tuple[str, ...] = ("ucx",)
#: Test modes, in the order of the engine's Mode enum (its integer is the index here).
MODES: tuple[str, ...] = ("lat", "bw", "verify")
#: What ``bench(mode=...)`` accepts.
BENCH_MODES: tuple[str, ...] = ("lat", "bw", "both")
#: Where the GPU sits against the NIC (the model's topology placements), nearest first.
PLACEMENTS: tuple[str, ...] = ("same-switch", "same-host-bridge", "cross-socket")
#: Memory a buffer lives in, in the order of the engine's MemKind enum.
MEMORY_KINDS: tuple[str, ...] = ("pageable", "pinned", "device")
#: The host memory kinds (a copy's host side).
HOST_MEMORY_KINDS: tuple[str, ...] = tuple(k for k in MEMORY_KINDS if k != "device")
#: The memory kinds CUDA allocates (page-locked host memory and GPU memory): a buffer of one needs CUDA.
CUDA_MEMORY_KINDS: tuple[str, ...] = tuple(k for k in MEMORY_KINDS if k != "pageable")

DEFAULT_CHUNK_BYTES = 256 * 1024  # MVAPICH2-GDR's MV2_CUDA_BLOCK_SIZE
DEFAULT_PIPELINE_DEPTH = 4


def paths_over(wire: str) -> tuple[str, ...]:
    """The paths the engine runs over ``wire`` (``"tcp"``, ``"verbs"`` or ``"none"``)."""
    return tuple(p.name for p in PATH_TABLE if wire in p.wires)


def wants_latency(mode: str) -> bool:
    """Whether bench ``mode`` measures latency (``lat`` or ``both``)."""
    return mode != "bw"


def wants_bandwidth(mode: str) -> bool:
    """Whether bench ``mode`` measures bandwidth (``bw`` or ``both``)."""
    return mode != "lat"


def path_info(name: str) -> PathInfo:
    """The :class:`PathInfo` of ``name``; KeyError naming the valid paths otherwise."""
    for p in PATH_TABLE:
        if p.name == name:
            return p
    raise KeyError(f"unknown path {name!r}; valid: {', '.join(PATHS)}")


@dataclass(frozen=True)
class Column:
    """One result column: ``name`` (units in the name), ``unit`` and what it holds."""

    name: str
    unit: str
    meaning: str


# The columns of a bench row: name, unit ("-" for labels and flags), what it holds.
_BENCH_SCHEMA = """
path         -        transfer path (PATHS)
wire         -        wire the bytes crossed (WIRES), 'none' inside one machine
size         bytes    message size
iters        count    timed iterations (latency) or repetitions (bandwidth only)
lat_min_us   us       smallest one-way latency (half round trip, like perftest and OSU)
lat_p50_us   us       median one-way latency
lat_p99_us   us       99th percentile one-way latency
lat_mean_us  us       mean one-way latency
bw_gbps      GB/s     bandwidth at the median sample, 1e9 bytes per second
verified     -        the receiver checked the data pattern at the end of the size
chunk        bytes    pipelined chunk size (NaN for other paths)
depth        buffers  pipelined buffers in flight (NaN for other paths)
source       -        where the row came from: live, recorded or modelled (gdrlab.provenance.label)
"""

#: The columns of a bench row, for every wire, importer and plot.
BENCH_COLUMNS: tuple[Column, ...] = tuple(
    Column(name, "" if unit == "-" else unit, meaning)
    for name, unit, meaning in (line.split(None, 2) for line in _BENCH_SCHEMA.strip().splitlines()))

#: The columns the CLI prints as a table (DESIGN.md's CLI contract).
BENCH_TABLE_COLUMNS: tuple[str, ...] = ("path", "wire", "size", "iters", "lat_min_us", "lat_p50_us",
                                        "lat_p99_us", "bw_gbps", "verified")


def column_unit(name: str) -> str:
    """The unit of bench column ``name`` (``""`` for labels and flags)."""
    for c in BENCH_COLUMNS:
        if c.name == name:
            return c.unit
    raise KeyError(f"unknown result column {name!r}")
