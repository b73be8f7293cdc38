"""The verbs wire's GPU paths and teardown on a machine without GPU or HCA: the stand-in libcuda
(tests/fake_cuda) and the stand-in libibverbs (tests/fake_verbs) together. The fake HCA counts
teardown steps taken out of order (a memory region or protection domain released while a queue
pair of that domain lives, a completion queue destroyed under a queue pair)."""
from __future__ import annotations

from pathlib import Path

import pytest
from standins import ROOT, RUN, run_with_fake_cuda  # noqa: F401

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("path", ["host", "staged", "shared", "pipelined"])
def test_paths_verify_and_tear_down_queue_pair_first(stand_ins, path, mode):
    d, lib = stand_ins
    out = run_with_fake_cuda(d, RUN.format(path=path, mode=mode), GDRLAB_IBVERBS_LIB=lib)
    assert out.get("verified") is True and out["samples"] == 3, out
    assert out["violations"] == 0, "a region, CQ or PD was released while its queue pair lived"
    assert (out["qps"], out["streams"], out["events"], out["allocs"], out["pinned"], out["regions"]) == (0,) * 6, out


@pytest.mark.parametrize("path,call,after", [("staged", "cuStreamCreate", 0), ("pipelined", "cuEventCreate", 1)])
def test_endpoint_failing_after_registration_releases_everything(stand_ins, path, call, after):
    # The client's endpoint has its queue pair, buffers and registered regions when the CUDA call fails.
    d, lib = stand_ins
    out = run_with_fake_cuda(d, RUN.format(path=path, mode=0), GDRLAB_IBVERBS_LIB=lib,
                             GDRLAB_FAKE_CUDA_FAIL=call, GDRLAB_FAKE_CUDA_FAIL_AFTER=str(after))
    assert out.get("raised") == "CudaError" and out["call"] == call, out
    assert out["violations"] == 0, out
    assert (out["qps"], out["streams"], out["events"], out["allocs"], out["pinned"], out["regions"]) == (0,) * 6, out


def test_failed_receive_post_destroys_the_new_queue_pair(stand_ins):
    # The client's queue pair is made, then 256 receives are posted; the 11th post fails.
    d, lib = stand_ins
    out = run_with_fake_cuda(d, RUN.format(path="host", mode=0), GDRLAB_IBVERBS_LIB=lib, FAKE_IBV_FAIL_RECV_AFTER="10")
    assert out.get("raised") == "VerbsError" and out["call"] == "ibv_post_recv", out
    assert out["qps"] == 0 and out["violations"] == 0, out


def _gdr(stand_ins, tmp_path, peer_module: str | None, **env: str) -> dict:
    d, lib = stand_ins
    sysfs = tmp_path / "sys"
    (sysfs / "module").mkdir(parents=True)
    if peer_module:
        (sysfs / "module" / peer_module).mkdir()
    script = RUN.format(path="gdr", mode=0).replace(
        "print(json.dumps(out))", "out['flushes'] = cuda.fake_cuda_flushes()\n    print(json.dumps(out))")
    return run_with_fake_cuda(d, script, GDRLAB_IBVERBS_LIB=lib, GDRLAB_SYSFS_ROOT=str(sysfs), **env)


def test_gdr_registers_through_dmabuf(dmabuf_stand_ins, tmp_path):
    out = _gdr(dmabuf_stand_ins, tmp_path, None)
    assert out.get("verified") is True and out["mechanism"] == "dmabuf", out
    assert out["violations"] == 0 and out["regions"] == 0, out


@pytest.mark.parametrize("err", ["EPROTONOSUPPORT", "ENOTTY", "EOPNOTSUPP"])
@pytest.mark.parametrize("module", ["nvidia_peermem", "nv_peer_mem"])
def test_kernel_without_dmabuf_falls_back_to_either_peer_module(dmabuf_stand_ins, tmp_path, err, module):
    out = _gdr(dmabuf_stand_ins, tmp_path, module, FAKE_IBV_DMABUF_ERRNO=err)
    assert out.get("verified") is True and out["mechanism"] == "peermem", out


def test_no_dmabuf_and_no_peer_module_is_unavailable(dmabuf_stand_ins, tmp_path):
    out = _gdr(dmabuf_stand_ins, tmp_path, None, FAKE_IBV_DMABUF_ERRNO="EPROTONOSUPPORT")
    assert out.get("raised") == "Unavailable", out
    assert "Protocol not supported" in out["message"] and "nv_peer_mem" in out["message"], out


