"""`gdrlab copy` and the engine's copy runs through the stand-in libcuda (tests/fake_cuda): copy
engines and the SM copy kernel, every direction and memory kind, --bidir, the patterns, both
timings, verification that catches one corrupted byte, nothing left allocated, and one line for
each bad input."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import TIME_SCALE
from standins import run_with_fake_cuda

# Runs gdrlab.copies.copy_sweep(**kw) in a fresh interpreter on the stand-in; prints the rows, the
# error if one was raised, and the stand-in's counters after the run.
SWEEP = """
    import ctypes, json
    from gdrlab import _native, errors
    from gdrlab.transfer import copies
    fake = ctypes.CDLL("libcuda.so.1")
    out = {{}}
    try:
        df = copies.copy_sweep(**{kw})
        out["rows"] = json.loads(df.to_json(orient="records"))
        out["provenance"] = df.attrs["provenance"]
    except errors.GdrlabError as e:
        out["raised"], out["message"] = type(e).__name__, str(e)
    _native.release_kept_buffers()  # freed pinned blocks kept for reuse are not leaks: unlock them first
    out.update(allocs=fake.fake_cuda_live_allocs(), streams=fake.fake_cuda_live_streams(),
               events=fake.fake_cuda_live_events(), pinned=_native.live_pinned_bytes(),
               device=_native.live_device_bytes(), launches=fake.fake_cuda_launches(),
               stream_copies=fake.fake_cuda_stream_copies(),
               launches_on=[fake.fake_cuda_launches_on(d) for d in range(4)],
               allocs_on=[fake.fake_cuda_allocs_on(d) for d in range(4)])
    print(json.dumps(out))
"""


def sweep(fake_cuda_dir, env: dict | None = None, **kw) -> dict:
    return run_with_fake_cuda(fake_cuda_dir, SWEEP.format(kw=repr(kw)), **(env or {}))


def no_leaks(out: dict) -> None:
    left = {k: out[k] for k in ("allocs", "streams", "events", "pinned", "device")}
    assert left == dict.fromkeys(left, 0), f"the copy run left CUDA objects or memory behind: {left}"


@pytest.mark.parametrize("direction,engine,src_mem,dst_mem", [
    ("h2d", "ce", "pinned", None), ("h2d", "ce", "pageable", None), ("d2h", "ce", None, "pinned"),
    ("d2h", "ce", None, "pageable"), ("d2d", "ce", None, None),
    ("h2d", "sm", "pinned", None), ("d2h", "sm", None, "pinned"), ("d2d", "sm", None, None)])
def test_every_direction_and_engine_moves_verified_data(fake_cuda_dir, direction, engine, src_mem, dst_mem):
    # 100003 bytes: not a multiple of 16, so the SM kernel's tail runs too.
    out = sweep(fake_cuda_dir, direction=direction, sizes=[100003, 8], iters=4, warmup=2, engine=engine,
                src_mem=src_mem, dst_mem=dst_mem)
    assert "raised" not in out, out
    rows = out["rows"]
    assert [r["size"] for r in rows] == [8, 100003]  # sizes are swept in order
    for r in rows:
        assert r["verified"] is True and r["checks"] == 6  # warm-up and timed samples, one copy each
        assert r["copies"] == 1 and r["bytes_per_sample"] == r["size"]
        assert r["host_lat_p50_us"] > 0 and r["event_lat_p50_us"] > 0
        # the events are recorded inside the host clock's window, around the copy alone
        assert r["event_lat_min_us"] <= r["host_lat_min_us"]
        assert (r["src_mem"], r["dst_mem"]) == (src_mem or "device", dst_mem or "device")
    if engine == "sm":
        assert out["launches"] == 12 and out["stream_copies"] == 0, out
        assert rows[0]["sm_threads"] == 512 and rows[0]["sm_blocks"] >= 1
    else:
        assert out["launches"] == 0 and out["stream_copies"] == 12, out
        assert rows[0]["sm_blocks"] is None
    no_leaks(out)


def test_sm_kernels_that_run_at_once_share_the_gpu(fake_cuda_dir):
    """One SM copy kernel takes 4 blocks of 512 threads per SM (2048, every resident thread); the
    two kernels of a bidirectional copy take 2 each, so both fit on the GPU at once instead of the
    second waiting for the first's grid to end (the stand-in reports 1 SM)."""
    code = SWEEP.replace('print(json.dumps(out))', 'out["grid"] = fake.fake_cuda_last_grid()\n    print(json.dumps(out))')
    one = run_with_fake_cuda(fake_cuda_dir, code.format(kw=repr(dict(direction="h2d", sizes=[1 << 20], iters=2,
                                                                            warmup=0, engine="sm"))))
    both = run_with_fake_cuda(fake_cuda_dir, code.format(kw=repr(dict(direction="h2d", sizes=[1 << 20], iters=2,
                                                                             warmup=0, engine="sm", bidir=True))))
    assert (one["grid"], one["rows"][0]["sm_blocks"]) == (4, 4), one
    assert (both["grid"], both["rows"][0]["sm_blocks"]) == (2, 2), both
    assert both["rows"][0]["verified"] and one["rows"][0]["verified"]


