"""`bench(device=N)` measures on GPU N on both sides: the local peer (thread or process) serves its
GPU tests on N too. Before, the thread peer's server was built without the device and served on
GPU 0, so `bench(device=1)` measured GPU 1 against GPU 0 and reported verified. Checked here
with the stand-in libcuda reporting two GPUs (tests/fake_cuda: allocations are counted per
device whose context was current); on two real GPUs by the multigpu tests."""
from __future__ import annotations

import pytest
from standins import run_with_fake_cuda

SCRIPT = """
    import ctypes, json
    import gdrlab
    fake = ctypes.CDLL("libcuda.so.1")
    df = gdrlab.bench(path="PATH", sizes=[4096, 65536], iters=2, warmup=0, device=DEVICE, local_peer="thread")
    print(json.dumps({"verified": bool(df["verified"].all()),
                      "on": [fake.fake_cuda_allocs_on(d) for d in range(2)]}))
"""


@pytest.mark.parametrize("path", ["staged", "shared", "pipelined"])
@pytest.mark.parametrize("device", [0, 1])
def test_the_thread_peer_serves_on_the_device_bench_measures(fake_cuda_dir, path, device):
    out = run_with_fake_cuda(fake_cuda_dir, SCRIPT.replace("PATH", path).replace("DEVICE", str(device)),
                             GDRLAB_FAKE_CUDA_DEVICES="2")
    assert out["verified"], out
    other = 1 - device
    assert out["on"][device] >= 2 and out["on"][other] == 0, out  # both sides' GPU buffers on `device`
