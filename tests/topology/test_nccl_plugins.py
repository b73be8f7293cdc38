"""GIN (NCCL 2.28+) and AWS OFI plugin lines in NCCL logs, read from the shipped excerpts of public
logs (gdrlab/data/nccl/plugins/, each cited in its README) and from lines in the formats NCCL's and
the plugin's source print (NVIDIA/nccl src/plugin/gin.cc @ v2.30.7-1, src/gin/gin_host.cc;
aws/aws-ofi-nccl src/nccl_ofi_net.cpp, src/nccl_ofi_ofiutils.cpp)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gdrlab import nccl

EXCERPTS = {"nccl-issue-2397-gin-gdaki", "ofi-issue-161-efa-no-hmem", "nccl-issue-1597-efa-p5en",
            "ofi-issue-715-efa-simple-proto", "nccl-issue-229-ofi-tcp"}


def _parse(name: str) -> dict:
    return nccl.parse_log(nccl.plugin_logs()[name].read_text())


def test_every_excerpt_is_shipped_and_cited():
    logs = nccl.plugin_logs()
    assert set(logs) == EXCERPTS
    readme = (next(iter(logs.values())).parent / "README.md").read_text()
    for name in logs:
        row = next(line for line in readme.splitlines() if f"`{name}.log`" in line)
        assert "https://github.com/" in row and "/issues/" in row


def test_gin_gdaki_excerpt():
    p = _parse("nccl-issue-2397-gin-gdaki")
    assert p["gin"] == {"plugin": "GIN_IB_GDAKI", "rma_plugin": "GIN_IB_PROXY", "mode": "GDAKI", "type": None,
                        "external": False, "gdrcopy": None, "errors": []}
    assert p["ofi"] is None and p["network"] == "IB"
    text = "\n".join(nccl.explain(p))
    assert "GIN_IB_GDAKI, GDAKI mode" in text and "rings the NIC's doorbell" in text


def test_gin_line_of_2_30_7_names_the_type():
    p = nccl.parse_log("h:1:1 [0] NCCL INFO GIN/Plugin: Assigned plugin GIN_IB_PROXY type 2 to comm")
    assert (p["gin"]["plugin"], p["gin"]["type"], p["gin"]["mode"]) == ("GIN_IB_PROXY", "2", "proxy")
    p = nccl.parse_log("h:1:1 [0] NCCL INFO GIN/Plugin: Assigned plugin SOME_VENDOR_GIN type 3 to comm")
    assert p["gin"]["mode"] == "GDAKI"  # the type number decides, not the name


def test_gin_warnings_are_explained():
    p = nccl.parse_log("h:1:1 [0] some/file.cc:76 NCCL WARN No GIN-capable devices found.")
    assert p["gin"]["errors"] == ["No GIN-capable devices found."]
    assert any("RDMA NIC" in r["meaning"] for r in p["summary"]["reasons"])
    assert p["warnings"] == ["No GIN-capable devices found."]


def test_a_log_without_plugin_lines_has_none():
    recorded = nccl.parse_log(nccl.recorded_logs()["h200x2-nvlink-default"].read_text())
    assert recorded["gin"] is None and recorded["ofi"] is None


def test_efa_device_without_rdma_has_no_gdr():
    p = _parse("ofi-issue-161-efa-no-hmem")
    ofi = p["ofi"]
    assert (ofi["plugin_version"], ofi["provider"], ofi["gdr"]) == ("1.3.0aws", "efa", False)
    assert ofi["env"] == {"FI_EFA_FORK_SAFE": "1"}
    assert p["version"] == "2.10.3+cuda11.3"  # rank 0's plain "NCCL version" line
    assert "GPUDirect RDMA not used" in "\n".join(nccl.explain(p))


def test_p5en_excerpt_counts_nics_and_leaves_gdr_open():
    ofi = _parse("nccl-issue-1597-efa-p5en")["ofi"]
    assert (ofi["provider"], ofi["nics"], ofi["dmabuf"], ofi["global_registrations"]) == ("efa", 16, False, True)
    assert ofi["nic_groups"] == 9 and ofi["gdr"] is None  # dma-buf off does not say GDR is off
    assert ofi["env"]["NCCL_TOPO_FILE"] == "/proc/self/fd/150"


def test_simple_protocol_excerpt():
    p = _parse("ofi-issue-715-efa-simple-proto")
    assert (p["ofi"]["provider"], p["ofi"]["nics"], p["ofi"]["gdr"]) == ("efa", 4, None)
    reasons = {r["message"]: r["meaning"] for r in p["summary"]["reasons"]}
    assert "128-byte" in reasons['NET/OFI Setting NCCL_PROTO to "simple"']
    assert "in order" in reasons["NET/OFI Setting FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES not supported."]


def test_tcp_provider_is_no_gdr():
    p = _parse("nccl-issue-229-ofi-tcp")
    assert (p["ofi"]["provider"], p["ofi"]["gdr"], p["version"]) == ("tcp;ofi_rxm", False, "2.4.6+cuda10.0")


@pytest.mark.parametrize("lines, gdr, key, value", [
    (["NET/OFI Support for DMA-BUF registrations: true"], True, "dmabuf", True),
    (["NET/OFI Could not disable CUDA API usage for HMEM, disabling GDR"], False, "gdr", False),
    (["NET/OFI Support for DMA-BUF registrations: true",  # a line saying off wins
      "NET/OFI Need to force simple protocol: GDR not supported"], False, "dmabuf", True),
    (["NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)"], None, "fabric", "efa-direct"),
    (["NET/OFI Using Libfabric version 1.22", "NET/OFI Using transport protocol RDMA"], None, "protocol", "RDMA"),
    (["NET/OFI Setting FI_EFA_USE_DEVICE_RDMA environment variable to 1"], True, "env",
     {"FI_EFA_USE_DEVICE_RDMA": "1"}),
])
def test_ofi_lines_in_the_plugin_formats(lines, gdr, key, value):
    p = nccl.parse_log("\n".join(f"h:1:1 [0] NCCL INFO {line}" for line in lines))
    assert p["ofi"]["gdr"] is gdr and p["ofi"][key] == value
    assert all(r["meaning"] for r in p["summary"]["reasons"])


def test_gdrdma_channel_over_libfabric_settles_gdr():
    p = nccl.parse_log("\n".join([
        "h:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/AWS Libfabric/0/GDRDMA",
    ]))
    assert p["ofi"]["gdr"] is True and p["connections"][0]["transport"] == "NET/AWS Libfabric/GDRDMA"


def _gdrlab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gdrlab", *args], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])


def test_cli_parses_an_excerpt_by_name_and_lists_them():
    proc = _gdrlab("nccl", "parse", "ofi-issue-161-efa-no-hmem", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ofi"]["gdr"] is False and "aws/aws-ofi-nccl issue #161" in doc["provenance"]["hardware"]
    listed = json.loads(_gdrlab("nccl", "recorded", "--json").stdout)
    assert {p["name"] for p in listed["plugin_excerpts"]} == EXCERPTS
    bad = _gdrlab("nccl", "parse", "no-such-log")
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "ofi-issue-715" in bad.stderr


def test_trace_lines_of_the_provider_search():
    on = nccl.parse_log("h:1:1 [0] NCCL TRACE NET/OFI Using Libfabric 1.6 API, with GPUDirect RDMA support")
    assert on["ofi"]["gdr"] is True and on["ofi"]["libfabric_api"] == "1.6"
    open_ = nccl.parse_log("h:1:1 [0] NCCL TRACE NET/OFI Using Libfabric 1.18 API, with GPUDirect RDMA support")
    assert open_["ofi"]["gdr"] is None  # 1.18: settled only when an endpoint turns CUDA calls off
    off = nccl.parse_log("h:1:1 [0] NCCL TRACE NET/OFI Could not find any optimal provider supporting GPUDirect RDMA")
    assert off["ofi"]["gdr"] is False
