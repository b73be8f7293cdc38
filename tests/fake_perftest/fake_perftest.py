#!/usr/bin/env python3
"""A stand-in for perftest's ib_write_bw / ib_write_lat / ib_send_lat, for tests of
bench/rdma_pair.sh's feature detection (tests/verbs/test_rdma_pair_script.py). It behaves as the
real tools do where the script looks (as perftest's sources at tags 24.01-26.04 behave):

- ``--version`` prints ``Version: <AC_INIT>``: 6.20 for the 24.01 release, 6.29 for 26.04 (the
  release tag never appears; 26.01 prints 6.28);
- ``--help`` lists the options this build accepts; an option it lacks is refused as getopt_long
  refuses it (``unrecognized option``, the usage, exit 1): a build without CUDA has no
  ``--use_cuda`` / ``--use_cuda_dmabuf``;
- ib_write_lat with GPU memory: refused before 26.01; from 26.01 only with ``--write_with_imm``
  (exit 1, after the option parse, before listening);
- no host argument: a server that listens on ``-p`` (default 18515) for one client; with one: a
  client that connects (exit 1 when nothing listens) and prints a result table.

Environment: FAKE_PERFTEST_RELEASE (24.01, 26.01, 26.04; set by the wrapper directories here),
FAKE_PERFTEST_CUDA=0 (a build without CUDA), FAKE_PERFTEST_LOG (a file: one JSON line per run
with the tool, its arguments and its role).
"""
from __future__ import annotations

import json
import os
import socket
import sys

AC_INIT = {"24.01": "6.20", "25.10": "6.27", "26.01": "6.28", "26.04": "6.29"}
COMMON = ["-a", "-F", "-I", "-d", "-i", "-x", "-p", "-n", "-s", "--tclass", "--sl", "--pkey_index", "--report_gbits",
          "--version", "-h", "--help"]


def usage(tool: str, cuda: bool) -> str:
    lines = [f" Usage:\n   {tool}            start a server and wait for connection",
             f"   {tool} <host>     connect to server at <host>\n", " Options:"]
    opts = list(COMMON) + ["--write_with_imm"]
    if cuda:
        opts += ["--use_cuda=<cuda device id>", "--use_cuda_dmabuf"]
    lines += [f"  {o:<30} (option)" for o in opts]
    return "\n".join(lines)


def main() -> int:
    tool, args = sys.argv[1], sys.argv[2:]
    release = os.environ.get("FAKE_PERFTEST_RELEASE", "26.04")
    cuda = os.environ.get("FAKE_PERFTEST_CUDA", "1") != "0"
    known = {o.split("=")[0] for o in COMMON + ["--write_with_imm"] + (["--use_cuda", "--use_cuda_dmabuf"] if cuda else [])}
    takes_value = {"-I", "-d", "-i", "-x", "-p", "-n", "-s"}
    opts: dict[str, str] = {}
    host = None
    i = 0
    while i < len(args):
        a = args[i]
        name = a.split("=")[0]
        if a.startswith("-"):
            if name not in known:
                print(f"{tool}: unrecognized option '{a}'", file=sys.stderr)
                print(usage(tool, cuda))
                return 1
            if name in takes_value and "=" not in a:
                i += 1
                opts[name] = args[i] if i < len(args) else ""
            else:
                opts[name] = a.partition("=")[2]
        else:
            host = a
        i += 1
    if "--version" in opts:
        print(f"Version: {AC_INIT[release]}")
        return 0
    if "-h" in opts or "--help" in opts:
        print(usage(tool, cuda))
        return 0
    gpu = "--use_cuda" in opts
    if tool == "ib_write_lat" and gpu:
        if release < "26.01":
            print(" Perftest doesn't support CUDA memory in latency tests of this verb", file=sys.stderr)
            return 1
        if "--write_with_imm" not in opts:
            print(" GPU memory in a write latency test needs --write_with_imm", file=sys.stderr)
            return 1
    port = int(opts.get("-p") or 18515)

    def record() -> None:  # once the two sides met: a run, not a probe stopped by timeout
        log = os.environ.get("FAKE_PERFTEST_LOG")
        if log:
            with open(log, "a") as f:
                f.write(json.dumps({"tool": tool, "args": args, "role": "client" if host else "server",
                                    "release": release}) + "\n")
    signature = json.dumps({"tool": tool, "gpu": gpu, "imm": "--write_with_imm" in opts})
    if host is None:
        srv = socket.create_server(("0.0.0.0", port), reuse_port=False)
        conn, _ = srv.accept()
        with conn:
            theirs = conn.makefile().readline().strip()
            conn.sendall((signature + "\n").encode())
        srv.close()
        record()
        if theirs != signature:
            print(" Mismatched test parameters between client and server", file=sys.stderr)
            return 1
        print(f"* Waiting for client to connect... *\n {tool} server done")
        return 0
    try:
        conn = socket.create_connection((host, port), timeout=5)
    except OSError:
        print(f"Couldn't connect to {host}:{port}", file=sys.stderr)
        return 1
    with conn:
        conn.sendall((signature + "\n").encode())
        theirs = conn.makefile().readline().strip()
    record()
    if theirs != signature:
        print(" Mismatched test parameters between client and server", file=sys.stderr)
        return 1
    print(f"---------------------------------------------------------------------------------------\n"
          f" {tool} (stand-in perftest {release})")
    for k in range(1, 24):
        size = 1 << k
        if tool.endswith("_bw"):
            print(f" {size:<10} 5000           {size / 100:.2f}            {size / 110:.2f}             0.5")
        else:
            print(f" {size:<7} 1000          1.10           5.00         1.20             1.25            0.10"
                  f"            1.60                    4.00")
    return 0


if __name__ == "__main__":
    sys.exit(main())
