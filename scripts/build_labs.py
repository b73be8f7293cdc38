#!/usr/bin/env python3
"""Write the lab source notebooks from their generators in scripts/labs/labNN.py.

    python scripts/build_labs.py            # write labs/source/<lab>/<lab>.ipynb for every lab
    python scripts/build_labs.py 00 02      # only these labs
    python scripts/build_labs.py --check    # fail if a committed notebook differs from its generator

Each generator module defines ``LAB = "NN-name"`` and ``cells() -> list`` (cells from
``scripts/labs/_nb.py``).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402

from scripts.labs._nb import notebook  # noqa: E402


def lab_modules(only: list[str] | None = None):
    for path in sorted((ROOT / "scripts" / "labs").glob("lab[0-9][0-9].py")):
        num = path.stem[3:]
        if only and num not in only:
            continue
        yield importlib.import_module(f"scripts.labs.{path.stem}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("labs", nargs="*", help="lab numbers (default: all)")
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args(argv)
    stale = []
    for mod in lab_modules(args.labs):
        nb = notebook(mod.cells(), mod.LAB)
        text = nbformat.writes(nb) + "\n"
        target = ROOT / "labs" / "source" / mod.LAB / f"{mod.LAB}.ipynb"
        if args.check:
            if not target.is_file() or target.read_text(encoding="utf-8") != text:
                stale.append(str(target.relative_to(ROOT)))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target.relative_to(ROOT)}")
    if stale:
        print("out of date (run python scripts/build_labs.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