@pytest.mark.parametrize("direction", ["h2d", "d2d"])
def test_bidir_runs_both_directions_at_once(fake_cuda_dir, direction):
    out = sweep(fake_cuda_dir, direction=direction, sizes=[65536], iters=3, warmup=0, bidir=True, engine="sm")
    (r,) = out["rows"]
    assert r["copies"] == 2 and r["bytes_per_sample"] == 2 * 65536 and r["checks"] == 2 * 3
    # one GPU runs both copies: the event span (first start to last end) lies inside the host window
    assert 0 < r["event_lat_min_us"] <= r["host_lat_min_us"]
    legs = out["provenance"]["legs"]
    assert legs[1] == [legs[0][2], legs[0][3], legs[0][0], legs[0][1], legs[1][4]]  # the reverse copy
    assert r["nvbandwidth"] == ("host_to_device_bidirectional_memcpy_sm" if direction == "h2d" else None)
    no_leaks(out)


@pytest.mark.parametrize("engine,call", [("ce", "cuMemcpyHtoDAsync"), ("sm", "cuLaunchKernel")])
def test_one_corrupted_byte_in_one_copy_fails_the_run(fake_cuda_dir, engine, call):
    # The 5th of 7 copies (2 warm-up + 5 timed) flips one byte; the next copies are good again,
    # so only a check after that very copy can see it.
    env = {"GDRLAB_FAKE_CUDA_CORRUPT": call, "GDRLAB_FAKE_CUDA_CORRUPT_AT": "4"}
    out = sweep(fake_cuda_dir, env, direction="h2d", sizes=[4096], iters=5, warmup=2, engine=engine)
    assert out.get("raised") == "VerifyError", out
    assert re.search(r"byte 2048 of 4096 differs after the h2d copy .*sample 4\)", out["message"]), out["message"]
    no_leaks(out)
    # Checking only every 100th sample (and the last) misses it: the check above is what caught it.
    missed = sweep(fake_cuda_dir, env, direction="h2d", sizes=[4096], iters=5, warmup=2, engine=engine,
                   check_every=100)
    assert "raised" not in missed and missed["rows"][0]["checks"] == 1, missed


