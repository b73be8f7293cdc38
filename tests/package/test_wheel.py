"""The wheel and the sdist carry the student labs and no answers; `gdrlab lab` from a wheel
installed in a fresh venv outside the repository serves the student copies.

The wheel is built from this checkout (the engine's build folder is reused, so it is quick),
installed with the versions of constraints.txt into a new venv in a temporary folder, and
`gdrlab lab` is started headless (no browser, a free port, a token). The notebooks are listed
through Jupyter's contents API and read back; then the server is shut down through its API.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from conftest import TIME_SCALE, UNDER_ASAN

if UNDER_ASAN:
    # DESIGN.md: the sanitizer re-run covers tests that reach native code; these run once
    pytest.skip("packaging and deployment tests run in the plain suite, not the sanitizer re-run",
                allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
# nbgrader's markers as they stand in a cell (a line of their own, in a .py file or a notebook's JSON),
# not as prose that names them
MARKER_LINE = re.compile(r'(^|")[ \t]*#+[ \t]*(BEGIN|END) (SOLUTION|HIDDEN TESTS)', re.M)
LABS = sorted(p.parent.name for p in (ROOT / "labs" / "source").glob("*/*.ipynb"))
TOKEN = "wheel-test-token"

pytestmark = pytest.mark.timeout(int(900 * TIME_SCALE))


def _run(cmd: list[str], timeout_s: float, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s * TIME_SCALE, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(out), str(ROOT)],
         600, cwd=ROOT)
    code = f"from scikit_build_core.build import build_sdist; print(build_sdist({str(out)!r}))"
    _run([sys.executable, "-c", code], 120, cwd=ROOT)
    return out


def _text_members(names_and_reader) -> dict[str, str]:
    out = {}
    for name, read in names_and_reader:
        if name.endswith((".py", ".ipynb", ".md", ".txt", ".json", ".toml", ".cfg", ".yml", ".yaml", ".sh")):
            out[name] = read(name).decode("utf-8", errors="replace")
    return out


def _assert_student_labs(members: dict[str, str], prefix: str) -> None:
    notebooks = {n: t for n, t in members.items() if n.startswith(prefix) and n.endswith(".ipynb")}
    assert sorted({Path(n).parent.name for n in notebooks}) == LABS
    leaks = [f"{n}: {m.group(0).strip()}" for n, t in members.items() for m in MARKER_LINE.finditer(t)]
    assert not leaks, "answers shipped: " + ", ".join(leaks)


def test_wheel_carries_the_student_labs_and_no_answers(dist):
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        members = _text_members((n, z.read) for n in z.namelist())
    _assert_student_labs(members, "gdrlab/data/labs/")
    assert "gdrlab/data/jupyter-student/labconfig/page_config.json" in members
    assert "gdrlab/data/jupyter-course/labconfig/page_config.json" in members


def test_sdist_carries_the_student_labs_and_no_answers(dist):
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
        members = _text_members((m.name.split("/", 1)[1], lambda _n, m=m: tar.extractfile(m).read()) for m in files)
    _assert_student_labs(members, "gdrlab/data/labs/")
    assert "CMakeLists.txt" in {m.name.split("/", 1)[1] for m in files}, "the sdist must build the engine"
    assert not [n for n in members if n.startswith(("labs/source/", "scripts/labs/"))]


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Path:
    """A fresh venv outside the repository with the wheel and its [lab] extra installed."""
    where = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(where / "venv")], 120)
    (wheel,) = dist.glob("*.whl")
    _run([str(where / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"),
          f"{wheel}[lab]"], 600, cwd=where)
    return where / "venv"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout_s: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        body = resp.read().decode()
    return json.loads(body) if body.lstrip().startswith(("{", "[")) else body


def _wait_for_server(base: str, proc: subprocess.Popen, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"gdrlab lab exited with {proc.returncode} before serving")
        try:
            _get(f"{base}/api/status?token={TOKEN}", 2)
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer within {deadline_s:.0f} s")


def test_gdrlab_lab_from_the_wheel_serves_student_copies(venv, tmp_path):
    where = _run([str(venv / "bin" / "python"), "-c", "import gdrlab, gdrlab._native; print(gdrlab.__file__)"],
                 60, cwd=tmp_path).stdout.strip()
    assert where.startswith(str(venv)), f"gdrlab imported from {where}, not the fresh venv"
    before = _repo_status()
    work, port = tmp_path / "my-labs", _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "JUPYTER", "VIRTUAL_ENV", "GDRLAB"))}
    env.update(HOME=str(tmp_path), JUPYTER_TOKEN=TOKEN, PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    log = (tmp_path / "lab.log").open("w")
    proc = subprocess.Popen([str(venv / "bin" / "gdrlab"), "lab", str(work), "--no-browser", f"--port={port}"],
                            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(base, proc, 90 * TIME_SCALE)
        top = _get(f"{base}/api/contents?token={TOKEN}")
        assert sorted(e["name"] for e in top["content"] if e["type"] == "directory") == sorted([*LABS, "docs"])
        for lab in LABS:
            listing = _get(f"{base}/api/contents/{lab}?token={TOKEN}")
            (nb_name,) = [e["name"] for e in listing["content"] if e["type"] == "notebook"]
            nb = _get(f"{base}/api/contents/{lab}/{nb_name}?token={TOKEN}&content=1")["content"]
            text = "".join(c["source"] for c in nb["cells"])
            assert not [m for m in MARKERS if m in text], f"{lab} served with solutions or hidden tests"
            assert "...  # YOUR CODE HERE" in text or "YOUR ANSWER HERE" in text, lab
        page = _get(f"{base}/lab?token={TOKEN}")
        assert '"@jupyter/nbgrader"' in page.split("disabledExtensions", 1)[1][:200], \
            "nbgrader's instructor extension must be off for learners"
        _run_shutdown(base)
        proc.wait(timeout=30 * TIME_SCALE)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    text = (tmp_path / "lab.log").read_text()
    assert "running as root" in text if os.geteuid() == 0 else "running as root" not in text
    assert "nbgrader.server_extensions" not in text, "nbgrader's server extensions must not load"
    assert f"added {len(LABS)} lab(s) to {work}" in text, text[:2000]
    assert sorted(p.name for p in work.iterdir() if p.is_dir()) == sorted([*LABS, "docs"])  # docs/: the pages the labs link
    assert _repo_status() == before, "serving the labs changed files in the repository"


def _repo_status() -> str:
    """git's view of the lab folders (empty string outside a git checkout)."""
    proc = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "labs", "gdrlab/data"],
                          capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else ""


def _run_shutdown(base: str) -> None:
    req = urllib.request.Request(f"{base}/api/shutdown?token={TOKEN}", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=10):
        pass
