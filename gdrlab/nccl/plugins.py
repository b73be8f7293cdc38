"""NCCL log lines that come from beside NCCL's own IB transport: GPU-Initiated Networking (GIN,
NCCL 2.28 and later) and the AWS OFI plugin (aws-ofi-nccl: NCCL over libfabric, EFA on AWS).

Each reader takes one message (the text after ``NCCL INFO`` / ``NCCL WARN``) and, when it knows the
line, records a fact in ``out["gin"]`` or ``out["ofi"]`` and returns ``(message, meaning)`` for the
reasons list; otherwise None. The lines are those NCCL and the plugin print, read from their
source (NVIDIA/nccl src/plugin/net.cc, src/plugin/gin.cc, src/gin/gin_host*.cc at v2.28.9-1 to
v2.30.7-1; aws/aws-ofi-nccl src/nccl_ofi_net.cpp, src/nccl_ofi_ofiutils.cpp, src/platform-aws.cpp)
and checked against users' logs (``gdrlab/data/nccl/plugins/``). Every match is a prefix test or
a split: linear in the line.
"""
from __future__ import annotations

from . import versions

__all__ = ["new_gin", "new_ofi", "read_gin", "read_ofi", "read_libfabric", "GIN_TYPES", "OFI_ENV_MEANING"]

# NCCL_GIN_TYPE / the plugin's netDeviceType (src/include/nccl_device/net_device.h @ v2.30.7-1)
GIN_TYPES = {"2": "proxy", "3": "GDAKI"}
_GIN_PLUGIN_MODE = {"GIN_IB_GDAKI": "GDAKI", "GIN_IB_PROXY": "proxy"}
_MODE_MEANING = {
    "GDAKI": ("the GPU itself writes the work request and rings the NIC's doorbell (GPUDirect Async, "
              "kernel-initiated: no CPU thread on the data path); needs an RDMA NIC and GPUDirect RDMA"),
    "proxy": ("a CPU proxy thread posts the RDMA operations the GPU kernel queued for it (GPU-initiated "
              "API, CPU-driven NIC); the data still moves by GPUDirect RDMA where the NIC can reach GPU memory"),
}

OFI_ENV_MEANING = {
    "FI_EFA_USE_DEVICE_RDMA": ("libfabric's EFA provider uses the device's RDMA read (and write) to move "
                               "data: needed for GPUDirect RDMA on EFA; by default on where the EFA device "
                               "supports RDMA, off on the first EFA device generations (libfabric's fi_efa(7))"),
    "FI_EFA_FORK_SAFE": "libfabric keeps registered memory usable across fork() (madvise DONTFORK)",
    "FI_PROVIDER": "which libfabric provider to use (efa on AWS)",
    "NCCL_PROTO": "NCCL's protocols (Simple, LL, LL128) the plugin leaves NCCL",
    "NCCL_TOPO_FILE": ("the topology file the plugin wrote so that NCCL pairs each GPU with the EFA "
                       "devices under its PCIe switch"),
}


def new_gin() -> dict:
    return {"plugin": None, "rma_plugin": None, "mode": None, "type": None, "external": None,
            "gdrcopy": None, "errors": []}


def new_ofi() -> dict:
    return {"plugin_version": None, "libfabric_api": None, "provider": None, "fabric": None, "nics": None,
            "protocol": None, "dmabuf": None, "global_registrations": None, "gdr": None, "gdr_evidence": [],
            "env": {}, "nic_groups": 0}


def _gdr(ofi: dict, value: bool, why: str) -> None:
    # a line saying GDR is off wins over one saying it could be on
    if ofi["gdr"] is not False:
        ofi["gdr"] = value
    if why not in ofi["gdr_evidence"]:
        ofi["gdr_evidence"].append(why)


