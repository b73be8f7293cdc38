"""The nbgrader classroom workflow on a real lab, end to end, with a temporary exchange directory:
generate, release, fetch (as a student), submit, collect, autograde, generate feedback
(docs/nbgrader-workflow.md describes the same steps for an instructor).

The student fills every solution cell with the reference solution from the source; a second
submission is the release handed in unchanged. The first must get every autograded point, the
second fewer points, and written answers (if the lab has any) wait for a person. Every
warning nbgrader prints must be one that docs/nbgrader-workflow.md lists as harmless.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TIME_SCALE, UNDER_ASAN

if UNDER_ASAN:
    # DESIGN.md: the sanitizer re-run covers tests that reach native code; these run once
    pytest.skip("packaging and deployment tests run in the plain suite, not the sanitizer re-run",
                allow_module_level=True)

pytest.importorskip("nbgrader")

ROOT = Path(__file__).resolve().parents[2]
LAB = "00-setup-check"
COURSE = "gdrlab"
DOC = ROOT / "docs" / "nbgrader-workflow.md"
MARKER = re.compile(r"^\s*#+\s*(BEGIN|END) SOLUTION\s*$")

pytestmark = pytest.mark.timeout(int(600 * TIME_SCALE))


def _config(path: Path, **settings: str) -> None:
    lines = ["c = get_config()", f"c.CourseDirectory.course_id = {COURSE!r}"]
    lines += [f"c.{key.replace('__', '.')} = {value!r}" for key, value in settings.items()]
    path.write_text("\n".join(lines) + "\n")


def _nbgrader(cwd: Path, *args: str, log: list[str]) -> str:
    # nbgrader runs `alembic` by name: the environment's bin/ goes first on PATH
    env = dict(os.environ, GDRLAB_QUICK="1", PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300 * TIME_SCALE)
    log.append(proc.stderr)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{proc.stderr[-4000:]}"
    return proc.stderr


def _solved(student_nb: Path, source_nb: Path) -> None:
    """Put the reference solution of each solution cell into the student's notebook."""
    answers = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in json.loads(source_nb.read_text())["cells"]
               if c["metadata"].get("nbgrader", {}).get("solution")}
    nb = json.loads(student_nb.read_text())
    filled = 0
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("solution"):
            src = answers[meta["grade_id"]]
            text = "".join(src) if isinstance(src, list) else src
            cell["source"] = "\n".join(line for line in text.splitlines() if not MARKER.match(line))
            filled += 1
    assert filled == len(answers) > 0
    student_nb.write_text(json.dumps(nb))


def _grades(course: Path) -> dict[str, dict[str, dict]]:
    """{student: {grade_id: {auto, max, manual}}} read from the gradebook in a fresh process."""
    code = f"""
import json
from nbgrader.api import Gradebook
out = {{}}
with Gradebook("sqlite:///{course / 'gradebook.db'}", {COURSE!r}) as gb:
    for nb in gb.find_assignment({LAB!r}).notebooks:
        for sub in nb.submissions:
            out.setdefault(sub.student.id, {{}}).update({{
                g.name: {{"auto": g.auto_score, "max": g.max_score, "manual": g.needs_manual_grade,
                          "kind": g.cell_type}} for g in sub.grades}})
print(json.dumps(out))
"""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def harmless_warnings() -> list[re.Pattern]:
    """The patterns docs/nbgrader-workflow.md lists under "Harmless warnings" (one `regex` per item)."""
    section = DOC.read_text().split("## Harmless warnings", 1)[1].split("\n## ", 1)[0]
    return [re.compile(m) for m in re.findall(r"^- `([^`]+)`", section, re.M)]


def test_classroom_flow_generate_release_fetch_submit_collect_autograde_feedback(tmp_path):
    course, student, exchange = tmp_path / "course", tmp_path / "student", tmp_path / "exchange"
    source_nb = course / "source" / LAB / f"{LAB}.ipynb"
    source_nb.parent.mkdir(parents=True)
    shutil.copyfile(ROOT / "labs" / "source" / LAB / f"{LAB}.ipynb", source_nb)
    student.mkdir()
    exchange.mkdir()
    _config(course / "nbgrader_config.py", CourseDirectory__root=str(course), Exchange__root=str(exchange))
    _config(student / "nbgrader_config.py", Exchange__root=str(exchange))
    log: list[str] = []

    _nbgrader(course, "generate_assignment", LAB, log=log)
    _nbgrader(course, "release_assignment", LAB, log=log)
    _nbgrader(student, "fetch_assignment", LAB, log=log)
    fetched = student / LAB / f"{LAB}.ipynb"
    assert "BEGIN HIDDEN TESTS" not in fetched.read_text() and "BEGIN SOLUTION" not in fetched.read_text()
    blank = json.loads(fetched.read_text())
    _solved(fetched, source_nb)
    _nbgrader(student, "submit", LAB, log=log)
    _nbgrader(course, "collect", LAB, log=log)
    (me,) = [p.name for p in (course / "submitted").iterdir()]
    # a second learner handed in the release unchanged
    unchanged = course / "submitted" / "unchanged" / LAB
    shutil.copytree(course / "submitted" / me / LAB, unchanged)
    (unchanged / f"{LAB}.ipynb").write_text(json.dumps(blank))
    _nbgrader(course, "autograde", LAB, log=log)
    _nbgrader(course, "generate_feedback", LAB, log=log)

    grades = _grades(course)
    auto = {k for k, g in grades[me].items() if not g["manual"] and g["kind"] == "code"}
    assert auto, "the lab has autograded cells"
    assert all(grades[me][k]["auto"] == grades[me][k]["max"] > 0 for k in auto), grades[me]
    assert sum(grades["unchanged"][k]["auto"] or 0 for k in auto) < sum(grades[me][k]["max"] for k in auto)
    written = {c["metadata"]["nbgrader"]["grade_id"] for c in json.loads(source_nb.read_text())["cells"]
               if c["metadata"].get("nbgrader", {}).get("grade") and c["metadata"]["nbgrader"].get("solution")}
    assert all(grades[me][k]["manual"] for k in written), "written answers wait for a person"
    for who in (me, "unchanged"):
        html = (course / "feedback" / who / LAB / f"{LAB}.html").read_text()
        assert "Score" in html or "score" in html

    known = harmless_warnings()
    warnings = [line for text in log for line in text.splitlines()
                if re.search(r"WARNING|Warning:", line) and not line.startswith(" ")]
    unknown = [w for w in warnings if not any(p.search(w) for p in known)]
    assert not unknown, "warnings docs/nbgrader-workflow.md does not explain:\n" + "\n".join(unknown)
