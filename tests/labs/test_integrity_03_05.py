"""Attacks on the reworked exercises of labs 03-05 (issue 24 items 2 and 5): each must score 0.

Two kinds: (1) a plausible wrong answer or a shortcut through the package, run as graded
(NBGRADER_EXECUTION set) through the lab's setup cell, the answer and its test cell, hidden tests
included; (2) a call the exercise forbids, which the grader's screen must refuse before anything
runs. The instructor's answer passes the same harness.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from gdrlab.autograde.screen import forbidden_calls_of, screen

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("IPython")  # the labs' cells import IPython.display

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {p.parent.name[:2]: p for p in sorted((ROOT / "labs" / "source").glob("*/*.ipynb"))}


def _cells(lab: str) -> dict:
    return {c.id: c for c in nbformat.read(SOURCES[lab], as_version=4).cells}


def _run(lab: str, context: list[str], answer_id: str, answer: str | None, test_id: str) -> str | None:
    """None when the test cell passes, else its error."""
    cells = _cells(lab)
    code = [cid for cid, c in cells.items() if c.cell_type == "code"]
    ns: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for cid in [code[0], *context]:
            exec(compile(cells[cid].source, cid, "exec"), ns)  # noqa: S102 - the lab's own cells
        with contextlib.suppress(Exception):
            exec(compile(answer if answer is not None else cells[answer_id].source, answer_id, "exec"), ns)  # noqa: S102
        try:
            exec(compile(cells[test_id].source, test_id, "exec"), ns)  # noqa: S102
        except Exception as exc:  # noqa: BLE001 - any failure is a 0
            return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(autouse=True)
def _graded(monkeypatch):
    monkeypatch.setenv("GDRLAB_QUICK", "1")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")


_FIRST_CHANGE_ONE_WAY = '''
import numpy as np
def first_change(sizes, lat_a, lat_b):
    w = np.nonzero(np.asarray(lat_b) < np.asarray(lat_a))[0]   # assumes a is faster first
    return int(np.asarray(sizes)[w[0]]) if w.size else None
sizes = np.unique(np.geomspace(1, 4 << 20, 20000).astype(np.int64)).astype(float)
crossover_snb_bytes = first_change(sizes, model.latency_us("kepler-snb-2013", "gdr", sizes), model.latency_us("kepler-snb-2013", "pipelined", sizes))
crossover_ivb_bytes = first_change(sizes, model.latency_us("kepler-ivb-2014", "gdr", sizes), model.latency_us("kepler-ivb-2014", "pipelined", sizes))
'''

ATTACKS = {
    # lab 04 Ex1: a finder that only works one way round; right profile values, wrong function
    "04-ex1-one-direction-only": ("04", [], "ex1-crossover", "ex1-crossover-tests", _FIRST_CHANGE_ONE_WAY),
    # lab 04 Ex1: MVAPICH2's 8 KB typed in for both, with a correct finder
    "04-ex1-8kb-typed-in": ("04", [], "ex1-crossover", "ex1-crossover-tests",
                            _FIRST_CHANGE_ONE_WAY.split("sizes = ")[0].replace("w = np.nonzero(np.asarray(lat_b) < np.asarray(lat_a))[0]   # assumes a is faster first",
                                                                                "a, b = np.asarray(lat_a), np.asarray(lat_b)\n    w = np.nonzero(b < a)[0] if a[0] <= b[0] else np.nonzero(a < b)[0]")
                            + "crossover_snb_bytes = 8192\ncrossover_ivb_bytes = 8192\n"),
    # lab 04 Ex2: the seed's direction (staging small, RDMA large)
    "04-ex2-seed-direction": ("04", [], "ex2-policy", "ex2-policy-tests",
                              ('def choose_path(size, threshold, gdr_ok=True):\n'
                              '    big = "gdr" if gdr_ok else "gdrcopy"\n'
                              '    return big if threshold is not None and size >= threshold else "pipelined"')),
    # lab 04 Ex2: a fixed 8 KB threshold whatever the argument
    "04-ex2-fixed-8kb": ("04", [], "ex2-policy", "ex2-policy-tests",
                         ('def choose_path(size, threshold, gdr_ok=True):\n'
                         '    return ("gdr" if gdr_ok else "gdrcopy") if size < 8192 else "pipelined"')),
    # lab 04 Ex2: no threshold read as "always pipelined"
    "04-ex2-none-means-staging": ("04", [], "ex2-policy", "ex2-policy-tests",
                                  ('def choose_path(size, threshold, gdr_ok=True):\n'
                                  '    small = "gdr" if gdr_ok else "gdrcopy"\n'
                                  '    return "pipelined" if threshold is None or size >= threshold else small')),
    # lab 04 Ex2: the boundary on the wrong side (size <= threshold stays small)
    "04-ex2-boundary": ("04", [], "ex2-policy", "ex2-policy-tests",
                        ('def choose_path(size, threshold, gdr_ok=True):\n'
                        '    small = "gdr" if gdr_ok else "gdrcopy"\n'
                        '    return small if threshold is None or size <= threshold else "pipelined"')),
    # lab 05 Ex2: ties broken by the last name
    "05-ex2-tie-last-name": ("05", [], "ex2-nearest", "ex2-nearest-tests",
                             ('ORDER = ["PIX", "PXB", "PHB", "NODE", "SYS"]\n'
                             'def pick_nearest_nic(codes):\n'
                             '    return min(sorted(codes, reverse=True), key=lambda n: ORDER.index(codes[n])) if codes else None')),
    # lab 03 Ex3: rounding down instead of up
    "03-ex3-floor": ("03", [], "ex3-amortization", "ex3-amortization-tests",
                     ('import math\n'
                     'def breakeven_reuses(reg_us, dereg_us, copy_us, lookup_us=0.0):\n'
                     '    return None if copy_us <= lookup_us else max(1, math.floor((reg_us + dereg_us) / (copy_us - lookup_us)))\n'
                     'reuses_gpu_64k = 276')),
    # lab 03 Ex2: pages from the size alone (ignores where the buffer starts)
    "03-ex2-size-only": ("03", [], "ex2-gpu-pages", "ex2-gpu-pages-tests",
                         'GPU_PAGE = 65536\ndef gpu_pages_pinned(addr, nbytes):\n    return -(-nbytes // GPU_PAGE)'),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_scores_zero(name):
    lab, context, answer_id, test_id, attack = ATTACKS[name]
    assert _run(lab, context, answer_id, attack, test_id) is not None, f"{name}: the attack passes {test_id}"


@pytest.mark.parametrize("lab, answer_id, test_id", [
    ("03", "ex2-gpu-pages", "ex2-gpu-pages-tests"), ("03", "ex3-amortization", "ex3-amortization-tests"),
    ("04", "ex1-crossover", "ex1-crossover-tests"), ("04", "ex2-policy", "ex2-policy-tests"),
    ("05", "ex2-nearest", "ex2-nearest-tests"),
])
def test_the_instructors_answer_passes_the_same_harness(lab, answer_id, test_id):
    assert _run(lab, [], answer_id, None, test_id) is None


SHORTCUTS = {
    "04-ex1-model-crossover": ("04", "ex1-crossover",
                               'crossover_snb_bytes = model.crossover("kepler-snb-2013", "gdr", "pipelined")'),
    "04-ex1-lab-crossovers": ("04", "ex1-crossover",
                              'crossover_snb_bytes, crossover_ivb_bytes = lab04.crossovers(("kepler-snb-2013", "kepler-ivb-2014")).values()'),
    "04-ex1-crossings": ("04", "ex1-crossover", 'x = model.crossings("kepler-ivb-2014", "gdr", "pipelined")'),
    "04-ex2-hybrid-policy": ("04", "ex2-policy",
                             ('def choose_path(size, threshold, gdr_ok=True):\n'
                             '    return model.hybrid_policy("kepler-snb-2013", ["gdr", "pipelined"])[0]["path"]')),
    "04-ex2-policy-table": ("04", "ex2-policy",
                            ('def choose_path(size, threshold, gdr_ok=True):\n'
                            '    return lab04.policy_table("kepler-snb-2013")[0]["path"]')),
    "05-ex3-gdr-decision": ("05", "ex3-nccl-rule",
                            'def nccl_uses_gdr(code, level="PXB"):\n    return dgx.gdr_decision("GPU0", "NIC0", level)'),
    "05-ex3-private-topo": ("05", "ex3-nccl-rule",
                            ('from gdrlab.topology import _topo as T\n'
                            'def nccl_uses_gdr(code, level="PXB"):\n'
                            '    return T._NCCL_PATHS.index(T._SMI_TO_NCCL[code]) <= T._NCCL_PATHS.index(level)')),
    "05-exdgx-path-types": ("05", "ex-dgx-a100",
                            ('from gdrlab.nccl import log\n'
                            'dgx_forced_distance = (log.PATH_TYPES_2_12.index("SYS"), log.PATH_TYPES_2_12.index("PXB"))')),
    # the NCCL version table (public since the table came in) holds the order the exercises ask for
    "05-ex3-versions-path-types": ("05", "ex3-nccl-rule",
                                   ('from gdrlab.nccl import versions\n'
                                   'def nccl_uses_gdr(code, level="PXB"):\n'
                                   '    t = versions.path_types(); c = "PHB" if code == "NODE" else code\n'
                                   '    return t.index(c) <= t.index(level)')),
    "05-ex3-path-rank": ("05", "ex3-nccl-rule",
                         ('from gdrlab.nccl.versions import path_rank\n'
                         'def nccl_uses_gdr(code, level="PXB"):\n'
                         '    return path_rank("PHB" if code == "NODE" else code) <= path_rank(level)')),
    "05-ex3-path-type-name": ("05", "ex3-nccl-rule",
                              ('from gdrlab import nccl\n'
                              'def nccl_uses_gdr(code, level="PXB"):\n'
                              '    t = [nccl.path_type_name(i, "2.30.7") for i in range(11)]\n'
                              '    return t.index("PHB" if code == "NODE" else code) <= t.index(level)')),
    "05-ex3-reasons-path-types": ("05", "ex3-nccl-rule",
                                  ('from gdrlab.nccl import reasons\n'
                                  'def nccl_uses_gdr(code, level="PXB"):\n'
                                  '    t = list(reasons.PATH_TYPES)\n'
                                  '    return t.index("PHB" if code == "NODE" else code) <= t.index(level)')),
    "05-exdgx-versions": ("05", "ex-dgx-a100",
                          ('from gdrlab.nccl.versions import path_rank\n'
                          'dgx_forced_distance = (path_rank("SYS", "2.19.3"), path_rank("PXB", "2.19.3"))')),
    "05-exdgx-path-type-name": ("05", "ex-dgx-a100",
                                ('from gdrlab import nccl\n'
                                'names = [nccl.path_type_name(i, "2.19.3") for i in range(9)]\n'
                                'dgx_forced_distance = (names.index("SYS"), names.index("PXB"))')),
    "05-ex2-nearest-nic": ("05", "ex2-nearest", 'def pick_nearest_nic(codes):\n    return dgx2.nearest_nic("GPU0")'),
    "03-ex3-registration-summary": ("03", "ex3-amortization",
                                    'reuses_gpu_64k = int(lab03.registration_summary("h200-lab", [65536])["breakeven_sends"][0])'),
}


@pytest.mark.parametrize("name", sorted(SHORTCUTS))
def test_the_screen_refuses_the_package_shortcut(name):
    lab, answer_id, source = SHORTCUTS[name]
    cell = _cells(lab)[answer_id]
    findings = screen(source, forbidden_calls=forbidden_calls_of(cell))
    assert findings, f"{name}: the screen lets the shortcut through"
