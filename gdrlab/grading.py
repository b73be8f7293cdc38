"""Checks used by the labs' autograder cells, with messages a learner can act on.

Every check raises ``AssertionError`` (what nbgrader counts as a failed test) whose message says
what was found, what kind of mistake it looks like and, where it helps, a hint; never the
expected value (feedback is read by the next cohort too). Exercises are graded on
deterministic data only: recorded datasets (:func:`dataset`) and the model, never on a live
measurement, so a grade does not depend on the machine that runs the grader.
"""
from __future__ import annotations

import math
import numbers
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "done", "graded_run", "check_close", "check_between", "check_equal", "check_set_equal", "check_true", "check_callable",
    "check_function_cases", "dataset",
]


def graded_run() -> bool:
    """True while nbgrader runs the notebook (autograde, validate): an unfinished answer then
    fails its checks. In a learner's own Run All it does not stop the notebook."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def _unset(value: Any) -> bool:
    return value is None or value is Ellipsis


def _pending(name: str, why: str) -> bool:
    """Outside a graded run: say the exercise is not done yet and let Run All go on (True).
    In a graded run: fail (AssertionError)."""
    if graded_run():
        raise AssertionError(f"{name} {why}: fill in the exercise cell above and run it")
    print(f"not done yet: {name} {why}. The notebook goes on; this check fails when graded.")
    return True


def done(*values: Any, name: str = "this exercise") -> bool:
    """Whether every answer in ``values`` is set (not ``None`` or ``...``). Lab cells that use an
    answer ask first, so Run All reaches the end of an unfinished lab; in a graded run it is
    always True, so the checks that follow run and fail on an unset answer."""
    if graded_run() or not any(_unset(v) for v in values):
        return True
    print(f"not done yet: {name}; the cells that need it show the rest without it.")
    return False


def _number(value: Any, name: str) -> float:
    if value is None or value is Ellipsis:
        raise AssertionError(f"{name} is still {value!r}: fill in the exercise cell above and run it")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        try:
            value = _item(value)
        except (AttributeError, ValueError, TypeError):
            raise AssertionError(f"{name} should be a number, got {type(value).__name__}: {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise AssertionError(f"{name} should be a number, got {type(value).__name__}: {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise AssertionError(f"{name} is {value}: check for a division by zero or an empty selection")
    return value


def _item(value: Any) -> Any:
    """A numpy scalar or 0-d array as a Python number; AttributeError, ValueError or TypeError
    for anything else (a bool has no ``item``)."""
    return value.item()


def _fmt(x: float, unit: str) -> str:
    return f"{x:.4g}" + (f" {unit}" if unit else "")


def _unit_slip(got: float, want: float) -> str:
    """' (off by about a factor 1000: check the units)' where the ratio looks like a unit mistake."""
    if got == 0 or want == 0 or (got > 0) != (want > 0):
        return ""
    ratio = abs(got / want)
    for factor, what in ((1e3, "1000"), (1e6, "a million"), (1e9, "a billion"), (1024, "1024"), (2**20, "2**20"),
                         (2**30, "2**30"), (8, "8 (bits and bytes?)"), (1.024, "1.024 (GB and GiB?)"),
                         (1.048576, "1.05 (MB and MiB?)"), (1.073741824, "1.07 (GB and GiB?)")):
        for r in (factor, 1 / factor):
            if math.isclose(ratio, r, rel_tol=0.02):
                return f" (off by about a factor {what}: check the units)"
    return ""


def check_close(value: Any, expected: float, *, rel: float = 0.05, abs_tol: float = 0.0, name: str = "value",
                unit: str = "", hint: str = "") -> None:
    """Pass when ``value`` is within ``rel`` (relative) or ``abs_tol`` (absolute) of ``expected``."""
    if rel < 0 or abs_tol < 0:
        raise ValueError("rel and abs_tol must be non-negative")
    if _unset(value) and _pending(name, f"is still {value!r}"):
        return
    got = _number(value, name)
    want = _number(expected, "the expected value")
    if math.isclose(got, want, rel_tol=rel, abs_tol=abs_tol):
        return
    tol = f"within {rel:.0%}" if abs_tol == 0 else f"within {rel:.0%} or {_fmt(abs_tol, unit)}"
    raise AssertionError(f"{name} = {_fmt(got, unit)} is not {tol} of the expected value{_unit_slip(got, want)}."
                         + (f" Hint: {hint}" if hint else ""))


def check_between(value: Any, low: float, high: float, *, name: str = "value", unit: str = "",
                  hint: str = "") -> None:
    """Pass when ``low <= value <= high``."""
    if _unset(value) and _pending(name, f"is still {value!r}"):
        return
    got = _number(value, name)
    if low <= got <= high:
        return
    side = "too low" if got < low else "too high"
    raise AssertionError(f"{name} = {_fmt(got, unit)} is outside the accepted range ({side})."
                         + (f" Hint: {hint}" if hint else ""))


def check_equal(value: Any, expected: Any, *, name: str = "value", hint: str = "") -> None:
    """Pass when ``value == expected`` (strings compare without surrounding spaces, case-sensitively)."""
    if _unset(value) and _pending(name, f"is still {value!r}"):
        return
    a = value.strip() if isinstance(value, str) else value
    b = expected.strip() if isinstance(expected, str) else expected
    if a == b:
        return
    shown = repr(value) if len(repr(value)) <= 200 else repr(value)[:200] + "..."
    raise AssertionError(f"{name} = {shown} is not the expected answer." + (f" Hint: {hint}" if hint else ""))


def check_set_equal(values: Iterable[Any], expected: Iterable[Any], *, name: str = "answer", hint: str = "") -> None:
    """Pass when ``values`` holds exactly the items of ``expected`` (order does not matter)."""
    if _unset(values) and _pending(name, f"is still {values!r}"):
        return
    if isinstance(values, (str, bytes)):
        raise AssertionError(f"{name} should be a list or set of items, got {values!r}")
    got, want = set(values), set(expected)
    if got == want:
        return
    parts = []
    if want - got:
        parts.append(f"{len(want - got)} item(s) missing")
    if got - want:
        parts.append(f"{len(got - want)} item(s) that should not be there: {sorted(map(str, got - want))}")
    raise AssertionError(f"{name}: " + "; ".join(parts) + "." + (f" Hint: {hint}" if hint else ""))


def check_true(condition: Any, message: str, *, answer: Any = True, name: str = "the answer") -> None:
    """Pass when ``condition`` is truthy; otherwise fail with ``message``. Give the ``answer`` the
    condition is about, and an unset one is "not done yet" rather than a failure outside grading."""
    if _unset(answer) and _pending(name, f"is still {answer!r}"):
        return
    if not condition:
        raise AssertionError(message)


def check_callable(fn: Any, *, name: str = "your function") -> None:
    """Pass when ``fn`` is a function (a learner may have left it as ``None``)."""
    if _unset(fn) and _pending(name, f"is still {fn!r}"):
        return
    if not callable(fn):
        raise AssertionError(f"{name} should be a function, got {fn!r}: define it in the exercise cell")


def check_function_cases(fn: Callable[..., Any], cases: Iterable[tuple[tuple[Any, ...], Any]], *, name: str = "your function",
                         rel: float | None = None) -> None:
    """Call ``fn(*args)`` for each ``(args, expected)`` and compare (``rel`` for numbers). A stub
    (``None``, or a function that raises NotImplementedError or returns ``None`` or ``...`` where
    an answer is expected) is "not done yet" outside grading."""
    if _unset(fn) and _pending(name, f"is still {fn!r}"):
        return
    check_callable(fn, name=name)
    for args, expected in cases:
        call = f"{name}({', '.join(map(repr, args))})"
        try:
            got = fn(*args)
        except NotImplementedError:
            if _pending(name, "raises NotImplementedError"):
                return
            raise  # not reached: _pending raises in a graded run
        except Exception as exc:  # a learner's bug: say which call and why
            raise AssertionError(f"{call} raised {type(exc).__name__}: {exc}") from None
        if _unset(got) and not _unset(expected) and _pending(
                name, f"returns {got!r} (not written yet, or a missing return statement)"):
            return
        if rel is not None and isinstance(expected, numbers.Real) and not isinstance(expected, bool):
            check_close(got, float(expected), rel=rel, name=call)
        else:
            check_equal(got, expected, name=call)


def dataset(name: str) -> pd.DataFrame:
    """A deterministic dataset for an exercise: a recorded file (see :mod:`gdrlab.recorded`),
    as a DataFrame with ``attrs["provenance"]``. Raises ``RecordedDataMissing`` when absent."""
    from .recorded import load
    return load(name)