@pytest.mark.parametrize("err,text", [("EINVAL", "Invalid argument"), ("EFAULT", "Bad address")])
def test_real_dmabuf_errors_are_raised_not_hidden_by_a_fallback(dmabuf_stand_ins, tmp_path, err, text):
    # A peer module is loaded, so a fallback would succeed: the error must still surface.
    out = _gdr(dmabuf_stand_ins, tmp_path, "nvidia_peermem", FAKE_IBV_DMABUF_ERRNO=err)
    assert out.get("raised") == "VerbsError" and out["call"] == "ibv_reg_dmabuf_mr", out
    assert text in out["message"], out
    assert out["qps"] == 0 and out["violations"] == 0, out


@pytest.mark.parametrize("options,ordering,flushes", [("1", "0", 3), ("1", "100", 0), ("0", "0", 0)])
def test_flush_only_where_the_device_supports_and_needs_it(dmabuf_stand_ins, tmp_path, options, ordering, flushes):
    # Where writes land in a GPU buffer and are then read or overwritten: the client's buffer after
    # the timed loop and after the verification message, the server's after its message.
    out = _gdr(dmabuf_stand_ins, tmp_path, None, GDRLAB_FAKE_CUDA_FLUSH_OPTIONS=options,
               GDRLAB_FAKE_CUDA_ORDERING=ordering)
    assert out.get("verified") is True, out
    assert out["flushes"] == flushes, out


@pytest.mark.parametrize("path", ["staged", "shared", "pipelined"])
def test_sender_never_overwrites_a_message_the_receiver_has_not_taken(stand_ins, path):
    # Bandwidth mode, a window of 8 messages, a receiver that takes 300 us per message: without
    # flow control the sender's next message lands on the one still being copied out.
    d, lib = stand_ins
    script = RUN.format(path=path, mode=1).replace("100003, 3, 1, 2, 16384", "100003, 3, 1, 8, 16384").replace(
        "print(json.dumps(out))", "out['overwrites'] = ibv.fake_ibv_unconsumed_overwrites()\n    print(json.dumps(out))")
    out = run_with_fake_cuda(d, script, GDRLAB_IBVERBS_LIB=lib, FAKE_IBV_SLOW_RECV_US="300")
    assert out.get("verified") is True and out["samples"] == 3, out
    assert out["overwrites"] == 0, out


def _pci_tree(root: Path) -> None:
    """fake0 under another root port than the GPU, fake1 under the GPU's PCIe switch."""
    far = root / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:01:00.0"
    switch = root / "devices" / "pci0000:80" / "0000:80:01.0" / "0000:81:00.0"
    gpu, near = switch / "0000:82:00.0", switch / "0000:82:01.0"
    for d in (far, gpu, near):
        d.mkdir(parents=True)
    for name, target in (("fake0", far), ("fake1", near)):
        (root / "class" / "infiniband" / name).mkdir(parents=True)
        (root / "class" / "infiniband" / name / "device").symlink_to(target)
    (root / "bus" / "pci" / "devices").mkdir(parents=True)
    (root / "bus" / "pci" / "devices" / "0000:82:00.0").symlink_to(gpu)


@pytest.mark.parametrize("bus_id,expected", [("0000:82:00.0", "fake1"), ("", "fake0")])
def test_default_hca_is_the_one_nearest_the_gpu(dmabuf_stand_ins, tmp_path, bus_id, expected):
    d, lib = dmabuf_stand_ins
    _pci_tree(tmp_path)
    script = RUN.format(path="staged", mode=0).replace(
        "mechanism=info[\"mechanism\"]",
        "mechanism=info[\"mechanism\"], device=info[\"device\"], hops=info[\"gpu_pci_hops\"]")
    out = run_with_fake_cuda(d, script, GDRLAB_IBVERBS_LIB=lib, GDRLAB_SYSFS_ROOT=str(tmp_path), FAKE_IBV_DEVICES="2",
                             GDRLAB_FAKE_CUDA_BUS_ID=bus_id)
    assert out.get("verified") is True and out["device"] == expected, out
    # GPU and fake1 share the switch below 0000:81:00.0 (one hop each side); unknown GPU: -1.
    assert out["hops"] == (2 if bus_id else -1), out
