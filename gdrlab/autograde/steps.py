"""nbgrader steps for a grade an instructor can trust (configured in ``labs/nbgrader_config.py``).

* :class:`ScreenAnswers` (autograde, before execution): every code cell the learner controls is
  screened (:mod:`gdrlab.autograde.screen`); a refused cell is not run: its text is kept as
  comments under one line that says why, so the tests after it fail with that reason, in the
  feedback too. A cell is the lab's own only where its source is, character for character, the
  instructor's locked or test cell in the gradebook; every other code cell (an answer, a cell the
  learner added, a locked cell whose metadata was edited) is screened.
* :class:`SandboxedExecute` (autograde, replaces nbgrader's ``Execute``): the kernel runs in a
  temporary folder holding a copy of the one submission, started through
  :mod:`gdrlab.autograde.landlock`, so it cannot read the course's ``source/``, other learners'
  folders or ``gradebook.db``.
* :class:`ScrubFeedback` (generate_feedback): test cells show their visible part only, and an
  error in a test cell shows the failing check's message, never a traceback through hidden tests.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.manager import AsyncKernelManager
from nbconvert.exporters.exporter import ResourcesDict
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Bool, Dict, List, Unicode

from . import landlock
from .screen import bound_names, forbidden_calls_of, import_map, read_names, screen

__all__ = ["FORBIDDEN_CALLS", "SandboxedExecute", "ScreenAnswers", "ScrubFeedback", "configure"]

_HIDDEN = re.compile(r"^[ \t]*#+[ \t]*BEGIN HIDDEN TESTS.*?^[ \t]*#+[ \t]*END HIDDEN TESTS[^\n]*\n?", re.MULTILINE | re.DOTALL)

# Per exercise (the answer cell's grade_id): package functions that compute its graded value,
# {grade_id: {name: why}}. The labs say this beside the exercise, in the answer cell's metadata
# (``gdrlab={"forbid": {...}}`` in the cell header of labs/src); this table adds to it (config).
FORBIDDEN_CALLS: dict[str, dict[str, str]] = {}


def _nbgrader(cell: NotebookNode) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


class ScreenAnswers(NbGraderPreprocessor):
    """Refuses, before anything runs, the answer cells that hook the grader or skip the skill."""

    enabled = Bool(True).tag(config=True)
    forbidden_calls = Dict(FORBIDDEN_CALLS, help="{answer grade_id: {name: why}} refused in that answer").tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: ResourcesDict) -> tuple[NotebookNode, ResourcesDict]:
        if not self.enabled:
            return nb, resources
        trusted, answers, forbid = self._lab_cells(resources)
        for answer_id, extra in self.forbidden_calls.items():
            forbid.setdefault(answer_id, {}).update(extra)
        # Names the tests read, except the answers the learner must set: the learner reads them
        # and does not rebind them (a lab cell deleted from the submission protects them all the
        # same); the lab's imports may be repeated as they are.
        protected: set[str] = set()
        lab_imports: dict[str, str] = {}
        for source, is_test in trusted.items():
            if is_test:
                protected |= read_names(source)
            lab_imports.update(import_map(source))
        protected -= set().union(*(bound_names(a) for a in answers)) if answers else set()
        refused = 0
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or cell.source in trusted:
                continue
            gid = _nbgrader(cell).get("grade_id")
            findings = screen(cell.source, protected=protected, forbidden_calls=forbid.get(gid or "", {}),
                              lab_imports=lab_imports)
            if findings:
                refused += 1
                where = gid or f"cell {index + 1}"
                self.log.warning("Screened out %s of %s: %s", where, resources.get("nbgrader", {}).get("student", "?"),
                                 "; ".join(map(str, findings)))
                cell.source = _refusal(cell.source, findings)
        resources.setdefault("gdrlab", {})["screened_out"] = refused
        return nb, resources

    def _lab_cells(self, resources: ResourcesDict) -> tuple[dict[str, bool], list[str], dict[str, dict[str, str]]]:
        """({source: is a test cell} of the lab's own code cells, the answer cells' sources,
        {answer grade_id: calls it forbids}), read from the instructor's notebook in the course's
        source folder. A cell is the lab's when its text is one of these, whatever its metadata
        says."""
        from nbgrader.coursedir import CourseDirectory

        info = resources.get("nbgrader", {})
        if not info.get("assignment") or not info.get("notebook"):
            return {}, [], {}
        cd = CourseDirectory(config=self.config)
        path = Path(cd.format_path(cd.source_directory, ".", info["assignment"])) / f"{info['notebook']}.ipynb"
        if not path.is_file():
            self.log.warning("No source notebook %s: every code cell is screened", path)
            return {}, [], {}
        out: dict[str, bool] = {}
        answers: list[str] = []
        forbid: dict[str, dict[str, str]] = {}
        for cell in nbformat.read(str(path), as_version=4).cells:
            meta = _nbgrader(cell)
            if cell.cell_type != "code":
                continue
            if meta.get("solution"):
                answers.append(cell.source)
                forbid[meta.get("grade_id", "")] = forbidden_calls_of(cell)
                continue
            is_test = bool(meta.get("grade"))
            out[cell.source] = is_test
            if is_test:  # the learner's copy: hidden tests cut (OverwriteCells puts them back first)
                out.setdefault(_HIDDEN.sub("", cell.source), True)
        return out, answers, forbid


def _imports_only(source: str) -> set[str]:
    import ast
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {(a.asname or a.name).split(".")[0] for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
            for a in node.names if a.name != "*"}


def _refusal(source: str, findings: list) -> str:
    reasons = "; ".join(map(str, findings[:5])) + (f" (and {len(findings) - 5} more)" if len(findings) > 5 else "")
    kept = "\n".join("# " + line for line in source.splitlines())
    message = f"the grader did not run this cell: {reasons}. See the lab's grading rules in docs/instructor.md."
    return f"{kept}\nraise RuntimeError({message!r})\n"


class _SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel through the Landlock wrapper, confined to ``sandbox_dir``."""

    sandbox_dir = Unicode("").tag(config=False)
    read_only = List(Unicode()).tag(config=False)

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        ro: list[str] = []
        for path in self.read_only:
            ro += ["--ro", path]
        if self.connection_file:
            ro += ["--ro", os.path.abspath(self.connection_file)]
        return [sys.executable, "-m", "gdrlab.autograde.landlock", *ro, "--rw", self.sandbox_dir,
                "--home", os.path.join(self.sandbox_dir, "env"), "--", *cmd]


