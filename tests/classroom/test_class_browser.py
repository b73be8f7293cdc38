"""The class view's dashboard in a real browser (Playwright driving headless Chromium), as the
labs' browser test does: the instructor logs in, 3 simulated learners submit while the page is
open, the machines table and the per-path curves fill in without a reload and without polling
(the server-sent event stream carries them), a learner named ``<script>`` shows as text (no
dialog opens), one learner's slow sweep is coloured as the model's "low" verdict for that
learner's machine and its hover names the likeliest cause, and after a reload everything is still
there.

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
OUTLIER = 2  # Grace: her sweeps at a third of the recorded bandwidth, three times its latency


def _submission(i: int) -> dict:
    sub = submission(i, frames=2)
    if i == OUTLIER:
        for frame in sub["frames"]:
            for row in frame["rows"]:
                row["bw_gbps"] = row["bw_gbps"] * 0.3 if row.get("bw_gbps") is not None else None
                row["lat_p50_us"] = row["lat_p50_us"] * 3 if row.get("lat_p50_us") is not None else None
    return sub


def _expected(sub: dict, path: str) -> list[dict]:
    """The model's verdicts for one frame of ``sub``, straight from gdrlab.model (the dashboard
    must show these): the doctor report's machine, explain_rows on its rows, by size."""
    import pandas as pd

    from gdrlab.model import explain_rows, profile_from_machine
    from gdrlab.model.machine import facts_from_doctor
    doctor = sub["doctor"]
    cpu = doctor["provenance"]["hardware_detail"]["cpu"]
    frame = next(f for f in sub["frames"] if f["rows"][0]["path"] == path)
    df = pd.DataFrame(frame["rows"])
    df.attrs["provenance"] = frame["provenance"]
    out = explain_rows(df, profile_from_machine(facts_from_doctor(doctor, cpu)))
    return sorted(out.to_dict("records"), key=lambda r: r["size"])


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
    _SHOTS[:] = [shots]
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
                page.wait_for_function("document.body.dataset.live === 'sse'", timeout=30_000)
                assert page.evaluate("document.body.dataset.rows") == "0"
                navigations: list[str] = []
                page.on("framenavigated", lambda f: navigations.append(f.url) if f == page.main_frame else None)
                polls: list[str] = []
                page.on("request", lambda r: polls.append(r.url) if "api/state" in r.url else None)
                subs = {i: _submission(i) for i in range(len(NAMES))}

                errors: list[str] = []

                def learner(i: int) -> None:
                    try:
                        _, key = join(running.url, NAMES[i])
                        status, doc, _ = call(running.url, "api/submit", subs[i], key=key)
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
                assert polls == []  # ... and without polling: through the event stream
                assert page.evaluate("document.body.dataset.live") == "sse"
                _check_page(page)
                cause = _check_outlier(page, subs[OUTLIER])
                shot = shots / "class-view.png"
                page.screenshot(path=str(shot), full_page=True)
                _say(request, f"class view screenshot: {shot}")
                _say(request, f"class view hover on the outlier: {shots / 'class-view-outlier-hover.png'} ({cause})")
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
    for path in paths:
        kinds = page.evaluate("""(path) => Array.from(document.querySelector(`#plots [data-path="${path}"]`).data)
            .map(t => (t.meta || {}).kind)""", path)
        assert kinds.count("learner") == len(NAMES), (path, kinds)  # one curve per learner's machine
        assert kinds.count("recorded") == 1, (path, kinds)  # the recorded H200 sweep
        assert kinds.count("model") >= 1, (path, kinds)  # the model of each kind of machine in the room


