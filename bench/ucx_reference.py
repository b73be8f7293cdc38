"""gdrlab against UCX's own benchmark, like for like: ucx_perftest (tag_lat, tag_bw) between two
processes over UCX's tcp transport, beside gdrlab's tcp wire and gdrlab's ucx wire, each with its
process peer and its thread peer, at each size (from 1 MiB also gdrlab's tcp wire over 4 connections,
`--streams 4`; up to 64 KiB also the message rate, gdrlab's `--rate` beside ucx_perftest's msgrate), on one lane (UCX_NET_DEVICES=lo) and on every
lane UCX finds (UCX_NET_DEVICES unset), all in one run.

    python bench/ucx_reference.py OUT_DIR [--sizes 8,64K,64M] [--reps 3] [--mem host|cuda]

Writes OUT_DIR/ucx_reference.json: per lane setting, per configuration and size, the median over
--reps repetitions (configurations alternate inside each repetition, so drift hits them all) of
the one-way latency p50 (us) and the bandwidth (GB/s, 1e9 B/s); and the ratios of every gdrlab
configuration to ucx_perftest (latency: gdrlab / UCX, below 1 is faster; bandwidth: gdrlab / UCX,
above 1 is faster).

ucx_perftest is the libucx wheel's (gdrlab[ucx]), run with the wheel's libraries first on
LD_LIBRARY_PATH (a system UCX of another version would otherwise be loaded). Its latency is half a
round trip, like gdrlab's; its bandwidth column is MB/s of 2^20 bytes (UCX's UCS_MBYTE), converted
here to GB/s. ucx_perftest streams tag_bw without acknowledgements; gdrlab's bandwidth waits for an
ACK per window: the ratio says which each measured. Without ucx_perftest (a UCX without its tools)
the reference is gdrlab's ucx wire with a process peer (a UCP tag loop through gdrlab's binding
between two processes), and the JSON says so.

--mem cuda (a GPU): ucx_perftest -m cuda,cuda with UCX_TLS=tcp,cuda_copy; gdrlab's ucx wire moves
device memory on both sides and gdrlab's tcp wire runs the pipelined path.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from gdrlab import provenance  # noqa: E402
from gdrlab.errors import GdrlabError  # noqa: E402
from gdrlab.transfer.buffers import machine  # noqa: E402
from gdrlab.transfer.driver import bench, options, run  # noqa: E402
from gdrlab.transfer.lanes import Parity  # noqa: E402
from gdrlab.transfer.ucx_wire import status as ucx_status  # noqa: E402
from gdrlab.transfer.ucx_wire import wheel_library  # noqa: E402
from gdrlab.units import parse_sizes  # noqa: E402

LANES = {"one": "lo", "every": None}  # UCX_NET_DEVICES
UCX_MBYTE = 1 << 20
# ucx_perftest's Final line: iterations, latency (typical, average, overall; us), bandwidth
# (average, overall; MB/s of 2^20 B) and message rate (average, overall; msg/s).
FINAL = re.compile(r"^Final:\s+(?P<iters>\d+)\s+(?P<p50>[\d.]+)\s+(?P<avg>[\d.]+)\s+(?P<overall>[\d.]+)\s+"
                   r"(?P<bw_avg>[\d.]+)\s+(?P<bw_overall>[\d.]+)(?:\s+(?P<mr_avg>[\d.]+)\s+(?P<mr_overall>[\d.]+))?",
                   re.M)
RATE_MAX_BYTES = 64 << 10  # message rate (osu_mbw_mr, ucx_perftest's msgrate) at small sizes only
STREAMS = 4  # gdrlab's tcp wire over this many connections (--streams), from 1 MiB up
STREAMS_MIN_BYTES = 1 << 20


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def perftest_binary() -> tuple[str, dict[str, str]] | None:
    """ucx_perftest of the wheel this gdrlab loads (and the environment it needs), else None."""
    lib = wheel_library()
    if lib:
        exe = Path(lib).parent.parent / "bin" / "ucx_perftest"
        if exe.is_file():
            libdir = str(Path(lib).parent)
            return str(exe), {"LD_LIBRARY_PATH": libdir + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")}
    exe = shutil.which("ucx_perftest")
    return (exe, {}) if exe else None


def perftest(exe: str, env: dict[str, str], test: str, size: int, mem: str) -> dict[str, float]:
    """One ucx_perftest run (a server process and a client process on 127.0.0.1)."""
    port = free_port()
    iters = max(10, min(2000, (256 << 20) // size)) if test == "tag_lat" else max(10, min(20000, (512 << 20) // size))
    mem_flags = ["-m", "cuda,cuda"] if mem == "cuda" else []
    server = subprocess.Popen([exe, "-p", str(port), *mem_flags], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        out = None
        while time.monotonic() < deadline:  # the server listens once it has started: retry the connect
            proc = subprocess.run([exe, "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size), "-n", str(iters),
                                   "-w", str(max(2, iters // 10)), *mem_flags], env=env, capture_output=True,
                                  text=True, timeout=300, check=False)
            if proc.returncode == 0:
                out = proc.stdout
                break
            time.sleep(0.2)
        if out is None:
            raise RuntimeError(f"ucx_perftest {test} {size} failed: {proc.stderr.strip()[-300:]}")
    finally:
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    m = FINAL.search(out)
    if not m:
        raise RuntimeError(f"ucx_perftest printed no Final line: {out[-300:]}")
    if test == "tag_lat":
        return {"lat_p50_us": float(m.group("p50"))}
    got = {"bw_gbps": float(m.group("bw_avg")) * UCX_MBYTE / 1e9}
    if size <= RATE_MAX_BYTES and m.group("mr_avg"):
        got["msg_rate_mps"] = float(m.group("mr_avg"))
    return got


def gdrlab_row(wire: str, peer: str, size: int, mem: str) -> dict[str, float]:
    """gdrlab's one-way latency p50 and bandwidth at one size."""
    if wire == "ucx":
        kind = "device" if mem == "cuda" else None
        opts = options("host", [size], wire="ucx", parity=Parity(src_mem=kind, dst_mem=kind))
        df = run(opts, local_peer=peer)
    else:
        df = bench("pipelined" if mem == "cuda" else "host", [size], wire="tcp", local_peer=peer)
    row = df.iloc[0]
    if not bool(row["verified"]):
        raise RuntimeError(f"gdrlab {wire} {peer} {size}: not verified")
    got = {"lat_p50_us": float(row["lat_p50_us"]), "bw_gbps": float(row["bw_gbps"]),
           **({"protocol": str(row["protocol"])} if "protocol" in row else {})}
    if wire == "tcp" and mem == "host" and size <= RATE_MAX_BYTES:
        # --rate: messages per second with a window of messages in flight (osu_mbw_mr's measure)
        rated = run(options("host", [size], mode="bw", wire="tcp", parity=Parity(rate=True)), local_peer=peer)
        if not bool(rated.iloc[0]["verified"]):
            raise RuntimeError(f"gdrlab {wire} {peer} {size} --rate: not verified")
        got["msg_rate_mps"] = float(rated.iloc[0]["msg_rate_mps"])
    return got


