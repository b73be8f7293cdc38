"""The instructor guide's point table says what the labs grade (docs/instructor.md, "How to grade"):
autograded points, the hand-graded cells by name with their points, and the total, per lab."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "labs" / "source").glob("*/*.ipynb"))
ROW = re.compile(r"^\| (\d\d) [^|]+\| (\d+) \| (\d+) \(([^)]*)\) \| (\d+) \|$", re.MULTILINE)


def _graded(path: Path) -> tuple[int, int, set[str]]:
    auto = written = 0
    names = set()
    for cell in nbformat.read(path, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade"):
            continue
        if cell.cell_type == "code" and not meta.get("solution"):
            auto += int(meta.get("points", 0))
        elif meta.get("solution"):
            written += int(meta.get("points", 0))
            names.add(meta["grade_id"])
    return auto, written, names


def test_the_point_table_matches_every_lab():
    table = {m.group(1): m for m in ROW.finditer((ROOT / "docs" / "instructor.md").read_text())}
    assert sorted(table) == sorted(p.parent.name[:2] for p in SOURCES), "one row per lab"
    for path in SOURCES:
        row = table[path.parent.name[:2]]
        auto, written, names = _graded(path)
        assert (int(row.group(2)), int(row.group(3)), int(row.group(5))) == (auto, written, auto + written), path.name
        assert set(re.findall(r"`([^`]+)`", row.group(4))) == names, path.name
