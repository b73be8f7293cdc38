"""Registration details a cluster run would hit: fork protection with unaligned host memory
(V10, kernels before 5.13) and what a dma-buf registration's time includes (V9)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from standins import run_with_fake_cuda

UNALIGNED = r"""
import ctypes, json, numpy as np
from gdrlab import errors, verbs
from gdrlab.engine import Buffer
out = {}
with verbs.Device() as d, d.alloc_pd() as pd:
    out["fork"] = verbs._v().fork_protection()
    raw = np.zeros(3 * 4096, np.uint8)
    off = (-raw.ctypes.data) % 4096
    try:
        pd.reg_mr(raw[off + 8: off + 8 + 100])
        out["unaligned"] = "registered"
    except errors.GdrlabError as e:
        out["unaligned"] = str(e)
    pd.reg_mr(raw[off: off + 4096])
    pd.reg_mr(Buffer(100, "pageable"))
    out["aligned"] = "registered"
print(json.dumps(out))
"""


def _py(code: str, **env: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, **env))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_unaligned_host_memory_is_refused_under_fork_protection(fake_verbs_lib):
    out = _py(UNALIGNED, GDRLAB_IBVERBS_LIB=fake_verbs_lib, FAKE_IBV_FORK="enabled")
    assert out["fork"] == "enabled"
    assert "fork protection is on" in out["unaligned"] and "Buffer" in out["unaligned"]
    assert out["aligned"] == "registered"


def test_unaligned_host_memory_registers_where_fork_copies_pages(fake_verbs_lib):
    out = _py(UNALIGNED, GDRLAB_IBVERBS_LIB=fake_verbs_lib)
    assert out["fork"] == "unneeded" and out["unaligned"] == "registered"


GDR_UNALIGNED = """
    import ctypes, json, threading
    from gdrlab import _native
    ibv = ctypes.CDLL(_native.verbs.status()["library"])
    srv = _native.Server("127.0.0.1", 0, "tok", 10000)
    t = threading.Thread(target=srv.serve_one, args=(10000,))
    t.start()
    c = _native.verbs.Client("127.0.0.1", srv.port, "tok", 10000)
    c.run("gdr", 2, 4096, 1, 0, 1, 16384, 3, 0, 9)
    c.close()
    t.join()
    print(json.dumps({"unaligned": ibv.fake_ibv_unaligned_regs()}))
"""


def test_the_flush_reads_into_a_page_of_its_own(dmabuf_stand_ins):
    # The RDMA-READ flush's host word was an 8-byte heap object: registered, its page went DONTFORK.
    d, lib = dmabuf_stand_ins
    out = run_with_fake_cuda(d, GDR_UNALIGNED, GDRLAB_IBVERBS_LIB=lib, GDRLAB_FAKE_CUDA_FLUSH_OPTIONS="0",
                             GDRLAB_FAKE_CUDA_ORDERING="0")
    assert out["unaligned"] == 0, out


EXPORT = """
    import json
    from gdrlab import verbs
    from gdrlab.engine import Buffer
    buf = Buffer(1 << 20, "device")
    with verbs.Device() as d, d.alloc_pd() as pd:
        mr = pd.reg_gpu(buf, how="dmabuf")
        print(json.dumps({"mechanism": mr.mechanism, "reg_us": mr.reg_us, "export_us": mr.export_us}))
"""


def test_dmabuf_registration_time_includes_the_export(dmabuf_stand_ins):
    d, lib = dmabuf_stand_ins
    out = run_with_fake_cuda(d, EXPORT, GDRLAB_IBVERBS_LIB=lib, GDRLAB_FAKE_CUDA_EXPORT_US="30000")
    assert out["mechanism"] == "dmabuf"
    assert out["export_us"] >= 30000 and out["reg_us"] >= out["export_us"], out
