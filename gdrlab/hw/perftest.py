"""The perftest options that put perftest on the NIC, port, GID, traffic class, service level and
P_Key index gdrlab resolved on this node, so that bench/rdma_pair.sh compares like for like.

gdrlab reads ``GDRLAB_IB_*`` and NCCL's ``NCCL_IB_*`` names and, with no HCA named, takes the ACTIVE
HCA nearest the GPU; perftest takes only its own options (``-d -i -x --tclass --sl --pkey_index``)
and otherwise the first device. ``python -m gdrlab.hw.perftest args --device N`` prints the options,
one per line; ``--json`` prints what they came from.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

__all__ = ["resolved_link", "perftest_options", "options_from_env"]


def options_from_env(env: dict[str, str] | None = None) -> list[str]:
    """The options from the variables alone (no HCA opened): what the script falls back to."""
    e = os.environ if env is None else env

    def first(*names: str) -> str | None:
        return next((e[n] for n in names if e.get(n)), None)

    out: list[str] = []
    dev = first("GDRLAB_IB_DEV")
    if dev:
        name, _, port = dev.partition(":")
        out += ["-d", name] + (["-i", port] if port else [])
    gid = first("GDRLAB_IB_GID_INDEX", "NCCL_IB_GID_INDEX")
    if gid and gid != "-1":
        out += ["-x", gid]
    for flag, names in (("--tclass", ("GDRLAB_IB_TC", "NCCL_IB_TC")), ("--sl", ("GDRLAB_IB_SL", "NCCL_IB_SL")),
                        ("--pkey_index", ("GDRLAB_IB_PKEY_INDEX", "NCCL_IB_PKEY"))):
        v = first(*names)
        if v:
            out.append(f"{flag}={v}")
    return out


def resolved_link(gpu: int = -1) -> dict[str, Any]:
    """What a verbs test for GPU ``gpu`` would use here: ``hca``, ``port``, ``link_layer``,
    ``gid_index`` (-1 on InfiniBand), ``pkey_index``, ``traffic_class``, ``service_level``.
    Raises the engine's Unavailable without libibverbs or an HCA."""
    from .._native import verbs
    return dict(verbs.resolve_link(gpu))


def perftest_options(link: dict[str, Any]) -> list[str]:
    """perftest's options for a :func:`resolved_link` answer."""
    out = ["-d", str(link["hca"]), "-i", str(link["port"])]
    if link.get("link_layer") == 2 and int(link.get("gid_index", -1)) >= 0:
        out += ["-x", str(link["gid_index"])]
    if link.get("traffic_class"):
        out.append(f"--tclass={link['traffic_class']}")
    if link.get("service_level"):
        out.append(f"--sl={link['service_level']}")
    if link.get("pkey_index"):
        out.append(f"--pkey_index={link['pkey_index']}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gdrlab.hw.perftest")
    p.add_argument("what", choices=["args"])
    p.add_argument("--device", type=int, default=0, help="the GPU the tests use (the HCA nearest it is chosen)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    try:
        link = resolved_link(a.device)
        opts, source = perftest_options(link), "resolved by gdrlab"
    except Exception as exc:  # no libibverbs, no HCA: the variables alone
        link, opts, source = {"reason": str(exc)}, options_from_env(), "environment only"
    if a.json:
        print(json.dumps({"options": opts, "source": source, "link": link}))
    else:
        print("\n".join(opts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
