"""The class view's dashboard in a real browser (Playwright driving headless Chromium), as the
labs' browser test does: the instructor logs in, 3 simulated learners submit while the page is
open, the machines table and the per-path curves fill in without a reload, a learner named
``<script>`` shows as text (no dialog opens), and after a reload everything is still there.

Needs Chromium (``/usr/bin/chromium`` or ``GDRLAB_CHROMIUM``) and the ``playwright`` package (its
own browser download is not used). Without them the test skips, except under ``CI``, where a
missing prerequisite fails. The screenshot goes to ``$GDRLAB_ARTIFACTS/browser/`` (or pytest's
temporary base); its path is printed.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import threading
from pathlib import Path

import pytest

from classroom.conftest import start_class, stop_class
from classroom.helpers import INSTRUCTOR_TOKEN, call, join, submission

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

NAMES = ("Ada", "<script>alert('xss')</script>", "Grace")
ROWS_EACH = 24 * 2  # two recorded sweeps of 24 sizes


def _chromium() -> str | None:
    chosen = os.environ.get("GDRLAB_CHROMIUM")
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    candidates = ["/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"browser test cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def _artifacts(request: pytest.FixtureRequest) -> Path:
    env = os.environ.get("GDRLAB_ARTIFACTS")
    path = Path(env) / "browser" if env else request.config._tmp_path_factory.getbasetemp() / "browser-artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _say(request: pytest.FixtureRequest, line: str) -> None:
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(line)


def test_dashboard_fills_live_and_keeps_rows_after_reload(tmp_path, request):
    if importlib.util.find_spec("playwright") is None:
        _skip_or_fail("Python package missing: playwright")
    if _chromium() is None:
        _skip_or_fail("no Chromium: /usr/bin/chromium absent and GDRLAB_CHROMIUM not set (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    from gdrlab.classroom.store import db_url

    running = start_class(db_url(str(tmp_path / "browser.sqlite")))
    shots = _artifacts(request)
    dialogs: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=_chromium(), headless=True,
                                         args=["--disable-dev-shm-usage", "--disable-gpu"])
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1200})
                page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
                page.goto(running.url + "dashboard")
                page.fill("#token", INSTRUCTOR_TOKEN)
                page.click("#login")
                page.wait_for_selector("#machines")
                page.wait_for_function("document.body.dataset.rows === '0' || document.body.dataset.rows === undefined")
                navigations: list[str] = []
                page.on("framenavigated", lambda f: navigations.append(f.url) if f == page.main_frame else None)

                errors: list[str] = []

                def learner(i: int) -> None:
                    try:
                        _, key = join(running.url, NAMES[i])
                        status, doc, _ = call(running.url, "api/submit", submission(i, frames=2), key=key)
                        assert status == 201, doc
                    except BaseException as exc:  # noqa: BLE001 - reported below
                        errors.append(repr(exc))

                threads = [threading.Thread(target=learner, args=(i,)) for i in range(len(NAMES))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(60)
                assert errors == []
                total = ROWS_EACH * len(NAMES)
                page.wait_for_function(f"document.body.dataset.rows === '{total}'", timeout=30_000)
                page.wait_for_function(f"document.querySelectorAll('#machines tbody tr').length === {len(NAMES)}")
                assert navigations == []  # the rows came without a reload
                _check_page(page)
                shot = shots / "class-view.png"
                page.screenshot(path=str(shot), full_page=True)
                _say(request, f"class view screenshot: {shot}")
                page.reload()
                page.wait_for_function(f"document.body.dataset.rows === '{total}'", timeout=30_000)
                _check_page(page)
                page.screenshot(path=str(shots / "class-view-after-reload.png"), full_page=True)
            finally:
                browser.close()
    finally:
        stop_class(running)
    assert dialogs == []  # the learner named <script> ran nothing


def _check_page(page) -> None:
    table = page.inner_text("#machines")
    for name in NAMES:
        assert name in table  # shown as text, escaped
    assert "NVIDIA H200" in table
    curves = page.evaluate("""() => Array.from(document.querySelectorAll('#plots .js-plotly-plot'))
        .map(d => ({path: d.dataset.path, traces: d.data.length}))""")
    paths = {c["path"]: c["traces"] for c in curves}
    assert set(paths) == {"host", "staged"}, paths
    for path, traces in paths.items():
        assert traces == len(NAMES) + 1, (path, traces)  # one curve per learner's machine + the recorded H200
