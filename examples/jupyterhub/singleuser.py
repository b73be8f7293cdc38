"""Start one person's Jupyter server under JupyterHub (jupyterhub_config.py's Spawner.cmd).

A learner's server first makes the learner's working copies of the labs with ``gdrlab lab``'s own
copying (:func:`gdrlab.commands.lab.prepare`: labs new to the learner are added, every file the
learner has is kept) in ``$GDRLAB_WORKDIR`` or ``~/gdrlab-labs``, then serves the learner's home.
An instructor's server serves the course folder ($GDRLAB_HUB_COURSE, default ~/course; on the
first start a copy of labs/ of the checkout this gdrlab runs from), whose nbgrader_config.py is
then in force (nbgrader reads it from the folder the server starts in).
Runs as the person whose server it is, so the copies belong to them.
"""
import os
import shutil
import sys
from pathlib import Path

from gdrlab.commands.lab import prepare, resolve_workdir, source_checkout

# what nbgrader writes into a course folder, not copied from a checkout's labs/
COURSE_DATA = ("release", "submitted", "autograded", "feedback", "gradebook.db", "__pycache__", ".ipynb_checkpoints")


def main() -> None:
    if os.environ.get("GDRLAB_HUB_ROLE") == "instructor":
        root = Path(os.environ.get("GDRLAB_HUB_COURSE", "~/course")).expanduser()
        checkout = source_checkout()
        if not root.exists() and checkout is not None:
            # first start: the lab sources and their nbgrader configuration, without course data
            shutil.copytree(checkout / "labs", root, ignore=shutil.ignore_patterns(*COURSE_DATA))
            root.chmod(0o700)  # solutions and hidden tests: the instructor's only
            print(f"singleuser.py: copied the course ({checkout / 'labs'}) to {root}", file=sys.stderr, flush=True)
        if not (root / "nbgrader_config.py").is_file():
            sys.exit(f"singleuser.py: the course folder {root} has no nbgrader_config.py "
                     "(copy labs/ of a gdrlab checkout there: README.md beside this file)")
    else:
        workdir = resolve_workdir(None)
        done = prepare(workdir)
        print(f"singleuser.py: {len(done['added'])} lab file(s) added to {workdir}, "
              f"{len(done['kept'])} kept", file=sys.stderr, flush=True)
        root = Path.home()
    os.chdir(root)
    # nbgrader starts alembic by name: this environment's bin/ first on PATH
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    argv = [sys.executable, "-m", "jupyterhub.singleuser", f"--ServerApp.root_dir={root}", *sys.argv[1:]]
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
