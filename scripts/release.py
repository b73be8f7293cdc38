#!/usr/bin/env python3
"""Generate the student versions of every lab with ``nbgrader generate_assignment``.

    python scripts/release.py            # labs/source/<lab>/ -> labs/release/<lab>/ (solutions removed)
    python scripts/release.py 00-setup-check

Solutions between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` become stubs and hidden tests
disappear; labs/release/ is generated output and is not committed.
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

LABS = Path(__file__).resolve().parents[1] / "labs"


def source_labs() -> list[str]:
    return sorted(p.name for p in (LABS / "source").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def release(lab: str) -> int:
    cmd = [sys.executable, "-m", "nbgrader", "generate_assignment", lab, "--force", "--no-db",
           "--CourseDirectory.root=" + str(LABS)]
    print("+ " + " ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd, cwd=LABS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("labs", nargs="*", help="lab folder names (default: every lab in labs/source)")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("nbgrader") is None:
        print("release: nbgrader is not installed: pip install gdrlab[lab]", file=sys.stderr)
        return 1
    labs = args.labs or source_labs()
    if not labs:
        print("no labs found in labs/source", file=sys.stderr)
        return 1
    unknown = sorted(set(labs) - set(source_labs()))
    if unknown:
        print(f"unknown labs: {', '.join(unknown)}; known: {', '.join(source_labs())}", file=sys.stderr)
        return 2
    failed = [lab for lab in labs if release(lab) != 0]
    if failed:
        print(f"nbgrader failed for: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"released {len(labs)} labs into {LABS / 'release'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
