"""Provenance has one builder in fact (gdrlab/provenance.py): no other module writes a provenance
dict by hand (a dict literal with a "kind" of live/recorded/modelled/imported) or sets
``attrs["provenance"]`` itself, and the builders refuse the keys that drifted before ("source"
where "hardware" is read). Scanned with the ast module over the package, the lab sources and
bench/."""
from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pytest

from gdrlab import provenance

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"live", "recorded", "modelled", "imported"}


def _files() -> list[Path]:
    out = sorted((ROOT / "gdrlab").rglob("*.py")) + sorted((ROOT / "labs" / "src").glob("*.py"))
    out += sorted((ROOT / "bench").glob("*.py"))
    return [p for p in out if p != ROOT / "gdrlab" / "provenance.py"]


def _hand_built(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            for k, v in zip(node.keys, node.values):
                if not (isinstance(k, ast.Constant) and k.value == "kind"):
                    continue
                options = [v.body, v.orelse] if isinstance(v, ast.IfExp) else [v]
                if (any(isinstance(o, ast.Constant) and o.value in KINDS for o in options)
                        or keys & {"hardware", "profile", "date"}):  # {"kind": variable, "hardware": ...}
                    lines.append(node.lineno)
        if isinstance(node, ast.Assign):
            for t in node.targets:  # X.attrs["provenance"] = ...
                if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) and t.value.attr == "attrs"
                        and isinstance(t.slice, ast.Constant) and t.slice.value == "provenance"):
                    lines.append(node.lineno)
    return lines


def test_the_scan_finds_a_planted_hand_built_provenance():
    planted = ast.parse('df.attrs["provenance"] = {"kind": "recorded", "source": "x"}\n'
                        'p = {"kind": "live" if ok else "recorded"}\nq = {"kind": k, "hardware": h}\n')
    assert sorted(_hand_built(planted)) == [1, 1, 2, 3]


def test_no_module_builds_provenance_by_hand():
    found = {str(p.relative_to(ROOT)): hits for p in _files() if (hits := _hand_built(ast.parse(p.read_text())))}
    assert found == {}, f"build it with gdrlab.provenance.live/recorded/modelled/imported and attach(): {found}"


def test_the_builders_say_one_thing_one_way():
    rec = provenance.recorded("NVIDIA H200, PCIe Gen5 x16", "2026-11-30T04:00", command="x")
    assert provenance.label(rec) == "recorded on NVIDIA H200, PCIe Gen5 x16 (2026-11-30)"
    assert provenance.label(rec, short=True) == "recorded on NVIDIA H200, PCIe Gen5 x16 (2026-11-30)"
    assert provenance.label(provenance.modelled("hopper-ndr", "verbs")) == "modelled, profile hopper-ndr (verbs level)"
    imp = provenance.imported("perftest", "6.28", options="-d mlx5_0 --report_gbits", host="node7")
    assert provenance.label(imp) == "imported from perftest 6.28 (node7)"
    assert provenance.live()["kind"] == "live" and provenance.live()["host"]
    for bad in ({"source": "file"}, {"kind": "live"}):
        with pytest.raises(ValueError):
            provenance.recorded("hw", **bad)
    with pytest.raises(ValueError):
        provenance.recorded("")
    with pytest.raises(ValueError):
        provenance.derived(pd.DataFrame())


def test_attach_refuses_what_is_not_provenance_and_may_leave_the_rows_alone():
    df = pd.DataFrame({"size": [8, 16]})
    with pytest.raises(ValueError):
        provenance.attach(df, {"kind": "guessed"})
    provenance.attach(df, provenance.modelled("kepler-snb-2013"), column=False)
    assert list(df.columns) == ["size"] and df.gdrlab.sources == ["modelled, profile kepler-snb-2013"]
    provenance.attach(df, provenance.derived(df, chunk=4096))
    assert df.attrs["provenance"]["chunk"] == 4096 and set(df["source"]) == {"modelled, profile kepler-snb-2013"}
