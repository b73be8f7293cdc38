"""`gdrlab lab`: finds the labs folder, builds the JupyterLab command, explains a missing JupyterLab."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gdrlab import cli
from gdrlab.commands import lab

ROOT = Path(__file__).resolve().parents[1]


def test_finds_the_labs_folder_next_to_the_sources():
    assert lab.find_labs_dir() == (ROOT / "labs").resolve()


def test_explicit_path_and_missing_path(tmp_path):
    assert lab.find_labs_dir(str(tmp_path)) == tmp_path.resolve()
    with pytest.raises(FileNotFoundError, match="no such labs folder"):
        lab.find_labs_dir(str(tmp_path / "nope"))


def test_command_line_options(tmp_path):
    cmd = lab.jupyter_command(tmp_path, no_browser=True, port=8899)
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"]
    assert f"--ServerApp.root_dir={tmp_path}" in cmd and "--no-browser" in cmd and "--port=8899" in cmd
    with pytest.raises(ValueError, match="port"):
        lab.jupyter_command(tmp_path, port=70000)


def test_dry_run_json_prints_one_document():
    proc = subprocess.run([sys.executable, "-m", "gdrlab", "lab", "--dry-run", "--json", "--no-browser"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["labs_dir"] == str((ROOT / "labs").resolve())
    assert "--no-browser" in doc["command"]


def test_missing_jupyterlab_gives_one_line_with_the_fix(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jupyterlab" else real(name, *a))
    rc = cli.main(["lab", "--no-browser"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert len(err) == 1 and "pip install gdrlab[lab]" in err[0]
