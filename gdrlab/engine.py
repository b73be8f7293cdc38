"""The transfer engine from Python: the public facade of :mod:`gdrlab.transfer`.

Buffers, connections, local peers and the measurement loops (which run in C++ with the GIL
released, ``gdrlab._native``). Every DataFrame says it is live and where it was measured
(``attrs["provenance"]`` and a ``source`` column, see :mod:`gdrlab.provenance`). Labs, widgets
and outside scripts import from here; the code lives in the transfer package.
"""
from __future__ import annotations


from .errors import InvalidArgument, PeerTimeout, Unavailable
from .transfer.buffers import Buffer, cuda_status, export_dmabuf, gpus, machine, native
from .transfer.copies import copy_bench
from .transfer.driver import LIVE_DURATION_S, Sweep, bench
from .transfer.p2p import p2p_bench
from .transfer.peers import MAX_TIMEOUT_S, LocalPeer, ThreadPeer
from .transfer.peers import check_timeout as _check_timeout  # noqa: F401 - `gdrlab serve` imports it from here
from .transfer.peers import parse_peer as _parse_peer  # noqa: F401 - `gdrlab serve` imports it from here
from .transfer.stats import ProgressFn, result_columns, summarize
from .transfer.tcp_wire import Connection, connect
from .transfer.verbs_wire import VerbsConnection
from .vocab import DEFAULT_CHUNK_BYTES as DEFAULT_CHUNK
from .vocab import DEFAULT_PIPELINE_DEPTH as DEFAULT_DEPTH
from .vocab import path_info, paths_over

__all__ = [
    "TCP_PATHS", "GPU_PATHS", "Buffer", "Connection", "VerbsConnection", "LocalPeer", "ThreadPeer", "connect",
    "bench", "Sweep", "LIVE_DURATION_S", "copy_bench", "p2p_bench", "summarize", "result_columns", "cuda_status", "gpus", "machine",
    "export_dmabuf", "native", "ProgressFn", "DEFAULT_CHUNK", "DEFAULT_DEPTH", "MAX_TIMEOUT_S", "Unavailable",
    "InvalidArgument", "PeerTimeout",
]

#: Paths the tcp wire runs, and those of them whose buffers are in GPU memory.
TCP_PATHS: tuple[str, ...] = paths_over("tcp")
GPU_PATHS: tuple[str, ...] = tuple(p for p in TCP_PATHS if path_info(p).gpu)