class SandboxedExecute(Execute):
    """nbgrader's Execute with the kernel in a temporary folder it alone can write, unable to read
    the course folder. ``require_sandbox`` (default on) makes a machine without Landlock refuse to
    grade, with the reason, rather than grade with a kernel that can read the instructor's files."""

    require_sandbox = Bool(True, help="refuse to grade where the Landlock sandbox cannot be applied").tag(config=True)
    extra_read_paths = List(Unicode(), help="more paths the kernel may read (data a lab needs)").tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: ResourcesDict, *args: Any, **kwargs: Any) -> Any:
        ok, why = landlock.available()
        if not ok:
            if self.require_sandbox:
                raise RuntimeError(f"gdrlab grading: the kernel sandbox cannot be applied here ({why}); set "
                                   "c.SandboxedExecute.require_sandbox = False to grade without it (the kernel "
                                   "could then read the course folder: docs/nbgrader-workflow.md)")
            self.log.warning("Grading without the kernel sandbox: %s", why)
            return super().preprocess(nb, resources, *args, **kwargs)
        submission = Path(resources.get("metadata", {}).get("path") or os.getcwd()).resolve()
        course = _course_folders(self.config, submission, resources.get("nbgrader", {}).get("db_url", ""))
        box = Path(tempfile.mkdtemp(prefix="gdrlab-grade-"))
        work = box / "work"
        try:
            shutil.copytree(submission, work, symlinks=False,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "gradebook.db"))
            self._box, self._course = box, course
            resources.setdefault("metadata", {})["path"] = str(work)
            return super().preprocess(nb, resources, *args, **kwargs)
        finally:
            resources["metadata"]["path"] = str(submission)
            shutil.rmtree(box, ignore_errors=True)

    def create_kernel_manager(self) -> Any:
        box = getattr(self, "_box", None)
        if box is None:
            return super().create_kernel_manager()
        self.kernel_manager_class = _SandboxedKernelManager
        km = super().create_kernel_manager()
        km.sandbox_dir = str(box)
        km.read_only = _readable_paths(self._course, list(self.extra_read_paths))
        return km


