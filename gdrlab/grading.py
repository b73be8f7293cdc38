"""Checks used by the labs' autograder cells, with messages a learner can act on.

Every check raises ``AssertionError`` (what nbgrader counts as a failed test) whose message says
what was expected, what was found and, where it helps, a hint. Exercises are graded on
deterministic data only: recorded datasets (:func:`dataset`) and the model, never on a live
measurement, so a grade does not depend on the machine that runs the grader.
"""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "check_close", "check_between", "check_equal", "check_set_equal", "check_true", "check_callable",
    "check_function_cases", "dataset",
]


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


def check_close(value: Any, expected: float, *, rel: float = 0.05, abs_tol: float = 0.0, name: str = "value",
                unit: str = "", hint: str = "") -> None:
    """Pass when ``value`` is within ``rel`` (relative) or ``abs_tol`` (absolute) of ``expected``."""
    if rel < 0 or abs_tol < 0:
        raise ValueError("rel and abs_tol must be non-negative")
    got = _number(value, name)
    want = _number(expected, "the expected value")
    if math.isclose(got, want, rel_tol=rel, abs_tol=abs_tol):
        return
    tol = f"within {rel:.0%}" if abs_tol == 0 else f"within {rel:.0%} or {_fmt(abs_tol, unit)}"
    ratio = f" (you are off by a factor {got / want:.3g})" if want != 0 and got != 0 else ""
    raise AssertionError(f"{name} = {_fmt(got, unit)}, expected about {_fmt(want, unit)} ({tol}){ratio}."
                         + (f" Hint: {hint}" if hint else ""))


def check_between(value: Any, low: float, high: float, *, name: str = "value", unit: str = "",
                  hint: str = "") -> None:
    """Pass when ``low <= value <= high``."""
    got = _number(value, name)
    if low <= got <= high:
        return
    raise AssertionError(f"{name} = {_fmt(got, unit)}, expected between {_fmt(low, unit)} and {_fmt(high, unit)}."
                         + (f" Hint: {hint}" if hint else ""))


def check_equal(value: Any, expected: Any, *, name: str = "value", hint: str = "") -> None:
    """Pass when ``value == expected`` (strings compare without surrounding spaces, case-sensitively)."""
    if value is None or value is Ellipsis:
        raise AssertionError(f"{name} is still {value!r}: fill in the exercise cell above and run it")
    a = value.strip() if isinstance(value, str) else value
    b = expected.strip() if isinstance(expected, str) else expected
    if a == b:
        return
    raise AssertionError(f"{name} = {value!r}, expected {expected!r}." + (f" Hint: {hint}" if hint else ""))


def check_set_equal(values: Iterable[Any], expected: Iterable[Any], *, name: str = "answer", hint: str = "") -> None:
    """Pass when ``values`` holds exactly the items of ``expected`` (order does not matter)."""
    if values is None or isinstance(values, (str, bytes)):
        raise AssertionError(f"{name} should be a list or set of items, got {values!r}")
    got, want = set(values), set(expected)
    if got == want:
        return
    parts = []
    if want - got:
        parts.append(f"missing {sorted(map(str, want - got))}")
    if got - want:
        parts.append(f"should not contain {sorted(map(str, got - want))}")
    raise AssertionError(f"{name}: " + "; ".join(parts) + "." + (f" Hint: {hint}" if hint else ""))


def check_true(condition: Any, message: str) -> None:
    """Pass when ``condition`` is truthy; otherwise fail with ``message``."""
    if not condition:
        raise AssertionError(message)


def check_callable(fn: Any, *, name: str = "your function") -> None:
    """Pass when ``fn`` is a function (a learner may have left it as ``None``)."""
    if not callable(fn):
        raise AssertionError(f"{name} should be a function, got {fn!r}: define it in the exercise cell")


def check_function_cases(fn: Callable[..., Any], cases: Iterable[tuple[tuple[Any, ...], Any]], *, name: str = "your function",
                         rel: float | None = None) -> None:
    """Call ``fn(*args)`` for each ``(args, expected)`` and compare (``rel`` for numbers)."""
    check_callable(fn, name=name)
    for args, expected in cases:
        call = f"{name}({', '.join(map(repr, args))})"
        try:
            got = fn(*args)
        except NotImplementedError:
            raise AssertionError(f"{call} raised NotImplementedError: the exercise is not done yet") from None
        except Exception as exc:  # a learner's bug: say which call and why
            raise AssertionError(f"{call} raised {type(exc).__name__}: {exc}") from None
        if rel is not None and isinstance(expected, numbers.Real) and not isinstance(expected, bool):
            check_close(got, float(expected), rel=rel, name=call)
        else:
            check_equal(got, expected, name=call)


def dataset(name: str) -> pd.DataFrame:
    """A deterministic dataset for an exercise: a recorded file (see :mod:`gdrlab.recorded`),
    as a DataFrame with ``attrs["provenance"]``. Raises ``RecordedDataMissing`` when absent."""
    from .recorded import load
    return load(name)
