"""GPU-initiated networking in the model (gdrlab.model.initiated): a CPU proxy thread against the
GPU ringing the NIC's doorbell, worked out by hand, and against the published figures' direction."""
from __future__ import annotations

import pytest

from gdrlab import model
from gdrlab.errors import InvalidArgument
from gdrlab.model import initiated as G

PROF = model.get_profile("hopper-ndr").with_overrides(nic_lat_us=0.6, gdr_extra_us=0.2, doorbell_us=0.1,
                                                      nic_wire_gbps=50, wire_eff=1.0, nic_pcie_gbps=63, pcie_eff=0.9)
PARAMS = {"gpu_enqueue_us": 1.0, "proxy_poll_us": 0.2, "proxy_msg_us": 0.25, "proxy_threads": 1,
          "gpu_post_us": 1.0, "gpu_doorbell_us": 0.3, "gpu_posters": 64, "nic_mops": 200}


def test_latency_by_hand():
    # proxy: enqueue 1 + half a poll 0.1 + CPU post 0.1 + NIC to NIC 0.6 + GPU memory 0.2 + 8 B / 50e3 B/us
    assert float(G.initiated_latency_us(PROF, "proxy", [8], **PARAMS)[0]) == pytest.approx(2.00016)
    # gpu: WQE 1 + doorbell 0.3 + WQE fetch 0.2 + the same put (0.6 + 0.2 + 0.00016)
    assert float(G.initiated_latency_us(PROF, "gpu", [8], **PARAMS)[0]) == pytest.approx(2.30016)


def test_rate_by_hand():
    # 8 B: wire 50e3 / 8 = 6250 M/s, NIC 200, proxy 1 / 0.25 = 4, GPU 64 / 1 = 64
    rate, limit = G.initiated_rate_mops(PROF, "proxy", [8, 4096], **PARAMS)
    assert rate[0] == pytest.approx(4.0) and limit[0] == "proxy thread"
    assert rate[1] == pytest.approx(4.0)                  # 4096 B: wire 12.2 M/s, the proxy still limits
    rate, limit = G.initiated_rate_mops(PROF, "gpu", [8, 4096], **PARAMS)
    assert rate[0] == pytest.approx(64.0) and limit[0] == "GPU posting"
    assert rate[1] == pytest.approx(50e3 / 4096) and limit[1] == "wire"
    # with more warps than the NIC can take, the NIC's message rate is the limit
    rate, limit = G.initiated_rate_mops(PROF, "gpu", [8], **{**PARAMS, "gpu_posters": 1000})
    assert rate[0] == pytest.approx(200.0) and limit[0] == "NIC message rate"


def test_the_shape_the_published_figures_have():
    """NVSHMEM's guide: one GPU-posted message is slower than a proxy's; the blog: up to 9.5x the
    proxy's throughput below 1 KiB. The model with its stated defaults: GPU latency higher at 8 B,
    rate between 5x and 20x at 8 B, and the same rate once the wire limits both (1 MiB)."""
    df = G.predict_initiated("hopper-ndr", [8, 1 << 20])
    row = {(r.initiator, r.size): r for r in df.itertuples()}
    assert row[("gpu", 8)].lat_us > row[("proxy", 8)].lat_us
    assert 5 < row[("gpu", 8)].mops / row[("proxy", 8)].mops < 20
    assert row[("gpu", 1 << 20)].mops == pytest.approx(row[("proxy", 1 << 20)].mops)
    prov = df.attrs["provenance"]
    assert prov["kind"] == "modelled" and prov["route"] == "gpu-initiated"
    assert set(prov["param_levels"].values()) <= {"published", "assumed"}
    for p in G.INITIATED_PARAMS.values():
        assert p.source and p.level in ("published", "assumed")


def test_no_nic_no_gpu_initiated_networking():
    with pytest.raises(InvalidArgument, match="no RDMA NIC") as exc:
        G.predict_initiated("h200-lab")
    assert "\n" not in str(exc.value)
    with pytest.raises(InvalidArgument, match="unknown GPU-initiated parameter"):
        G.initiated_params(warp_speed=9)
    with pytest.raises(InvalidArgument, match="must be positive"):
        G.initiated_params(proxy_msg_us=0)
