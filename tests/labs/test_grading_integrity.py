"""Every point needs the skill: the grading cannot be passed through the package.

* the student release (the source notebooks through nbgrader's own solution and hidden-test
  stripping) holds no line of any solution;
* the installed package defines no reference answers (no function, class or constant whose name
  says reference/solution/answer key);
* one-line attacks through the public API (call the topology code, call a removed reference
  function, hard-code a published or seed value) fail the hidden tests of the exercise they
  target, while the instructor's solution passes the same harness (so a failure means the
  attack lost, not that the harness is broken).

The attack harness runs only the cells an exercise needs (the lab's setup, the cells named, the
answer cell with the attack in place of the solution, then the test cell with its hidden tests),
in this process, in quick mode.
"""
from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {p.parent.name[:2]: p for p in sorted((ROOT / "labs" / "source").glob("*/*.ipynb"))}
PACKAGE = ROOT / "gdrlab"
SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.DOTALL)


def _cells(lab: str) -> dict[str, str]:
    nb = nbformat.read(SOURCES[lab], as_version=4)
    return {c.id: c.source for c in nb.cells if c.cell_type == "code"}


# ----------------------------------------------------------------------------- the release
def _released_text(path: Path) -> str:
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

    nb = nbformat.read(path, as_version=4)
    resources: dict = {}
    nb, resources = ClearSolutions().preprocess(nb, resources)
    nb, resources = ClearHiddenTests().preprocess(nb, resources)
    return "\n".join(c.source for c in nb.cells)


@pytest.mark.parametrize("lab", sorted(SOURCES))
def test_release_holds_no_line_of_any_solution(lab):
    pytest.importorskip("nbgrader")
    text = nbformat.read(SOURCES[lab], as_version=4)
    solutions = [m.group(1) for c in text.cells if c.cell_type == "code" for m in SOLUTION.finditer(c.source)]
    assert solutions, "each lab has solution regions"
    # Lines the source also has outside every solution region (a stub such as `registers = {`) are
    # scaffolding the learner is given, not solution code.
    scaffold = {line.strip() for c in text.cells if c.cell_type == "code"
                for line in SOLUTION.sub("", c.source).splitlines()}
    released_lines = {line.strip() for line in _released_text(SOURCES[lab]).splitlines()}
    leaked = [line.strip() for block in solutions for line in block.splitlines()
              if len(line.strip()) > 12 and not line.strip().startswith("#")
              and line.strip() in released_lines - scaffold]
    assert not leaked, f"solution lines survive in the student release of lab {lab}: {leaked[:5]}"


# ----------------------------------------------------------------------------- the package
FORBIDDEN = re.compile(r"(^|_)(reference|solution|solutions|answer|answers|answer_key)(_|$)", re.IGNORECASE)


def _defined_names(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name, node.lineno
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield target.id, node.lineno


def test_package_defines_no_reference_answers():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{path.relative_to(ROOT)}:{line} {name}" for name, line in _defined_names(tree)
                  if FORBIDDEN.search(name)]
    assert not found, f"reference answers in the installed package: {found}"


def test_the_removed_reference_functions_are_gone():
    from gdrlab import grading
    from gdrlab.labsupport import lab03, lab04, lab05

    for module, name in [(grading, "fit_alpha_beta_reference"), (lab03, "reference_gpu_pages"),
                         (lab03, "reference_breakeven_reuses"), (lab05, "reference_nearest"),
                         (lab05, "reference_nccl_gdr"), (lab04, "check_choose_path"), (lab04, "best_path")]:
        assert not hasattr(module, name), f"{module.__name__}.{name} still answers an exercise"


# ----------------------------------------------------------------------------- attacks
def _run(lab: str, context: list[str], answer_id: str, answer: str | None, test_id: str) -> str | None:
    """Run the setup, ``context`` cells, the answer cell (``answer`` replacing it when given) and the
    test cell. Return None when the test cell passes, else the error it raised."""
    cells = _cells(lab)
    ns: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for cid in [next(iter(cells)), *context]:   # the lab's first code cell holds its imports
            exec(compile(cells[cid], cid, "exec"), ns)  # noqa: S102 - the lab's own cells
        # An answer that raises leaves its names undefined, and the test cell then fails, as in nbgrader.
        with contextlib.suppress(Exception):
            exec(compile(answer if answer is not None else cells[answer_id], answer_id, "exec"), ns)  # noqa: S102
        try:
            exec(compile(cells[test_id], test_id, "exec"), ns)  # noqa: S102
        except Exception as exc:  # noqa: BLE001 - any failure of the test cell is a 0
            return f"{type(exc).__name__}: {exc}"
    return None


