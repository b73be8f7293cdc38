"""examples/jupyterhub/ on a real JupyterHub: the workshop recipe as a class would use it.

A hub started from examples/jupyterhub/jupyterhub_config.py (through a small wrapper config that
only picks free ports and adds an admin token for the test), with configurable-http-proxy, the
recipe's shared-password authenticator and SimpleLocalProcessSpawner (every server as this user,
each in its own home). Three learners and an instructor log in through the hub's login form; each
learner's server holds that learner's own working copies of the labs; the nbgrader exchange runs
through the hub, with the HTTP calls the Assignments tab and Formgrader make (release, fetch,
submit, collect, autograde, feedback); the class view answers at /services/class/.

Each phase is timed and the timings printed (and written to $GDRLAB_ARTIFACTS/hub-timings.json).
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import UNDER_ASAN

if UNDER_ASAN:
    pytest.skip("the hub runs in the plain suite, not the sanitizer re-run (whose venv has no JupyterHub)",
                allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "jupyterhub"
SHIPPED = ROOT / "gdrlab" / "data" / "labs"
LAB = "01-bar1-exposure"
COURSE_ID = "gdrlab"  # labs/nbgrader_config.py
LEARNERS = ("alice", "bob", "carol")
INSTRUCTOR = "teacher"
USER_PASSWORD = "room-password-" + secrets.token_hex(4)
ADMIN_PASSWORD = "instructor-password-" + secrets.token_hex(16)
MARKER = re.compile(r"^\s*#+\s*(BEGIN|END) SOLUTION\s*$")
DEBIAN_NODE_PATH = "/usr/share/nodejs"  # where Debian's node-* packages put their modules

pytestmark = pytest.mark.timeout(600)


# ----------------------------------------------------------------------------- what the test needs
def _proxy_env() -> tuple[dict[str, str] | None, str]:
    """The environment in which configurable-http-proxy starts, or None and why not. Debian's
    package keeps its modules in /usr/share/nodejs, which a node from elsewhere (NodeSource) does
    not search: NODE_PATH names it then."""
    exe = shutil.which("configurable-http-proxy")
    if exe is None:
        return None, "configurable-http-proxy is not installed (apt-get install node-configurable-http-proxy)"
    why = ""
    for extra in ({}, {"NODE_PATH": DEBIAN_NODE_PATH}):
        env = dict(os.environ, **extra)
        try:
            proc = subprocess.run([exe, "--version"], env=env, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = f"{type(exc).__name__}: {exc}"
            continue
        if proc.returncode == 0:
            return env, ""
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return None, f"configurable-http-proxy does not start ({why})"


def _requirements() -> dict[str, str]:
    """The environment the hub runs in; skips (fails under CI=true) where a part is missing."""
    missing = []
    if importlib.util.find_spec("jupyterhub") is None:
        missing.append("jupyterhub is not installed (pip install jupyterhub; it is in the [test] extra)")
    env, why = _proxy_env()
    if env is None:
        missing.append(why)
    if missing:
        message = "; ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI installs jupyterhub and configurable-http-proxy, yet: {message}")
        pytest.skip(message)
    assert env is not None
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, check: Callable[[], Any], timeout: float, proc: subprocess.Popen | None = None,
             log: Path | None = None) -> Any:
    """Polls ``check`` until it returns something true; fails after ``timeout`` seconds, or at once
    when ``proc`` has exited, with the end of ``log``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # noqa: BLE001 - not ready yet; reported if it never is
            last = exc
        else:
            if last:
                return last
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-6000:] if log is not None and log.exists() else ""
    pytest.fail(f"{what}: not within {timeout:.0f} s (last: {last!r})\n{tail}")