def test_sm_copies_refuse_pageable_memory_and_absent_peers(fake_cuda_dir):
    out = sweep(fake_cuda_dir, direction="h2d", sizes=[64], iters=1, engine="sm", src_mem="pageable")
    assert out["raised"] == "InvalidArgument" and "pageable" in out["message"], out
    two = {"GDRLAB_FAKE_CUDA_DEVICES": "2", "GDRLAB_FAKE_CUDA_NO_PEER": "1"}
    out = sweep(fake_cuda_dir, two, direction="d2d", sizes=[64], iters=1, engine="sm", device=0, dst_device=1)
    assert out["raised"] == "Unavailable" and "cannot access GPU 1 as a peer" in out["message"], out
    out = sweep(fake_cuda_dir, two, direction="d2d", sizes=[64], iters=1, engine="ce", device=0, dst_device=1,
                peer="off")
    assert "raised" not in out and out["rows"][0]["verified"], out  # the copy engines stage instead
    no_leaks(out)


def test_read_runs_the_copy_on_the_destination_gpu(fake_cuda_dir):
    two = {"GDRLAB_FAKE_CUDA_DEVICES": "2"}
    write = sweep(fake_cuda_dir, two, direction="d2d", sizes=[4096], iters=3, warmup=0, engine="sm", dst_device=1)
    read = sweep(fake_cuda_dir, two, direction="d2d", sizes=[4096], iters=3, warmup=0, engine="sm", dst_device=1,
                 read=True)
    assert write["launches_on"][:2] == [3, 0] and read["launches_on"][:2] == [0, 3]
    assert write["rows"][0]["nvbandwidth"] == "device_to_device_memcpy_write_sm"
    assert read["rows"][0]["nvbandwidth"] == "device_to_device_memcpy_read_sm"


def test_patterns_on_several_gpus(fake_cuda_dir):
    out = sweep(fake_cuda_dir, {"GDRLAB_FAKE_CUDA_DEVICES": "3"}, direction="d2d", pattern="all-to-one", device=0,
                sizes=[4096], iters=2, warmup=0)
    (r,) = out["rows"]
    assert r["copies"] == 2 and r["nvbandwidth"] == "all_to_one_write_ce" and r["checks"] == 4
    assert out["allocs_on"][:3] == [2, 1, 1]  # two destinations on GPU 0, a source on each other GPU
    out = sweep(fake_cuda_dir, {"GDRLAB_FAKE_CUDA_DEVICES": "2"}, direction="h2d", pattern="host-to-all",
                sizes=[4096], iters=2, warmup=0, bidir=True, engine="sm")
    (r,) = out["rows"]
    assert r["copies"] == 4 and r["nvbandwidth"] == "host_to_all_bidirectional_memcpy_sm"
    assert out["launches_on"][:2] == [4, 4]
    no_leaks(out)


# --------------------------------------------------------------------------- the command line
# The command's own module and main(); the other commands' parsers are left out, so a test here
# fails for this command only.
CLI = "import sys; from gdrlab import cli; cli.COMMANDS = ['copy', 'p2p_matrix']; sys.exit(cli.main(sys.argv[1:]))"


def cli(fake_cuda_dir, *args: str, **env: str) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e["LD_LIBRARY_PATH"] = f"{fake_cuda_dir}:{e.get('LD_LIBRARY_PATH', '')}"
    e.update(env)
    return subprocess.run([sys.executable, "-c", CLI, *args], check=False, capture_output=True, text=True, env=e,
                          timeout=60 * TIME_SCALE)


@pytest.mark.parametrize("args,says", [
    (["--dir", "sideways"], "--dir 'sideways': valid values are h2d, d2h, d2d"),
    (["--engine", "dma"], "--engine 'dma': valid values are ce, sm"),
    (["--pattern", "ring"], "--pattern 'ring'"),
    (["--iters", "0"], "--iters 0: must be 1.."),
    (["--iters", "lots"], "--iters: 'lots' is not a whole number"),
    (["--sizes", "0"], "size"),
    (["--src-mem", "device"], "--src-mem device: the host end of a h2d copy is pageable or pinned memory"),
    (["--dir", "d2h", "--dst-mem", "device"], "--dst-mem device: the host end"),
    (["--engine", "sm", "--src-mem", "pageable"], "pageable"),
    (["--read"], "--read applies to GPU-to-GPU copies"),
    (["--device", "5"], "GPU 5 does not exist: this machine has 1"),
    (["--pattern", "host-to-all"], "--pattern host-to-all needs two or more GPUs; this machine has 1"),
    (["--pattern", "all-to-one", "--dir", "d2d"], "--pattern all-to-one needs two or more GPUs; this machine has 1"),
    (["--pattern", "all-to-one"], "use --dir d2d"),
    (["--json", "--csv"], "--csv and --json exclude each other"),
    (["--check-every", "0"], "--check-every 0"),
])
def test_bad_input_gets_one_line(fake_cuda_dir, args, says):
    p = cli(fake_cuda_dir, "copy", "--sizes", "4K", "--iters", "2", *args)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1, p.stderr
    assert lines[0].startswith("gdrlab copy: ") and says in lines[0], lines[0]