def read_gin(gin: dict, body: str) -> tuple[str, str] | None:
    """One NCCL message about GIN (NCCL 2.28 to 2.30)."""
    if body.startswith("Assigned GIN plugin ") and body.endswith(" to comm"):
        name = body[len("Assigned GIN plugin "):-len(" to comm")].strip()
        return _gin_plugin(gin, name, None, body)
    if body.startswith("GIN/Plugin: Assigned plugin ") and body.endswith(" to comm"):  # 2.30.7
        name, _, typ = body[len("GIN/Plugin: Assigned plugin "):-len(" to comm")].rpartition(" type ")
        return _gin_plugin(gin, name.strip(), typ.strip(), body)
    if body.startswith("Assigned RMA plugin ") and body.endswith(" to comm"):
        name = body[len("Assigned RMA plugin "):-len(" to comm")].strip()
        gin["rma_plugin"] = name
        mode = _GIN_PLUGIN_MODE.get(name)
        how = f" ({mode} mode: {_MODE_MEANING[mode].split(' (')[0]})" if mode else ""
        return body, (f"NCCL's one-sided (RMA) operations of this communicator go through {name}{how}; "
                      f"NCCL {_rma_versions()} log this line")
    if body.startswith("GIN/Plugin: Could not find: "):
        gin["external"] = False
        return body, ("no external GIN plugin (libnccl-gin.so) installed: NCCL uses its own GIN backends over "
                      "its IB transport")
    if body.startswith(("GIN/Plugin: Loaded gin plugin ", "NET/Plugin: Loaded gin plugin ",
                        "GIN/Plugin: Successfully loaded external plugin ")):
        gin["external"] = True
        return body, "an external GIN plugin was loaded (a network vendor's, e.g. aws-ofi-nccl's GIN over EFA)"
    if body.startswith("GIN Proxy will not be using GDRCopy"):
        gin["gdrcopy"] = False
        return body, ("GIN's CPU proxy cannot map GPU memory through gdrcopy, so it reads the GPU's queue and "
                      "writes signals with CUDA copies: slower small-message signalling")
    if body.startswith("Compute Capability (") and "to enable GIN" in body:
        gin["errors"].append(body)
        return body, "this GPU is too old for GIN (it needs Volta, compute capability 7.0, or newer)"
    for text, meaning in _GIN_WARN.items():
        if body.startswith(text):
            gin["errors"].append(body)
            return body, meaning
    return None


_GIN_WARN = {
    "GIN not supported.": "NCCL asked for GIN on a communicator whose network plugin has no GIN support",
    "GIN is disabled.": "GIN was requested while NCCL_GIN_ENABLE=0 turns it off",
    "No GIN-capable devices found.": ("no NIC that GIN can drive (GIN needs an RDMA NIC whose plugin offers GIN: "
                                      "NCCL's IB transport or a vendor's plugin); TCP networks cannot"),
    "GIN-capable device type mismatch.": "the ranks found different GIN types (proxy on some, GDAKI on others)",
    "User requested GIN but not all ranks in the communicator support GIN": (
        "some rank has no GIN-capable NIC, so a device communicator with GIN cannot be built"),
}


def _rma_versions() -> str:
    """The releases that print "Assigned RMA plugin", from the version table."""
    have = [v for v in versions.known_versions() if (versions.facts(v)["gin_assign_line"] or ("", False))[1]]
    return f"{versions.format_version(have[0])} to {versions.format_version(have[-1])}" if have else "no release"


def _gin_plugin(gin: dict, name: str, typ: str | None, body: str) -> tuple[str, str]:
    gin["plugin"] = name
    gin["type"] = typ
    mode = GIN_TYPES.get(typ or "") or _GIN_PLUGIN_MODE.get(name)
    gin["mode"] = mode
    how = _MODE_MEANING.get(mode or "", "a GIN backend this reader does not know")
    return body, (f"GPU-Initiated Networking: device kernels of this communicator reach other nodes through "
                  f"{name} ({mode or 'unknown mode'}): {how}. NCCL_GIN_TYPE=2 forces proxy, 3 GDAKI")


