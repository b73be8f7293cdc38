"""The answer screen (gdrlab.autograde.screen): every instructor solution passes it, and the ways
a learner can pass tests without the skill are refused, each with a reason and its line.

The attacks are the grading review's (an input transformer, exec of the instructor's cells,
package calls that compute the answer, private tables) and the ones that follow from the
kernel sharing one namespace with the tests (rebinding what the tests read, objects whose
comparison lies, reaching the interpreter through dunders, frames or other modules).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from gdrlab.autograde.screen import (
    bound_names,
    forbidden_calls_of,
    import_map,
    read_names,
    screen,
)

nbformat = pytest.importorskip("nbformat")


ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "labs" / "source").glob("*/*.ipynb"))
MARKER = re.compile(r"^\s*#+\s*(BEGIN|END) SOLUTION\s*$")


def _lab(path: Path) -> tuple[list, set[str], dict[str, str]]:
    """(solution cells, names the tests read that answers do not set, the lab's imports), as
    ScreenAnswers computes them from the source notebook."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    answers = [c for c in code if c.metadata.get("nbgrader", {}).get("solution")]
    tests = [c for c in code if c.metadata.get("nbgrader", {}).get("grade") and c not in answers]
    protected = set().union(*(read_names(c.source) for c in tests)) - set().union(*(bound_names(c.source) for c in answers))
    imports: dict[str, str] = {}
    for c in code:
        if c not in answers:
            imports.update(import_map(c.source))
    return answers, protected, imports


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.parent.name)
def test_every_instructor_solution_passes_the_screen(path):
    answers, protected, imports = _lab(path)
    assert answers
    for cell in answers:
        gid = cell.metadata["nbgrader"]["grade_id"]
        text = "\n".join(line for line in cell.source.splitlines() if not MARKER.match(line))
        assert screen(text, protected=protected, forbidden_calls=forbidden_calls_of(cell), lab_imports=imports) == [], gid


def test_the_tests_read_names_are_protected_in_every_lab():
    """The checks module and the builtins the tests call can never be rebound."""
    for path in SOURCES:
        _, protected, _ = _lab(path)
        assert "grading" in protected, path.name


