"""``gdrlab lab``: open JupyterLab on the learner's working copies of the labs.

The package ships the student form of every lab (``gdrlab/data/labs/``: nbgrader's release, no
solutions, no hidden tests). On first run they are copied into a working folder outside the
repository (``~/gdrlab-labs``, or ``$GDRLAB_WORKDIR``); later runs add labs that are new and keep
every file the learner already has. ``--instructor`` opens the sources (``labs/`` of a source
checkout) with nbgrader's tools instead.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import Unavailable
from ._common import Subparsers, add_command, emit_json, utf8_text

HELP = "open JupyterLab on your working copies of the labs"
DESCRIPTION = ("Copies the student versions of the labs into a working folder (first run; later "
               "runs add new labs and keep your files) and starts JupyterLab there. Needs the [lab] "
               "extra: pip install gdrlab[lab].")

PACKAGE = Path(__file__).resolve().parents[1]
STUDENT_LABS = PACKAGE / "data" / "labs"
SHIPPED_DOCS = PACKAGE / "data" / "docs"  # what the labs link to as ../docs/NAME
STUDENT_JUPYTER_CONFIG = PACKAGE / "data" / "jupyter-student"
COURSE_JUPYTER_CONFIG = PACKAGE / "data" / "jupyter-course"  # the Assignments tab on, instructor tools off
DEFAULT_WORKDIR = "~/gdrlab-labs"
COURSE_ID = "gdrlab"  # labs/nbgrader_config.py's c.CourseDirectory.course_id
COURSE_CONFIG = "nbgrader_config.py"


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "lab", HELP, DESCRIPTION)
    p.add_argument("workdir", nargs="?", default=None,
                   help=f"working folder (default $GDRLAB_WORKDIR, else {DEFAULT_WORKDIR})")
    p.add_argument("--reset", action="append", default=[], metavar="LAB",
                   help="replace your copy of LAB with a fresh one (yours is kept, renamed with the time)")
    p.add_argument("--instructor", action="store_true",
                   help="open the lab sources (solutions, nbgrader tools) of a source checkout instead")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser window")
    p.add_argument("--port", type=int, default=None, help="port for the Jupyter server (default: Jupyter's)")
    p.add_argument("--ip", default=None, help="address to listen on (default: Jupyter's, localhost); "
                   "0.0.0.0 inside a container")
    p.add_argument("--prepare", action="store_true",
                   help="copy the labs into the working folder and exit, without starting JupyterLab "
                        "(images, Binder's postBuild)")
    p.add_argument("--course", metavar="EXCHANGE_DIR", default=None,
                   help="join a course: write nbgrader_config.py in the working folder with the nbgrader "
                        "exchange your instructor gave you (c.Exchange.root) and the course id "
                        f"{COURSE_ID!r}; an nbgrader_config.py you already have is kept")
    p.add_argument("--dry-run", action="store_true",
                   help="prepare nothing, start nothing: print what would be copied and the command")
    return p


def shipped_labs() -> list[str]:
    """Names of the labs the package ships in student form."""
    if not STUDENT_LABS.is_dir():
        return []
    return sorted(p.name for p in STUDENT_LABS.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def source_checkout() -> Path | None:
    """The repository root when this package runs from a source checkout (labs/source beside it)."""
    root = PACKAGE.parent
    return root if (root / "labs" / "source").is_dir() else None


def resolve_workdir(workdir: str | None = None) -> Path:
    """The working folder: ``workdir``, else ``$GDRLAB_WORKDIR``, else ``~/gdrlab-labs``. Refuses a
    folder inside the source checkout, where a learner's work would mix with tracked files."""
    chosen = workdir or os.environ.get("GDRLAB_WORKDIR") or DEFAULT_WORKDIR
    path = Path(chosen).expanduser().resolve()
    root = source_checkout()
    if root is not None and path.is_relative_to(root.resolve()):
        raise ValueError(f"working folder {path} is inside the gdrlab sources ({root}); "
                         "choose one outside it (gdrlab lab DIR or GDRLAB_WORKDIR)")
    if path.exists() and not path.is_dir():
        raise ValueError(f"working folder {path} exists and is not a folder")
    return path


