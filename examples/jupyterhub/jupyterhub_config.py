"""JupyterHub for a gdrlab workshop on one login node or VM (README.md beside this file).

    GDRLAB_HUB_USER_PASSWORD=... GDRLAB_HUB_ADMIN_PASSWORD=... \\
        jupyterhub -f examples/jupyterhub/jupyterhub_config.py

What it sets up, once for everybody:

* **log in**: JupyterHub's shared-password authenticator (one password for the room, a longer one
  for the instructors); any name may log in, so keep the hub on the room's network or behind HTTPS.
* **one server per person**, started by ``singleuser.py`` beside this file: a learner's server
  first copies the student labs into ``~/gdrlab-labs`` with ``gdrlab lab``'s own copying (new labs
  added, the learner's files kept), then serves the learner's home; an instructor's serves the
  course folder (the lab sources with ``labs/nbgrader_config.py``), where Formgrader lists the labs.
* **the nbgrader exchange**, configured for every user in one generated ``nbgrader_config.py``
  (``c.Exchange.root`` and the course id), on every server's Jupyter config path: learners fetch
  and submit from the Assignments tab, the instructor releases, collects, autogrades and returns
  feedback from Formgrader. Nobody edits a config file.
* **the class view** (``gdrlab class serve``'s app) as a hub-managed service at ``/services/class/``.

Every setting is an environment variable, so the same file serves the workshop and the test
(tests/hub/test_jupyterhub.py):

=============================  =================================================================
GDRLAB_HUB_STATE               hub state: database, cookie secret, class view database and
                               token, generated Jupyter config (default /srv/gdrlab)
GDRLAB_HUB_COURSE              the instructor's course folder (default ~/course, in the
                               instructor's home): labs/ of a gdrlab checkout, copied there by
                               singleuser.py on the first start when the hub runs from a checkout
GDRLAB_HUB_EXCHANGE            the nbgrader exchange (default /srv/nbgrader/exchange, nbgrader's)
GDRLAB_HUB_INSTRUCTORS         comma-separated names that log in as instructors (default instructor)
GDRLAB_HUB_USER_PASSWORD       the learners' shared password (8 characters or more; required)
GDRLAB_HUB_ADMIN_PASSWORD      the instructors' password (32 characters or more; required)
GDRLAB_HUB_SPAWNER             systemd (default: SystemdSpawner with a throw-away Unix user per
                               learner), local (LocalProcessSpawner: existing Unix accounts; use
                               PAM to log in then) or simple (every server as the hub's own user:
                               tests and a single-person trial only)
GDRLAB_HUB_BIND_URL            where the hub listens (default http://0.0.0.0:8000)
GDRLAB_HUB_PUBLIC_URL          the hub's address as learners type it, for the class view's join
                               URL (default: the bind URL with this host's name)
GDRLAB_HUB_CLASS_PORT          the class view's port on 127.0.0.1 (default 8731)
GDRLAB_HUB_MEM_LIMIT           memory per server, SystemdSpawner only (default 2G; docs/instructor.md, Sizing)
=============================  =================================================================
"""
import os
import secrets
import socket
import sys
from pathlib import Path

from gdrlab.commands.lab import course_settings

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

HERE = Path(__file__).resolve().parent
STATE = Path(os.environ.get("GDRLAB_HUB_STATE", "/srv/gdrlab")).resolve()
COURSE = os.environ.get("GDRLAB_HUB_COURSE", "~/course")  # expanded in the instructor's server
EXCHANGE = Path(os.environ.get("GDRLAB_HUB_EXCHANGE", "/srv/nbgrader/exchange")).resolve()
INSTRUCTORS = {n.strip() for n in os.environ.get("GDRLAB_HUB_INSTRUCTORS", "instructor").split(",") if n.strip()}
SPAWNER = os.environ.get("GDRLAB_HUB_SPAWNER", "systemd")
CLASS_PORT = int(os.environ.get("GDRLAB_HUB_CLASS_PORT", "8731"))
LEARNER_WORKDIR = "gdrlab-labs"   # gdrlab lab's default working folder, in the learner's home
LEARNER_COURSE_DIR = "gdrlab-course"  # where the Assignments tab fetches graded copies to

for name in ("GDRLAB_HUB_USER_PASSWORD", "GDRLAB_HUB_ADMIN_PASSWORD"):
    if not os.environ.get(name):
        sys.exit(f"jupyterhub_config.py: set {name} (the shared-password authenticator needs it)")
if SPAWNER not in ("systemd", "local", "simple"):
    sys.exit(f"jupyterhub_config.py: GDRLAB_HUB_SPAWNER must be systemd, local or simple, not {SPAWNER!r}")


def _private_file(path: Path, make) -> str:
    """The content of ``path``, created (owner-only) with ``make()`` on first start."""
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(make())
    return path.read_text().strip()


# ---------------------------------------------------------------- hub state
# learners' servers read STATE/jupyter-config: the folder is passable (not listable); what is
# secret in it is owner-only
STATE.mkdir(parents=True, exist_ok=True)
STATE.chmod(0o711)
if not (STATE / "jupyterhub.sqlite").exists():
    (STATE / "jupyterhub.sqlite").touch(mode=0o600)
