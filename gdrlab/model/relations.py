"""Constants that scale with the machine: relations from a profile's own links and host class.

Model v2 reused figures measured on one machine on every profile (a V100's 9.6 GB/s BAR1 write
rate, an H200's 38.2 GB/s staged peer copy, an H200's copy launch). Here each becomes a relation:
a share of the profile's own link, a share of its own copy rate, or a property of its host class,
and each relation says where its factor comes from and at which **level** it is known:
``measured`` (on a machine named in the source), ``published`` (a figure someone else measured),
``assumed`` (no figure: a stated guess). A profile may still pin a parameter it has a direct figure
for; :func:`complete` fills in only what the profile leaves out, and labels every value it derives
``relation: ...`` so that :func:`rederive` can redo it for another link (a machine's own profile).
"""
from __future__ import annotations

from typing import Any, NamedTuple

from ..errors import InvalidArgument

__all__ = ["HOST_CLASSES", "LINK_LAYERS", "HostFactor", "pcie_gbps", "framing_eff", "complete", "rederive",
           "DERIVED", "RELATION"]

RELATION = "relation: "


class HostFactor(NamedTuple):
    """One host-class property: its value, the source, and the level it is known at."""

    value: float
    source: str
    level: str


GDRCOPY = "gdrcopy README (V100, PCIe 3.0 x16: write 9.6 GB/s, read 0.53 GB/s, 0.09 us write at 1 B)"
GDRCOPY288 = ("NVIDIA/gdrcopy issue #288 (A100 80GB PCIe, Gen4 x16: copybw about 20 GB/s of 32); maintainers "
              "in #288 and #221: a CPU emits 32-64 B write TLPs, so stores reach a fixed share of the link")
AC922 = ("openucx/ucx issue #5218 (IBM AC922, V100 over NVLink 2 to POWER9, coherent: copybw write 38.1 GB/s, "
         "read 37.6 GB/s of 3 x 25 GB/s per direction)")
H200 = "measured on an NVIDIA H200, Sapphire Rapids host (kit's curriculum notes)"
NV2014 = "NVIDIA blog 'Benchmarking GPUDirect RDMA on Modern Server Platforms' (2014)"


def _f(v: float, src: str, level: str) -> HostFactor:
    return HostFactor(v, src, level)


_X86_WC = _f(0.61, f"{GDRCOPY}: 9.6 / 15.75 = 0.61; {GDRCOPY288}: 0.63", "published")
_X86_RD = _f(0.034, f"{GDRCOPY}: 0.53 / 15.75 = 0.034 (uncached loads; scaling with the link assumed)",
             "published")
_SPR_LAUNCH = {"h2d": _f(5.9, H200 + ": 8 B H2D 5.9 us", "measured"),
               "d2h": _f(6.5, H200 + ": 8 B D2H 6.5 us", "measured")}
_SPR_RAMP = {"ce_ramp_h2d_us": _f(3.0, "derived from " + H200 + ": 8 B 5.6 us, 8 KiB 8.2 us, 64 KiB 9.5 us",
                                  "measured"),
             "ce_ramp_d2h_us": _f(0.0, "derived from " + H200 + ": D2H shows no ramp", "measured"),
             "ce_ramp_bytes": _f(2048.0, "derived from " + H200, "measured")}
_NO_RAMP = {"ce_ramp_h2d_us": _f(0.0, "no measurement on this host class: no ramp modelled", "assumed"),
            "ce_ramp_d2h_us": _f(0.0, "no measurement on this host class: no ramp modelled", "assumed"),
            "ce_ramp_bytes": _f(65536.0, "unused while the ramps are 0", "assumed")}
_BAR1_STORE = _f(0.09, GDRCOPY + ": 0.09 us at 1 B (one host; other hosts differ, not modelled per host)",
                 "published")


def _host(wc: HostFactor, rd: HostFactor, launch: dict[str, HostFactor], ramp: dict[str, HostFactor],
          memcpy: HostFactor, gdr_extra: HostFactor, store: HostFactor = _BAR1_STORE) -> dict[str, HostFactor]:
    return {"wc_share": wc, "read_share": rd, "ce_launch_h2d_us": launch["h2d"], "ce_launch_d2h_us": launch["d2h"],
            **ramp, "cpu_memcpy_gbps": memcpy, "gdr_extra_us": gdr_extra, "gdrcopy_write_us": store}


def _both(v: float, src: str, level: str) -> dict[str, HostFactor]:
    return {"h2d": _f(v, src, level), "d2h": _f(v, src, level)}


_ASSUMED_LAUNCH = _both(6.0, "assumed like Sapphire Rapids' 5.9-6.5 us (no measurement on this host class)",
                        "assumed")
_PCIE_RTT = _f(0.2, "assumed: one extra PCIe read round trip inside a switch or root port (about 0.2 us)",
               "assumed")

