"""``gdrlab lab``: open JupyterLab on the labs."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from ._common import add_json_flag, emit_json


def add_parser(sub):
    p = sub.add_parser(
        "lab", help="open JupyterLab on the lab notebooks",
        description="Start JupyterLab with the lab notebooks (labs/ next to the gdrlab sources, or the "
                    "folder given). Needs the [lab] extra: pip install gdrlab[lab].")
    p.add_argument("path", nargs="?", default=None, help="labs folder (default: labs/ next to the sources, "
                   "then ./labs)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser window")
    p.add_argument("--port", type=int, default=None, help="port for the Jupyter server (default: Jupyter's)")
    p.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    add_json_flag(p)
    return p


def find_labs_dir(path: str | None = None) -> Path:
    """The labs folder: ``path`` if given, else ``labs/`` beside the package's source tree (an
    editable or source install), else ``./labs``. Raises FileNotFoundError with what was tried."""
    if path is not None:
        candidate = Path(path).expanduser()
        if not candidate.is_dir():
            raise FileNotFoundError(f"no such labs folder: {candidate}")
        return candidate.resolve()
    tried = []
    for candidate in (Path(__file__).resolve().parents[2] / "labs", Path.cwd() / "labs"):
        tried.append(str(candidate))
        if (candidate / "source").is_dir() or (candidate / "release").is_dir():
            return candidate.resolve()
    raise FileNotFoundError("cannot find the labs folder (tried " + ", ".join(tried) + "); "
                            "pass it: gdrlab lab PATH")


def jupyter_command(labs_dir: Path, no_browser: bool = False, port: int | None = None) -> list[str]:
    """The command line that starts JupyterLab rooted at ``labs_dir``."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={labs_dir}"]
    if no_browser:
        cmd.append("--no-browser")
    if port is not None:
        if not 0 < port < 65536:
            raise ValueError(f"port must be between 1 and 65535, got {port}")
        cmd.append(f"--port={port}")
    return cmd


def run(args) -> int:
    from ..errors import Unavailable

    labs_dir = find_labs_dir(args.path)
    cmd = jupyter_command(labs_dir, args.no_browser, args.port)
    if args.dry_run:
        if args.json:
            emit_json({"labs_dir": str(labs_dir), "command": cmd})
        else:
            print(" ".join(cmd))
        return 0
    if importlib.util.find_spec("jupyterlab") is None:
        raise Unavailable("JupyterLab is not installed: pip install gdrlab[lab]")
    print(f"gdrlab lab: starting JupyterLab on {labs_dir} (Ctrl+C to stop)", file=sys.stderr)
    return subprocess.call(cmd)
