"""V13: routed InfiniBand, as NCCL's net_ib does it. A GID is | 10 bits fixed | 22 bits 0 |
16-bit FLID | 16-bit local subnet prefix | 64-bit EUI |: subnets are compared on the local prefix
(bytes 6-7), across subnets the packet goes to the peer's FLID (the router-forwardable LID) with a
GRH, and each port offers the GID at NCCL_IB_ROUTABLE_FLID_GID_INDEX (default 1) where it carries a
FLID. Before: subnets were compared on all 8 prefix bytes (two FLID GIDs of one subnet differ
there), dlid stayed the remote LID, and GID 0 was always sent. Whether a real router forwards the
FLID-addressed packet only a routed fabric can show."""
from __future__ import annotations

import pytest

from gdrlab import _native
from test_verbs_cluster import RUN_HOST, _run

V = _native.verbs


def _gid(flid: int, subnet: int, eui: int) -> bytes:
    return bytes.fromhex("fec00000") + flid.to_bytes(2, "big") + subnet.to_bytes(2, "big") + eui.to_bytes(8, "big")


def _conn(gid: bytes) -> dict:
    return {"qpn": 0x123, "psn": 7, "lid": 5, "link_layer": 1, "mtu": 5, "gid": gid, "gid_index": 1,
            "roce_version": 0, "rkey": 1, "addr": 2, "length": 3}


def test_other_subnet_is_addressed_to_the_peers_flid():
    mine = _gid(0x0041, 0x0001, 1)
    a = V.qp_rtr_attrs(1, 1, 5, 1, _conn(_gid(0x0042, 0x0002, 2)), local_gid=mine)["ah_attr"]
    assert (a["is_global"], a["dlid"], a["sgid_index"], a["hop_limit"]) == (1, 0x42, 1, 255), a


def test_same_local_subnet_with_different_flids_needs_no_grh():
    # the 8-byte prefixes differ (each port's FLID), the local subnets do not: plain LID routing
    a = V.qp_rtr_attrs(1, 1, 5, 1, _conn(_gid(0x0042, 0x0001, 2)), local_gid=_gid(0x0041, 0x0001, 1))["ah_attr"]
    assert (a["is_global"], a["dlid"]) == (0, 5), a


def test_other_subnet_without_a_flid_keeps_the_lid():
    a = V.qp_rtr_attrs(1, 1, 5, 0, _conn(_gid(0, 0x0002, 2)), local_gid=_gid(0, 0x0001, 1))["ah_attr"]
    assert (a["is_global"], a["dlid"]) == (1, 5), a


ROUTED_TABLE = "0 fe80::11,0 fec0:0:41:1::11"  # GID 0 the port GID, GID 1 with FLID 0x41, subnet 1


@pytest.mark.parametrize("env, index", [
    ({}, 1),                                            # NCCL's default index 1 carries a FLID
    ({"NCCL_IB_ROUTABLE_FLID_GID_INDEX": "0"}, 0),      # routing turned off
    ({"GDRLAB_IB_ROUTABLE_FLID_GID_INDEX": "7"}, 0),    # past the table: GID 0
])
def test_infiniband_port_offers_its_flid_gid(fake_verbs_lib, env, index):
    out = _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_GIDS=ROUTED_TABLE, **env)
    assert out.get("verified") is True and out["gid_index"] == index, out
    assert out["attrs"]["is_global"] == 0, out  # both ends in one local subnet


def test_plain_infiniband_table_keeps_gid_0(fake_verbs_lib):
    out = _run(fake_verbs_lib, RUN_HOST, FAKE_IBV_GIDS="0 fe80::11,0 fe80::12")  # no FLID at index 1
    assert out.get("verified") is True and out["gid_index"] == 0, out


def test_bad_routable_index_names_the_variable(fake_verbs_lib):
    out = _run(fake_verbs_lib, RUN_HOST, NCCL_IB_ROUTABLE_FLID_GID_INDEX="x")
    assert out.get("raised") == "InvalidArgument" and "NCCL_IB_ROUTABLE_FLID_GID_INDEX" in out["message"], out
