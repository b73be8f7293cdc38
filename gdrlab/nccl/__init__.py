"""NCCL, observed: run an all-reduce across the GPUs present and read which transport NCCL chose.

NCCL prints its decisions when ``NCCL_DEBUG=INFO`` is set: one ``Channel ... via TRANSPORT`` line
per connection (``P2P/CUMEM``, ``P2P/IPC``, ``P2P/direct pointer``, ``SHM/direct/direct``,
``NET/IB/0/GDRDMA``, ``NET/Socket/0``) and the facts behind them (``NET/IB : No device found.``,
``GPU Direct RDMA Disabled for HCA 0 'eth0'``, ``NCCL_P2P_DISABLE set by environment to 1``, the
topology paths it computed). :func:`parse_log` turns a log into data; :func:`run_allreduce` starts
one process per GPU (PyTorch's ``torch.distributed``, else CuPy's ``cupy.cuda.nccl``), captures
the log and measures bus bandwidth as nccl-tests defines it for all-reduce:
``algbw = bytes / time``, ``busbw = algbw * 2 (n - 1) / n``.

Three real logs from two NVLinked H200s ship as recorded data (:func:`recorded_logs`,
:func:`recorded_summary`); excerpts of public logs with InfiniBand GDR decisions ship as
:func:`published_logs`. NVLink multicast (NVLS) is always off in the runs started here.
"""
from __future__ import annotations

from .log import (
                  bus_bandwidth,
                  classify_via,
                  explain,
                  format_result_line,
                  parse_log,
                  path_type_name,
                  plugin_logs,
                  published_logs,
                  recorded_logs,
                  recorded_summary,
)
from .run import (
                  COMPARE_CONFIGS,
                  DEFAULT_SIZES,
                  DISABLE_ENV,
                  backend,
                  compare,
                  nccl_env,
                  run_allreduce,
)

__all__ = [
    "DISABLE_ENV", "COMPARE_CONFIGS", "DEFAULT_SIZES", "bus_bandwidth", "classify_via", "parse_log",
    "explain", "recorded_logs", "recorded_summary", "backend", "nccl_env", "run_allreduce", "compare",
    "format_result_line", "published_logs", "path_type_name", "plugin_logs",
]