# ----------------------------------------------------------------------------- the hub
class Hub:
    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.state = tmp / "state"
        self.course = self.state / "course"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_token = secrets.token_hex(24)
        self.log = tmp / "jupyterhub.log"
        self.proc: subprocess.Popen | None = None
        self.children: list[int] = []
        self.env = dict(env, GDRLAB_HUB_STATE=str(self.state), GDRLAB_HUB_SPAWNER="simple",
                        GDRLAB_HUB_INSTRUCTORS=INSTRUCTOR, GDRLAB_HUB_COURSE=str(self.course),
                        GDRLAB_HUB_EXCHANGE=str(self.state / "exchange"), GDRLAB_HUB_USER_PASSWORD=USER_PASSWORD,
                        GDRLAB_HUB_ADMIN_PASSWORD=ADMIN_PASSWORD, GDRLAB_HUB_BIND_URL=self.url + "/",
                        GDRLAB_HUB_PUBLIC_URL=self.url, GDRLAB_HUB_CLASS_PORT=str(_free_port()),
                        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
        self.env.pop("GDRLAB_WORKDIR", None)  # each learner's copies go to their own home
        self.config = tmp / "test_jupyterhub_config.py"
        self.config.write_text(f"""
c = get_config()  # noqa: F821
load_subconfig({str(EXAMPLE / 'jupyterhub_config.py')!r})  # noqa: F821
# the test's own: free ports, quick mode for the grading runs, and an admin token
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{_free_port()}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{_free_port()}"
c.Spawner.environment["GDRLAB_QUICK"] = "1"
c.JupyterHub.services.append({{"name": "test-admin", "api_token": {self.admin_token!r}}})
c.JupyterHub.load_roles = [{{"name": "test-admin", "services": ["test-admin"],
                            "scopes": ["admin:users", "admin:servers", "tokens", "list:users"]}}]
""")

    def make_course(self) -> None:
        """The instructor's course folder: labs/ of this checkout, one lab, the labs' own config."""
        from gdrlab.autograde import landlock
        (self.course / "source").mkdir(parents=True)
        shutil.copytree(ROOT / "labs" / "source" / LAB, self.course / "source" / LAB)
        sandbox = landlock.available()[0]
        (self.course / "nbgrader_config.py").write_text((ROOT / "labs" / "nbgrader_config.py").read_text()
                                                        + f"\nc.SandboxedExecute.require_sandbox = {sandbox!r}\n")

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(self.config)],
                                     cwd=self.state, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=self.log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)

    def api(self, method: str, path: str, token: str | None = None, **kw: Any) -> Any:
        import requests
        headers = {"Authorization": f"token {token or self.admin_token}"}
        return requests.request(method, self.url + path, headers=headers, timeout=120, **kw)

    def note_children(self) -> None:
        import psutil
        if self.proc is None:
            return
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                if child.pid not in self.children:
                    self.children.append(child.pid)

    def memory(self) -> dict[str, Any]:
        """RSS (MiB) of the hub, its proxy, the class view and each person's server (with its kernels)."""
        import psutil
        assert self.proc is not None
        hub = psutil.Process(self.proc.pid)
        out: dict[str, Any] = {"hub": round(hub.memory_info().rss / 2**20, 1), "servers": []}
        for child in hub.children():
            with contextlib.suppress(psutil.Error):
                line = " ".join(child.cmdline())
                tree = [child, *child.children(recursive=True)]
                rss = round(sum(p.memory_info().rss for p in tree) / 2**20, 1)
                if "configurable-http-proxy" in line:
                    out["proxy"] = rss
                elif "class_service.py" in line:
                    out["class view"] = rss
                elif "singleuser.py" in line or "jupyterhub.singleuser" in line:
                    out["servers"].append(rss)
        return out

    def stop(self) -> None:
        """The hub stops its servers, the proxy and the class view on SIGTERM; whatever is left
        of the processes it started is killed."""
        import psutil
        if self.proc is None:
            return
        self.note_children()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        left = []
        for pid in self.children:
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                proc.kill()
                left.append(proc)
        psutil.wait_procs(left, timeout=10)


@contextlib.contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    start = time.monotonic()
    try:
        yield
    finally:
        timings[name] = round(time.monotonic() - start, 2)


