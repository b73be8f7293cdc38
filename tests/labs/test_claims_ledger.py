"""docs/claims.md, the ledger of what no data in the repository can produce (issue 25 item 3).

Every lab cell that names a version or a sourced figure is listed in some row; every cell a row
names exists; every source is a file here or an external citation with a locator; every link and
repository file a lab names exists."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEDGER = ROOT / "docs" / "claims.md"
# what makes a sentence version-dependent or sourced from someone else's run
VERSIONED = re.compile(r"NCCL 2\.\d+|NCCL_NET_GDR_READ|CUDA 1?\d\.\d|driver 5\d\d|Linux \d\.\d+|gdrcopy 2\.\d|"
                       r"gdrcopy README|gdrcopy's|libcufile|1\.15\.1|GDAKI from|MV2_[A-Z_]+|RFC 50\d\d|port 4791|"
                       r"DOCA-OFED|errno 524")
_CELL = re.compile(r'^# %%[^\n]*?id="([^"]+)"', re.M)
_URL = re.compile(r"https?://[^\s)]+")
_REPO_PATH = re.compile(r"[\w.-]+/[\w.-]+ `[^`]+`")          # owner/repo `path`


def _lab_cells() -> dict[str, str]:
    cells: dict[str, str] = {}
    for f in sorted((ROOT / "labs" / "src").glob("0*.py")):
        text = f.read_text()
        marks = list(_CELL.finditer(text))
        for m, nxt in zip(marks, marks[1:] + [None]):
            cells[f"{f.name[:2]}:{m[1]}"] = text[m.start():nxt.start() if nxt else len(text)]
    return cells


def _rows() -> list[dict[str, str]]:
    rows = []
    for line in LEDGER.read_text().splitlines():
        if not line.startswith("| ") or line.startswith("| id ") :
            continue
        parts = [p.strip() for p in line.strip().strip("|").split(" | ")]
        assert len(parts) == 5, f"a ledger row needs 5 columns: {line[:80]}"
        rows.append(dict(zip(("id", "claim", "holds", "source", "used"), parts)))
    return rows


def test_ledger_rows_are_complete_and_unique():
    rows = _rows()
    assert len(rows) >= 15
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "duplicate ledger ids"
    for r in rows:
        for key in ("claim", "holds", "source", "used"):
            assert r[key] and r[key] != "-", (r["id"], key)


def test_every_cell_a_row_names_exists():
    cells = _lab_cells()
    for r in _rows():
        for ref in (x.strip() for x in r["used"].split(",")):
            if ref.startswith("docs/"):
                assert (ROOT / ref).is_file(), (r["id"], ref)
            else:
                assert ref in cells, f"{r['id']}: no lab cell {ref}"


def test_every_versioned_cell_is_in_the_ledger():
    listed = {ref.strip() for r in _rows() for ref in r["used"].split(",")}
    missing = sorted(key for key, text in _lab_cells().items() if VERSIONED.search(text) and key not in listed)
    assert not missing, f"cells naming a version or a sourced figure, absent from docs/claims.md: {missing}"


def test_every_source_is_here_or_has_a_locator():
    for r in _rows():
        src = r["source"]
        local = re.findall(r"`((?:gdrlab|docs|labs|bench|tests)/[^`]+)`", src)
        for path in local:
            assert (ROOT / path).exists(), (r["id"], path)
        external = _URL.search(src) or _REPO_PATH.search(src) or re.search(r"RFC \d{4}|arXiv:\d{4}\.\d{4,5}", src)
        assert local or external, f"{r['id']}: source without a locator: {src}"
        if src.startswith("recorded:"):
            assert local, f"{r['id']}: a recorded source names its file"


@pytest.mark.parametrize("key", sorted(k for k in _lab_cells()))
def test_links_and_repository_files_named_by_the_labs_exist(key):
    text = _lab_cells()[key]
    for target in re.findall(r"\]\(\.\./(docs/[^)#\s]+)", text):   # the learner's docs/ beside the labs
        assert (ROOT / target).is_file(), (key, target)
    for img in re.findall(r"\]\((img/[^)\s]+)\)", text):
        assert (ROOT / "labs" / "src" / img).is_file(), (key, img)
    assert not re.findall(r"\]\((?!\.\./docs/|https?://|#|img/)[^)\s]+\)", text), (key, "a link to neither docs, img nor a URL")
    for path in re.findall(r"`((?:gdrlab/data|docs|bench)/[\w./-]+)`", text):
        assert (ROOT / path).exists(), (key, path)


def test_the_ledger_catches_an_unlisted_version():
    """The scan is not vacuous: a made-up cell naming a version is flagged."""
    assert VERSIONED.search("since NCCL 2.31 the rule changed")
    assert VERSIONED.search("with driver 595 the exporter maps it")
    assert not VERSIONED.search("the lab's own recording shows 4.35 µs")


def test_the_ledgers_nccl_rows_agree_with_the_version_table():
    """The NCCL rows quote versions the kit's table (gdrlab.nccl.versions, read in NCCL's source at
    each tag) also holds: first GIN release, first TRACE-only per-pair line, IB timeout history."""
    from gdrlab.nccl import versions as v

    rows = {r["id"]: r["claim"] for r in _rows()}
    first = {name: next(since for since, val, _ in v.TABLE[name] if val) for name in ("gin_assign_line",)}
    assert f"NCCL {v.format_version(first['gin_assign_line'])}" in rows["nccl-gin"]
    trace = next(since for since, (level, _, _), _ in v.TABLE["gdr_pair_line"] if level == "TRACE")
    assert f"TRACE from {v.format_version(trace)}" in rows["nccl-gdr-log-line"]
    timeouts = {val: since for since, val, _ in reversed(v.TABLE["ib_timeout_default"])}
    assert f"defaults to 20" in rows["nccl-ib-timeout"] and f"from {v.format_version(timeouts[20])}" in rows["nccl-ib-timeout"]
    c2c = v.path_types("2.26.2").index("C2C")
    assert f"C2C inserted as {c2c} from 2.26.2" in rows["nccl-path-numbers"]
    assert f"SYS is {v.path_rank('SYS', '2.27.3')} from 2.27.3" in rows["nccl-path-numbers"]
    assert f"SYS {v.path_rank('SYS', '2.25')}" in rows["nccl-path-numbers"]
