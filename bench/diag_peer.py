"""Small-message latency of the GPU paths with the local peer as a process vs a thread.

Two processes that copy to one GPU share it by time-slicing their CUDA contexts; a thread peer
shares one context. Prints p50 latency (us) per size for each.  python bench/diag_peer.py
"""
import json
import sys

import gdrlab

rows = []
for path in ("host", "staged", "pipelined"):
    for peer in ("process", "thread"):
        df = gdrlab.bench(path=path, sizes="8,4K,16K,64K,1M", mode="lat", local_peer=peer)
        for r in df.to_dict(orient="records"):
            rows.append({"path": path, "local_peer": peer, "size": r["size"], "lat_p50_us": r["lat_p50_us"]})
            print(f"{path:10s} {peer:8s} {r['size']:>8d} {r['lat_p50_us']:9.1f} us", file=sys.stderr)
print(json.dumps(rows))
