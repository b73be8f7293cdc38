"""`gdrlab lab`: the learner's working copies (student form, outside the repository, never
overwritten), root, the instructor mode, and the JupyterLab command line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import UNDER_ASAN

from gdrlab import cli
from gdrlab.commands import lab

if UNDER_ASAN:
    # DESIGN.md: the sanitizer re-run covers tests that reach native code; these run once
    pytest.skip("packaging and deployment tests run in the plain suite, not the sanitizer re-run",
                allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def _sources() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "labs" / "source").glob("*/*.ipynb"))


def test_package_ships_every_lab_in_student_form():
    assert lab.shipped_labs() == _sources()
    for nb_path in lab.STUDENT_LABS.glob("*/*.ipynb"):
        nb = json.loads(nb_path.read_text())
        text = "".join("".join(c["source"]) for c in nb["cells"])
        assert not [m for m in MARKERS if m in text], f"{nb_path.name} carries solutions or hidden tests"
        assert "...  # YOUR CODE HERE" in text or "YOUR ANSWER HERE" in text, nb_path.name
        assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), nb_path.name


def test_shipped_student_labs_match_a_fresh_nbgrader_release():
    """The committed student form is what nbgrader makes of labs/source today (`make release`)."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "release.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_first_run_copies_later_runs_keep_and_add(tmp_path):
    work = tmp_path / "labs"
    first = lab.prepare(work)
    assert first["kept"] == [] and len(first["added"]) == len(_sources())
    mine = work / first["added"][0]
    mine.write_text("my work")
    removed = work / first["added"][-1]
    removed.unlink()  # stands for a lab that is new in this release
    second = lab.prepare(work)
    assert second["added"] == [first["added"][-1]]
    assert first["added"][0] in second["kept"]
    assert mine.read_text() == "my work"
    assert removed.read_text() == (lab.STUDENT_LABS / first["added"][-1]).read_text()


def test_the_docs_the_labs_link_to_are_in_the_learners_folder(tmp_path):
    """Every relative link in a student lab that points to ../docs/ finds its page in the
    working folder `gdrlab lab` prepares (the newcomer's broken links), and the shipped pages
    are this checkout's docs."""
    import re

    lab.prepare(tmp_path)
    links = set()
    for nb_path in tmp_path.glob("*/*.ipynb"):
        text = "".join("".join(c["source"]) for c in json.loads(nb_path.read_text())["cells"])
        for target in re.findall(r"\]\((\.\./[^)#\s]+)", text):
            links.add(target)
            assert (nb_path.parent / target).resolve().is_file(), f"{nb_path.name}: {target} is broken"
    assert "../docs/cluster.md" in links and "../docs/cheatsheet.md" in links
    for page in ("cluster.md", "cheatsheet.md"):
        assert (tmp_path / "docs" / page).read_text() == (ROOT / "docs" / page).read_text()


def test_reset_keeps_the_learners_copy_beside_a_fresh_one(tmp_path):
    lab.prepare(tmp_path)
    name = lab.shipped_labs()[0]
    nb = next((tmp_path / name).glob("*.ipynb"))
    nb.write_text("my answers")
    out = lab.prepare(tmp_path, reset=[name])
    assert out["reset"] == [f"{name}/{nb.name}"] and len(out["backups"]) == 1
    assert (tmp_path / out["backups"][0]).read_text() == "my answers"
    assert nb.read_text() == (lab.STUDENT_LABS / name / nb.name).read_text()
    with pytest.raises(ValueError, match="--reset: unknown lab 'nope'"):
        lab.prepare(tmp_path, reset=["nope"])
    # by number, as a learner types it (issue 34 item 9): "02" and "2" name lab 02
    second = lab.shipped_labs()[2]
    assert second.startswith("02-")
    for short in ("02", "2"):
        assert lab.plan(tmp_path, reset=[short])["reset"] and all(
            n.startswith(second + "/") for n in lab.plan(tmp_path, reset=[short])["reset"])
    with pytest.raises(ValueError, match="unknown lab '9'"):
        lab.plan(tmp_path, reset=["9"])