def resolve_lab(name: str, labs: Sequence[str]) -> str:
    """``"02"``, ``"2"`` or ``"02-p2p-dma"`` -> ``"02-p2p-dma"``; ValueError naming the known labs."""
    text = str(name).strip()
    if text in labs:
        return text
    if text.isdecimal() and len(text) <= 2:
        hits = [lab for lab in labs if lab.split("-", 1)[0] == text.zfill(2)]
        if len(hits) == 1:
            return hits[0]
    raise ValueError(f"--reset: unknown lab {text[:40]!r}; give its number or name: {', '.join(labs)}")


def plan(workdir: Path, reset: Sequence[str] = ()) -> dict[str, list[str]]:
    """What :func:`prepare` would do: ``{"added": [...], "kept": [...], "reset": [...]}`` of
    ``lab/file`` names. A lab in ``reset`` is its full name or its number (``02`` or ``2``);
    unknown names raise ValueError naming the known labs."""
    labs = shipped_labs()
    reset = [resolve_lab(name, labs) for name in reset]
    out: dict[str, list[str]] = {"added": [], "kept": [], "reset": []}
    for lab in labs:
        for src in sorted((STUDENT_LABS / lab).iterdir()):
            name = f"{lab}/{src.name}"
            if not (workdir / lab / src.name).exists():
                out["added"].append(name)
            elif lab in reset:
                out["reset"].append(name)
            else:
                out["kept"].append(name)
    return out


def prepare(workdir: Path, reset: Sequence[str] = ()) -> dict[str, list[str]]:
    """Copy the student labs into ``workdir``: new files are added, existing ones kept; a file of a
    lab named in ``reset`` is renamed ``<name>.<YYYYmmdd-HHMMSS><ext>`` before the fresh copy, so
    nothing the learner wrote is lost. Returns :func:`plan`'s dict, plus ``backups``."""
    todo = plan(workdir, reset)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backups = []
    for name in todo["reset"]:
        target = workdir / name
        backup = target.with_name(f"{target.stem}.{stamp}{target.suffix}")
        target.rename(backup)
        backups.append(str(backup.relative_to(workdir)))
    for name in todo["added"] + todo["reset"]:
        target = workdir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(STUDENT_LABS / name, target)  # copyfile: the learner's umask, not the package's mode
    _copy_docs(workdir)
    return dict(todo, backups=backups)


def _copy_docs(workdir: Path) -> None:
    """The docs the labs link to, in ``workdir/docs``: reference pages of this version of the
    package, refreshed on every run (a learner's own notes belong elsewhere)."""
    if not SHIPPED_DOCS.is_dir():
        return
    (workdir / "docs").mkdir(parents=True, exist_ok=True)
    for doc in sorted(SHIPPED_DOCS.glob("*.md")):
        shutil.copyfile(doc, workdir / "docs" / doc.name)


def course_settings(exchange: Path) -> str:
    """The two lines that put a learner in the course: the exchange and the course id."""
    return (f"c.Exchange.root = {str(exchange)!r}\n"
            f"c.CourseDirectory.course_id = {COURSE_ID!r}\n")


def course_config_text(exchange: Path) -> str:
    """A learner's ``nbgrader_config.py`` for the course whose exchange is ``exchange``."""
    return ("# Written by `gdrlab lab --course`: the nbgrader exchange of your course, so that\n"
            "# `nbgrader fetch_assignment LAB` and `nbgrader submit LAB`, run in this folder, reach it.\n"
            "# Edit it freely: gdrlab lab never overwrites it.\n"
            "c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file\n"
            + course_settings(exchange))