# Plugin lines whose meaning is fixed: (start of the message, what it says of GPUDirect RDMA: False
# when the line turns it off, None when it says nothing of it, the meaning for the reasons list).
_OFI_FIXED: tuple[tuple[str, bool | None, str], ...] = (
    ("Could not find any optimal provider supporting GPUDirect RDMA", False,
     "no libfabric provider here takes GPU memory: GPU data is staged through host memory"),
    ("Could not disable CUDA API usage for HMEM, disabling GDR", False,
     "libfabric could not promise to stay out of CUDA, so the plugin turned GPUDirect RDMA off: "
     "GPU data is staged through host memory"),
    ("GDR disabled on GDR-supported instance type", False,
     "this instance type supports GPUDirect RDMA over EFA, but it is off (check "
     "FI_EFA_USE_DEVICE_RDMA and the EFA driver): GPU data is staged through host memory"),
    ("Need to force simple protocol: GDR not supported", False,
     "the provider cannot reach GPU memory (no GPUDirect RDMA), so the plugin keeps NCCL to its "
     "Simple protocol: GPU data is staged through host memory"),
    ("Setting NCCL_PROTO to ", None,
     "the plugin limited NCCL to its Simple protocol (no LL, LL128): the libfabric endpoint "
     "cannot promise the 128-byte in-order aligned writes those protocols rely on"),
    ("Forcing AWS OFI ndev ", None,
     "the plugin tells NCCL to use this many network devices (a setting for this instance type)"),
    ("Skipping NCCL_PROTO checks on P5en + RDMA", None,
     "on p5en with the rdma protocol the plugin leaves NCCL all its protocols: EFA's RDMA writes are "
     "not split into segments there, so LL and LL128 stay safe"),
    ("Unexpected number of remote rails", None,
     "the two sides of a connection see a different number of EFA rails (devices per GPU): "
     "the plugin's multi-rail striping needs the same layout on both ends"),
)


def read_ofi(ofi: dict, body: str) -> tuple[str, str] | None:
    """One message of the AWS OFI plugin (``NET/OFI ...``) or about it."""
    if body.startswith(("Using network AWS Libfabric", "Using network Libfabric")):
        return body, ("NCCL's network is the aws-ofi-nccl plugin over libfabric (EFA on AWS): it, not NCCL's IB "
                      "transport, decides whether GPU memory goes to the NIC directly")
    if body.startswith("NET/Plugin: Loaded net plugin Libfabric"):
        return body, "the aws-ofi-nccl network plugin (libnccl-net.so) is loaded"
    if not body.startswith("NET/OFI "):
        return None
    msg = body[len("NET/OFI "):].strip()
    for prefix, gdr, meaning in _OFI_FIXED:
        if msg.startswith(prefix):
            if gdr is not None:
                _gdr(ofi, gdr, body)
            return body, meaning
    if msg.startswith(("Using aws-ofi-nccl ", "Initializing aws-ofi-nccl ")):
        ofi["plugin_version"] = msg.split(" ", 2)[2].strip() if msg.count(" ") >= 2 else None
        return body, f"aws-ofi-nccl version {ofi['plugin_version']}"
    if msg.startswith("Using Libfabric version "):
        ofi["libfabric_api"] = msg[len("Using Libfabric version "):].strip()
        return body, (f"the plugin talks to libfabric {ofi['libfabric_api']}: with 1.18 or later the EFA provider "
                      "can be told not to call CUDA itself, which the plugin needs before it hands GPU memory over")
    if msg.startswith("Using Libfabric ") and msg.endswith(" support") and " API, with " in msg:
        # TRACE builds: "Using Libfabric 1.18 API, with GPUDirect RDMA support" (1.20: "DMA-BUF support")
        api = msg[len("Using Libfabric "):].split(" ", 1)[0]
        ofi["libfabric_api"] = ofi["libfabric_api"] or api
        if api == "1.6":
            _gdr(ofi, True, body)
            return body, "a provider with FI_HMEM (GPU memory) was found through the libfabric 1.6 API: GDR on"
        return body, (f"a provider with FI_HMEM (GPU memory) was found through the libfabric {api} API; whether GDR "
                      "is used is settled once an endpoint agrees to stay out of CUDA")
    if msg.startswith(("Selected Provider is ", "Selected provider is ")):
        return body, _provider(ofi, msg[len("Selected Provider is "):])
    if msg.startswith("Using transport protocol "):
        ofi["protocol"] = msg[len("Using transport protocol "):].split()[0]
        what = ("RDMA writes (the rdma protocol: one message striped over several EFA rails)"
                if ofi["protocol"].upper() == "RDMA" else "libfabric's tagged send/receive (the sendrecv protocol)")
        return body, f"the plugin moves data with {what}"
    if msg.startswith("Support for DMA-BUF registrations: "):
        ofi["dmabuf"] = msg.rsplit(" ", 1)[-1] == "true"
        if ofi["dmabuf"]:
            _gdr(ofi, True, body)
            return body, ("GPU memory is registered with the EFA device through dma-buf, which the plugin offers "
                          "only when GPUDirect RDMA works: the NIC reads and writes GPU memory")
        return body, ("no dma-buf registration (old kernel, driver or libfabric, or no GDR): GPU memory, if used "
                      "directly, is registered through the peer-memory path instead")
    if msg.startswith(("Support for global registrations: ", "Global registrations supported")):
        ofi["global_registrations"] = not msg.endswith("false")
        return body, "whether one memory registration serves every connection of the process"
    if msg.startswith("Setting ") and " environment variable to " in msg:
        var, _, value = msg[len("Setting "):].partition(" environment variable to ")
        ofi["env"][var.strip()] = value.strip()
        meaning = OFI_ENV_MEANING.get(var.strip(), "set by the plugin for this platform")
        if var.strip() == "FI_EFA_USE_DEVICE_RDMA":
            _gdr(ofi, value.strip() not in ("0", "false"), body)
        return body, f"the plugin set {var.strip()}={value.strip()}: {meaning}"
    if msg.startswith("Setting FI_OPT_") and msg.endswith(" not supported."):
        return body, ("the libfabric endpoint does not offer this ordering guarantee (128-byte aligned writes "
                      "arriving in order), which NCCL's LL and LL128 protocols need")
    if msg.startswith("NIC group "):
        ofi["nic_groups"] += 1
        return None  # one per EFA device: counted, not repeated as a reason
    return None


