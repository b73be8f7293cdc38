"""'Is this number normal?': a profile of this machine, and the model beside each measured row.

:func:`profile_from_machine` takes what ``gdrlab doctor`` reads, as a plain dict, so it works on
made-up machines as well as on this one::

    {"gpu_name": "NVIDIA H100 80GB HBM3", "pcie_gen": 3, "pcie_width": 8, "pcie_max_gen": 5,
     "pcie_max_width": 16, "nic_rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand",
     "nic_mtu": 4096, "gpu_numa": 0, "nic_numa": 1, "cpu": "Intel(R) Xeon(R) Platinum 8480+"}

Every key is optional; with no facts at all, :func:`machine_facts` reads them from this machine
(what ``gdrlab doctor`` reads, the NIC's NUMA node from sysfs, the CPU from /proc/cpuinfo). It starts from the nearest catalog profile (by GPU name), puts in the
links as they trained, the NIC's rate and link layer, the placement from the NUMA nodes and the
host class from the CPU name, and derives the scaling constants again (:mod:`.relations`).
:func:`explain_rows` then gives per measured row the model's prediction, the bottleneck and a
verdict against the model's stated uncertainty (25 %, docs/model.md's validation tolerance).
"""
from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgument
from ..vocab import COPY_PATHS, WIRES
from .profile import Profile, get_profile
from .core import NETWORK_PATHS, _resolve, as_sizes, check_path, evaluate_full
from .fit import _val, row_target
from .relations import LINK_LAYERS, pcie_gbps, rederive

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["profile_from_machine", "facts_from_doctor", "machine_facts", "explain_rows", "nearest_profile",
           "host_class_of", "UNCERTAINTY"]

#: The model's stated uncertainty: docs/model.md's validation tolerance.
UNCERTAINTY = 0.25

_NEAREST = (("GH200", "gh200"), ("B200", "b200-xdr"), ("H200", "hopper-ndr"), ("H100", "hopper-ndr"),
            ("A100", "a100-hdr"), ("L40S", "l40s-pcie"), ("V100", "volta-dgx1"), ("K40", "kepler-ivb-2014"),
            ("K20", "kepler-snb-2013"))
_HOSTS = ((r"grace|neoverse", "grace"), (r"epyc", "epyc"), (r"xeon.*\b(85\d\d|65\d\d)", "emerald-rapids"),
          (r"xeon.*\b(84\d\d|64\d\d|44\d\d|34\d\d|24\d\d)", "sapphire-rapids"),
          (r"e5-\d{4}\w* v2", "ivy-bridge"), (r"e5-\d{4}\w* v[34]", "broadwell"), (r"e5-\d{4}", "sandy-bridge"))


def nearest_profile(gpu_name: str | None) -> str:
    """The catalog profile whose GPU matches ``gpu_name`` (hopper-ndr when none does)."""
    up = (gpu_name or "").upper()
    return next((prof for key, prof in _NEAREST if key in up), "hopper-ndr")


def host_class_of(cpu: str | None, default: str) -> str:
    """The host class a CPU model name belongs to (``default`` when it is not recognised)."""
    low = (cpu or "").lower()
    return next((cls for pat, cls in _HOSTS if re.search(pat, low)), default)


def _rate_gbps(rate: Any) -> float | None:
    """A NIC rate in GB/s from sysfs text ("400 Gb/sec (4X NDR)") or a number of Gb/s."""
    if rate is None:
        return None
    if isinstance(rate, (int, float)):
        return float(rate) / 8
    m = re.match(r"\s*([\d.]+)\s*Gb", str(rate))
    return float(m.group(1)) / 8 if m else None