def set_course(workdir: Path, exchange_dir: str, dry_run: bool = False) -> dict:
    """Write ``workdir/nbgrader_config.py`` for the course whose nbgrader exchange is
    ``exchange_dir``, unless one is there: an existing file is kept as it is. Returns ``config``
    (its path), ``exchange_root``, ``status`` ("written", "would write", "already set", "kept")
    and ``notes``, one line each for the learner."""

    text = utf8_text("--course", str(exchange_dir)).strip()
    if not text:
        raise ValueError("--course needs the exchange folder your instructor gave you, e.g. --course /srv/nbgrader/exchange")
    if any(c in text for c in "\n\r\x00"):
        raise ValueError("--course: the exchange folder's name holds a line break or NUL")
    exchange = Path(text).expanduser().resolve()
    if exchange.exists() and not exchange.is_dir():
        raise ValueError(f"--course: {exchange} exists and is not a folder (it should be the nbgrader exchange)")
    config = workdir / COURSE_CONFIG
    notes = []
    if config.exists():
        try:
            current = config.read_text(errors="replace")
        except OSError as e:
            current = ""
            notes.append(f"cannot read your {config} ({e.strerror or e})")
        if all(line in current.splitlines() for line in course_settings(exchange).splitlines()):
            status = "already set"
            notes.append(f"course: {config} already names the exchange {exchange} and course {COURSE_ID!r} (kept as is)")
        else:
            status = "kept"
            notes.append(f"course: kept your {config} (not overwritten); to join this course, put these lines in it: "
                         + " ; ".join(course_settings(exchange).splitlines()))
    elif dry_run:
        status = "would write"
        notes.append(f"course: would write {config} (exchange {exchange}, course {COURSE_ID!r})")
    else:
        workdir.mkdir(parents=True, exist_ok=True)
        config.write_text(course_config_text(exchange))
        status = "written"
        notes.append(f"course: wrote {config} (exchange {exchange}, course {COURSE_ID!r}); in a terminal in "
                     f"{workdir}: nbgrader fetch_assignment LAB, then nbgrader submit LAB")
    if not exchange.is_dir():
        notes.append(f"course: {exchange} does not exist on this machine yet; your instructor's first "
                     "`nbgrader release_assignment` creates it (check the folder with them if fetching finds nothing)")
    return {"config": str(config), "exchange_root": str(exchange), "course_id": COURSE_ID, "status": status,
            "notes": notes}