def gdrlab_streams(size: int) -> dict[str, float]:
    """gdrlab's tcp wire over STREAMS connections at once (--streams), host memory, a process peer."""
    df = run(options("host", [size], mode="bw", wire="tcp", parity=Parity(lanes=STREAMS)), local_peer="process")
    row = df.iloc[0]
    if not bool(row["verified"]):
        raise RuntimeError(f"gdrlab tcp --streams {STREAMS} {size}: not verified")
    return {"bw_gbps": float(row["bw_gbps"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--sizes", default="8,64K,64M")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mem", choices=["host", "cuda"], default="host")
    args = ap.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sizes = parse_sizes(args.sizes)
    st = ucx_status()
    if not st["loaded"]:
        log(f"UCX is not usable here: {st['reason']}")
        return 2
    pt = perftest_binary()
    tls = "tcp,cuda_copy" if args.mem == "cuda" else "tcp"
    configs = ["gdrlab_tcp_process", "gdrlab_tcp_thread", "gdrlab_ucx_process", "gdrlab_ucx_thread"]
    reference = "ucx_perftest" if pt else "gdrlab_ucx_process"
    saved_env = {k: os.environ.get(k) for k in ("UCX_TLS", "UCX_NET_DEVICES")}
    samples: dict[str, dict[str, dict[int, dict[str, list[float]]]]] = {}
    protocols: dict[str, dict[int, str]] = {}
    errors: list[str] = []
    try:
        for lane, devices in LANES.items():
            os.environ["UCX_TLS"] = tls
            if devices:
                os.environ["UCX_NET_DEVICES"] = devices
            else:
                os.environ.pop("UCX_NET_DEVICES", None)
            per = samples.setdefault(lane, {})
            for rep in range(args.reps):
                for size in sizes:
                    log(f"[{lane} lane(s), rep {rep + 1}/{args.reps}] {size} B")
                    if pt:
                        exe, extra = pt
                        env = dict(os.environ, **extra)
                        got = {**perftest(exe, env, "tag_lat", size, args.mem),
                               **perftest(exe, env, "tag_bw", size, args.mem)}
                        for k, v in got.items():
                            per.setdefault("ucx_perftest", {}).setdefault(size, {}).setdefault(k, []).append(v)
                    for cfg in configs:
                        _, wire, peer = cfg.split("_")
                        try:
                            got = gdrlab_row(wire, peer, size, args.mem)
                        except (GdrlabError, RuntimeError) as exc:
                            errors.append(f"{lane} {cfg} {size}: {exc}")
                            continue
                        if "protocol" in got:
                            protocols.setdefault(f"{lane}/{cfg}", {})[size] = str(got.pop("protocol"))
                        for k, v in got.items():
                            per.setdefault(cfg, {}).setdefault(size, {}).setdefault(k, []).append(v)
                    if args.mem == "host" and size >= STREAMS_MIN_BYTES:
                        cfg = f"gdrlab_tcp_streams{STREAMS}"
                        try:
                            got = gdrlab_streams(size)
                        except (GdrlabError, RuntimeError) as exc:
                            errors.append(f"{lane} {cfg} {size}: {exc}")
                            continue
                        for k, v in got.items():
                            per.setdefault(cfg, {}).setdefault(size, {}).setdefault(k, []).append(v)
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    medians = {lane: {cfg: {size: {k: statistics.median(v) for k, v in d.items()} for size, d in by.items()}
                      for cfg, by in per.items()} for lane, per in samples.items()}
    ratios: dict[str, dict[str, dict[int, dict[str, float]]]] = {}
    for lane, per in medians.items():
        ref = per.get(reference, {})
        for cfg, by in per.items():
            if cfg == reference:
                continue
            for size, m in by.items():
                r = ref.get(size, {})
                ratios.setdefault(lane, {}).setdefault(cfg, {})[size] = {
                    name: (m[key] / r[key] if m.get(key) and r.get(key) else None)
                    for name, key in (("lat_vs_ucx", "lat_p50_us"), ("bw_vs_ucx", "bw_gbps"),
                                      ("msg_rate_vs_ucx", "msg_rate_mps"))}
    doc = {
        "provenance": provenance.live({"what": "bench/ucx_reference.py", "argv": sys.argv[1:],
                                       "ucx_version": st["version"], "ucx_library": st["library"],
                                       "ucx_perftest": pt[0] if pt else None, "reference": reference,
                                       "ucx_tls": tls, "lanes": {k: v or "unset (every device UCX finds)"
                                                                  for k, v in LANES.items()},
                                       "reps": args.reps, "statistic": "median over reps"}, machine()),
        "units": {"lat_p50_us": "one-way latency p50, us (half round trip)", "bw_gbps": "GB/s, 1e9 B/s",
                  "msg_rate_mps": "messages/s (ucx_perftest tag_bw msgrate average; gdrlab --rate: window "
                                  "over the median window time)"},
        "medians": medians, "ratios": ratios, "gdrlab_ucx_protocols": protocols, "errors": errors}
    (out / "ucx_reference.json").write_text(json.dumps(doc, indent=2) + "\n")
    log(f"wrote {out / 'ucx_reference.json'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
