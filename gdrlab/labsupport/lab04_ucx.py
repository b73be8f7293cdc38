"""Lab 04, a production library beside the learner's policy: UCX's protocol choice for CUDA memory
by message size, live where UCX can move CUDA memory here, else the H200 recording."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import provenance
from .._engine import cuda_status
from ..recorded import load as load_recorded
from ..transfer.ucx_wire import status as ucx_status
from . import quick_mode

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ucx_protocols", "ucx_protocols_note"]


def ucx_protocols() -> tuple[pd.DataFrame, str]:
    """``(table, where)``: UCX's protocol choice for tagged messages of CUDA memory, by size range.
    Live (``gdrlab ucx protocols --mem cuda``) where the ucx extra's UCX has its CUDA module and a
    GPU is usable, outside quick mode; otherwise the H200 recording."""
    import json
    import subprocess
    import sys

    why = "recorded: UCX here cannot move CUDA memory, or quick mode"
    if not quick_mode():
        try:
            if ucx_status().get("has_cuda") and cuda_status()["usable"]:
                proc = subprocess.run([sys.executable, "-m", "gdrlab", "ucx", "protocols", "--mem", "cuda", "--json"],
                                      capture_output=True, text=True, timeout=120)
                doc = json.loads(proc.stdout)
                if doc.get("rows"):
                    import pandas as pd

                    df = pd.DataFrame(doc["rows"])
                    df = df[df["operation"].str.startswith("tagged message")].reset_index(drop=True)
                    return provenance.attach(df, doc["provenance"]), "live on this machine"
                why = "recorded: " + str(doc.get("error", {}).get("message", "UCX gave no table"))[:200]
        except Exception as exc:  # noqa: BLE001  no UCX, no GPU, a probe that failed: the recording stands
            why = f"recorded ({type(exc).__name__} reaching UCX here)"
    return load_recorded("h200-ucx-protocols-cuda"), why


def ucx_protocols_note(df: pd.DataFrame) -> str:
    """Where UCX stops sending CUDA memory eagerly, computed from ``df``'s ranges."""
    eager = df[df["protocol"].str.startswith("eager")]
    rndv = df[df["protocol"].str.startswith("rendezvous")]
    if eager.empty or rndv.empty:
        return "this table has no eager/rendezvous switch"
    last_eager = int(eager["max_bytes"].max())
    first_rndv = int(rndv["min_bytes"].min())
    return (f"UCX sends CUDA memory eagerly up to {last_eager:,} B and by rendezvous from {first_rndv:,} B "
            f"({provenance.label(df)}): a size-based switch between a path with little fixed cost and one "
            "that streams, as in your policy; its threshold is set by UCX's own cost estimates for "
            "this machine's transports, not by GDR (there is no RDMA NIC in this table).")