def jupyter_command(root: Path, no_browser: bool = False, port: int | None = None,
                    ip: str | None = None, allow_root: bool = False) -> list[str]:
    """The command line that starts JupyterLab rooted at ``root``."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}"]
    if no_browser:
        cmd.append("--no-browser")
    if port is not None:
        if not 0 < port < 65536:
            raise ValueError(f"--port must be between 1 and 65535, got {port}")
        cmd.append(f"--port={port}")
    if ip is not None:
        cmd.append(f"--ip={ip}")
    if allow_root:
        cmd.append("--allow-root")
    return cmd


def _with_bin_on_path(env: dict[str, str]) -> dict[str, str]:
    """This environment's bin/ first on PATH: nbgrader starts ``alembic`` by name, and a venv used
    without activating it (``.venv/bin/gdrlab lab``) would not find it."""
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def student_env(base: Mapping[str, str] | None = None, course: bool = False) -> dict[str, str]:
    """The environment for a learner's JupyterLab: nbgrader's instructor extensions switched off,
    and, in a course (``course``), its Assignments tab (fetch, validate, submit) switched on."""
    env = _with_bin_on_path(dict(os.environ if base is None else base))
    extra = env.get("JUPYTER_CONFIG_PATH")
    own = COURSE_JUPYTER_CONFIG if course else STUDENT_JUPYTER_CONFIG
    env["JUPYTER_CONFIG_PATH"] = str(own) + (os.pathsep + extra if extra else "")
    return env


def _summary(result: Mapping[str, list[str]], workdir: Path, dry_run: bool = False) -> list[str]:
    """One line each for what was (or, with ``dry_run``, would be) added, kept and reset."""
    lines = []
    if result["added"]:
        labs = sorted({n.split("/")[0] for n in result["added"]})
        lines.append(f"{'would add' if dry_run else 'added'} {len(labs)} lab(s) to {workdir}: {', '.join(labs)}")
    if result["kept"]:
        lines.append(f"kept {len(result['kept'])} file(s) you already have in {workdir} (not overwritten; "
                     "gdrlab lab --reset LAB gets a fresh copy and keeps yours)")
    for backup in result.get("backups", []):
        lines.append(f"reset: your previous copy is now {workdir / backup}")
    if dry_run and result["reset"]:
        lines.append(f"would reset {', '.join(result['reset'])} (your copies renamed, not deleted)")
    return lines


def run(args: argparse.Namespace) -> int:

    if args.instructor and (args.prepare or args.reset or args.workdir or args.course is not None):
        raise ValueError("--instructor opens labs/ of the source checkout: DIR, --reset, --prepare and "
                         "--course are for the student copies")
    if not (args.dry_run or args.prepare) and importlib.util.find_spec("jupyterlab") is None:
        raise Unavailable("JupyterLab is not installed: pip install gdrlab[lab]")
    notes: list[str] = []
    course: dict | None = None
    allow_root = hasattr(os, "geteuid") and os.geteuid() == 0
    if allow_root and not args.prepare:
        notes.append("running as root: passing --allow-root to JupyterLab")
    if args.instructor:
        root = source_checkout()
        if root is None:
            raise Unavailable("--instructor needs a source checkout of gdrlab (labs/source with the "
                              "solutions is not part of the installed package)")
        workdir, result, env = root / "labs", None, _with_bin_on_path(dict(os.environ))
        notes.append(f"instructor mode: the sources in {workdir} (solutions, hidden tests, nbgrader tools); "
                     "they are tracked files: clear outputs before committing, then `make release`")
    else:
        if not shipped_labs():
            raise Unavailable(f"this gdrlab has no student labs in {STUDENT_LABS}; run `make release` "
                              "in a source checkout")
        workdir, env = resolve_workdir(args.workdir), student_env()
        result = plan(workdir, args.reset) if args.dry_run else prepare(workdir, args.reset)
        notes += _summary(result, workdir, args.dry_run)
        if args.course is not None:
            course = set_course(workdir, args.course, args.dry_run)
            notes += course.pop("notes")
        if args.course is not None or (workdir / COURSE_CONFIG).is_file():
            env = student_env(course=True)   # a course: the Assignments tab, for fetch and submit
    cmd = jupyter_command(workdir, args.no_browser, args.port, args.ip, allow_root)
    if args.prepare:
        cmd = []
    if args.json:
        doc = {"workdir": str(workdir), "command": cmd, "files": result, "notes": notes,
               "dry_run": bool(args.dry_run)}
        if course is not None:
            doc["course"] = course
        emit_json(doc)
    else:
        for line in notes:
            print(f"gdrlab lab: {line}", file=sys.stderr)
        if args.dry_run and cmd:
            print(" ".join(cmd))
    if args.dry_run or args.prepare:
        return 0
    if not args.json:
        print(f"gdrlab lab: starting JupyterLab on {workdir} (Ctrl+C to stop)", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    if args.json:
        os.dup2(2, 1)  # stdout held one document: Jupyter's own output goes to stderr
    # Jupyter starts in the folder it serves: nbgrader reads nbgrader_config.py from the current
    # folder, so in instructor mode labs/nbgrader_config.py is in force and Formgrader lists the labs.
    os.chdir(workdir)
    # Jupyter replaces this process, so Ctrl+C and a SIGTERM from a batch system reach it directly
    os.execve(cmd[0], cmd, env)
    return 1  # not reached
