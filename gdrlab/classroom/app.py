"""The class view's web app: an ASGI app on Starlette, served by uvicorn.

Why Starlette: it is small (one pure-Python package over anyio, no compiled parts), needs no build
step (the page is one HTML file, one script and plotly.js from the plotly package, served as
files), is well kept (Encode's, the toolkit FastAPI itself is built on, frequent releases) and
runs on uvicorn, which already comes with JupyterLab-adjacent stacks. FastAPI's extra layer
(pydantic models, OpenAPI) would add a dependency tree for four endpoints whose input is checked
by :mod:`gdrlab.classroom.schema` anyway.

Endpoints (every error is JSON ``{"error": "one line"}`` with a 4xx status; nothing is stored):

==========================  ==================  ===============================================
``POST /api/join``          class join token    ``{"join_token", "name"}`` -> ``{"learner_id", "key"}``
``POST /api/submit``        learner key         a submission (:mod:`.schema`) -> what was stored
``GET /api/state?since=N``  instructor          learners, machines, progress, rows after N
``GET /api/events?since=N`` instructor          the same state as server-sent events, live
``GET /api/recorded``       instructor          the recorded H200 sweeps, per path
``GET /export.csv``         instructor          every row (``?anonymise=1``: learner-ID names)
``GET /export.parquet``     instructor          the same rows as Parquet
``GET /dashboard``          instructor cookie   the page (``POST /login`` with the token sets it)
==========================  ==================  ===============================================

The learner key and the instructor token travel as ``Authorization: Bearer``; the dashboard's
cookie is an HMAC of the instructor token (HttpOnly, SameSite=Strict), never the token itself.

Live updates: ``/api/events`` is a ``text/event-stream`` (server-sent events, one ``state`` event
whenever a learner joins or stores something, a comment line as heartbeat every
``ClassConfig.heartbeat_s``, the event id the last submission id so a reconnecting browser resumes
from ``Last-Event-ID``). At most ``ClassConfig.max_live`` streams at once (503 beyond: the page
then polls ``/api/state``); every stream ends when the server shuts down (:meth:`LiveHub.close`,
called by the server's exit handler), so uvicorn exits without waiting on them.

Each row in the state carries the model's verdict for its learner's machine (:mod:`.normal`). The
refusals, security headers, capped bodies, tokens and rate limits are :mod:`.web`'s.
"""
from __future__ import annotations

import asyncio
import hmac
import math
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from . import schema
from .export import export_parquet_bytes, export_rows_csv
from .live import LiveHub, event_stream
from .normal import VERDICTS, Verdicts
from .pages import dashboard_page, login_page
from .store import Store
from .web import (
    RateLimiter,
    Refused,
    bearer,
    client_ip,
    error_response,
    guarded,
    key_hash,
    parse_json,
    read_body,
    secured,
    session_cookie,
)

__all__ = ["ClassConfig", "LiveHub", "RateLimiter", "create_app", "key_hash", "plotly_js_path", "session_cookie"]

COOKIE = "gdrlab_class"
STATIC = Path(__file__).resolve().parent / "static"
RECORDED_SWEEPS = ("h200-bench-host", "h200-bench-staged", "h200-bench-shared", "h200-bench-pipelined")


def plotly_js_path() -> Path:
    """The plotly.min.js the plotly Python package ships (no CDN, no build step)."""
    import plotly
    path = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise FileNotFoundError(f"plotly.min.js not found in the plotly package ({path})")
    return path


@dataclass
class ClassConfig:
    """The server's settings: the instructor token (dashboard, API, export), the class join
    token, caps and limits."""

    instructor_token: str
    join_token: str
    max_body_bytes: int = schema.MAX_BODY_BYTES
    rate_per_minute: float = 60.0
    rate_burst: int = 30
    max_learners: int = 1000
    max_live: int = 16  # dashboards streaming at once (server-sent events)
    heartbeat_s: float = 15.0
    log: Callable[[str], None] | None = None
    limits: schema.Limits = field(default_factory=schema.Limits)


