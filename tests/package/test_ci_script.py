"""The CI entry point installs what the test suite needs on a fresh Debian 12 machine.

The fuzzing step links libFuzzer (``libclang_rt.fuzzer-x86_64.a``). On Debian 12 that archive is in
``libclang-rt-14-dev``, which ``clang`` only recommends; an install with
``--no-install-recommends`` leaves it out and the link fails. These tests read ``.ci/run`` and the
install script it calls, and check that the package owning the archive is installed explicitly.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CI_RUN = ROOT / ".ci" / "run"
DEPS = ROOT / "scripts" / "install-system-deps.sh"


def _packages() -> list[str]:
    out = subprocess.run(["bash", str(DEPS), "--print"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_ci_run_calls_the_install_script_and_the_readme_test_command():
    text = CI_RUN.read_text()
    assert "scripts/install-system-deps.sh" in text
    assert re.search(r"^make test$", text, re.M), "CI must run README's test command"
    readme = (ROOT / "README.md").read_text()
    assert "scripts/install-system-deps.sh" in readme, "README must name the same install script"


def test_install_script_names_libfuzzer_owner_on_bookworm(tmp_path):
    pkgs = _packages()
    assert "clang" in pkgs and "chromium" in pkgs and "openmpi-bin" in pkgs
    assert "--no-install-recommends" in DEPS.read_text()
    # The package list as it is on Debian 12, whatever this machine runs.
    text = DEPS.read_text()
    assert re.search(r"bookworm.*\n.*libclang-rt-14-dev", text), \
        "on bookworm the script must name libclang-rt-14-dev (clang only recommends it)"
    assert "libclang-rt-dev" in pkgs


def test_libfuzzer_owner_is_installed_by_name():
    """Where dpkg knows the owner of libclang_rt.fuzzer, that package is in the list."""
    if shutil.which("dpkg") is None:
        pytest.skip("dpkg not found: not a Debian-family machine")
    found = subprocess.run(["dpkg", "-S", "libclang_rt.fuzzer-x86_64.a"], capture_output=True, text=True)
    if found.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("libclang_rt.fuzzer-x86_64.a is not installed on CI: " + found.stderr.strip())
        pytest.skip("libFuzzer not installed here (scripts/install-system-deps.sh installs it)")
    owners = {line.split(":")[0] for line in found.stdout.splitlines() if ":" in line}
    assert owners & set(_packages()), f"{owners} own libFuzzer but the install script names none of them"
