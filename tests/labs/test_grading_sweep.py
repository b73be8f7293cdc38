"""A systematic attack on every autograded exercise: no point without the skill.

For each answer cell of each lab, the lab is run as the instructor's notebook up to that cell
(as graded: NBGRADER_EXECUTION set, quick mode), and then, one answer name at a time (the others
keep the instructor's values), the exercise's test cell, hidden tests included, is run with the
answer replaced by:

(a) what the package computes: every public function of the gdrlab modules the lab reaches
    (its imports, and gdrlab.labsupport.labNN), called with no argument and with each object
    the lab has defined by then, and the scalars inside what they return; for an answer that is
    a function, every public function itself. Calls the exercise forbids (its answer cell's
    ``gdrlab.forbid``, which the grader's screen refuses) are not tried: they cannot be handed in;
(b) every number written in the student's copy of the lab (text and code), every number it prints
    when a learner runs it all unfinished (quick mode, no GPU), and every number in the docs.

A test cell's points are free when every answer it grades can be replaced so (each found alone,
the others at the instructor's values): the test fails then, listing each answer and its source.
Numbers from the text count when they could not be guessed (at least 100, or a fraction with
three significant digits); a yes/no answer or a small count is never free on its own, since any
text has a 1 or a True in it, but it does not protect a cell whose other answers are free. The instructor's values pass the same
harness (so a failure means the attack lost, not that the harness broke).
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import math
import numbers
import os
import re
import signal
import types
from pathlib import Path
from typing import Any

import pytest

from gdrlab.autograde.screen import bound_names, forbidden_calls_of, read_names

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("IPython")  # the labs' cells and the screen's reading of magics


ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "labs" / "source").glob("*/*.ipynb"))
STUDENT = ROOT / "gdrlab" / "data" / "labs"
MARKER = re.compile(r"^\s*#+\s*(BEGIN|END) SOLUTION\s*$")
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
# gdrlab modules whose functions measure or draw (a live sweep, a server, a plot): not answers
NOT_ANSWERS = ("gdrlab.engine", "gdrlab.transfer", "gdrlab.widgets", "gdrlab.commands", "gdrlab.cli",
               "gdrlab.autograde", "gdrlab.grading", "gdrlab.labsupport.softroce")
CALL_LIMIT_S = 2

pytestmark = [pytest.mark.timeout(900)]


@pytest.fixture(autouse=True)
def _graded(monkeypatch):
    monkeypatch.setenv("GDRLAB_QUICK", "1")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")


def _exercises(path: Path) -> list[tuple[int, Any, Any]]:
    """(index of the answer cell, the answer cell, its test cell) for each autograded exercise:
    the test cell is the first graded code cell after the answer, before the next answer."""
    cells = nbformat.read(path, as_version=4).cells
    out = []
    for i, cell in enumerate(cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("solution"):
            continue
        test = None
        for c in cells[i + 1:]:
            m = c.metadata.get("nbgrader", {})
            if c.cell_type == "code" and m.get("solution"):
                break  # the next exercise: this answer has no autograded test (a prediction, say)
            if c.cell_type == "code" and m.get("grade"):
                test = c
                break
        if test is not None:
            out.append((i, cell, test))
    return out


def _strip(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if not MARKER.match(line))


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _limit(seconds: int):
    def fire(signum, frame):
        raise _Timeout

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _run_cells(cells: list, upto: int) -> dict:
    ns: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for cell in cells[:upto]:
            if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade"):
                continue  # tests are not setup
            code = _strip(cell.source)
            if code.lstrip().startswith(("%", "!")):
                continue
            with contextlib.suppress(Exception):
                exec(compile(code, cell.get("id", "cell"), "exec"), ns)  # noqa: S102 - the lab's own cells
    return ns


def _passes(ns: dict, test_source: str) -> bool:
    trial = dict(ns)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            with _limit(10):
                exec(compile(test_source, "test", "exec"), trial)  # noqa: S102 - the lab's own test cell
        except BaseException:  # noqa: BLE001 - any failure is a 0
            return False
    return True


def _modules(ns: dict, lab: str) -> list[types.ModuleType]:
    names = {v.__name__ for v in ns.values() if isinstance(v, types.ModuleType) and v.__name__.startswith("gdrlab")}
    names |= {getattr(v, "__module__", "") for v in ns.values() if callable(v)
              and str(getattr(v, "__module__", "")).startswith("gdrlab")}
    names.add(f"gdrlab.labsupport.lab{lab}")
    out = []
    for name in sorted(names):
        if not name or name.startswith(NOT_ANSWERS):
            continue
        with contextlib.suppress(ImportError):
            out.append(importlib.import_module(name))
    return out


def _public_functions(modules: list[types.ModuleType], forbidden: dict[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for module in modules:
        for name in getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]:
            fn = getattr(module, name, None)
            if name in forbidden or not (inspect.isfunction(fn) or inspect.isbuiltin(fn)):
                continue
            if str(getattr(fn, "__module__", "")).startswith(NOT_ANSWERS):
                continue
            found[f"{module.__name__}.{name}"] = fn
    return found


def _scalars(value: Any, depth: int = 0) -> list[Any]:
    """The value and what it holds, to a small depth: what a learner could pick out of a result."""
    out = [value]
    if depth >= 2:
        return out
    items: list[Any] = []
    if isinstance(value, dict):
        items = list(value.values())[:50]
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)[:50]
    elif hasattr(value, "to_numpy") and hasattr(value, "shape"):
        with contextlib.suppress(Exception):
            items = list(value.to_numpy().ravel()[:200])
    elif hasattr(value, "params") and isinstance(getattr(value, "params", None), dict):
        items = list(value.params.values())
    for item in items:
        out += _scalars(item, depth + 1)
    return out


def _same_kind(candidate: Any, answer: Any) -> bool:
    if callable(answer) and not isinstance(answer, type):
        return callable(candidate)
    if isinstance(answer, bool):
        return isinstance(candidate, bool)
    if isinstance(answer, numbers.Real):
        return isinstance(candidate, numbers.Real) and not isinstance(candidate, bool) and math.isfinite(float(candidate))
    return type(candidate) is type(answer)


def _package_candidates(ns: dict, functions: dict[str, Any]) -> list[tuple[str, Any]]:
    objects = [(k, v) for k, v in ns.items() if not k.startswith("_") and not isinstance(v, (types.ModuleType, type))
               and not callable(v)]
    out: list[tuple[str, Any]] = []
    for fname, fn in functions.items():
        out.append((fname, fn))  # for answers that are functions
        for label, args in [("()", ()), *((f"({k})", (v,)) for k, v in objects)]:
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                        _limit(CALL_LIMIT_S):
                    result = fn(*args)
            except BaseException:  # noqa: BLE001, S112 - a call that does not fit the arguments
                continue
            out += [(f"{fname}{label}", s) for s in _scalars(result)]
    return out


_PRINTED: dict[str, str] = {}


def _printed(lab_dir: str) -> str:
    """What the student's copy prints when a learner runs it all, unfinished (quick mode, no GPU
    here): the outputs a learner could copy numbers from. Run once per lab."""
    if lab_dir not in _PRINTED:
        nbclient = pytest.importorskip("nbclient")
        student = STUDENT / lab_dir / f"{lab_dir}.ipynb"
        nb = nbformat.read(student, as_version=4)
        env_graded = os.environ.pop("NBGRADER_EXECUTION", None)  # a learner's own Run All
        try:
            nbclient.NotebookClient(nb, timeout=180, kernel_name="python3", allow_errors=True,
                                    resources={"metadata": {"path": str(student.parent)}}).execute()
        finally:
            if env_graded is not None:
                os.environ["NBGRADER_EXECUTION"] = env_graded
        parts = []
        for cell in nb.cells:
            for out in cell.get("outputs", []):
                parts.append("".join(out.get("text", "")))
                for key in ("text/plain", "text/html", "text/markdown"):
                    parts.append("".join(out.get("data", {}).get(key, "")))
        _PRINTED[lab_dir] = "\n".join(parts)
    return _PRINTED[lab_dir]


def _text_numbers(lab_dir: str) -> list[tuple[str, Any]]:
    texts = []
    student = STUDENT / lab_dir / f"{lab_dir}.ipynb"
    if student.exists():
        texts.append(("student notebook", "\n".join("".join(c["source"]) for c in json.loads(student.read_text())["cells"])))
        texts.append(("what the student notebook prints", _printed(lab_dir)))
    for doc in sorted((ROOT / "docs").glob("*.md")):
        texts.append((f"docs/{doc.name}", doc.read_text()))
    out: list[tuple[str, Any]] = []
    for where, text in texts:
        for m in set(NUMBER.findall(text.replace(",", ""))):
            with contextlib.suppress(ValueError, OverflowError):
                value = float(m)
                if not _distinctive(value):
                    continue
                out += [(f"{where}: {m}", value)] + ([(f"{where}: {m}", int(value))] if value.is_integer() else [])
    return out


def _distinctive(value: float) -> bool:
    """A number nobody hits by chance: at least 100, or a fraction with three significant digits."""
    if abs(value) >= 100:
        return True
    return not float(value).is_integer() and len(f"{abs(value):.6g}".replace(".", "").lstrip("0")) >= 3


def _guessable(answer: Any) -> bool:
    return isinstance(answer, bool) or (isinstance(answer, int) and abs(answer) < 100)


def _ids() -> list[str]:
    return [f"{p.parent.name}:{cell.metadata['nbgrader']['grade_id']}" for p in SOURCES for _, cell, _ in _exercises(p)]


@pytest.mark.parametrize("target", _ids())
def test_no_answer_comes_from_the_package_or_the_text(target):
    lab_dir, grade_id = target.split(":")
    path = ROOT / "labs" / "source" / lab_dir / f"{lab_dir}.ipynb"
    cells = nbformat.read(path, as_version=4).cells
    index, answer_cell, test_cell = next(e for e in _exercises(path) if e[1].metadata["nbgrader"]["grade_id"] == grade_id)
    before = _run_cells(cells, index)
    solved = dict(before)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Exception):
        exec(compile(_strip(answer_cell.source), grade_id, "exec"), solved)  # noqa: S102
    if not _passes(solved, test_cell.source):
        pytest.fail(f"{target}: the instructor's answer fails its own test in this harness")
    graded = read_names(test_cell.source)
    answers = sorted(n for n in bound_names(_strip(answer_cell.source)) if n in solved and n in graded)
    assert answers, f"{target}: no answer names"
    forbidden = forbidden_calls_of(answer_cell)
    functions = _public_functions(_modules(before, lab_dir[:2]), forbidden)
    candidates = _package_candidates(before, functions) + _text_numbers(lab_dir)
    free: dict[str, str] = {}
    for name in answers:
        want = solved[name]
        for source, value in candidates:
            if _same_kind(value, want) and _passes({**solved, name: value}, test_cell.source):
                free[name] = f"{source} -> {value!r:.60}"
                break
    protected = [n for n in answers if n not in free and not _guessable(solved[n])]
    assert protected, f"{target}: every answer it grades passes without the skill: {free}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.parent.name)
def test_no_prediction_is_autograded(path):
    """A notebook cannot show that a prediction was made before the data it predicts was seen, so
    no autograded test reads a prediction (the hand-graded reason beside it carries the points)."""
    cells = nbformat.read(path, as_version=4).cells
    graded = [c for c in cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
              and not c.metadata["nbgrader"].get("solution")]
    read = set().union(*(read_names(c.source) for c in graded)) if graded else set()
    assert not sorted(n for n in read if n.startswith("predict")), f"{path.parent.name}: autograded predictions"