ATTACKS = {
    # the review's one line: later test cells become `pass`
    "input transformer": "get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])",
    "transformer through IPython": "import IPython\nIPython.get_ipython().input_transformers_post.append(str)",
    "line magic": "%config InteractiveShell.ast_node_interactivity='none'",
    "shell escape": "!cat ../../../source/01-bar1-exposure/01-bar1-exposure.ipynb",
    "cell magic": "%%capture\nprint(1)",
    # the review's peek: exec the instructor's cells
    "peek and exec": "import json\nnb = json.load(open('../../../source/01/01.ipynb'))\nexec(nb['cells'][3]['source'])",
    "open a file": "text = open('/srv/course/gradebook.db', 'rb').read()",
    "pandas reads a file": "import pandas as pd\nd = pd.read_csv('../../../source/x.csv')",
    "numpy reads a file": "import numpy as np\nd = np.load('../../x.npy', allow_pickle=True)",
    "eval a string": "answer = eval('6*7')",
    "compile a string": "c = compile('x=1', 'f', 'exec')",
    "dunder import": "os = __import__('os')",
    "sys settrace": "import sys\nsys.settrace(lambda *a: None)",
    "sys.modules edit": "from gdrlab import model\nmodel.sys.modules['gdrlab.grading'] = None",
    "builtins": "import builtins\nbuiltins.isinstance = lambda *a: True",
    "subclasses walk": "ok = ().__class__.__base__.__subclasses__()",
    "rebind the checks": "grading = None",
    "fake checks class": "class grading:\n    check_close = staticmethod(lambda *a, **k: None)",
    "fake checks import": "from gdrlab import model as grading",
    "shadow a builtin": "def isinstance(*args):\n    return True",
    "shadow in a loop": "for len in [lambda x: 6]:\n    pass",
    "delete the checks": "del grading",
    "global rebind": "def f():\n    global grading\n    grading = 1\nf()",
    "patch a check": "grading.check_close = lambda *a, **k: None",
    "patch the model": "model.get_profile = lambda name: None",
    "patch a profile": "lab01.K20_PROFILE = 'h200'",
    "patch through subscript": "model.__dict__['x'] = 1",
    "lying float": "class F(float):\n    def __eq__(self, other):\n        return True\nanswer = F(1)",
    "lying float by type()": "F = type('F', (float,), {'__eq__': lambda s, o: True})",
    "dunder as a string": "key = '__eq__'",
    "format reaches attributes": "s = '{0.__class__}'.format(1)",
    "format reaches private attributes": "s = '{0._topo}'.format(topology)",
    "getattr": "f = getattr(model, 'bar1_available_bytes')",
    "vars": "v = vars(model)",
    "globals": "g = globals()['grading']",
    "private module import": "from gdrlab.topology._topo import _NCCL_PATHS",
    "private table by attribute": "import gdrlab.topology\nt = gdrlab.topology._topo._NCCL_PATHS",
    "private name from a module": "from gdrlab.topology import _topo",
    "star import": "from gdrlab.labsupport.lab04 import *",
    "grader import": "import gdrlab.grading",
    "grader's own module": "from gdrlab.autograde import steps",
    "a module through another": "from gdrlab.hw import sysfs\nsysfs.subprocess.run(['cat', '/etc/passwd'])",
    "os through another": "import gdrlab.engine\ngdrlab.engine.os.system('id')",
    "frames": "def g():\n    yield 1\nf = g().gi_frame.f_back",
    "traceback frames": "try:\n    1/0\nexcept Exception as e:\n    f = e.__traceback__.tb_frame",
    "not importable": "import subprocess",
    "ctypes": "import ctypes",
    "relative import": "from . import x",
    "pandas query": "import pandas as pd\npd.DataFrame({'a': [1]}).query('a > 0')",
    "unparseable": "def (",
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attacks_are_refused_with_a_reason_and_a_line(name):
    findings = screen(ATTACKS[name], protected={"grading", "model", "lab01", "topology"},
                      lab_imports={"model": "gdrlab.model", "grading": "gdrlab.grading"})
    assert findings, f"{name} passed the screen"
    assert all(f.line >= 1 and len(f.reason) > 10 for f in findings)


def _forbids() -> dict[str, dict[str, str]]:
    return {c.metadata["nbgrader"]["grade_id"]: forbidden_calls_of(c) for path in SOURCES for c in _lab(path)[0]}


def test_the_labs_forbid_the_calls_that_compute_their_answers():
    forbids = _forbids()
    assert forbids["ex1-k20-max"] and forbids["ex3-sysfs-index"]


@pytest.mark.parametrize("grade_id,call", [
    ("ex1-k20-max", "k20_max_register_bytes = model.bar1_available_bytes(lab01.K20_PROFILE)"),
    ("ex1-k20-max", "from gdrlab.model import bar1_available_bytes"),
    ("ex2-k20-count", "n = model.bar1_available_bytes(lab01.K20_PROFILE) // (64 << 20)"),
    ("ex3-sysfs-index", "from gdrlab.hw import bars\nbars.bar_layout('')"),
])
def test_an_exercise_refuses_the_function_that_computes_its_answer(grade_id, call):
    assert screen(call, protected={"model", "lab01"}, forbidden_calls=_forbids()[grade_id])
    # the same call elsewhere is not refused by this rule
    assert not screen(call, protected={"model", "lab01"}, forbidden_calls={})


@pytest.mark.parametrize("code", [
    "x = 3 * 4\ny = [i ** 2 for i in range(x)]",
    "import numpy as np\nslope, intercept = np.polyfit([1, 2, 3], [2, 4, 6], 1)",
    "import math\nfrom fractions import Fraction\nz = math.log2(1024) + Fraction(1, 3)",
    "def policy(n, alpha, beta):\n    return 'gdr' if n < alpha / beta else 'pipelined'",
    "class Row:\n    def __init__(self, a):\n        self._a = a\n\n    def __repr__(self):\n        return f'Row({self._a})'",
    "from gdrlab import model\np = model.get_profile('hopper-ndr').params",
    "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\ndf['b'] = df['a'] * 2",
    "try:\n    v = 1 / 0\nexcept ZeroDivisionError as exc:\n    v = None",
])
def test_ordinary_answers_pass(code):
    assert screen(code, protected={"grading", "model"}, lab_imports={"model": "gdrlab.model"}) == []


def test_repeating_the_labs_own_import_is_allowed_and_another_is_not():
    lab = {"np": "numpy", "model": "gdrlab.model"}
    assert screen("import numpy as np", protected={"np"}, lab_imports=lab) == []
    assert screen("import pandas as np", protected={"np"}, lab_imports=lab)
    assert screen("from gdrlab import model", protected={"model"}, lab_imports=lab) == []