def test_workdir_default_env_and_refusal_inside_the_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("GDRLAB_WORKDIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert lab.resolve_workdir() == (tmp_path / "gdrlab-labs").resolve()
    monkeypatch.setenv("GDRLAB_WORKDIR", str(tmp_path / "w"))
    assert lab.resolve_workdir() == (tmp_path / "w").resolve()
    assert lab.resolve_workdir(str(tmp_path / "x")) == (tmp_path / "x").resolve()
    with pytest.raises(ValueError, match="inside the gdrlab sources"):
        lab.resolve_workdir(str(ROOT / "labs"))
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a folder"):
        lab.resolve_workdir(str(tmp_path / "file"))


@pytest.mark.parametrize("uid", [0, 1000])
def test_root_gets_allow_root_and_one_line(uid, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lab.os, "geteuid", lambda: uid)
    rc = cli.main(["lab", str(tmp_path / "w"), "--dry-run", "--no-browser"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert ("--allow-root" in out.split()) == (uid == 0)
    root_lines = [line for line in err.splitlines() if "running as root" in line]
    assert len(root_lines) == (1 if uid == 0 else 0), err
    assert not (tmp_path / "w").exists(), "--dry-run must create nothing"


def test_command_line_options(tmp_path):
    cmd = lab.jupyter_command(tmp_path, no_browser=True, port=8899, ip="0.0.0.0", allow_root=True)
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"]
    for flag in (f"--ServerApp.root_dir={tmp_path}", "--no-browser", "--port=8899", "--ip=0.0.0.0", "--allow-root"):
        assert flag in cmd
    with pytest.raises(ValueError, match="--port"):
        lab.jupyter_command(tmp_path, port=70000)


def test_student_env_switches_nbgrader_off_and_keeps_the_users_config_path(tmp_path):
    env = lab.student_env({"JUPYTER_CONFIG_PATH": "/elsewhere"})
    first, rest = env["JUPYTER_CONFIG_PATH"].split(":", 1)
    assert rest == "/elsewhere"
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent), "nbgrader runs alembic by name"
    server = json.loads((Path(first) / "jupyter_server_config.json").read_text())
    assert all(v is False for v in server["ServerApp"]["jpserver_extensions"].values())
    page = json.loads((Path(first) / "labconfig" / "page_config.json").read_text())
    assert page["disabledExtensions"]["@jupyter/nbgrader"] is True


def test_dry_run_json_prints_one_document(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "gdrlab", "lab", str(tmp_path / "w"), "--dry-run", "--json",
                           "--no-browser"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    doc = json.loads(proc.stdout)
    assert doc["workdir"] == str((tmp_path / "w").resolve())
    assert "--no-browser" in doc["command"] and len(doc["files"]["added"]) == len(_sources())
    assert any("would add" in n for n in doc["notes"])


def test_instructor_mode_opens_the_sources_and_needs_a_checkout(monkeypatch, capsys):
    assert cli.main(["lab", "--instructor", "--dry-run"]) == 0
    assert f"--ServerApp.root_dir={ROOT / 'labs'}" in capsys.readouterr().out
    assert cli.main(["lab", "--instructor", "--reset", "00-setup-check"]) == 1
    assert "--instructor" in capsys.readouterr().err
    monkeypatch.setattr(lab, "source_checkout", lambda: None)
    assert cli.main(["lab", "--instructor", "--dry-run"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "source checkout" in err[0]


def test_missing_jupyterlab_gives_one_line_with_the_fix(monkeypatch, capsys, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jupyterlab" else real(name, *a))
    rc = cli.main(["lab", str(tmp_path / "w"), "--no-browser"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert len(err) == 1 and "pip install gdrlab[lab]" in err[0]
    assert not (tmp_path / "w").exists(), "nothing is copied when JupyterLab cannot start"


# ----------------------------------------------------------------------------- --course (issue 34)
def _course_lines(config: Path) -> list[str]:
    return [line for line in config.read_text().splitlines() if line.startswith("c.")]


def test_course_writes_the_learners_nbgrader_config(tmp_path, capsys):
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    work = tmp_path / "w"
    assert cli.main(["lab", str(work), "--prepare", "--course", str(exchange)]) == 0
    err = capsys.readouterr().err
    config = work / "nbgrader_config.py"
    assert _course_lines(config) == [f"c.Exchange.root = {str(exchange.resolve())!r}",
                                     "c.CourseDirectory.course_id = 'gdrlab'"]
    assert f"wrote {config}" in err and "nbgrader fetch_assignment" in err and "does not exist" not in err
    # the course id is the one the instructor's labs/nbgrader_config.py sets
    assert 'c.CourseDirectory.course_id = "gdrlab"' in (ROOT / "labs" / "nbgrader_config.py").read_text()
    compile(config.read_text(), str(config), "exec")  # valid Python for nbgrader to load


def test_course_keeps_an_existing_config_and_says_so(tmp_path, capsys):
    work = tmp_path / "w"
    work.mkdir()
    mine = "c = get_config()\nc.Exchange.root = '/elsewhere'\n"
    (work / "nbgrader_config.py").write_text(mine)
    assert cli.main(["lab", str(work), "--prepare", "--course", str(tmp_path / "ex")]) == 0
    err = capsys.readouterr().err
    assert (work / "nbgrader_config.py").read_text() == mine
    assert "kept your" in err and "not overwritten" in err and "c.Exchange.root" in err
    assert "does not exist on this machine yet" in err  # the exchange is not there yet: said too
    # run twice with the same exchange: the second run says it is already set
    other = tmp_path / "w2"
    for _ in range(2):
        assert cli.main(["lab", str(other), "--prepare", "--course", str(tmp_path / "ex")]) == 0
    assert "already names the exchange" in capsys.readouterr().err


def test_course_dry_run_json_and_refusals(tmp_path, capsys):
    proc = subprocess.run([sys.executable, "-m", "gdrlab", "lab", str(tmp_path / "w"), "--dry-run", "--json",
                           "--course", str(tmp_path / "ex")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["course"]["status"] == "would write" and doc["course"]["course_id"] == "gdrlab"
    assert any("would write" in n for n in doc["notes"])
    assert not (tmp_path / "w").exists(), "--dry-run must create nothing"
    assert cli.main(["lab", "--instructor", "--course", str(tmp_path)]) == 1
    assert "--course" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert cli.main(["lab", str(tmp_path / "w"), "--prepare", "--course", str(tmp_path / "file")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a folder" in err[0]
    assert cli.main(["lab", str(tmp_path / "w"), "--prepare", "--course", " "]) == 1
    assert "--course" in capsys.readouterr().err


def test_course_config_reaches_the_exchange_with_nbgrader(tmp_path):
    """The written file is what nbgrader reads in that folder: a learner fetches from the exchange."""
    import os

    pytest.importorskip("nbgrader")
    exchange = tmp_path / "exchange"
    released = exchange / "gdrlab" / "outbound" / "demo"
    released.mkdir(parents=True)
    exchange.chmod(0o777)
    (released / "demo.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                                                     "nbformat_minor": 5}))
    work = tmp_path / "w"
    assert cli.main(["lab", str(work), "--prepare", "--course", str(exchange)]) == 0
    nbgrader = [sys.executable, "-m", "nbgrader"]
    env = lab._with_bin_on_path(dict(os.environ))
    listed = subprocess.run(nbgrader + ["list"], capture_output=True, text=True, cwd=work, timeout=120, env=env)
    assert listed.returncode == 0 and "gdrlab demo" in (listed.stdout + listed.stderr), listed.stderr
    fetched = subprocess.run(nbgrader + ["fetch_assignment", "demo"], capture_output=True, text=True, cwd=work,
                             timeout=120, env=env)
    assert fetched.returncode == 0, fetched.stderr
    assert (work / "demo" / "demo.ipynb").is_file()


def test_before_the_workshop_page_is_linked_and_names_what_exists():
    """Issue 34 item 2: README's quick start links the learner's setup page and says where the CLI is."""
    import re

    readme = (ROOT / "README.md").read_text()
    assert "(docs/before-the-workshop.md)" in readme and "`.venv/bin/gdrlab`" in readme
    page = (ROOT / "docs" / "before-the-workshop.md").read_text()
    for needed in ("WSL2", "macOS", "Binder", "Dockerfile", "gdrlab doctor", "--lab", "Not measured"):
        assert needed in page, needed
    for path in re.findall(r"`((?:binder|scripts|gdrlab/data)/[\w./-]*|Dockerfile|constraints\.txt)`", page):
        assert (ROOT / path).exists(), f"the page names {path}, which does not exist"
    makefile = (ROOT / "Makefile").read_text()
    assert ".venv" in makefile and "bin/gdrlab" in makefile  # what the page says `make lab` prints
    anchors = {"#" + re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", page, re.M)}
    for link in re.findall(r"\]\((#[^)]+)\)", page):
        assert link in anchors, link


def test_a_course_learner_gets_the_assignments_tab_and_no_instructor_tools():
    """Issue 34 (hub report): a learner in a course needs nbgrader's Assignments tab (fetch, submit)
    in JupyterLab; formgrader, the course list and 'create assignment' stay off."""
    env = lab.student_env({}, course=True)
    first = Path(env["JUPYTER_CONFIG_PATH"].split(":", 1)[0])
    server = json.loads((first / "jupyter_server_config.json").read_text())["ServerApp"]["jpserver_extensions"]
    assert server["nbgrader.server_extensions.assignment_list"] is True
    assert server["nbgrader.server_extensions.formgrader"] is False
    assert server["nbgrader.server_extensions.course_list"] is False
    page = json.loads((first / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
    assert page.get("@jupyter/nbgrader:assignment-list") is not True and "@jupyter/nbgrader" not in page
    for tool in ("formgrader", "create-assignment", "course-list"):
        assert page[f"@jupyter/nbgrader:{tool}"] is True
