"""The class view: every learner's machine and measurements in one place for the instructor.

- ``gdrlab class serve`` (instructor): :mod:`.app` (Starlette on uvicorn) over :mod:`.store`
  (SQLAlchemy Core: SQLite by default, PostgreSQL by URL). Needs the ``class`` extra
  (``pip install 'gdrlab[class]'``; ``gdrlab[postgres]`` adds psycopg).
- ``gdrlab class join URL --name NAME`` and ``gdrlab class submit [FILES]`` (learners), or from
  a lab :func:`submit`: :mod:`.client`, standard library only.
- What a learner may send, and the caps: :mod:`.schema`.
- A lab's "send to the class" button: :func:`submit_button` (:mod:`.button`).
- "Is this number normal" on the dashboard: :mod:`.normal`; exports and reading them back: :mod:`.export`.
"""
from __future__ import annotations

from typing import Any

from .button import submit_button

__all__ = ["join", "submit", "submit_button"]


def submit(df: Any = None, **kw: Any) -> dict[str, Any]:
    """Send ``df`` (a result DataFrame with provenance, or a list of them) and this machine's doctor
    report to the class joined with ``gdrlab class join``; see :func:`gdrlab.classroom.client.submit`."""
    from .client import submit as _submit
    return _submit(df, **kw)


def join(url: str, name: str, **kw: Any) -> dict[str, Any]:
    """Join the class at the instructor's join URL; see :func:`gdrlab.classroom.client.join`."""
    from .client import join as _join
    return _join(url, name, **kw)