#: Host classes: the CPU generation's effect on CPU stores and loads through BAR1, on copy launches
#: and on one core's memcpy.
HOST_CLASSES: dict[str, dict[str, HostFactor]] = {
    "sandy-bridge": _host(
        _f(0.40, "assumed: Sandy/Ivy Bridge emit write-combined stores to PCIe slower than Haswell on "
                 "(the issue's reading of published rates; no figure held here)", "assumed"),
        _X86_RD, _both(6.5, "kit curriculum: cudaMemcpy launch about 5-8 us; 6.5 makes staging total the "
                            "seed's 17-19 us", "published"), _NO_RAMP,
        _f(5.0, "assumed: one Sandy Bridge-EP core, about half of a 2023 core's 9.9 GB/s", "assumed"),
        _f(0.6, "derived: " + NV2014 + ": GDR 1.9 us GPU to GPU vs 1.3 us host to host", "published")),
    "ivy-bridge": _host(
        _f(0.40, "assumed: as Sandy Bridge (no figure held here)", "assumed"), _X86_RD,
        _both(8.0, NV2014 + ": cudaMemcpy about 8 us", "published"), _NO_RAMP,
        _f(5.5, "assumed: one Ivy Bridge-EP core", "assumed"),
        _f(0.5, "derived: " + NV2014 + ": GDR 1.7-1.9 us vs 1.3 us host to host", "published")),
    "broadwell": _host(_X86_WC, _X86_RD, _ASSUMED_LAUNCH, _NO_RAMP,
                       _f(6.0, "assumed: one Broadwell-EP core", "assumed"), _PCIE_RTT),
    "sapphire-rapids": _host(_X86_WC, _X86_RD, _SPR_LAUNCH, _SPR_RAMP,
                             _f(9.9, H200 + ": one-thread memcpy 9.9 GB/s", "measured"), _PCIE_RTT),
    "emerald-rapids": _host(_X86_WC, _X86_RD, _SPR_LAUNCH, _SPR_RAMP,
                            _f(9.9, "assumed like Sapphire Rapids (same core)", "assumed"), _PCIE_RTT),
    "epyc": _host(_X86_WC, _X86_RD, _ASSUMED_LAUNCH, _NO_RAMP,
                  _f(8.0, "assumed: one Zen 2-4 core", "assumed"), _PCIE_RTT),
    "grace": _host(
        _f(0.085, "assumed: one core's stores over a coherent link, bounded by the core; by analogy to "
                  + AC922 + ", one core's 38 GB/s, taken as 38 / 450 of C2C", "assumed"),
        _f(0.085, "assumed: one core's cached loads over a coherent link, as the write (" + AC922 + ")",
           "assumed"),
        _ASSUMED_LAUNCH, _NO_RAMP,
        _f(15.0, "assumed: one Neoverse V2 core with LPDDR5X", "assumed"), _PCIE_RTT),
}

#: Share of a pinned copy's rate that the driver's staging of a GPU-to-GPU copy reaches.
P2P_STAGED_SHARE = _f(0.69, "measured on a 2x H200 NVLink machine (kit's curriculum notes): peer access off, "
                            "38.2 GB/s at 256 MiB against 55.1 GB/s pinned copies: 0.69", "measured")
#: Pageable copies: the driver memcpys into its pinned buffers and DMAs from them, partly in
#: series: 1 / rate = 1 / (k x cpu_memcpy) + 1 / pinned rate, k per direction.
PAGEABLE_K = {"h2d": _f(2.97, "h200-lab's fit to recorded H200 pageable copies (steady 19.2 GB/s H2D, 55.4 "
                              "pinned, memcpy 9.9): 1/(1/19.2 - 1/55.4) / 9.9 = 2.97", "measured"),
              "d2h": _f(2.04, "h200-lab's fit (steady 14.8 GB/s D2H, 55.1 pinned, memcpy 9.9): "
                              "1/(1/14.8 - 1/55.1) / 9.9 = 2.04", "measured")}

#: Wire framing per link layer: payload MTU, per-packet header bytes on the wire and the share
#: taken by acknowledgements and flow control.
LINK_LAYERS: dict[str, dict[str, Any]] = {
    "InfiniBand": {"mtu": 4096, "header": 26, "ack": 0.02,
                   "source": "InfiniBand: LRH 8 + BTH 12 + ICRC 4 + VCRC 2 = 26 B per packet (IBTA spec vol. 1); "
                             "link-level credits and ACKs about 2% (assumed)"},
    "Ethernet": {"mtu": 4096, "header": 82, "ack": 0.02,
                 "source": "RoCE v2 (IBTA Annex A17): preamble+SFD 8, Ethernet 14, FCS 4, inter-frame gap 12, "
                           "IPv4 20, UDP 8, BTH 12, ICRC 4 = 82 B per packet at RoCE MTU 4096; ACKs about 2% "
                           "(assumed)"},
    "EFA": {"mtu": 8192, "header": 98, "ack": 0.03,
            "source": "AWS EFA SRD: 9001-byte jumbo frames (AWS EC2 docs), payload 8192 B assumed; Ethernet "
                      "framing 38 + IPv4 20 + SRD header about 40 B (assumed); SRD ACKs about 3% (assumed)"},
}


