"""Building blocks for lab notebooks in nbgrader's format (schema 3).

A lab module calls these to make its cells; ``scripts/build_labs.py`` writes the notebook with
stable cell ids (so regenerating a lab gives a small diff) and no outputs.
"""
from __future__ import annotations

import re
import textwrap

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

__all__ = ["md", "code", "solution", "tests", "answer", "notebook"]

_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def _meta(grade_id: str, *, grade: bool, solution: bool, locked: bool, points: float | None = None) -> dict:
    if not _ID.match(grade_id):
        raise ValueError(f"grade_id must match {_ID.pattern}: {grade_id!r}")
    meta = {"grade": grade, "solution": solution, "locked": locked, "grade_id": grade_id, "schema_version": 3}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def md(text: str, grade_id: str | None = None):
    """An explanation cell. With ``grade_id`` it is locked (learners cannot edit it)."""
    cell = new_markdown_cell(_src(text))
    if grade_id:
        cell.metadata.update(_meta(grade_id, grade=False, solution=False, locked=True))
    return cell


def with_svg(cell, name: str, svg: str, alt: str):
    """Show an SVG drawing where ``{name}`` stands in a markdown cell's text.

    JupyterLab's sanitizer removes inline <svg> from markdown; an <img> whose source is the SVG
    as a base64 data URL is kept, and renders in JupyterLab, VS Code and nbviewer alike."""
    import base64

    data = base64.b64encode(svg.strip().encode()).decode()
    cell.source = cell.source.replace("{" + name + "}", f'<img alt="{alt}" src="data:image/svg+xml;base64,{data}"/>')
    return cell


def code(text: str, grade_id: str | None = None):
    """A code cell learners run as is. With ``grade_id`` it is locked."""
    cell = new_code_cell(_src(text))
    if grade_id:
        cell.metadata.update(_meta(grade_id, grade=False, solution=False, locked=True))
    return cell


def solution(text: str, grade_id: str):
    """An exercise cell: the part between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` is
    replaced by a stub in the student version."""
    body = _src(text)
    if "### BEGIN SOLUTION" not in body or "### END SOLUTION" not in body:
        raise ValueError(f"solution cell {grade_id!r} needs ### BEGIN SOLUTION / ### END SOLUTION")
    cell = new_code_cell(body)
    cell.metadata.update(_meta(grade_id, grade=False, solution=True, locked=False))
    return cell


def answer(text: str, grade_id: str, points: float):
    """A written answer graded by hand (markdown, solution + grade)."""
    cell = new_markdown_cell(_src(text))
    cell.metadata.update(_meta(grade_id, grade=True, solution=True, locked=False, points=points))
    return cell


def tests(text: str, grade_id: str, points: float):
    """An autograder cell: visible checks, then ``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN
    TESTS`` (removed from the student version, run by the grader)."""
    body = _src(text)
    cell = new_code_cell(body)
    cell.metadata.update(_meta(grade_id, grade=True, solution=False, locked=True, points=points))
    return cell


def notebook(cells: list, lab: str):
    """A notebook (nbformat 4.5, python3 kernel) whose cells get stable ids ``<lab>-<n>`` or their
    grade_id, with no outputs."""
    nb = new_notebook(cells=cells)
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
        "language_info": {"name": "python"},
    }
    seen = set()
    for i, cell in enumerate(nb.cells):
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell.id = gid or f"{lab[:2]}-cell-{i:03d}"
        if cell.id in seen:
            raise ValueError(f"duplicate cell id {cell.id!r} in lab {lab}")
        seen.add(cell.id)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.validate(nb)
    return nb
