"""Start and stop a throw-away JupyterLab server for the browser tests.

The server listens on 127.0.0.1 with a random port and a random token, serves a
temporary root directory, and reads its user settings from a temporary copy of
``tests/browser/settings`` (notebook windowing off, no news toasts) so the
learner's own JupyterLab settings never leak into a test run.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LabServer", "start_lab_server", "SETTINGS_DIR"]

SETTINGS_DIR = Path(__file__).resolve().parent / "settings"


def _free_port() -> int:
    """Return a port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LabServer:
    """A running ``jupyter lab`` process and how to reach it.

    Attributes
    ----------
    url : str
        Base URL, ``http://127.0.0.1:PORT``.
    token : str
        The random token the server requires.
    root : Path
        The directory the server serves (``--ServerApp.root_dir``).
    log_path : Path
        Where the server's stdout and stderr go.
    """

    url: str
    token: str
    root: Path
    log_path: Path
    proc: subprocess.Popen = field(repr=False)

    def api(self, path: str, method: str = "GET", body: Any = None, timeout_s: float = 10.0) -> Any:
        """Call the Jupyter REST API and return the decoded JSON (or None)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def lab_url(self, rel_path: str) -> str:
        """URL that opens ``rel_path`` (relative to root) in JupyterLab, token included."""
        quoted = urllib.parse.quote(rel_path)
        return f"{self.url}/lab/tree/{quoted}?token={self.token}"

    def kernel_states(self, rel_path: str) -> list[str]:
        """Execution states of the kernels of every session on ``rel_path``."""
        states = []
        for session in self.api("/api/sessions"):
            if session.get("path") == rel_path and session.get("kernel"):
                kernel = self.api(f"/api/kernels/{session['kernel']['id']}")
                states.append(str(kernel.get("execution_state")))
        return states

    def setting(self, plugin: str, key: str) -> Any:
        """The value JupyterLab uses for ``key`` of ``plugin`` (user settings over defaults)."""
        data = self.api(f"/lab/api/settings/{urllib.parse.quote(plugin)}")
        settings = data.get("settings") or {}
        if key in settings:
            return settings[key]
        return data.get("schema", {}).get("properties", {}).get(key, {}).get("default")

    def log_tail(self, n_chars: int = 4000) -> str:
        """The end of the server log, for failure messages."""
        try:
            return self.log_path.read_text(errors="replace")[-n_chars:]
        except OSError as exc:
            return f"(no server log: {exc})"

    def stop(self) -> None:
        """Shut the server down (its kernels with it); kill it if it does not go."""
        if self.proc.poll() is not None:
            return
        try:
            self.api("/api/shutdown", method="POST", timeout_s=5.0)
        except (urllib.error.URLError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_lab_server(
    root: Path, state_dir: Path, extra_env: dict[str, str] | None = None, timeout_s: float = 60.0
) -> LabServer:
    """Start ``jupyter lab`` on ``root`` and wait until its REST API answers.

    Parameters
    ----------
    root : Path
        Directory to serve; notebooks are opened relative to it.
    state_dir : Path
        Empty scratch directory for settings, workspaces, runtime files and the log.
    extra_env : dict, optional
        Added to the server's (and so the kernels') environment.
    timeout_s : float
        How long to wait for the server to come up.

    Returns
    -------
    LabServer

    Raises
    ------
    RuntimeError
        If the server exits or does not answer in time; the message carries its log.
    """
    settings = state_dir / "user-settings"
    shutil.copytree(SETTINGS_DIR, settings)
    for sub in ("workspaces", "runtime", "config"):
        (state_dir / sub).mkdir()
    env = dict(os.environ)
    env.update(
        {
            "JUPYTER_RUNTIME_DIR": str(state_dir / "runtime"),
            # The user's own ~/.jupyter (a password, other settings) must not change the test;
            # the environment's config (sys.prefix/etc/jupyter) still loads, with its extensions.
            "JUPYTER_CONFIG_DIR": str(state_dir / "config"),
            "JUPYTER_PLATFORM_DIRS": "1",
            "IPYTHONDIR": str(state_dir / "ipython"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra_env or {})
    last_error = ""
    # The free port is only free until someone takes it: on a port clash, try another.
    for attempt in range(3):
        server = _launch(root, state_dir, settings, env, attempt)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                break
            try:
                server.api("/api/status", timeout_s=2.0)
                return server
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(0.3)
        server.stop()
        last_error = f"jupyter lab (attempt {attempt + 1}) exited or did not answer within {timeout_s:.0f} s"
        if "already in use" not in server.log_tail():
            break
    raise RuntimeError(f"{last_error}:\n{server.log_tail()}")


def _launch(root: Path, state_dir: Path, settings: Path, env: dict[str, str], attempt: int) -> LabServer:
    port = _free_port()
    token = secrets.token_hex(24)
    log_path = state_dir / f"jupyter-lab{attempt or ''}.log"
    cmd = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.user_settings_dir={settings}",
        f"--LabApp.workspaces_dir={state_dir / 'workspaces'}",
        # The test must not reach PyPI or the news feed.
        "--LabApp.news_url=None",
        "--LabApp.extension_manager=readonly",
        "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI runners often run as root
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    return LabServer(f"http://127.0.0.1:{port}", token, root, log_path, proc)