class _ClassView:
    """The endpoints, over one store and one configuration."""

    def __init__(self, store: Store, config: ClassConfig) -> None:
        self.store, self.config = store, config
        self.submit_limit = RateLimiter(config.rate_per_minute, config.rate_burst)
        self.failed_auth = RateLimiter(per_minute=20, burst=20)  # wrong tokens and keys, per client address
        self.cookie_value = session_cookie(config.instructor_token)
        self.log = config.log or (lambda line: None)
        self.recorded_cache: list[Any] = []
        self.hub = LiveHub(config.max_live)
        self.verdicts = Verdicts()
        self._bodies: dict[int, Any] = {}  # doctor report submission id -> body
        self._state_lock = threading.Lock()
        self._last_state: tuple[tuple[int, int, int], dict[str, Any]] | None = None

    # ------------------------------------------------------------------ who is asking
    def check_failed_auth(self, request: Request) -> None:
        wait = self.failed_auth.take(client_ip(request))
        if wait:
            raise Refused(429, f"too many wrong tokens from this address: retry in {wait:.0f} s",
                           {"Retry-After": str(int(wait) + 1)})

    def instructor(self, request: Request) -> None:
        token = bearer(request)
        if token is not None:
            if hmac.compare_digest(token.encode(), self.config.instructor_token.encode()):
                return
            self.check_failed_auth(request)
            raise Refused(403, "wrong instructor token")
        cookie = request.cookies.get(COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), self.cookie_value.encode()):
            return
        raise Refused(401, "the instructor token is needed (Authorization: Bearer TOKEN, or log in at /dashboard)")

    async def learner(self, request: Request) -> dict[str, Any]:
        key = bearer(request)
        if key is None:
            raise Refused(401, "no learner key: run `gdrlab class join URL --name NAME` first")
        found = await run_in_threadpool(self.store.learner_by_key_hash, key_hash(key))
        if found is None:
            self.check_failed_auth(request)
            raise Refused(403, "unknown learner key: join the class again (`gdrlab class join URL --name NAME`)")
        return found

    # ------------------------------------------------------------------ learners
    async def join(self, request: Request) -> Response:
        body = parse_json(await read_body(request, 4096))
        if not isinstance(body, dict) or not isinstance(body.get("join_token"), str):
            raise Refused(400, 'join: send {"join_token": ..., "name": ...}')
        if not hmac.compare_digest(body["join_token"].encode(), self.config.join_token.encode()):
            self.check_failed_auth(request)
            raise Refused(403, "wrong join token: ask your instructor for the class's join URL")
        name = schema.validate_name(body.get("name"))
        if await run_in_threadpool(self.store.count_learners) >= self.config.max_learners:
            raise Refused(409, f"the class is full ({self.config.max_learners} learners)")
        key = secrets.token_urlsafe(32)
        learner_id = await run_in_threadpool(self.store.add_learner, name, key_hash(key))
        self.hub.notify()
        self.log(f"learner {learner_id} joined: {schema._shown(name, 80)}")
        return JSONResponse({"learner_id": learner_id, "name": name, "key": key}, status_code=201)

    async def submit(self, request: Request) -> Response:
        who = await self.learner(request)
        wait = self.submit_limit.take(who["id"])
        if wait:
            raise Refused(429, f"too many submissions: retry in {wait:.0f} s", {"Retry-After": str(int(wait) + 1)})
        doc = schema.validate_submission(parse_json(await read_body(request, self.config.max_body_bytes)),
                                         self.config.limits)
        outcomes = await run_in_threadpool(self.store.add_items, who["id"], doc["fingerprint"], submission_items(doc))
        new = [o for o in outcomes if not o.duplicate]
        if new:
            self.hub.notify()
        self.log(f"learner {who['id']} ({schema._shown(who['name'], 40)}): {len(new)} stored, "
                 f"{len(outcomes) - len(new)} already there, {sum(o.rows for o in new)} rows")
        return JSONResponse({"stored": len(new), "duplicates": len(outcomes) - len(new),
                             "rows": sum(o.rows for o in new), "submissions": [o.submission_id for o in outcomes]},
                            status_code=201 if new else 200)

    # ------------------------------------------------------------------ instructor
    def _reports(self, ids: dict[tuple[int, str], int]) -> dict[tuple[int, str], tuple[int, Any]]:
        out = {}
        for machine, sid in ids.items():
            body = self._bodies.get(sid)
            if body is None:
                body = self.store.submission_body(sid) or {}
            out[machine] = (sid, body)
        self._bodies = {sid: body for sid, body in out.values()}  # only the current reports stay
        return out

    def _shared_state(self, since: int) -> dict[str, Any]:
        """:meth:`_state`, computed once for every dashboard that asks with the same ``since``
        while nothing new has come (the streams of several dashboards wake together)."""
        with self._state_lock:
            key = (since, self.store.max_submission_id(), self.store.count_learners())
            if self._last_state is not None and self._last_state[0] == key:
                return self._last_state[1]
            doc = self._state(since)
            self._last_state = ((since, doc["max_id"], len(doc["learners"])), doc)
            return doc

    def _state(self, since: int) -> dict[str, Any]:
        """Everything the dashboard shows that changed after submission ``since``: the rows of
        later submissions (and, with their new verdicts, the earlier rows of a machine whose doctor
        report came later), the tables in full, the model curves when there are new rows."""
        store = self.store
        max_id = store.max_submission_id()
        new_rows = [r for r in store.rows_after(since) if r["submission_id"] <= max_id]
        report_ids = store.machine_reports()
        if since > 0:
            seen = {r["id"] for r in new_rows}
            for (learner_id, fp), sid in report_ids.items():
                if since < sid <= max_id:
                    new_rows += [r for r in store.rows_of_machine(learner_id, fp, since) if r["id"] not in seen]
        reports = self._reports(report_ids)
        verdicts = self.verdicts.explain(new_rows, reports)
        rows = [{**{k: r[k] for k in STATE_ROW_KEYS}, **v} for r, v in zip(new_rows, verdicts)]
        doc = {"max_id": max_id, "learners": store.learners(), "machines": store.machines(),
               "progress": store.progress(), "rows": rows, "counts": store.counts(), "verdicts": list(VERDICTS)}
        if rows or since == 0:
            doc["models"] = self.verdicts.curves(store.row_keys(max_id), reports)
        return doc

    async def state(self, request: Request) -> Response:
        self.instructor(request)
        since_text = request.query_params.get("since", "0")
        if not since_text.isascii() or not since_text.isdigit() or len(since_text) > 18:
            raise Refused(400, "since: a submission id (a whole number)")
        return JSONResponse(await run_in_threadpool(self._shared_state, int(since_text)))

    async def events(self, request: Request) -> Response:
        """The dashboard's state as server-sent events (see the module docstring)."""
        self.instructor(request)
        since_text = request.query_params.get("since", "0")
        resume = request.headers.get("last-event-id", "")
        for text in (since_text, resume):
            if text and (not text.isascii() or not text.isdigit() or len(text) > 18):
                raise Refused(400, "since: a submission id (a whole number)")
        since = max(int(since_text or 0), int(resume or 0))
        loop, wake = asyncio.get_running_loop(), asyncio.Event()
        if not self.hub.enter(loop, wake):
            if self.hub.closed:
                raise Refused(503, "the class view is shutting down", {"Retry-After": "5"})
            raise Refused(503, f"too many live dashboards ({self.hub.max_clients}): this page polls instead",
                           {"Retry-After": "30"})
        stream = event_stream(self.hub, loop, wake, lambda since: run_in_threadpool(self._shared_state, since), since,
                              self.config.heartbeat_s)
        return StreamingResponse(stream, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def export_parquet(self, request: Request) -> Response:
        self.instructor(request)
        anonymise = request.query_params.get("anonymise", "") in ("1", "true", "yes")
        try:
            data = await run_in_threadpool(export_parquet_bytes, self.store, anonymise)
        except ImportError:
            raise Refused(501, "Parquet export needs pyarrow on the server: pip install 'gdrlab[class]'") from None
        return Response(data, media_type="application/vnd.apache.parquet",
                        headers={"Content-Disposition": 'attachment; filename="gdrlab-class.parquet"'})

    async def recorded(self, request: Request) -> Response:
        self.instructor(request)
        if not self.recorded_cache:
            self.recorded_cache.append(await run_in_threadpool(_recorded_rows))
        return JSONResponse(self.recorded_cache[0])

    async def export_csv(self, request: Request) -> Response:
        self.instructor(request)
        anonymise = request.query_params.get("anonymise", "") in ("1", "true", "yes")
        text = await run_in_threadpool(export_rows_csv, self.store, anonymise)
        return Response(text, media_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition": 'attachment; filename="gdrlab-class.csv"'})

    async def dashboard(self, request: Request) -> Response:
        try:
            self.instructor(request)
        except Refused:
            return HTMLResponse(login_page(), status_code=401)
        return HTMLResponse(await run_in_threadpool(dashboard_page, self.store))

    async def login(self, request: Request) -> Response:
        form = parse_qs((await read_body(request, 4096)).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        if not hmac.compare_digest(token.encode(), self.config.instructor_token.encode()):
            self.check_failed_auth(request)
            return HTMLResponse(login_page("wrong instructor token"), status_code=403)
        response = RedirectResponse("dashboard", status_code=303)
        response.set_cookie(COOKIE, self.cookie_value, httponly=True, samesite="strict", path="/")
        return response

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("dashboard", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def index(self, request: Request) -> Response:
        return RedirectResponse("dashboard", status_code=307)

    async def health(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "service": "gdrlab class view"})

    async def static(self, request: Request) -> Response:
        files: dict[str, Callable[[], Path]] = {
            "plotly.min.js": plotly_js_path, "dashboard.js": lambda: STATIC / "dashboard.js",
            "dashboard.css": lambda: STATIC / "dashboard.css"}
        name = request.path_params["name"]
        if name not in files:
            raise Refused(404, "not found")
        response = FileResponse(files[name]())
        response.headers["Cache-Control"] = "max-age=3600"
        return response


STATE_ROW_KEYS = ("id", "submission_id", "learner_id", "learner", "fingerprint", "path", "wire", "size", "lat_p50_us",
                  "bw_gbps", "verified", "source", "lab")


def submission_items(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A validated submission as the store's items: the doctor report (keyed by its content
    without dates) and each result frame (keyed by its content)."""
    items = []
    if doc["doctor"] is not None:
        body = {"doctor": doc["doctor"], "topology": doc["topology"]}
        items.append({"kind": "doctor",
                      "content_hash": schema.content_hash(schema.doctor_identity(doc["doctor"], doc["topology"])),
                      "provenance": doc["doctor"].get("provenance") or {}, "body": body, "lab": doc["lab"],
                      "rows": [], "summary": schema.machine_summary(body)})
    for f in doc["frames"]:
        items.append({"kind": "frame", "content_hash": schema.content_hash(f), "provenance": f["provenance"],
                      "body": {"provenance": f["provenance"], "lab": f["lab"]}, "lab": f["lab"],
                      "rows": f["rows"], "summary": None})
    return items


def create_app(store: Store, config: ClassConfig) -> Starlette:
    """The class view as an ASGI app over ``store``."""
    v = _ClassView(store, config)
    routes = [
        Route("/", guarded(v.index)),
        Route("/healthz", guarded(v.health)),
        Route("/api/join", guarded(v.join), methods=["POST"]),
        Route("/api/submit", guarded(v.submit), methods=["POST"]),
        Route("/api/state", guarded(v.state)),
        Route("/api/recorded", guarded(v.recorded)),
        Route("/api/events", guarded(v.events)),
        Route("/export.csv", guarded(v.export_csv)),
        Route("/export.parquet", guarded(v.export_parquet)),
        Route("/dashboard", guarded(v.dashboard)),
        Route("/login", guarded(v.login), methods=["POST"]),
        Route("/logout", guarded(v.logout), methods=["POST"]),
        Route("/static/{name}", guarded(v.static)),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        return secured(error_response(status, "not found" if status == 404 else "method not allowed" if status == 405
                               else "refused"))

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})
    app.state.class_view = v
    return app


def _recorded_rows() -> dict[str, Any]:
    """The recorded H200 sweeps shipped with gdrlab, per path, for the overlay."""
    from .. import provenance as _prov
    from .. import recorded
    out: dict[str, Any] = {}
    for name in RECORDED_SWEEPS:
        try:
            df = recorded.load(name)
        except Exception:  # noqa: BLE001 - a copy without recorded data draws no overlay
            continue
        label = _prov.label(df, short=True)
        for path, part in df.groupby("path"):
            part = part.sort_values("size")
            out[str(path)] = {"label": label, "size": [int(v) for v in part["size"]],
                              "bw_gbps": [_finite(v) for v in part["bw_gbps"]],
                              "lat_p50_us": [_finite(v) for v in part["lat_p50_us"]]}
    return out


def _finite(v: Any) -> float | None:
    return float(v) if v is not None and math.isfinite(float(v)) else None