# ----------------------------------------------------------------------------- helpers of the flow
def login(hub: Hub, name: str, password: str) -> Any:
    """The login form, as a browser sends it: the hub's XSRF cookie, then the POST."""
    import requests
    s = requests.Session()
    page = s.get(f"{hub.url}/hub/login", timeout=30)
    page.raise_for_status()
    xsrf = s.cookies.get("_xsrf")
    resp = s.post(f"{hub.url}/hub/login", data={"username": name, "password": password, "_xsrf": xsrf},
                  allow_redirects=False, timeout=30)
    return s, resp


def contents(hub: Hub, user: str, token: str, path: str, **kw: Any) -> Any:
    return hub.api("GET", f"/user/{user}/api/contents/{path}", token, **kw)


def solutions() -> dict[str, str]:
    nb = json.loads((ROOT / "labs" / "source" / LAB / f"{LAB}.ipynb").read_text())
    return {c["metadata"]["nbgrader"]["grade_id"]: "\n".join(
        line for line in "".join(c["source"]).splitlines() if not MARKER.match(line))
        for c in nb["cells"] if c["cell_type"] == "code" and c["metadata"].get("nbgrader", {}).get("solution")}


def ok(resp: Any, what: str) -> Any:
    assert resp.status_code < 300, f"{what}: HTTP {resp.status_code}: {resp.text[:2000]}"
    try:
        return resp.json()  # nbgrader's handlers send JSON without saying so
    except ValueError:
        return resp


def nbgrader_ok(resp: Any, what: str) -> Any:
    """Formgrader answers 200 with ``{"success": false, "log": ...}`` when nbgrader failed."""
    doc = ok(resp, what)
    if isinstance(doc, dict) and "success" in doc:
        assert doc["success"], f"{what}: {doc.get('error') or ''}\n{doc.get('log', '')[-4000:]}"
    return doc


