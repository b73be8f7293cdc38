#!/usr/bin/env python3
"""Generate the student versions of every lab with ``nbgrader generate_assignment``.

    python scripts/release.py            # labs/source/<lab>/ -> gdrlab/data/labs/<lab>/ (solutions removed)
    python scripts/release.py 00-setup-check
    python scripts/release.py --check    # fail if gdrlab/data/labs/ differs from a fresh release
    python scripts/release.py --out DIR  # write somewhere else (an nbgrader course's release/)

Solutions between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` become stubs, hidden tests
disappear, outputs are cleared. The student versions are committed in ``gdrlab/data/labs/`` so that
the wheel and the sdist carry them without shipping the answers or needing nbgrader to build;
``--check`` (run by the test suite) keeps them in step with the sources.
"""
from __future__ import annotations

import argparse
import filecmp
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LABS = ROOT / "labs"
STUDENT = ROOT / "gdrlab" / "data" / "labs"
# The docs the labs link to (``](../docs/NAME)``), shipped beside the student labs: `gdrlab lab`
# puts them in the learner's working folder as docs/, where those links find them.
SHIPPED_DOCS = ROOT / "gdrlab" / "data" / "docs"
_DOC_LINK = re.compile(r"\]\(\.\./docs/([A-Za-z0-9_.-]+\.md)")


def learner_docs() -> list[str]:
    """The docs/ pages the lab sources link to."""
    names = {m for src in (LABS / "src").glob("[0-9][0-9]-*.py") for m in _DOC_LINK.findall(src.read_text())}
    return sorted(names)


def stale_docs() -> list[str]:
    """Shipped copies that differ from docs/, are missing, or are no longer linked."""
    wanted = learner_docs()
    stale = [name for name in wanted if not _same(ROOT / "docs" / name, SHIPPED_DOCS / name)]
    extra = sorted(p.name for p in SHIPPED_DOCS.glob("*.md") if p.name not in wanted)
    return stale + extra


def ship_docs() -> None:
    SHIPPED_DOCS.mkdir(parents=True, exist_ok=True)
    wanted = learner_docs()
    for old in SHIPPED_DOCS.glob("*.md"):
        if old.name not in wanted:
            old.unlink()
    for name in wanted:
        shutil.copyfile(ROOT / "docs" / name, SHIPPED_DOCS / name)


def source_labs() -> list[str]:
    """Lab folder names under labs/source that hold a notebook."""
    return sorted(p.name for p in (LABS / "source").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def generate(labs: list[str], out: Path) -> int:
    """Run nbgrader generate_assignment for ``labs`` into ``out/<lab>/``; the exit status."""
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    # one nbgrader run for every lab ("*" is a glob over source/) is ten times faster than one each
    for lab in (["*"] if labs == source_labs() else labs):
        cmd = [sys.executable, "-m", "nbgrader", "generate_assignment", lab, "--force", "--no-db",
               "--log-level=ERROR", f"--CourseDirectory.root={LABS}",
               f"--CourseDirectory.release_directory={out}"]
        if subprocess.call(cmd, cwd=LABS) != 0:
            print(f"release: nbgrader failed for {lab}", file=sys.stderr)
            status = 1
    return status


def _same(a: Path, b: Path) -> bool:
    """Same file, comparing notebooks as JSON (nbgrader's byte layout may vary, content may not)."""
    if not (a.is_file() and b.is_file()):
        return False
    if a.suffix == ".ipynb":
        return json.loads(a.read_text(encoding="utf-8")) == json.loads(b.read_text(encoding="utf-8"))
    return filecmp.cmp(a, b, shallow=False)


def differences(fresh: Path, committed: Path) -> list[str]:
    """Files that differ between two release trees (relative paths), both ways."""
    out = []
    kept = {p.name for p in committed.iterdir() if p.is_dir()} if committed.is_dir() else set()
    for lab in sorted({p.name for p in fresh.iterdir()} | kept):
        a, b = fresh / lab, committed / lab
        names = {p.name for p in a.glob("*")} | {p.name for p in b.glob("*")} if a.is_dir() or b.is_dir() else set()
        for name in sorted(names):
            if not _same(a / name, b / name):
                out.append(f"{lab}/{name}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("labs", nargs="*", help="lab folder names (default: every lab in labs/source)")
    ap.add_argument("--out", type=Path, default=STUDENT, help="where the student versions go "
                    "(default gdrlab/data/labs, which the package ships)")
    ap.add_argument("--check", action="store_true", help="compare a fresh release with gdrlab/data/labs")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("nbgrader") is None:
        print("release: nbgrader is not installed: pip install gdrlab[lab]", file=sys.stderr)
        return 1
    known = source_labs()
    labs = args.labs or known
    if not labs:
        print("release: no labs found in labs/source", file=sys.stderr)
        return 1
    unknown = sorted(set(labs) - set(known))
    if unknown:
        print(f"release: unknown labs: {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            if generate(labs, Path(tmp)) != 0:
                return 1
            stale = differences(Path(tmp), STUDENT) + [f"docs/{n}" for n in stale_docs()]
        if stale:
            print("release: student notebooks out of date (run `make release` and commit "
                  "gdrlab/data/labs and gdrlab/data/docs): " + ", ".join(stale), file=sys.stderr)
            return 1
        print(f"release: gdrlab/data/labs matches labs/source ({len(labs)} labs)", file=sys.stderr)
        return 0
    if args.out.resolve() == STUDENT.resolve() and not args.labs:
        for old in STUDENT.glob("*"):
            if old.is_dir() and old.name not in known:
                shutil.rmtree(old)  # a lab renamed or removed in the sources
    if generate(labs, args.out) != 0:
        return 1
    if args.out.resolve() == STUDENT.resolve():
        ship_docs()
    print(f"release: wrote {len(labs)} student labs into {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