def _provider(ofi: dict, rest: str) -> str:
    """``efa (found 16 nics)``, ``efa, fabric is efa-direct (found 4 nics)`` or ``tcp;ofi_rxm``."""
    head, _, count = rest.partition(" (found ")
    name, _, fabric = head.partition(", fabric is ")
    ofi["provider"] = name.strip()
    ofi["fabric"] = fabric.strip() or None
    nics = count.split(" ", 1)[0]
    ofi["nics"] = int(nics) if nics.isdecimal() and len(nics) < 6 else None
    found = f" with {ofi['nics']} NICs" if ofi["nics"] is not None else ""
    if ofi["provider"].split(";")[0] == "efa":
        return (f"libfabric's EFA provider{found}: EFA's SRD transport (reliable, multipath, delivery "
                "out of order, no queue pair per peer); GPUDirect RDMA depends on the device's RDMA support")
    _gdr(ofi, False, f"provider {ofi['provider']}")
    return (f"libfabric provider {ofi['provider']}{found}, not EFA: a socket-based provider, so no GPUDirect RDMA "
            "(GPU data is staged through host memory)")


def read_libfabric(ofi: dict, line: str) -> tuple[str, str] | None:
    """A line libfabric itself printed (``libfabric:PID:TIME:prov:subsys:func():LINE<warn> text``)."""
    at = line.find("> ")
    if not line.startswith("libfabric:") or at < 0:
        return None
    text = line[at + 2:].strip()
    if text.startswith("FI_HMEM capability requires RDMA"):
        _gdr(ofi, False, text)
        return text, ("libfabric (EFA provider): this EFA device has no RDMA read, so it cannot take GPU "
                      "memory (FI_HMEM): no GPUDirect RDMA, GPU data is staged through host memory")
    if "provider efa output empty list" in text:
        return text, "libfabric found no usable EFA device for the requested capabilities"
    return None
