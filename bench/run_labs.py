"""Execute every lab notebook live (quick mode off unless GDRLAB_QUICK is set) and keep the
executed copies in OUTDIR, out of the repository. Prints one line per lab and, per lab, the text
of the outputs that carry figures (lines containing GB/s, us, GiB or 'live'/'recorded').

    python bench/run_labs.py OUTDIR [--timeout 300]
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

KEY = re.compile(r"(GB/s|\bus\b|GiB|MiB|live|recorded|modelled|crossover)", re.I)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--timeout", type=int, default=300)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for nb_path in sorted(Path("labs/source").glob("*/*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        t0 = time.time()
        status = "ok"
        try:
            NotebookClient(nb, timeout=a.timeout, kernel_name="python3",
                           resources={"metadata": {"path": str(nb_path.parent)}}).execute()
        except CellExecutionError as exc:
            status = f"FAILED: {str(exc).splitlines()[-1] if str(exc) else exc!r}"
            failed += 1
        except Exception as exc:  # kernel died, timeout
            status = f"FAILED: {type(exc).__name__}: {exc}"
            failed += 1
        nbformat.write(nb, out / nb_path.name)
        print(f"lab {nb_path.stem}: {status} ({time.time() - t0:.0f} s)", flush=True)
        with open(out / f"{nb_path.stem}.figures.txt", "w") as fh:
            for cell in nb.cells:
                for o in cell.get("outputs", []):
                    text = o.get("text") or o.get("data", {}).get("text/plain", "")
                    for line in str(text).splitlines():
                        if KEY.search(line):
                            fh.write(line[:300] + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