def pcie_gbps(gen: int, width: int) -> float:
    """Theoretical per-direction rate of a PCIe link in GB/s: GT/s x lanes x encoding / 8
    (8b/10b to Gen2, 128b/130b Gen3-5, Gen6 FLIT mode 242/256 of each 256-byte flit)."""
    table = {1: (2.5, 0.8), 2: (5.0, 0.8), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130), 5: (32.0, 128 / 130),
             6: (64.0, 242 / 256)}
    if gen not in table or width not in (1, 2, 4, 8, 16, 32):
        raise InvalidArgument(f"no PCIe Gen{gen} x{width} link")
    gts, enc = table[gen]
    return gts * width * enc / 8


def framing_eff(link_layer: str, mtu: float | None = None) -> float:
    """Share of a wire's data rate left for payload: mtu / (mtu + header) x (1 - ack share)."""
    if link_layer not in LINK_LAYERS:
        raise InvalidArgument(f"unknown link layer {link_layer!r}; valid: {', '.join(LINK_LAYERS)}")
    ll = LINK_LAYERS[link_layer]
    m = float(mtu or ll["mtu"])
    return m / (m + ll["header"]) * (1 - ll["ack"])


#: Parameters a relation fills in when a profile leaves them out.
DERIVED = ("gdrcopy_write_gbps", "gdrcopy_read_gbps", "p2p_staged_gbps", "pageable_h2d_gbps", "pageable_d2h_gbps",
           "ce_launch_h2d_us", "ce_launch_d2h_us", "ce_ramp_h2d_us", "ce_ramp_d2h_us", "ce_ramp_bytes",
           "cpu_memcpy_gbps", "gdr_extra_us", "gdrcopy_write_us", "wire_eff")


def _val(params: dict[str, Any], key: str) -> float:
    v = params[key]
    return float(v[0] if isinstance(v, tuple) else v)


def complete(params: dict[str, Any], host_class: str, link_layer: str = "InfiniBand",
             mtu: float | None = None) -> dict[str, tuple[float, str]]:
    """``params`` (name -> (value, source)) with every :data:`DERIVED` parameter it lacks filled in
    from the relations; returns a new dict. The link and copy rates must be there already."""
    if host_class not in HOST_CLASSES:
        raise InvalidArgument(f"unknown host class {host_class!r}; valid: {', '.join(HOST_CLASSES)}")
    h = HOST_CLASSES[host_class]
    out = dict(params)

    def put(key: str, value: float, src: str, level: str) -> None:
        if key not in out:
            out[key] = (float(value), f"{RELATION}{src} [{level}]")

    for key in ("ce_launch_h2d_us", "ce_launch_d2h_us", "ce_ramp_h2d_us", "ce_ramp_d2h_us", "ce_ramp_bytes",
                "cpu_memcpy_gbps", "gdr_extra_us", "gdrcopy_write_us"):
        put(key, h[key].value, f"host class {host_class}: {h[key].source}", h[key].level)
    link = _val(out, "gpu_pcie_gbps")
    for key, share in (("gdrcopy_write_gbps", h["wc_share"]), ("gdrcopy_read_gbps", h["read_share"])):
        put(key, link * share.value, f"{share.value:g} of the GPU link {link:g} GB/s (host class {host_class}; "
                                     f"{share.source})", share.level)
    pinned = {d: link * _val(out, "ce_eff" if d == "h2d" else "ce_eff_d2h") for d in ("h2d", "d2h")}
    put("p2p_staged_gbps", P2P_STAGED_SHARE.value * min(pinned.values()),
        f"{P2P_STAGED_SHARE.value:g} of the slower pinned copy rate {min(pinned.values()):.3g} GB/s "
        f"({P2P_STAGED_SHARE.source})", P2P_STAGED_SHARE.level)
    mc = _val(out, "cpu_memcpy_gbps")
    for d in ("h2d", "d2h"):
        k = PAGEABLE_K[d]
        put(f"pageable_{d}_gbps", 1.0 / (1.0 / (k.value * mc) + 1.0 / pinned[d]),
            f"1/(1/({k.value:g} x memcpy {mc:g}) + 1/pinned {pinned[d]:.3g}) GB/s ({k.source}; the form "
            "assumed)", k.level)
    ll = LINK_LAYERS.get(link_layer)
    if ll is None:
        raise InvalidArgument(f"unknown link layer {link_layer!r}; valid: {', '.join(LINK_LAYERS)}")
    put("wire_eff", framing_eff(link_layer, mtu), f"{link_layer} framing at MTU {int(mtu or ll['mtu'])}: "
                                                  f"{ll['source']}", "published")
    return out


def rederive(values: dict[str, float], sources: dict[str, str], host_class: str, link_layer: str = "InfiniBand",
             mtu: float | None = None) -> tuple[dict[str, float], dict[str, str]]:
    """Values and sources with every parameter a relation derived (source ``relation: ...``)
    derived again from the current links: what a machine's own profile needs after its link
    rates change."""
    keep = {k: (v, sources[k]) for k, v in values.items() if not sources.get(k, "").startswith(RELATION)}
    done = complete(keep, host_class, link_layer, mtu)
    return {k: v for k, (v, _) in done.items()}, {k: s for k, (_, s) in done.items()}