c.JupyterHub.bind_url = os.environ.get("GDRLAB_HUB_BIND_URL", "http://0.0.0.0:8000")
PUBLIC_URL = os.environ.get("GDRLAB_HUB_PUBLIC_URL") or c.JupyterHub.bind_url.replace("0.0.0.0", socket.getfqdn())
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")

# ---------------------------------------------------------------- log in
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = os.environ["GDRLAB_HUB_USER_PASSWORD"]
c.SharedPasswordAuthenticator.admin_password = os.environ["GDRLAB_HUB_ADMIN_PASSWORD"]
c.Authenticator.admin_users = INSTRUCTORS
c.Authenticator.allow_all = True  # a workshop: whoever has the room's password

# ---------------------------------------------------------------- the exchange, once for everybody
# nbgrader needs the exchange writable by all, sticky like /tmp (its docs, "Exchange" setup)
EXCHANGE.mkdir(parents=True, exist_ok=True)
EXCHANGE.chmod(0o1777)
COMMON_CONFIG = STATE / "jupyter-config"
COMMON_CONFIG.mkdir(exist_ok=True)
COMMON_CONFIG.chmod(0o755)
(COMMON_CONFIG / "nbgrader_config.py").write_text(
    "# Written by examples/jupyterhub/jupyterhub_config.py at every hub start: the course's\n"
    "# nbgrader exchange for every user of this hub (gdrlab lab --course writes the same lines).\n"
    "import os\n"
    "c = get_config()  # noqa: F821\n"
    + course_settings(EXCHANGE)
    + f"c.Exchange.assignment_dir = os.path.expanduser('~/{LEARNER_COURSE_DIR}')\n"
    "os.makedirs(c.Exchange.assignment_dir, exist_ok=True)  # the Assignments tab fetches into it\n"
    "# a learner hands in under their hub name, whatever Unix user the server runs as (nbgrader's\n"
    "# default is the Unix name); the instructor's student_id stays '*' so that collect takes all\n"
    "if os.environ.get('GDRLAB_HUB_ROLE') == 'learner' and os.environ.get('JUPYTERHUB_USER'):\n"
    "    c.CourseDirectory.student_id = os.environ['JUPYTERHUB_USER']\n")
(COMMON_CONFIG / "nbgrader_config.py").chmod(0o644)
LEARNER_CONFIG = HERE / "learner-jupyter-config"  # nbgrader's instructor tools off, Assignments tab on

# ---------------------------------------------------------------- one server per person
c.Spawner.cmd = [sys.executable, str(HERE / "singleuser.py")]
c.Spawner.http_timeout = 60
c.Spawner.start_timeout = 120
c.Spawner.environment = {"GDRLAB_HUB_COURSE": COURSE}
if SPAWNER == "systemd":
    # pip install jupyterhub-systemdspawner; the hub runs as root under systemd
    c.JupyterHub.spawner_class = "systemdspawner.SystemdSpawner"
    c.SystemdSpawner.dynamic_users = True  # a throw-away Unix user and home per learner name
    c.SystemdSpawner.mem_limit = os.environ.get("GDRLAB_HUB_MEM_LIMIT", "2G")
    c.SystemdSpawner.cpu_limit = 1.0
    c.SystemdSpawner.isolate_tmp = True
    c.SystemdSpawner.readwrite_paths = [str(EXCHANGE)]
elif SPAWNER == "local":
    c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
else:
    c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
    c.SimpleLocalProcessSpawner.home_dir_template = str(STATE / "home" / "{username}")
    if os.geteuid() == 0:  # a hub run as root (containers, CI): Jupyter refuses root without this
        c.Spawner.args = ["--allow-root"]


def pre_spawn_hook(spawner) -> None:
    """Per person: the role, the Jupyter config path and the page the browser opens."""
    instructor = spawner.user.name in INSTRUCTORS
    paths = [str(COMMON_CONFIG)] if instructor else [str(LEARNER_CONFIG), str(COMMON_CONFIG)]
    spawner.environment = dict(spawner.environment, GDRLAB_HUB_ROLE="instructor" if instructor else "learner",
                               JUPYTER_CONFIG_PATH=os.pathsep.join(paths))
    spawner.default_url = "/lab/tree/source" if instructor else f"/lab/tree/{LEARNER_WORKDIR}"
    if SPAWNER == "simple":
        Path(spawner.home_dir).mkdir(parents=True, exist_ok=True)


c.Spawner.pre_spawn_hook = pre_spawn_hook

# ---------------------------------------------------------------- the class view, a hub service
CLASS_TOKEN = _private_file(STATE / "class-token", lambda: secrets.token_urlsafe(24))
c.JupyterHub.services = [{
    "name": "class",
    "url": f"http://127.0.0.1:{CLASS_PORT}",
    "command": [sys.executable, str(HERE / "class_service.py"), "--db", str(STATE / "class.sqlite"),
                "--public-url", PUBLIC_URL],
    "environment": {"GDRLAB_TOKEN": CLASS_TOKEN, "GDRLAB_CLASS_JOIN_FILE": str(STATE / "class-join-url")},
    "display": True,
}]