# ----------------------------------------------------------------------------- the test
def test_workshop_hub_end_to_end(tmp_path, capsys):
    env = _requirements()
    import requests
    timings: dict[str, float] = {}
    memory: dict[str, Any] = {}
    hub = Hub(tmp_path, env)
    hub.make_course()
    started = time.monotonic()
    try:
        with timed(timings, "hub start (hub, proxy, class view service)"):
            hub.start()
            wait_for("the hub's API", lambda: hub.api("GET", "/hub/api/").status_code == 200, 90, hub.proc, hub.log)
            wait_for("the class view through the proxy",
                     lambda: requests.get(f"{hub.url}/services/class/healthz", timeout=5).status_code == 200,
                     60, hub.proc, hub.log)

        with timed(timings, "log in 3 learners and the instructor"):
            sessions = {}
            for name in (*LEARNERS, INSTRUCTOR):
                session, resp = login(hub, name, ADMIN_PASSWORD if name == INSTRUCTOR else USER_PASSWORD)
                assert resp.status_code == 302, f"login of {name}: HTTP {resp.status_code}\n{resp.text[:500]}"
                assert any(c.name.startswith("jupyterhub-") for c in session.cookies), session.cookies
                sessions[name] = session
            _, refused = login(hub, "mallory", "not-the-password")
            assert refused.status_code == 403, f"a wrong password: HTTP {refused.status_code}"
            _, refused = login(hub, INSTRUCTOR, USER_PASSWORD)
            assert refused.status_code == 403, "the instructor's name with the learners' password was let in"
            users = {u["name"]: u for u in ok(hub.api("GET", "/hub/api/users"), "users")}
            assert set(users) == {*LEARNERS, INSTRUCTOR}, users
            assert users[INSTRUCTOR]["admin"] and not any(users[n]["admin"] for n in LEARNERS)

        with timed(timings, "start 4 servers (each from its own login session)"):
            for name in (*LEARNERS, INSTRUCTOR):  # what the browser does after logging in
                resp = sessions[name].get(f"{hub.url}/hub/spawn", allow_redirects=False, timeout=60)
                assert resp.status_code == 302 and f"/{name}" in resp.headers["Location"], (
                    f"start {name}: HTTP {resp.status_code} {resp.headers.get('Location')}\n{resp.text[:500]}")
            for name in (*LEARNERS, INSTRUCTOR):
                wait_for(f"{name}'s server",
                         lambda n=name: hub.api("GET", f"/hub/api/users/{n}").json()["servers"].get("", {}).get("ready"),
                         150, hub.proc, hub.log)
            hub.note_children()
            tokens = {name: ok(hub.api("POST", f"/hub/api/users/{name}/tokens", json={"expires_in": 3600, "note": "test"}),
                               f"token for {name}")["token"] for name in (*LEARNERS, INSTRUCTOR)}

        with timed(timings, "each learner's own copies"):
            shipped = sorted(p.name for p in SHIPPED.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
            assert LAB in shipped
            for name in LEARNERS:
                listing = ok(contents(hub, name, tokens[name], "gdrlab-labs"), f"{name}'s gdrlab-labs")
                labs = sorted(i["name"] for i in listing["content"] if i["type"] == "directory" and i["name"] != "docs")
                assert labs == shipped, (name, labs)
                nb = ok(contents(hub, name, tokens[name], f"gdrlab-labs/{LAB}/{LAB}.ipynb"), "a copy")["content"]
                want = json.loads((SHIPPED / LAB / f"{LAB}.ipynb").read_text())
                assert [c["source"] for c in nb["cells"]] == ["".join(c["source"]) for c in want["cells"]]
                assert (hub.state / "home" / name / "gdrlab-labs" / LAB / f"{LAB}.ipynb").is_file()
            # one learner's file is not in another's folder, and one learner's token opens no other server
            ok(hub.api("PUT", "/user/alice/api/contents/gdrlab-labs/notes.md", tokens["alice"],
                       json={"type": "file", "format": "text", "content": "mine"}), "alice writes")
            assert contents(hub, "bob", tokens["bob"], "gdrlab-labs/notes.md").status_code == 404
            assert contents(hub, "bob", tokens["alice"], "gdrlab-labs").status_code in (403, 404)
            source = ok(contents(hub, INSTRUCTOR, tokens[INSTRUCTOR], "source"), "the course's source/")
            assert [i["name"] for i in source["content"]] == [LAB]

        def grader(method: str, path: str, **kw: Any) -> Any:
            return hub.api(method, f"/user/{INSTRUCTOR}/formgrader/api/{path}", tokens[INSTRUCTOR], **kw)

        def assignments(name: str, action: str) -> Any:
            return hub.api("POST", f"/user/{name}/assignments/{action}", tokens[name],
                           json={"assignment_id": LAB, "course_id": COURSE_ID})

        with timed(timings, "release (generate + release_assignment)"):
            nbgrader_ok(grader("POST", f"assignment/{LAB}/assign"), "generate_assignment")
            nbgrader_ok(grader("POST", f"assignment/{LAB}/release"), "release_assignment")
            assert (hub.state / "exchange" / COURSE_ID / "outbound" / LAB / f"{LAB}.ipynb").is_file()

        with timed(timings, "fetch (3 learners)"):
            for name in LEARNERS:
                listed = ok(assignments(name, "fetch"), f"{name} fetches")
                assert any(a["assignment_id"] == LAB and a["status"] == "fetched" for a in listed["value"]), listed
                assert (hub.state / "home" / name / "gdrlab-course" / LAB / f"{LAB}.ipynb").is_file()

        with timed(timings, "work and submit (3 learners)"):
            answers = solutions()
            for name in LEARNERS:
                path = f"gdrlab-course/{LAB}/{LAB}.ipynb"
                nb = ok(contents(hub, name, tokens[name], path), "the fetched copy")["content"]
                if name != "bob":  # bob hands in the release as it is
                    for cell in nb["cells"]:
                        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
                        if cell["cell_type"] == "code" and grade_id in answers:
                            cell["source"] = answers[grade_id]
                    ok(hub.api("PUT", f"/user/{name}/api/contents/{path}", tokens[name],
                               json={"type": "notebook", "format": "json", "content": nb}), f"{name} saves")
                listed = ok(assignments(name, "submit"), f"{name} submits")
                assert listed.get("success", True), listed
            inbound = sorted(p.name.split("+")[0] for p in (hub.state / "exchange" / COURSE_ID / "inbound").iterdir())
            assert inbound == sorted(LEARNERS), inbound

        with timed(timings, "collect"):
            nbgrader_ok(grader("POST", f"assignment/{LAB}/collect"), "collect")
            for name in LEARNERS:
                assert (hub.course / "submitted" / name / LAB / f"{LAB}.ipynb").is_file(), name

        with timed(timings, "autograde (3 submissions)"):
            for name in LEARNERS:
                nbgrader_ok(grader("POST", f"submission/{LAB}/{name}/autograde"), f"autograde {name}")
            rows = {r["student"]: r for r in ok(grader("GET", f"submissions/{LAB}"), "submissions")}
            assert set(rows) == set(LEARNERS), rows
            full = rows["alice"]["max_code_score"]
            assert full > 0 and rows["alice"]["code_score"] == full == rows["carol"]["code_score"], rows
            assert rows["bob"]["code_score"] < full, rows

        with timed(timings, "feedback (generate, release, fetch)"):
            nbgrader_ok(grader("POST", f"assignment/{LAB}/generate_feedback"), "generate_feedback")
            nbgrader_ok(grader("POST", f"assignment/{LAB}/release_feedback"), "release_feedback")
            for name in LEARNERS:
                ok(assignments(name, "fetch_feedback"), f"{name} fetches feedback")
                got = list((hub.state / "home" / name / "gdrlab-course" / LAB / "feedback").glob(f"*/{LAB}.html"))
                assert len(got) == 1, (name, got)
                assert "HIDDEN TESTS" not in got[0].read_text(errors="replace")

        with timed(timings, "class view at /services/class/"):
            base = f"{hub.url}/services/class/"
            token = (hub.state / "class-token").read_text().strip()
            page = requests.get(base + "dashboard", timeout=30)
            assert page.status_code in (200, 401) and 'action="login"' in page.text, page.status_code
            browser = requests.Session()
            resp = browser.post(base + "login", data={"token": token}, timeout=30)
            assert resp.status_code == 200 and resp.url == base + "dashboard", (resp.status_code, resp.url)
            assert 'href="export.csv"' in resp.text
            join_url = (hub.state / "class-join-url").read_text().strip()
            assert join_url.startswith(base + "?join="), join_url
            from gdrlab.classroom.client import join
            joined = join(join_url, "Alice Learner", where=tmp_path / "alice-config")
            assert joined["learner_id"], joined
            state = ok(requests.get(base + "api/state", headers={"Authorization": f"Bearer {token}"}, timeout=30),
                       "class state")
            assert "Alice Learner" in json.dumps(state), state
            assert requests.get(base + "api/state", timeout=30).status_code == 401

        memory.update(hub.memory())
    finally:
        with timed(timings, "stop everything"):
            hub.stop()
        timings["total"] = round(time.monotonic() - started, 2)
        timings["load average (1 min) at the end"] = round(os.getloadavg()[0], 2)
        timings["cores"] = os.cpu_count() or 0
        with capsys.disabled():
            print("\nJupyterHub test phases (s): " + json.dumps(timings, indent=1))
            print("memory at the end, RSS MiB: " + json.dumps(memory))
        if os.environ.get("GDRLAB_ARTIFACTS"):
            out = Path(os.environ["GDRLAB_ARTIFACTS"])
            out.mkdir(parents=True, exist_ok=True)
            (out / "hub-timings.json").write_text(json.dumps(timings, indent=1) + "\n")
            if hub.log.exists():
                shutil.copyfile(hub.log, out / "hub-jupyterhub.log")
    import psutil
    alive = [pid for pid in hub.children if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"processes the hub started are still running: {alive}"
