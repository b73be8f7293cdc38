"""GPU facts from NVML (through nvidia-ml-py): BAR1, PCIe link, NUMA node, NVLinks.

``import pynvml`` loads nothing; ``libnvidia-ml.so.1`` is opened by ``nvmlInit`` inside the
functions here, never at import of gdrlab.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

from .sysfs import norm_bus_id

__all__ = ["GpuList", "nvml_gpus", "nvlink_pairs"]


class GpuList(list):
    """A list of GPU dicts that also says why it may be empty (``reason``)."""

    def __init__(self, items: Iterable[dict] = (), reason: str = "") -> None:
        super().__init__(items)
        self.reason = reason


@contextlib.contextmanager
def _session() -> Iterator[ModuleType]:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        raise RuntimeError("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise RuntimeError(f"NVML did not start: {exc} (no NVIDIA driver, or libnvidia-ml.so.1 missing)") from None
    except OSError as exc:  # pragma: no cover - odd loader failures
        raise RuntimeError(f"NVML did not load: {exc}") from None
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _try(fn: Callable[..., Any], *args: Any, default: Any = None) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported and friends: the field is just unknown
        return default


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def nvml_gpus() -> GpuList:
    """Every GPU NVML sees: index, name, pci_bus_id, bar1_total_bytes, bar1_used_bytes, pcie_gen,
    pcie_width, pcie_max_gen, pcie_max_width, numa_node, uuid.

    Returns an empty :class:`GpuList` whose ``reason`` says why when NVML is absent.
    """
    try:
        with _session() as nv:
            out = GpuList(reason="")
            driver = _text(_try(nv.nvmlSystemGetDriverVersion))
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                pci = nv.nvmlDeviceGetPciInfo(h)
                bar1 = _try(nv.nvmlDeviceGetBAR1MemoryInfo, h)
                numa = _try(getattr(nv, "nvmlDeviceGetNumaNodeId", lambda _h: None), h)
                out.append({
                    "index": i,
                    "name": _text(_try(nv.nvmlDeviceGetName, h)),
                    "pci_bus_id": norm_bus_id(_text(pci.busId)),
                    "uuid": _text(_try(nv.nvmlDeviceGetUUID, h)),
                    "bar1_total_bytes": int(bar1.bar1Total) if bar1 else None,
                    "bar1_used_bytes": int(bar1.bar1Used) if bar1 else None,
                    "pcie_gen": _try(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    "pcie_width": _try(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
                    "pcie_max_gen": _try(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
                    "pcie_max_width": _try(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
                    "numa_node": numa if isinstance(numa, int) and numa >= 0 else None,
                    "driver_version": driver,
                })
            if not out:
                out.reason = "NVML found no GPU"
            return out
    except RuntimeError as exc:
        return GpuList(reason=str(exc))


def nvlink_pairs() -> tuple[dict[tuple[str, str], int], str]:
    """``({(bus_a, bus_b): links}, note)`` for GPU pairs joined by NVLink, as nvidia-smi counts.

    A GPU-to-GPU link counts once per pair; GPUs that reach NVSwitches get min(links into the
    switch fabric) with every other such GPU (NVML does not report switch-to-switch trunks).
    """
    try:
        with _session() as nv:
            n = nv.nvmlDeviceGetCount()
            buses = [norm_bus_id(_text(nv.nvmlDeviceGetPciInfo(nv.nvmlDeviceGetHandleByIndex(i)).busId))
                     for i in range(n)]
            pairs: dict[tuple[str, str], int] = {}
            to_switch: dict[str, int] = {}
            max_links = getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)
            for i in range(n):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                for link in range(max_links):
                    state = _try(nv.nvmlDeviceGetNvLinkState, h, link)
                    if state is None:
                        break
                    if state != 1:
                        continue
                    rp = _try(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
                    if rp is None:
                        continue
                    peer = norm_bus_id(_text(rp.busId))
                    if peer in buses:
                        if buses.index(peer) > i:
                            key = (buses[i], peer)
                            pairs[key] = pairs.get(key, 0) + 1
                    else:
                        get_type = getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
                        dtype = _try(get_type, h, link) if get_type else None
                        if dtype is not None and dtype != 2:  # 2: NVSwitch; 1 is a POWER CPU
                            continue
                        to_switch[buses[i]] = to_switch.get(buses[i], 0) + 1
            sw = sorted(to_switch)
            for x in range(len(sw)):
                for y in range(x + 1, len(sw)):
                    key = (sw[x], sw[y])
                    pairs[key] = pairs.get(key, 0) + min(to_switch[sw[x]], to_switch[sw[y]])
            return pairs, "NVLink counts from NVML (live)"
    except RuntimeError as exc:
        return {}, f"NVLink unknown: {exc}"