# (lab, context cells, answer cell, test cell, attack)
ATTACKS = {
    "00-ex1-peer-module-for-gdr": (
        "00", ["00-h200-report"], "ex1-runnable", "test-ex1-runnable",
        ('h200_runnable = ["host", "staged", "shared", "pipelined"]\nh200_missing = {"gdr": "a peer-memory module", '
        '"gdrcopy": "the gdrcopy library and driver", "p2p": "a second GPU"}')),
    "00-ex3-hard-coded-what-if": (
        "00", ["00-h200-report"], "ex3-whatif", "test-ex3-whatif",
        'h200_with_hca = h200\ngdr_whatif = {"available": True, "reason": "dma-buf"}'),
    "00-ex3-typed-in-dict-on-a-real-copy": (
        "00", ["00-h200-report"], "ex3-whatif", "test-ex3-whatif",
        ('h200_with_hca = copy.deepcopy(h200)\nh200_with_hca["rdma_devices"] = [{"name": "mlx5_0", "active": True}]\n'
        'gdr_whatif = {"available": True, "reason": "registered via dma-buf"}')),
    "01-ex3-copy-the-kepler-layout": (
        "01", [], "ex3-sysfs-index", "test-ex3-sysfs-index",
        "k40_resource = lab01.KEPLER_RESOURCE\nk40_bar1_slot = 1"),
    "01-ex3-copy-the-h200": (
        "01", [], "ex3-sysfs-index", "test-ex3-sysfs-index",
        "k40_resource = lab01.h200_resource()\nk40_bar1_slot = 2"),
    "02-ex3-the-seed-p2p-figure": (
        "02", [], "ex3-p2p", "test-ex3-p2p",
        ('h200x2 = grading.dataset("h200x2-p2p-curriculum")\nat = h200x2.set_index(["peer_access", "size"])\n'
        'p2p_bw_gain = at.loc[(True, 256 << 20), "bw_gbps"] / at.loc[(False, 256 << 20), "bw_gbps"]\n'
        'p2p_lat_gain = at.loc[(False, 8), "lat_p50_us"] / at.loc[(True, 8), "lat_p50_us"]\n'
        "k20_p2p_bound_gbps = 24.0")),
    "03-ex3-old-published-break-even": (
        "03", [], "ex3-amortization", "ex3-amortization-tests",
        ("import math\ndef breakeven_reuses(r, d, c, l=0.0):\n    return None if c <= l else max(1, math.ceil((r + d) / (c - l)))\n"
        "reuses_gpu_64k = 104")),
    "03-ex3-removed-reference": (
        "03", [], "ex3-amortization", "ex3-amortization-tests",
        ("from gdrlab.labsupport import lab03\nbreakeven_reuses = lab03.reference_breakeven_reuses\n"
        "reuses_gpu_64k = breakeven_reuses(1300.0, 677.0, 7.7, 0.5)")),
    "05-ex1-topology-code": (
        "05", [], "ex1-classify", "ex1-classify-tests",
        'placement_codes = {k: lab05.recorded_topology("DGX2").pcie_code("GPU0", "GPU1")[0] for k in "ABCDE"}'),
    "05-ex1-seed-fixture-answer": (
        "05", [], "ex1-classify", "ex1-classify-tests",
        'placement_codes = {"A": "PIX", "B": "SYS", "C": "PHB", "D": "PHB", "E": "SYS"}'),
    "05-ex2-removed-reference": (
        "05", [], "ex2-nearest", "ex2-nearest-tests",
        "pick_nearest_nic = lambda codes: lab05.reference_nearest(codes)"),
    "05-ex2-ignores-codes": (
        "05", [], "ex2-nearest", "ex2-nearest-tests",
        "pick_nearest_nic = lambda codes: min(codes) if codes else None"),
    "05-ex3-removed-reference": (
        "05", [], "ex3-nccl-rule", "ex3-nccl-rule-tests",
        "nccl_uses_gdr = lab05.reference_nccl_gdr"),
    "05-ex3-node-as-its-own-level": (
        "05", [], "ex3-nccl-rule", "ex3-nccl-rule-tests",
        ('def nccl_uses_gdr(code, level="PXB"):\n    o = ["PIX", "PXB", "PHB", "NODE", "SYS"]\n'
        "    return o.index(code) <= o.index(level)")),
    "04-ex1-published-8kb-for-both": (
        "04", [], "ex1-crossover", "ex1-crossover-tests",
        "crossover_snb_bytes = 8192\ncrossover_ivb_bytes = 8192"),
    "04-ex2-seed-direction": (
        "04", [], "ex2-policy", "ex2-policy-tests",
        ('def choose_path(size, profile, gdr_ok=True):\n'
        '    return "pipelined" if size <= 8192 else ("gdr" if gdr_ok else "gdrcopy")')),
    "04-ex2-removed-model-answer": (
        "04", [], "ex2-policy", "ex2-policy-tests",
        "choose_path = lambda size, profile, gdr_ok=True: lab04.best_path(profile, size)"),
    "04-ex2-published-8kb-everywhere": (
        "04", [], "ex2-policy", "ex2-policy-tests",
        ('def choose_path(size, profile, gdr_ok=True):\n'
        '    return ("gdr" if gdr_ok else "gdrcopy") if size < 8192 else "pipelined"')),
    # lab 00 exercise 2: the BAR1 that maps all of a GPU's memory, tried on other GPUs
    "00-ex2-hard-coded-h200-bar1": (
        "00", ["00-h200-report"], "ex2-bar1", "test-ex2-bar1",
        "bar1_to_map_all = lambda m: 256 * 2**30\nh200_bar1_headroom = 256 * 2**30 / 141e9"),
    "00-ex2-the-report-for-every-gpu": (
        "00", ["00-h200-report"], "ex2-bar1", "test-ex2-bar1",
        'bar1_to_map_all = lambda m: h200["gpus"][0]["bar1_total_bytes"]\nh200_bar1_headroom = 2.0'),
    "00-ex2-nearest-power-not-next": (
        "00", ["00-h200-report"], "ex2-bar1", "test-ex2-bar1",
        ("import math\nbar1_to_map_all = lambda m: 2 ** round(math.log2(m))\n"
         'h200_bar1_headroom = h200["gpus"][0]["bar1_total_bytes"] / 141e9')),
    # lab 02 exercise 2: the staging copy's rate under the serial model, tried on made-up rates
    "02-ex2-the-old-ratio": (
        "02", [], "ex2-pageable", "test-ex2-pageable",
        ('pinned = grading.dataset("h200-copy-h2d-pinned")\npageable = grading.dataset("h200-copy-h2d-pageable")\n'
         "staging_rate_gbps = lambda a, b: a / b\nh200_staging_gbps = 55.37 / 20.63")),
    "02-ex2-overlapped-model-instead": (
        "02", [], "ex2-pageable", "test-ex2-pageable",
        "staging_rate_gbps = lambda a, b: None if b >= a else b\nh200_staging_gbps = 20.63"),
    "02-ex2-hard-coded-h200-figure": (
        "02", [], "ex2-pageable", "test-ex2-pageable",
        "staging_rate_gbps = lambda a, b: None if b >= a else 32.88\nh200_staging_gbps = 32.88"),
    "02-ex2-model-call": (
        "02", [], "ex2-pageable", "test-ex2-pageable",
        ('staging_rate_gbps = lambda a, b: None if b >= a else '
         'float(lab02.copy_model("h2d", "pageable", [256 << 20])["bw_gbps"].iloc[0])\n'
         'h200_staging_gbps = staging_rate_gbps(2.0, 1.0)')),
    # lab 05 exercise 4: the real DGX A100 matrix
    "05-exdgx-nic0-for-everyone": (
        "05", ["05-dgx-a100-matrix-code", "ex2-nearest", "ex3-nccl-rule"], "ex-dgx-a100", "ex-dgx-a100-tests",
        'dgx_nics = {g: {"NIC0"} for g in dgx.rows}\ndgx_gdr_default = True\ndgx_forced_distance = (7, 4)'),
    "05-exdgx-current-nccl-numbering": (
        "05", ["05-dgx-a100-matrix-code", "ex2-nearest", "ex3-nccl-rule"], "ex-dgx-a100", "ex-dgx-a100-tests",
        ('dgx_nics = {"GPU0": {"NIC0", "NIC1"}, "GPU1": {"NIC0", "NIC1"}, "GPU2": {"NIC2", "NIC3"}, '
         '"GPU3": {"NIC2", "NIC3"}}\ndgx_gdr_default = True\ndgx_forced_distance = (8, 5)')),
    "05-exdgx-nvidia-smi-order-as-distance": (
        "05", ["05-dgx-a100-matrix-code", "ex2-nearest", "ex3-nccl-rule"], "ex-dgx-a100", "ex-dgx-a100-tests",
        ('dgx_nics = {"GPU0": {"NIC0", "NIC1"}, "GPU1": {"NIC0", "NIC1"}, "GPU2": {"NIC2", "NIC3"}, '
         '"GPU3": {"NIC2", "NIC3"}}\ndgx_gdr_default = True\n'
         'dgx_forced_distance = (lab05.CODE_ORDER.index("SYS"), lab05.CODE_ORDER.index("PXB"))')),
    "05-exdgx-one-nic-each-gdr-never": (
        "05", ["05-dgx-a100-matrix-code", "ex2-nearest", "ex3-nccl-rule"], "ex-dgx-a100", "ex-dgx-a100-tests",
        ('dgx_nics = {g: {pick_nearest_nic({n: dgx.code(g, n) for n in dgx.nics})} for g in dgx.rows}\n'
         'dgx_gdr_default = False\ndgx_forced_distance = (7, 4)')),
}


@pytest.fixture(autouse=True)
def _quick(monkeypatch):
    monkeypatch.setenv("GDRLAB_QUICK", "1")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # as graded: an unset answer fails, never "not done yet"


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_scores_zero(name):
    lab, context, answer_id, test_id, attack = ATTACKS[name]
    assert _run(lab, context, answer_id, attack, test_id) is not None, f"{name}: the attack passes {test_id}"


@pytest.mark.parametrize("target", sorted({(a[0], tuple(a[1]), a[2], a[3]) for a in ATTACKS.values()}))
def test_the_solution_passes_the_same_harness(target):
    lab, context, answer_id, test_id = target
    error = _run(lab, list(context), answer_id, None, test_id)
    assert error is None, f"lab {lab} {answer_id}: the instructor's solution fails its own test: {error}"
