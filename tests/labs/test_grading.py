"""gdrlab.grading: checks fail with messages that tell the learner what to fix."""
from __future__ import annotations

import numpy as np
import pytest

from gdrlab import grading


def test_check_close_passes_inside_and_fails_outside_tolerance():
    grading.check_close(10.4, 10.0, rel=0.05)
    with pytest.raises(AssertionError, match=r"bw = 12 GB/s is not within 5% of the expected value\.$"):
        grading.check_close(12.0, 10.0, rel=0.05, name="bw", unit="GB/s")
    grading.check_close(0.001, 0.0, abs_tol=0.01)
    grading.check_close(np.float64(2.0), 2.0)


@pytest.mark.parametrize("value,msg", [(None, "still None"), (..., "still Ellipsis"), ("12", "should be a number"),
                                       (True, "should be a number"), (float("nan"), "division by zero")])
def test_check_close_explains_unfinished_or_wrong_type_answers(value, msg, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(AssertionError, match=msg):
        grading.check_close(value, 1.0, name="answer")


def test_check_between_and_equal_and_sets():
    grading.check_between(5, 1, 10)
    with pytest.raises(AssertionError, match=r"outside the accepted range \(too high\)") as err:
        grading.check_between(11, 1, 10)
    assert "10" not in str(err.value).replace("11", "")
    grading.check_equal(" gdr ", "gdr")
    with pytest.raises(AssertionError, match="'staged' is not the expected answer. Hint: look") as err:
        grading.check_equal("staged", "gdr", hint="look at the reason column")
    assert "gdr" not in str(err.value)
    grading.check_set_equal(["b", "a"], {"a", "b"})
    with pytest.raises(AssertionError, match=r"1 item\(s\) missing; 1 item\(s\) that should not be there: \['x'\]") as err:
        grading.check_set_equal(["a", "x"], ["a", "c"])
    assert "'c'" not in str(err.value)
    with pytest.raises(AssertionError, match="list or set"):
        grading.check_set_equal("ab", ["a", "b"])


@pytest.mark.parametrize("got,want,slip", [(12e9, 12.0, "a billion"), (12.0, 12e3, "1000"), (80.0, 10.0, "8 (bits"),
                                           (10.24, 10.0, "GB and GiB"), (12.0, 10.0, None)])
def test_a_miss_names_a_unit_slip_and_never_the_expected_value(got, want, slip):
    with pytest.raises(AssertionError) as err:
        grading.check_close(got, want, rel=0.01, name="x")
    text = str(err.value)
    assert (slip in text) if slip else "factor" not in text
    assert f"{want:.4g}" not in text.replace(f"{got:.4g}", "")


def test_function_cases_report_the_failing_call(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    grading.check_function_cases(lambda n: n * 2, [((1,), 2), ((3,), 6)])
    with pytest.raises(AssertionError, match=r"f\(3\) = 7"):
        grading.check_function_cases(lambda n: 7, [((3,), 6)], name="f")

    def todo(n):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="raises NotImplementedError: fill in"):
        grading.check_function_cases(todo, [((1,), 1)], name="policy")
    with pytest.raises(AssertionError, match="still None: fill in"):
        grading.check_callable(None)
    with pytest.raises(AssertionError, match="should be a function"):
        grading.check_callable(3)


def test_an_unset_answer_is_not_done_in_a_run_all_and_fails_when_graded(monkeypatch, capsys):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    grading.check_close(None, 1.0, name="bw")
    grading.check_equal(..., "gdr", name="path")
    grading.check_true(False, "wrong", answer=None, name="count")

    def stub(n):
        raise NotImplementedError()

    grading.check_function_cases(stub, [((1,), 1)], name="policy")
    grading.check_function_cases(lambda n: ..., [((1,), 1)], name="policy")
    assert grading.done(1, None) is False and grading.done(1, 2) is True
    out = capsys.readouterr().out
    assert out.count("not done yet") == 6
    # a set answer that is wrong still fails, in a Run All too
    with pytest.raises(AssertionError):
        grading.check_true(False, "wrong", answer=3)
    with pytest.raises(AssertionError):
        grading.check_close(2.0, 1.0)
    for mode in ("autograde", "validate"):
        monkeypatch.setenv("NBGRADER_EXECUTION", mode)
        assert grading.done(None) is True
        for call in (lambda: grading.check_close(None, 1.0), lambda: grading.check_equal(None, 1),
                     lambda: grading.check_function_cases(stub, [((1,), 1)]),
                     lambda: grading.check_function_cases(lambda n: ..., [((1,), 1)]),
                     lambda: grading.check_true(True, "x", answer=None)):
            with pytest.raises(AssertionError, match="fill in"):
                call()
