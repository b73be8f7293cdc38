"""Start one person's Jupyter server under JupyterHub (jupyterhub_config.py's Spawner.cmd).

A learner's server first makes the learner's working copies of the labs with ``gdrlab lab``'s own
copying (:func:`gdrlab.commands.lab.prepare`: labs new to the learner are added, every file the
learner has is kept) in ``$GDRLAB_WORKDIR`` or ``~/gdrlab-labs``, then serves the learner's home.
An instructor's server serves the course folder ($GDRLAB_HUB_COURSE), whose nbgrader_config.py
is then in force (nbgrader reads it from the folder the server starts in).
Runs as the person whose server it is, so the copies belong to them.
"""
import os
import sys
from pathlib import Path

from gdrlab.commands.lab import prepare, resolve_workdir


def main() -> None:
    if os.environ.get("GDRLAB_HUB_ROLE") == "instructor":
        root = Path(os.environ["GDRLAB_HUB_COURSE"])
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