def _check_outlier(page, sub: dict) -> str:
    """The outlier's points on the staged plot have the legend's colour of the verdict the model
    gives them, and hovering one that is 'low' shows the likeliest cause; returns that cause."""
    legend = page.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll(
        '#verdict-legend [data-verdict]')).map(li => [li.dataset.verdict, li.dataset.color]))""")
    expected = _expected(sub, "staged")
    assert any(e["verdict"] == "low" for e in expected), [e["verdict"] for e in expected]
    trace = page.evaluate("""(name) => {
        const d = document.querySelector('#plots [data-path="staged"]');
        const i = d.data.findIndex(t => (t.meta || {}).kind === 'learner' && t.name.startsWith(name));
        return {index: i, x: d.data[i].x, colors: d.data[i].marker.color, text: d.data[i].text};
    }""", NAMES[OUTLIER])
    assert trace["x"] == [e["size"] for e in expected]
    assert trace["colors"] == [legend[e["verdict"]] for e in expected]
    # the largest size that is 'low': there the curves stand apart (at small sizes they overlap)
    j = max(k for k, e in enumerate(expected) if e["verdict"] == "low")
    cause = expected[j]["likely_causes"].split("; ")[0]
    point = """([i, j]) => {
        const d = document.querySelector('#plots [data-path="staged"]');
        d.scrollIntoView({block: 'center'});
        const pt = d.querySelectorAll('.scatterlayer .trace')[i].querySelectorAll('.points path')[j];
        const r = pt.getBoundingClientRect();
        return {x: r.x + r.width / 2, y: r.y + r.height / 2};
    }"""
    shown = """(cause) => {
        const h = document.querySelector('#plots [data-path="staged"] .hoverlayer');
        return !!h && h.textContent.includes('likeliest cause') && h.textContent.includes(cause);
    }"""
    for attempt in range(10):  # a redraw meanwhile (the next event) clears the hover: point again
        box = page.evaluate(point, [trace["index"], j])
        page.mouse.move(box["x"] - 4, box["y"] - 4)
        page.mouse.move(box["x"], box["y"], steps=2)
        try:
            page.wait_for_function(shown, arg=cause, timeout=2_000)
            break
        except Exception:  # noqa: BLE001 - tried again below; the last try's failure is reported
            if attempt == 9:
                raise
    hover = page.evaluate("""() => document.querySelector('#plots [data-path="staged"] .hoverlayer').textContent""")
    assert "low" in hover and NAMES[OUTLIER] in hover, hover
    page.screenshot(path=str(_SHOTS[0] / "class-view-outlier-hover.png"))
    return cause


_SHOTS: list[Path] = []


def test_dashboard_polls_when_the_server_streams_to_no_more_dashboards(tmp_path):
    """With every live place taken (here: none offered, --max-live 0) the page falls back to
    polling api/state, and the rows still come without a reload."""
    if importlib.util.find_spec("playwright") is None:
        _skip_or_fail("Python package missing: playwright")
    if _chromium() is None:
        _skip_or_fail("no Chromium: /usr/bin/chromium absent and GDRLAB_CHROMIUM not set (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    from gdrlab.classroom.store import db_url

    running = start_class(db_url(str(tmp_path / "poll.sqlite")), max_live=0)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=_chromium(), headless=True,
                                         args=["--disable-dev-shm-usage", "--disable-gpu"])
            try:
                page = browser.new_page()
                page.goto(running.url + "dashboard")
                page.fill("#token", INSTRUCTOR_TOKEN)
                page.click("#login")
                page.wait_for_selector("#machines")
                page.wait_for_function("document.body.dataset.live === 'poll'", timeout=30_000)
                navigations: list[str] = []
                page.on("framenavigated", lambda f: navigations.append(f.url) if f == page.main_frame else None)
                _, key = join(running.url, "Ada")
                status, doc, _ = call(running.url, "api/submit", submission(0, frames=1), key=key)
                assert status == 201, doc
                page.wait_for_function("document.body.dataset.rows === '24'", timeout=30_000)
                assert navigations == []
                assert "polling" in page.inner_text("#status")
            finally:
                browser.close()
    finally:
        stop_class(running)
