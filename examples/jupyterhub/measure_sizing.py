"""What one learner costs a hub, measured: the figures of docs/instructor.md, "Sizing".

    python examples/jupyterhub/measure_sizing.py OUT_DIR [--labs 00,01] [--quick]

Starts JupyterLab on fresh working copies of the student labs (``gdrlab lab``'s copying and
environment), opens every lab in its own kernel through the server's sessions API, as a learner
opening each notebook does, runs its code cells in order, and reads the resident memory (RSS, and
USS where the kernel lets it be read) of the server and of each kernel from /proc (psutil), with
the kernels left open, as a learner's are, and adds them up (RSS counts the shared libraries once
per process, PSS shares them out, so the PSS total is what the learner adds to the machine). Then runs ``gdrlab bench --path host`` (the live sweep
of lab 00) and reads how many cores it kept busy (CPU time of it and its local peer over wall
time). Writes OUT_DIR/sizing.json, with the machine, the date and the load average before and
after (a loaded machine inflates the times and the core count, not the memory).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
from jupyter_client import BlockingKernelClient

from gdrlab.commands.lab import jupyter_command, prepare, shipped_labs, student_env

MIB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(url: str, token: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
                                 method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read() or b"{}")


def _memory(proc: psutil.Process) -> dict:
    info = {"rss_mib": round(proc.memory_info().rss / MIB, 1)}
    try:  # USS: pages only this process holds; PSS: its fair share of the shared ones
        full = proc.memory_full_info()
        info.update(uss_mib=round(full.uss / MIB, 1), pss_mib=round(full.pss / MIB, 1))
    except (psutil.Error, AttributeError):
        pass
    return info


def _run_cells(client: BlockingKernelClient, cells: list[dict], timeout: float) -> tuple[int, list[str]]:
    """Runs each code cell in order; returns how many ran and the errors (ename: evalue)."""
    errors, ran = [], 0
    for cell in cells:
        if cell["cell_type"] != "code" or not "".join(cell["source"]).strip():
            continue
        try:
            reply = client.execute_interactive("".join(cell["source"]), timeout=timeout, output_hook=lambda msg: None,
                                               allow_stdin=False)
        except (TimeoutError, queue.Empty):
            errors.append(f"cell {ran + 1}: timed out after {timeout:.0f} s")
            break
        ran += 1
        if reply["content"]["status"] == "error":
            errors.append(f"cell {ran}: {reply['content']['ename']}: {reply['content']['evalue'][:200]}")
    return ran, errors


def _busy_cores(cmd: list[str], env: dict) -> dict:
    """Wall time and CPU time (user + system) of ``cmd`` and every process it waited for."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime
    return {"command": " ".join(cmd[1:]), "exit": proc.returncode, "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "cores_busy": round(cpu / wall, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="folder for sizing.json")
    p.add_argument("--labs", default="", help="lab number prefixes, comma-separated (default: every shipped lab)")
    p.add_argument("--quick", action="store_true", help="GDRLAB_QUICK=1: the short sweeps a graded run uses")
    p.add_argument("--cell-timeout", type=float, default=600.0, help="seconds per cell (default 600)")
    args = p.parse_args()
    labs = [lab for lab in shipped_labs() if not args.labs or lab.split("-")[0] in args.labs.split(",")]
    if not labs:
        p.error(f"--labs {args.labs!r} names none of {', '.join(shipped_labs())}")
    args.out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="gdrlab-sizing-") as tmp:
        workdir, runtime = Path(tmp) / "gdrlab-labs", Path(tmp) / "runtime"
        prepare(workdir)
        env = dict(student_env(), JUPYTER_RUNTIME_DIR=str(runtime))
        if args.quick:
            env["GDRLAB_QUICK"] = "1"
        token, port = secrets.token_hex(16), _free_port()
        cmd = jupyter_command(workdir, no_browser=True, port=port, allow_root=os.geteuid() == 0)
        cmd += [f"--IdentityProvider.token={token}", "--ServerApp.open_browser=False"]
        server = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    _http(base + "/api/status", token)
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("measure_sizing.py: JupyterLab did not start") from None
                    time.sleep(0.2)
            server_proc = psutil.Process(server.pid)
            result: dict = {"server_idle": _memory(server_proc), "labs": {}}
            for lab in labs:
                session = _http(base + "/api/sessions", token, {"path": f"{lab}/{lab}.ipynb", "type": "notebook",
                                                                "name": f"{lab}.ipynb", "kernel": {"name": "python3"}})
                kernel_id = session["kernel"]["id"]
                client = BlockingKernelClient(connection_file=str(runtime / f"kernel-{kernel_id}.json"))
                client.load_connection_file()
                client.start_channels()
                client.kernel_info()  # its reply says the kernel is up (no heartbeat race, unlike wait_for_ready)
                client.get_shell_msg(timeout=180)
                kernel = next(c for c in server_proc.children(recursive=True)
                              if any(kernel_id in part for part in c.cmdline()))
                nb = json.loads((workdir / lab / f"{lab}.ipynb").read_text())
                start = time.monotonic()
                ran, errors = _run_cells(client, nb["cells"], args.cell_timeout)
                wall = time.monotonic() - start
                cpu = kernel.cpu_times()
                client.stop_channels()
                result["labs"][lab] = dict(_memory(kernel), cells_run=ran, errors=errors, wall_s=round(wall, 1),
                                           kernel_cpu_s=round(cpu.user + cpu.system, 1))
                print(f"{lab}: {result['labs'][lab]}", file=sys.stderr, flush=True)
            result["server_after"] = _memory(server_proc)
            for kind in ("rss_mib", "pss_mib"):  # RSS counts shared libraries once per process; PSS splits them
                if all(kind in v for v in (result["server_after"], *result["labs"].values())):
                    total = result["server_after"][kind] + sum(v[kind] for v in result["labs"].values())
                    result[f"learner_total_{kind}"] = round(total, 1)
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
    gdrlab = str(Path(sys.executable).parent / "gdrlab")
    result["host_bench"] = _busy_cores([gdrlab, "bench", "--path", "host", "--json"], env=dict(os.environ))
    result["machine"] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                         "memory_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
                         "system": platform.platform(), "python": platform.python_version()}
    model = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")]
    if model:
        result["machine"]["cpu"] = model[0]
    result["date_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    result["load_average_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    result["quick"] = bool(args.quick)
    (args.out / "sizing.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