def _course_folders(config: Any, submission: Path, db_url: str) -> list[Path]:
    """The folders the kernel must not see: the course root nbgrader is configured with, the one
    the submission lies in (``autograded/<student>/<lab>`` below it) and the gradebook's."""
    from nbgrader.coursedir import CourseDirectory

    folders = [Path(CourseDirectory(config=config).root).resolve()]
    if len(submission.parents) > 2:
        folders.append(submission.parents[2])
    if db_url.startswith("sqlite:///"):
        folders.append(Path(db_url[len("sqlite:///"):]).resolve().parent)
    return folders


def _readable_paths(course: list[Path], extra: list[str]) -> list[str]:
    """What the grading kernel may read: the interpreter, its packages and the system, never a
    path that holds a course folder or lies inside one."""
    import gdrlab

    candidates = ["/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/dev",
                  sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path, *list(gdrlab.__path__), *extra]
    native = sys.modules.get("gdrlab._native")
    if native is not None and getattr(native, "__file__", None):
        candidates.append(os.path.dirname(str(native.__file__)))
    out: list[str] = []
    for path in candidates:
        if not path:
            continue
        real = Path(path).resolve()
        if not real.exists() or real == Path("/"):
            continue
        if any(real == c or real in c.parents or c in real.parents for c in course):
            continue  # would expose the course folder (a checkout on sys.path, say)
        if str(real) not in out:
            out.append(str(real))
    return out


class ScrubFeedback(NbGraderPreprocessor):
    """Feedback without the hidden tests: their source is cut from test cells, and an error in a
    test cell keeps only the failing check's message (a traceback would quote hidden lines)."""

    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: ResourcesDict) -> tuple[NotebookNode, ResourcesDict]:
        if not self.enabled:
            return nb, resources
        for cell in nb.cells:
            meta = _nbgrader(cell)
            if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
                continue
            had_hidden = bool(_HIDDEN.search(cell.source))
            cell.source = _HIDDEN.sub("# (hidden tests: not shown)\n", cell.source)
            outputs = []
            for out in cell.get("outputs", []):
                if out.get("output_type") != "error":
                    continue  # what a test cell prints may come from its hidden part
                ename = str(out.get("ename", "Error"))
                if ename == "AssertionError":
                    text = str(out.get("evalue", "")) or "a check failed"
                else:
                    text = (f"the {'hidden ' if had_hidden else ''}checks could not run on your answer ({ename}); "
                            "run the cell yourself to see why")
                out["evalue"] = text
                out["traceback"] = [f"{ename}: {text}"]
                outputs.append(out)
            cell["outputs"] = outputs
        return nb, resources


def configure(c: Any, *, timeout_s: int = 300) -> None:
    """Puts the three steps into an nbgrader configuration ``c`` (``labs/nbgrader_config.py``
    calls this): nbgrader's own autograde and feedback steps, with the screen before execution,
    the sandboxed execution in place of ``Execute`` and the scrub before the HTML is written."""
    from nbconvert.preprocessors import (
        ClearMetadataPreprocessor,
        CSSHTMLHeaderPreprocessor,
    )
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        GetGrades,
        IgnorePattern,
        LimitOutput,
        SaveAutoGrades,
    )

    c.Autograde.autograde_preprocessors = [ScreenAnswers, SandboxedExecute, IgnorePattern, ClearMetadataPreprocessor,
                                           LimitOutput, SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
    # generous per cell: a live sweep on a slow machine may take a while; graded cells do not
    c.SandboxedExecute.timeout = timeout_s
    c.GenerateFeedback.preprocessors = [GetGrades, ScrubFeedback, CSSHTMLHeaderPreprocessor]