def test_json_and_csv_carry_the_same_fields(fake_cuda_dir):
    j = cli(fake_cuda_dir, "copy", "--sizes", "8,4K", "--iters", "3", "--engine", "sm", "--json")
    assert j.returncode == 0, j.stderr
    doc = json.loads(j.stdout)
    assert set(doc["timing"]) == {"host", "event"} and len(doc["rows"]) == 2
    c = cli(fake_cuda_dir, "copy", "--sizes", "8,4K", "--iters", "3", "--engine", "sm", "--csv")
    assert c.returncode == 0, c.stderr
    rows = list(csv.DictReader(io.StringIO(c.stdout)))
    assert list(rows[0]) == list(doc["rows"][0]) and [int(r["size"]) for r in rows] == [8, 4096]
    assert all(r["nvbandwidth"] == "host_to_device_memcpy_sm" for r in rows)


def test_text_output_says_which_clock_and_shows_progress(fake_cuda_dir):
    p = cli(fake_cuda_dir, "copy", "--dir", "d2h", "--sizes", "8:32", "--iters", "2")
    assert p.returncode == 0, p.stderr
    assert "host_*: host clock" in p.stdout and "event_*: CUDA events" in p.stdout
    assert "nvbandwidth testcase: device_to_host_memcpy_ce" in p.stdout
    assert "every copy verified: True" in p.stdout
    assert [ln.split()[0] for ln in p.stderr.splitlines()] == ["[1/3]", "[2/3]", "[3/3]"]


def test_help_names_the_nvbandwidth_testcases(fake_cuda_dir):
    p = cli(fake_cuda_dir, "copy", "--help")
    for name in ("host_to_device_memcpy_ce", "device_to_host_bidirectional_memcpy_ce", "host_to_all_memcpy_ce",
                 "all_to_one_write_ce", "device_to_device_memcpy_write_ce", "PTX ISA 6.0"):
        assert name in p.stdout, name


def test_the_embedded_ptx_assembles_for_current_gpus(fake_cuda_dir, tmp_path):
    ptxas = shutil.which("ptxas") or (shutil.which("ptxas", path="/usr/local/cuda/bin"))
    if not ptxas:
        pytest.skip("ptxas (CUDA toolkit) is not installed: the PTX is checked by the driver's JIT on a GPU only")
    out = run_with_fake_cuda(fake_cuda_dir, """
        import json
        from gdrlab.transfer import copies
        print(json.dumps(copies.sm_kernel()))
    """)
    assert (out["ptx_isa"], out["target"]) == ("6.0", "sm_50")
    assert f".version {out['ptx_isa']}" in out["ptx"] and f".target {out['target']}" in out["ptx"]
    src = tmp_path / "copy.ptx"
    src.write_text(out["ptx"])
    for arch in ("sm_75", "sm_90"):
        r = subprocess.run([ptxas, "--gpu-name", arch, str(src), "-o", str(tmp_path / f"{arch}.cubin")], check=False,
                           capture_output=True, text=True)
        assert r.returncode == 0, f"ptxas {arch}: {r.stderr}"
