"""The grading review's two 38/38 attacks through nbgrader itself, with the course configured as
``labs/nbgrader_config.py`` configures it (gdrlab.autograde.steps.configure):

* **hook**: one line in the first answer cell registers an input transformer that turns every
  later test cell into ``pass``; the rest of the release is handed in unchanged. It must score 0.
* **peek**: an answer reads the instructor's notebook beside the submission
  (``../../../source/``), the gradebook and another learner's folder. With the screen switched
  off (so that the sandbox alone is tested) the kernel must find nothing readable.
* the instructor's solutions score full marks through the same steps, and the feedback of a wrong
  answer shows no hidden test, no traceback and no expected value.

Lab 01 is used: three autograded exercises, hidden tests that raise package errors, and the
per-exercise forbidden calls.
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
    pytest.skip("nbgrader flows run in the plain suite, not the sanitizer re-run", allow_module_level=True)
pytest.importorskip("nbgrader")

from gdrlab.autograde import landlock

ROOT = Path(__file__).resolve().parents[2]
LAB = "01-bar1-exposure"
MARKER = re.compile(r"^\s*#+\s*(BEGIN|END) SOLUTION\s*$")
pytestmark = pytest.mark.timeout(int(900 * TIME_SCALE))

HOOK = ("get_ipython().input_transformers_cleanup.append("
        "lambda lines: ['pass\\n'] if any('grading.' in x for x in lines) else lines)\n")
PEEK = """
import glob
found = {}
for pattern in ('../../../source/*/*.ipynb', '../../../gradebook.db', '../../../submitted/*/*/*.ipynb',
                COURSE + '/source/*/*.ipynb', COURSE + '/gradebook.db', COURSE + '/source/' + LAB + '/' + LAB + '.ipynb',
                COURSE + '/submitted/other/' + LAB + '/' + LAB + '.ipynb', '../../../source/' + LAB + '/' + LAB + '.ipynb'):
    for path in glob.glob(pattern) or [pattern]:
        try:
            with open(path, 'rb') as f:
                found[path] = len(f.read())
        except OSError as exc:
            found[path] = type(exc).__name__
print('PEEK', found)
"""


def _course(tmp_path: Path, *, screen: bool, sandbox: bool = True) -> Path:
    course = tmp_path / "course"
    (course / "source" / LAB).mkdir(parents=True)
    shutil.copyfile(ROOT / "labs" / "source" / LAB / f"{LAB}.ipynb", course / "source" / LAB / f"{LAB}.ipynb")
    # the labs' own configuration (its root is the folder it lies in), the screen on or off
    (course / "nbgrader_config.py").write_text((ROOT / "labs" / "nbgrader_config.py").read_text()
                                               + f"\nc.ScreenAnswers.enabled = {screen!r}\n"
                                               + f"c.SandboxedExecute.require_sandbox = {sandbox!r}\n")
    return course


def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, GDRLAB_QUICK="1", PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, check=False,
                          text=True, timeout=600 * TIME_SCALE)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{proc.stderr[-4000:]}"
    return proc


def _submit(course: Path, student: str, edit) -> None:
    nb = json.loads((course / "release" / LAB / f"{LAB}.ipynb").read_text())
    edit(nb["cells"])
    folder = course / "submitted" / student / LAB
    folder.mkdir(parents=True)
    (folder / f"{LAB}.ipynb").write_text(json.dumps(nb))


def _answers(cells: list) -> list:
    return [c for c in cells if c["metadata"].get("nbgrader", {}).get("solution") and c["cell_type"] == "code"]


def _solutions() -> dict[str, str]:
    nb = json.loads((ROOT / "labs" / "source" / LAB / f"{LAB}.ipynb").read_text())
    return {c["metadata"]["nbgrader"]["grade_id"]: "\n".join(
        line for line in "".join(c["source"]).splitlines() if not MARKER.match(line))
        for c in _answers(nb["cells"])}


def _scores(course: Path) -> dict[str, tuple[float, float]]:
    code = f"""
import json
from nbgrader.api import Gradebook
out = {{}}
with Gradebook("sqlite:///{course / 'gradebook.db'}") as gb:
    for nb in gb.find_assignment({LAB!r}).notebooks:
        for sub in nb.submissions:
            auto = [g for g in sub.grades if g.cell_type == "code" and not g.needs_manual_grade]
            out[sub.student.id] = (sum(g.auto_score or 0 for g in auto), sum(g.max_score for g in auto))
