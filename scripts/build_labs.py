#!/usr/bin/env python3
"""Write the lab notebooks from their sources, labs/src/<lab>.py (jupytext percent format).

    python scripts/build_labs.py            # write labs/source/<lab>/<lab>.ipynb for every lab
    python scripts/build_labs.py 00 02      # only these labs
    python scripts/build_labs.py --check    # fail if a committed notebook differs from its source

The sources are the only place lab text and code are edited; ruff reads them (labs/src/ruff.toml).
Each cell header carries the cell's stable id (``id="01-gpu-bars"``) and, for exercises, its
nbgrader metadata. A markdown image whose target is ``img/NAME.svg`` is embedded as a data URL,
because JupyterLab's sanitizer strips inline ``<svg>`` but keeps ``<img>``. The notebooks carry
instructor solutions and hidden tests; nbgrader makes the student release from them
(scripts/release.py).
"""
from __future__ import annotations

import argparse
import base64
import re
import sys
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "labs" / "src"
OUT = ROOT / "labs" / "source"
_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")
_IMG = re.compile(r"!\[([^\]]*)\]\((img/[A-Za-z0-9_.-]+\.svg)\)")
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def generated_note(lab: str) -> str:
    """The line every generated notebook starts with (an HTML comment: invisible when rendered)."""
    return (f"<!-- Generated from labs/src/{lab}.py by scripts/build_labs.py: edit that file, "
            "not this notebook. -->\n")


def _embed_svgs(text: str, src: Path) -> str:
    def sub(match: re.Match) -> str:
        svg_path = src.parent / match.group(2)
        if not svg_path.is_file():
            raise SystemExit(f"{_rel(src)}: image {match.group(2)} not found")
        data = base64.b64encode(svg_path.read_text(encoding="utf-8").strip().encode()).decode()
        return f'<img alt="{match.group(1)}" src="data:image/svg+xml;base64,{data}"/>'

    return _IMG.sub(sub, text)


def build(src: Path) -> nbformat.NotebookNode:
    """The notebook (nbformat 4.5, no outputs) that the percent file ``src`` describes.

    Raises
    ------
    SystemExit
        With one line naming the file and the cell, when a cell has no id, a bad or duplicate id,
        or names an image that does not exist.
    """
    lab = src.stem
    nb = jupytext.read(src, fmt="py:percent")
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
    seen: set[str] = set()
    for n, cell in enumerate(nb.cells):
        cid = cell.metadata.pop("id", None)
        where = f"{_rel(src)}, cell {n + 1}"
        if not cid or not _ID.match(cid):
            raise SystemExit(f"{where}: needs id=\"...\" in its '# %%' line (letters, digits, - and _)")
        if cid in seen:
            raise SystemExit(f"{where}: duplicate cell id {cid!r}")
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid and gid != cid:
            raise SystemExit(f"{where}: an nbgrader cell's id must equal its grade_id ({cid!r} != {gid!r})")
        seen.add(cid)
        cell.id = cid
        if cell.cell_type == "markdown":
            cell.source = _embed_svgs(cell.source, src)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    if not nb.cells or nb.cells[0].cell_type != "markdown":
        raise SystemExit(f"{_rel(src)}: the first cell must be the lab's markdown header")
    nb.cells[0].source = generated_note(lab) + nb.cells[0].source
    nbformat.validate(nb)
    return nb


def sources(only: list[str] | None = None) -> list[Path]:
    """The lab sources, every one or only those whose number is in ``only``."""
    paths = sorted(SRC.glob("[0-9][0-9]-*.py"))
    if only:
        unknown = set(only) - {p.name[:2] for p in paths}
        if unknown:
            raise SystemExit(f"no lab source for {', '.join(sorted(unknown))} in labs/src")
        paths = [p for p in paths if p.name[:2] in only]
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("labs", nargs="*", help="lab numbers (default: all)")
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args(argv)
    stale = []
    for src in sources(args.labs):
        text = nbformat.writes(build(src)) + "\n"
        target = OUT / src.stem / f"{src.stem}.ipynb"
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
