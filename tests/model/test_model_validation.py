"""The model against published figures it was not fitted to: the validation table of
docs/model.md, read here row by row. Misses stay in the table as expected failures."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from gdrlab import model
from gdrlab.model import routes

DOC = Path(__file__).resolve().parents[2] / "docs" / "model.md"
TOLERANCE = 0.25


def validation_rows() -> list[dict]:
    section = DOC.read_text().split("## Validation against figures", 1)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 8 or not re.fullmatch(r"V\d+", cells[0]):
            continue
        rid, qty, prof, sets, pub, mod, src, status = cells
        over = {} if sets == "-" else {k: float(v) for k, v in (kv.split("=") for kv in sets.split(","))}
        rows.append({"id": rid, "quantity": qty, "profile": prof, "set": over, "published": float(pub),
                     "documented": float(mod), "source": src, "status": status})
    return rows


def modelled(row: dict) -> float:
    kind, _, rest = row["quantity"].partition(":")
    prof = model.get_profile(row["profile"], **row["set"])
    if kind == "link":
        path, link = rest.split(":")
        return routes.route(prof.params, path, prof.placement, "verbs")[link]
    what, size = rest.split("@")
    size = float(size)
    if kind in ("bw", "bidir"):
        bw = float(model.bandwidth_gbps(prof, what, [size])[0])
        return 2 * bw if kind == "bidir" else bw
    t = float(model.stage_us(prof, what, [size])[0])
    return t if kind == "stagelat" else size / t / 1e3


def _param(row):
    marks = []
    if row["status"].startswith("xfail"):
        marks.append(pytest.mark.xfail(reason=row["status"].split(":", 1)[1].strip(), strict=True))
    return pytest.param(row, id=row["id"], marks=marks)


def test_at_least_fifteen_cited_rows():
    rows = validation_rows()
    assert len(rows) >= 15
    for r in rows:
        assert r["source"].count(";") >= 2, f"{r['id']}: cite document; table or figure; hardware"


@pytest.mark.parametrize("row", [_param(r) for r in validation_rows()])
def test_model_within_tolerance_of_published(row):
    got = modelled(row)
    assert got == pytest.approx(row["documented"], rel=0.01), f"{row['id']}: the table's model column is stale"
    err = (got - row["published"]) / row["published"]
    assert abs(err) <= TOLERANCE, f"{row['id']}: model {got:.4g} vs published {row['published']:.4g} ({err:+.0%})"


def _document(source: str) -> str:
    return source.split(";", 1)[0].strip()


def test_no_validation_citation_is_a_parameter_source():
    docs = {_document(r["source"]) for r in validation_rows()}
    keys = set()
    for d in docs:  # "NVIDIA/nccl issue #1264" -> "nccl issue #1264" and "#1264" in a source naming nccl
        m = re.search(r"([\w.-]+) (issue|PR) #(\d+)", d)
        keys.add((m.group(1).lower(), m.group(3)) if m else (d.lower(), ""))
    for name in model.profiles():
        prof = model.get_profile(name)
        for param, src in prof.sources.items():
            low = src.lower()
            for repo, num in keys:
                hit = (repo in low and f"#{num}" in low) if num else repo in low
                assert not hit, f"{name}.{param} is sourced from {repo} #{num}, which also validates it"