print(json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return {k: tuple(v) for k, v in json.loads(proc.stdout).items()}


def test_hook_scores_zero_and_solutions_full_marks_through_the_screen(tmp_path):
    # the screen and the feedback are tested here; where Landlock is missing, grading goes on
    # without the sandbox (the test below needs it)
    course = _course(tmp_path, screen=True, sandbox=landlock.available()[0])
    _nbgrader(course, "generate_assignment", LAB)
    solutions = _solutions()

    def solved(cells):
        for c in _answers(cells):
            c["source"] = solutions[c["metadata"]["nbgrader"]["grade_id"]]

    def hooked(cells):
        first = _answers(cells)[0]
        first["source"] = HOOK + "".join(first["source"])

    def wrong(cells):  # a real attempt with a mistake: the whole BAR1, reserve forgotten
        solved(cells)
        for c in _answers(cells):
            if c["metadata"]["nbgrader"]["grade_id"] == "ex1-k20-max":
                c["source"] = "k20 = model.get_profile(lab01.K20_PROFILE).params\nk20_max_register_bytes = int(k20['bar1_bytes'])"

    _submit(course, "solved", solved)
    _submit(course, "hooked", hooked)
    _submit(course, "wrong", wrong)
    proc = _nbgrader(course, "autograde", LAB)
    scores = _scores(course)
    got, full = scores["solved"]
    assert got == full > 0, scores
    assert scores["hooked"][0] == 0, scores
    assert 0 < scores["wrong"][0] < full, scores
    assert "Screened out ex1-k20-max of hooked" in proc.stderr and "hooks into the kernel" in proc.stderr

    # the feedback of the wrong answer: the failing check's message, nothing of the hidden tests
    _nbgrader(course, "generate_feedback", LAB)
    html = (course / "feedback" / "wrong" / LAB / f"{LAB}.html").read_text()
    source = json.loads((course / "source" / LAB / f"{LAB}.ipynb").read_text())
    hidden = [line.strip() for c in source["cells"] for m in re.finditer(
        r"BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", "".join(c["source"]), re.DOTALL) for line in m.group(1).splitlines()
        if len(line.strip()) > 12]
    assert hidden, "lab 01 has hidden tests"
    import html as html_lib
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<style.*?</style>", "", html, flags=re.DOTALL)))
    released = (course / "release" / LAB / f"{LAB}.ipynb").read_text()
    leaked = [line for line in hidden if line in text and json.dumps(line)[1:-1] not in released]
    assert not leaked, leaked
    assert "most recent call last" not in text and "BEGIN HIDDEN TESTS" not in text
    assert "hidden tests: not shown" in text
    assert "VerbsError" in text or "k20_max_register_bytes" in text  # the failing check still says what failed
    hooked_html = (course / "feedback" / "hooked" / LAB / f"{LAB}.html").read_text()
    assert "the grader did not run this cell" in html_lib.unescape(hooked_html)


@pytest.mark.skipif(not landlock.available()[0], reason=f"no Landlock here: {landlock.available()[1]}")
def test_the_grading_kernel_cannot_read_the_course_even_unscreened(tmp_path):
    course = _course(tmp_path, screen=False)
    _nbgrader(course, "generate_assignment", LAB)
    other = course / "submitted" / "other" / LAB
    other.mkdir(parents=True)
    (other / f"{LAB}.ipynb").write_text((course / "release" / LAB / f"{LAB}.ipynb").read_text())

    def peek(cells):
        first = _answers(cells)[0]
        first["source"] = f"COURSE = {str(course)!r}\nLAB = {LAB!r}\n" + PEEK + "".join(first["source"])

    _submit(course, "peek", peek)
    _nbgrader(course, "autograde", LAB, "--student", "peek")
    graded = json.loads((course / "autograded" / "peek" / LAB / f"{LAB}.ipynb").read_text())
    printed = "".join("".join(o.get("text", "")) for c in graded["cells"] if c["cell_type"] == "code"
                      for o in c.get("outputs", []) if o.get("output_type") == "stream")
    line = next(x for x in printed.splitlines() if x.startswith("PEEK"))
    found = eval(line[len("PEEK "):])  # the dict the cell printed (its own output, from this test)
    assert found, line
    readable = {path: v for path, v in found.items() if isinstance(v, int)}
    assert not readable, f"the grading kernel read {readable}"
    # the paths exist and were refused, not absent (the peek would have found them without the sandbox)
    assert (course / "gradebook.db").exists() and (course / "source" / LAB / f"{LAB}.ipynb").exists()
    for path in (course / "gradebook.db", course / "source" / LAB / f"{LAB}.ipynb", other / f"{LAB}.ipynb"):
        assert path.exists() and found[str(path)] == "PermissionError", (path, found)