def profile_from_machine(facts: dict[str, Any] | None = None, *, device: int = 0) -> Profile:
    """A profile of the machine ``facts`` describe (see the module docstring for the keys); with no
    ``facts``, of this machine as :func:`machine_facts` reads it (GPU ``device``)."""
    if facts is None:
        facts = machine_facts(device)
    base_name = nearest_profile(facts.get("gpu_name"))
    base = get_profile(base_name)
    topo = copy.deepcopy(base.topology)
    host = host_class_of(facts.get("cpu"), topo.get("host_class", "sapphire-rapids"))
    values, sources = dict(base.params), dict(base.sources)
    notes: list[str] = []
    gen, width = facts.get("pcie_gen"), facts.get("pcie_width")
    if gen and width:
        values["gpu_pcie_gbps"] = pcie_gbps(int(gen), int(width))
        sources["gpu_pcie_gbps"] = f"this machine: GPU link trained at PCIe Gen{gen} x{width}"
        mg, mw = facts.get("pcie_max_gen") or gen, facts.get("pcie_max_width") or width
        if (int(mg), int(mw)) != (int(gen), int(width)):
            notes.append(f"PCIe link trained at Gen{gen} x{width}, max Gen{mg} x{mw}")
    devices = topo.setdefault("devices", {})
    rate = _rate_gbps(facts.get("nic_rate"))
    if rate is not None or facts.get("link_layer") is not None:
        ll = facts.get("link_layer") or "InfiniBand"
        if ll not in LINK_LAYERS:
            raise InvalidArgument(f"unknown link layer {ll!r}; valid: {', '.join(LINK_LAYERS)}")
        if rate is not None:
            values["nic_wire_gbps"] = rate
            sources["nic_wire_gbps"] = f"this machine: NIC port rate {facts.get('nic_rate')}"
        mtu = facts.get("nic_mtu")
        for d in devices.values():
            if d.get("kind") == "nic":
                d["link_layer"] = ll
                if mtu:
                    d["mtu"] = int(mtu)
                elif ll == "InfiniBand":
                    d.pop("mtu", None)
        if mtu and ll != "EFA" and int(mtu) < 4096:
            notes.append(f"RDMA MTU {int(mtu)} B: more headers per byte than at 4096 (check the interface MTU)")
    elif "nic_rate" in facts or facts.get("no_nic"):  # asked, and no RDMA NIC found
        topo["devices"] = {k: d for k, d in devices.items() if d.get("kind") != "nic"}
    placement = None
    gn, nn = facts.get("gpu_numa"), facts.get("nic_numa")
    if gn is not None and nn is not None:
        placement = "same-host-bridge" if gn == nn else "cross-socket"
        if gn != nn:
            notes.append(f"GPU on NUMA node {gn}, NIC on NUMA node {nn}: traffic crosses sockets")
    topo["host_class"] = host
    nic: dict[str, Any] = next((d for d in topo["devices"].values() if d.get("kind") == "nic"), {})
    values, sources = rederive(values, sources, host, nic.get("link_layer", "InfiniBand"), nic.get("mtu"))
    topo["machine_notes"] = notes
    desc = (f"This machine, modelled from {base_name} with its own links"
            + (f" ({'; '.join(notes)})" if notes else "") + f"; host class {host}.")
    return Profile("this-machine", desc, values, sources, topo, placement or base.placement,
                   f"{base_name}, with this machine's links (doctor facts)", level=base.level)


_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def facts_from_doctor(report: dict[str, Any], cpu: str | None = None, device: int = 0,
                      pci: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The facts :func:`profile_from_machine` takes, from a ``gdrlab doctor --json`` report (the
    GPU ``device``, the first active RDMA port, preferring one on the GPU's NUMA node) and the CPU
    model name. ``pci`` (``gdrlab.hw.pci_devices``) fills in what the report leaves out: the
    NIC's NUMA node and the GPU's maximum link when NVML did not give it."""
    by_bus = {d.get("pci_bus_id"): d for d in (pci or [])}
    facts: dict[str, Any] = {"cpu": cpu}
    gpus = [g for g in report.get("gpus", []) if g.get("index") == device] or report.get("gpus", [])[:1]
    if gpus:
        g = gpus[0]
        s = by_bus.get(g.get("pci_bus_id"), {})
        max_gen = g.get("pcie_max_gen") or _GEN_BY_GTS.get(s.get("max_link_gts"))  # type: ignore[arg-type]
        facts.update(gpu_name=g.get("name"), pcie_gen=g.get("pcie_gen"), pcie_width=g.get("pcie_width"),
                     pcie_max_gen=max_gen, pcie_max_width=g.get("pcie_max_width") or s.get("max_link_width"),
                     gpu_numa=g.get("numa_node"))
    ports = [(d, p) for d in report.get("rdma_devices", []) for p in d.get("ports", [])
             if (p.get("state") or "").upper() == "ACTIVE"]

    def numa(d: dict[str, Any]) -> Any:
        return d.get("numa_node") if d.get("numa_node") is not None else by_bus.get(d.get("pci_bus_id"), {}).get(
            "numa_node")

    if ports:
        near = [(d, p) for d, p in ports if facts.get("gpu_numa") is not None and numa(d) == facts["gpu_numa"]]
        d, p = (near or ports)[0]
        facts.update(nic_rate=p.get("rate"), link_layer=p.get("link_layer"), nic_numa=numa(d),
                     nic_mtu=p.get("active_mtu"))
    else:
        facts["no_nic"] = True
    return facts


def machine_facts(device: int = 0, root: str = "/") -> dict[str, Any]:
    """The facts of this machine (or of a recorded sysfs tree at ``root``): the doctor's report,
    the PCI devices' NUMA nodes and links, and the CPU model name from ``/proc/cpuinfo``."""
    import os

    from ..hw import discover, pci_devices

    cpu = None
    try:
        with open(os.path.join(root, "proc/cpuinfo")) as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), None)
    except OSError:
        pass
    return facts_from_doctor(discover(root, probe_libs=False), cpu, device, pci_devices(root))


