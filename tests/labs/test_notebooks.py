"""The lab notebooks run, grade and release correctly, with no GPU.

* every source notebook executes top to bottom in quick mode (GDRLAB_QUICK=1);
* nbgrader validates every source notebook with full marks (the solutions pass the tests);
* the student version nbgrader generates has no solutions and no hidden tests, and scores zero:
  executed as released, every autograder cell fails (proof that the tests can fail).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
SOURCES = sorted((LABS / "source").glob("*/*.ipynb"))
CELL_TIMEOUT_S = 180
QUICK_BUDGET_S = 120  # a quick-mode lab should take well under a minute; CI machines vary

pytestmark = pytest.mark.notebook


def _ids(paths):
    return [p.parent.name for p in paths]


@pytest.fixture(autouse=True)
def quick_env(monkeypatch):
    # The kernel inherits this process's environment.
    monkeypatch.setenv("GDRLAB_QUICK", "1")
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    yield


def _execute(nb, cwd: Path, allow_errors: bool):
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=allow_errors,
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def _errors(cell) -> list[str]:
    return [f"{o.get('ename')}: {o.get('evalue')}" for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _grade_cells(nb):
    return [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")
            and c.cell_type == "code"]


def test_there_are_lab_notebooks():
    names = _ids(SOURCES)
    for lab in ("00-setup-check", "01-bar1-exposure", "02-p2p-dma"):
        assert lab in names, f"missing source notebook for {lab}"


@pytest.mark.parametrize("path", SOURCES, ids=_ids(SOURCES))
def test_source_notebook_executes_in_quick_mode(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    try:
        _execute(nb, path.parent, allow_errors=False)
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"{path.name} failed in quick mode:\n{str(exc)[:3000]}")
    elapsed = time.monotonic() - start
    assert elapsed < QUICK_BUDGET_S, f"{path.name} took {elapsed:.0f} s in quick mode"
    # Live widget loops must not run in quick mode: no sweep thread is left behind.
    assert not any("Exception in thread" in o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs)


@pytest.mark.parametrize("path", SOURCES, ids=_ids(SOURCES))
def test_nbgrader_validates_source_with_full_marks(path):
    from nbgrader.validator import Validator

    result = Validator().validate(str(path))
    assert not result.get("failed"), f"solutions fail their own tests: {result['failed']}"
    assert not result.get("type_changed"), result.get("type_changed")


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """Every lab released by nbgrader into a scratch course (the repository's labs/ is not touched)."""
    course = tmp_path_factory.mktemp("course")
    shutil.copy(LABS / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copytree(LABS / "source", course / "source")
    out = {}
    for path in SOURCES:
        lab = path.parent.name
        proc = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", lab, "--force", "--no-db",
                               f"--CourseDirectory.root={course}"], cwd=course, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, f"nbgrader generate_assignment {lab} failed:\n{proc.stderr[-3000:]}"
        out[lab] = course / "release" / lab / path.name
    return out


@pytest.mark.parametrize("path", SOURCES, ids=_ids(SOURCES))
def test_release_has_no_solutions_or_hidden_tests(path, released):
    text = released[path.parent.name].read_text(encoding="utf-8")
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in text, f"{marker!r} survived into the student version"
    assert "...  # YOUR CODE HERE" in text


@pytest.mark.parametrize("path", SOURCES, ids=_ids(SOURCES))
def test_release_scores_zero_on_every_graded_cell(path, released, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # as graded: an unset answer fails
    nb = nbformat.read(released[path.parent.name], as_version=4)
    graded = _grade_cells(nb)
    assert len(graded) >= 2, "each lab needs at least two autograded exercises"
    _execute(nb, released[path.parent.name].parent, allow_errors=True)
    passing = [c.metadata["nbgrader"]["grade_id"] for c in _grade_cells(nb) if not _errors(c)]
    assert not passing, f"these autograder cells pass on the unsolved student version: {passing}"


@pytest.mark.parametrize("path", SOURCES, ids=_ids(SOURCES))
def test_run_all_reaches_the_end_of_the_unfinished_student_lab(path, released):
    """A learner's Run All on the release as handed out: no cell raises; unfinished exercises
    say "not done yet" and the cells that need them show the rest without them."""
    nb = nbformat.read(released[path.parent.name], as_version=4)
    _execute(nb, released[path.parent.name].parent, allow_errors=True)
    stopped = [(c.get("id"), _errors(c)) for c in nb.cells if c.cell_type == "code" and _errors(c)]
    assert not stopped, f"Run All stops in {path.parent.name}: {stopped[:3]}"
    said = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "not done yet" in said


def test_release_script_refuses_unknown_labs():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "release.py"), "99-nope"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "unknown labs: 99-nope" in proc.stderr and "00-setup-check" in proc.stderr