def _causes(prof: Profile, row: dict, bottleneck: str) -> list[str]:
    causes = list(prof.topology.get("machine_notes", []))
    path = str(row.get("path", ""))
    if path == "host" or "cpu" in bottleneck or "thread" in bottleneck:
        causes.append("CPU busy or the process not bound to the NIC's NUMA node (numactl)")
    if str(row.get("wire", "")) == "tcp":
        causes.append("TCP stack: a slow or shared interface, or loopback")
    if path in COPY_PATHS and str(row.get("src_mem", "")) == "pageable":
        causes.append("pageable host memory (3-8x slower copies than pinned)")
    if path == "gdr":
        causes.append("ACS or the IOMMU sending peer traffic through the root complex")
    return causes or ["none known: measure again, check for other load"]


#: Provenance kinds of rows that are no measurement of the machine they would be compared with.
NOT_MEASUREMENTS = ("recorded", "modelled")


def explain_rows(df: pd.DataFrame | list[dict], profile: Profile | str | None = None) -> pd.DataFrame:
    """Measured rows with the model beside them (``profile``: this machine's,
    :func:`profile_from_machine`, when not given): ``model_lat_us``, ``model_bw_gbps``,
    ``bottleneck``, ``verdict`` (``normal`` within :data:`UNCERTAINTY`, ``low`` when slower,
    ``high`` when faster than modelled, ``not modelled``, ``not comparable`` for wire rows measured
    against a local peer over loopback and for rows whose provenance (``df.attrs``) says they are
    recorded or modelled data, no measurement of this machine) and ``likely_causes`` (for ``low``,
    and why a row is not comparable)."""
    import pandas as pd


    prof = get_profile(profile if profile is not None else profile_from_machine())
    rows = df.to_dict(orient="records") if hasattr(df, "to_dict") else [dict(r) for r in df]
    out = []
    for r in rows:
        add: dict[str, Any] = {"model_lat_us": None, "model_bw_gbps": None, "bottleneck": None,
                               "verdict": "not modelled", "likely_causes": ""}
        tgt = row_target(r)
        if tgt is not None and tgt[0] == "path":
            path, wire = tgt[1].split("/")
            try:
                p2, c, d = _resolve(prof, None, _val(r, "chunk"), _val(r, "depth"), wire or None, {})
                w = check_path(p2, path, (wire or None) if path in NETWORK_PATHS else None)
                lat, bw, neck = evaluate_full(p2, path, as_sizes([float(r["size"])]), wire=w, chunk=c, depth=d)
            except Exception as exc:  # a path this profile cannot run: say why, keep the row
                add["likely_causes"] = str(exc)
            else:
                add.update(model_lat_us=float(lat[0]), model_bw_gbps=float(bw[0]), bottleneck=str(neck[0]))
                add["verdict"] = _verdict(r, float(lat[0]), float(bw[0]))
                if add["verdict"] == "low":
                    add["likely_causes"] = "; ".join(_causes(prof, r, str(neck[0])))
        out.append({**r, **add})
    res = pd.DataFrame(out)
    prov = getattr(df, "attrs", {}).get("provenance") or {}
    peer = str(prov.get("peer", ""))
    if prov.get("kind") in NOT_MEASUREMENTS:
        # A recorded sweep (a lab's H200 data, sent from a laptop) says nothing about this machine.
        where = prov.get("hardware") or prov.get("profile")
        modelled = res["verdict"] != "not modelled"
        res.loc[modelled, "verdict"] = "not comparable"
        res.loc[modelled, "likely_causes"] = (f"{prov['kind']} data" + (f" ({str(where)[:120]})" if where else "")
                                              + ", not a measurement of this machine")
    elif peer.startswith("local") and "wire" in res.columns:
        # A local peer talks over loopback: no NIC, no wire of the kind the model describes. The
        # model's figures stay as a reference; a verdict against them would only say "low".
        over_wire = res["wire"].isin(list(WIRES)) & (res["verdict"] != "not modelled")
        res.loc[over_wire, "verdict"] = "not comparable"
        res.loc[over_wire, "likely_causes"] = ("local peer over loopback: the model is of a NIC between two "
                                               "hosts; measure against `gdrlab serve` on another host (--peer)")
    res.attrs["model_profile"] = prof.name
    return res


def _verdict(row: dict, lat: float, bw: float) -> str:
    worse = better = False
    m_lat, m_bw = row.get("lat_p50_us"), row.get("bw_gbps")  # NaN fails every comparison below
    if isinstance(m_lat, (int, float)) and m_lat == m_lat and m_lat > 0:
        worse |= m_lat > lat * (1 + UNCERTAINTY)
        better |= m_lat < lat * (1 - UNCERTAINTY)
    if isinstance(m_bw, (int, float)) and m_bw == m_bw and m_bw > 0:
        worse |= m_bw < bw * (1 - UNCERTAINTY)
        better |= m_bw > bw * (1 + UNCERTAINTY)
    return "low" if worse else ("high" if better else "normal")
