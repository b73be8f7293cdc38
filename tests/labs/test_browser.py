"""Real-browser test: the labs in JupyterLab, driven by Playwright in headless Chromium.

Learners meet the kit in a browser, so it is tested there: a throw-away
``jupyter lab`` (127.0.0.1, random port and token, ``GDRLAB_QUICK=1``, notebook
windowing off) serves a temporary copy of the labs; headless Chromium opens a
notebook, runs all cells through the Run menu, waits for the kernel to go idle,
checks that no cell shows an error, that the plotly plots are drawn with the
expected points, and that changing a dropdown redraws its plot.

- The harness first proves itself on a notebook it writes (a FigureWidget and a
  Dropdown), including that a raising cell is reported.
- Every lab's markdown must render as written (inline SVG, tables, images).
- Labs 04 and 05 are run and checked against independent figures (recorded data,
  numbers their exercises print, the curriculum's physics). Where a lab shows no
  dropdown under quick mode, the kit's crossover explorer is shown in an added
  cell and driven instead, with a warning.

Needs Chromium (``/usr/bin/chromium`` or ``GDRLAB_CHROMIUM``), the ``playwright``
Python package (its own browser download is not used), JupyterLab, ipywidgets,
anywidget and plotly. Without them the tests skip, except when ``CI`` is set:
there a missing prerequisite is a failure. Screenshots go to ``GDRLAB_ARTIFACTS``
(or ``browser-artifacts`` under pytest's temporary base); the path is printed.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Iterator

import pytest

from browser import labs as lab_checks
from browser import notebook_page as nbp
from browser.server import LabServer, start_lab_server
from browser.smoke import (KIT_SWEEP_SIZES, QUICK_POINTS, count_code_cells, write_kit_widgets_notebook,
                           write_smoke_notebook)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
LAB_SOURCE = REPO / "labs" / "source"
PY_MODULES = ("playwright", "jupyterlab", "ipywidgets", "jupyterlab_widgets", "anywidget", "plotly",
              "ipykernel", "nbformat")
RUN_TIMEOUT_S = 150.0


def _chromium() -> str | None:
    chosen = os.environ.get("GDRLAB_CHROMIUM")
    if chosen:  # an explicit choice is final: no silent fallback to another browser
        return chosen if os.access(chosen, os.X_OK) else None
    candidates = ["/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def _missing_prerequisites() -> str | None:
    missing = [m for m in PY_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        return "Python packages missing: " + ", ".join(missing)
    if _chromium() is None:
        if os.environ.get("GDRLAB_CHROMIUM"):
            return f"GDRLAB_CHROMIUM={os.environ['GDRLAB_CHROMIUM']} is not an executable file"
        return "no Chromium: /usr/bin/chromium absent and GDRLAB_CHROMIUM not set (apt-get install chromium)"
    return None


def _say(request: pytest.FixtureRequest, line: str) -> None:
    """Print past pytest's output capture, so the artifact path shows in every run."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    if capman is None:
        reporter.write_line(line)
        return
    with capman.global_and_fixture_disabled():
        reporter.ensure_newline()
        reporter.write_line(line)


def _skip_or_fail(reason: str) -> None:
    # In CI a skipped browser test would hide a broken front end: fail instead.
    if os.environ.get("CI"):
        pytest.fail(f"browser test cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def artifacts_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get("GDRLAB_ARTIFACTS")
    path = Path(env) / "browser" if env else tmp_path_factory.getbasetemp() / "browser-artifacts"
    path.mkdir(parents=True, exist_ok=True)
    _say(request, f"browser test artifacts (screenshots, logs): {path}")
    return path


@pytest.fixture(scope="module")
def lab_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary copy of the labs plus the smoke notebooks, served as the root."""
    root = tmp_path_factory.mktemp("lab-root")
    if LAB_SOURCE.is_dir():
        shutil.copytree(LAB_SOURCE, root / "source",
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    write_smoke_notebook(root / "smoke" / "smoke.ipynb")
    write_smoke_notebook(root / "smoke" / "broken.ipynb", broken=True)
    write_kit_widgets_notebook(root / "smoke" / "kit-widgets.ipynb")
    return root


@pytest.fixture(scope="module")
def server(lab_root: Path, tmp_path_factory: pytest.TempPathFactory,
           artifacts_dir: Path) -> Iterator[LabServer]:
    reason = _missing_prerequisites()
    if reason:
        _skip_or_fail(reason)
    lab = start_lab_server(lab_root, tmp_path_factory.mktemp("lab-state"),
                           extra_env={"GDRLAB_QUICK": "1"})
    try:
        # Off-screen outputs only exist in the DOM with windowing off.
        mode = lab.setting("@jupyterlab/notebook-extension:tracker", "windowingMode")
        assert mode == "none", f"user settings not applied: windowingMode is {mode!r}"
        yield lab
    finally:
        lab.stop()
        shutil.copy(lab.log_path, artifacts_dir / "jupyter-lab.log")


@pytest.fixture(scope="module")
def browser(server: LabServer) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=_chromium(), headless=True,
                                      args=["--disable-dev-shm-usage", "--disable-gpu"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def browser_context(browser: Any) -> Iterator[Any]:
    # One context for all tests: its HTTP cache spares reloading JupyterLab's scripts per test.
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def page(browser_context: Any, artifacts_dir: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    pg = browser_context.new_page()
    pg.set_default_timeout(30_000)
    console: list[str] = []
    pg.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    pg.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    try:
        yield pg
    finally:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
        (artifacts_dir / f"{name}-console.txt").write_text("\n".join(console) + "\n")
        pg.close()


def _shutdown_kernels(server: LabServer, rel_path: str) -> None:
    """Free the CPU for the next notebook (CI machines have two cores)."""
    for session in server.api("/api/sessions"):
        if session.get("path") == rel_path:
            server.api(f"/api/sessions/{session['id']}", method="DELETE")


def _run_notebook(page: Any, server: LabServer, rel_path: str) -> list[str]:
    n_cells = count_code_cells(server.root / rel_path)
    nbp.open_notebook(page, server, rel_path)
    nbp.collapse_left_sidebar(page)
    nbp.run_all_cells(page)
    return nbp.wait_for_run(page, server, rel_path, n_cells, RUN_TIMEOUT_S)


def _marker_traces(plot: dict) -> list[dict]:
    return [t for t in plot["traces"] if t["visible"] is True and t["y"]]


# --- the harness proves itself on a notebook it wrote ---------------------------------


def test_smoke_notebook_widget_redraws(page: Any, server: LabServer, artifacts_dir: Path) -> None:
    rel = "smoke/smoke.ipynb"
    try:
        _run_notebook(page, server, rel)
        # The notebook reports its own sweep length; quick mode must have reached the kernel.
        printed = [m for t in nbp.output_texts(page) for m in re.findall(r"sweep points: (\d+)", t)]
        assert printed == [str(QUICK_POINTS)], f"GDRLAB_QUICK not seen by the kernel: {printed}"
        cell = nbp.find_widget_cell(page, label="shape")
        plots = nbp.plot_traces(cell.locator)
        assert len(plots) == 1 and plots[0]["width"] > 100 and plots[0]["height"] > 100, plots
        assert cell.locator.locator(".js-plotly-plot").first.is_visible()
        (trace,) = plots[0]["traces"]
        assert len(trace["y"]) == QUICK_POINTS and len(trace["x"]) == QUICK_POINTS
        assert plots[0]["marker_paths"] == QUICK_POINTS  # markers drawn in the SVG, one per point
        cell.locator.scroll_into_view_if_needed()
        nbp.save_screenshot(page, artifacts_dir / "smoke-before.png")
        label, old, new = nbp.choose_other_option(cell.locator, "shape")
        assert (old, new) == ("linear", "quadratic")
        after = nbp.wait_for_plot_change(cell.locator, plots)
        # By hand: size 2**8 = 256 -> (256/1024)**2 = 0.0625 on the quadratic curve.
        assert after[0]["traces"][0]["y"][-1] == pytest.approx(0.0625)
        nbp.save_screenshot(page, artifacts_dir / "smoke-after.png")
        nbp.save_notebook_screenshot(page, artifacts_dir / "smoke-notebook.png")
        assert nbp.error_outputs(page) == []
    finally:
        _shutdown_kernels(server, rel)


def test_smoke_broken_notebook_is_reported(page: Any, server: LabServer) -> None:
    """The error check must be able to fail: a raising cell is caught with its text."""
    rel = "smoke/broken.ipynb"
    try:
        with pytest.raises(nbp.NotebookRunError, match="deliberate failure"):
            _run_notebook(page, server, rel)
    finally:
        _shutdown_kernels(server, rel)


def test_kit_widgets_in_browser(page: Any, server: LabServer, artifacts_dir: Path) -> None:
    """gdrlab.widgets in JupyterLab: Start fills the sweep plot, the profile dropdown redraws the model."""
    rel = "smoke/kit-widgets.ipynb"
    try:
        _run_notebook(page, server, rel)
        assert "quick mode: True" in "\n".join(nbp.output_texts(page))
        sweep_cell = page.locator(".jp-Notebook .jp-Cell").filter(
            has=page.locator("button.widget-button", has_text="Start"))
        sweep_cell.first.locator(".js-plotly-plot").first.wait_for(state="visible")
        before = nbp.plot_traces(sweep_cell.first)
        assert [len(t["y"]) for t in before[0]["traces"]] == [0], "the sweep plot is not empty before Start"
        sweep_cell.first.locator("button.widget-button", has_text="Start").click()
        after = nbp.wait_for_plot_change(sweep_cell.first, before,
                                         settled=lambda: server.kernel_states(rel) == ["idle"])
        (live,) = after[0]["traces"]
        # Quick mode measures three of the sizes: the first, the last and one between.
        xs = [int(x) for x in live["x"]]
        assert len(xs) == 3 and xs[0] == 8 and xs[-1] == 64 << 20, xs
        assert live["y"] == pytest.approx([x / 1e6 for x in xs]), "points are not the measured values"
        assert after[0]["marker_paths"] == 3
        assert "done: 3 sizes" in sweep_cell.first.inner_text()
        nbp.save_screenshot(sweep_cell.first, artifacts_dir / "kit-sweep-after-start.png")

        cell = nbp.find_widget_cell(page, label="profile")
        before = nbp.plot_traces(cell.locator)
        assert all(len(t["y"]) == KIT_SWEEP_SIZES and None not in t["y"] for t in before[0]["traces"])
        nbp.choose_other_option(cell.locator, "profile", "kepler-ivb-2014")
        after = nbp.wait_for_plot_change(cell.locator, before,
                                         settled=lambda: server.kernel_states(rel) == ["idle"])
        assert "kepler-ivb-2014" in (after[0]["title"] or ""), after[0]["title"]
        assert all(len(t["y"]) == KIT_SWEEP_SIZES for t in after[0]["traces"])
        nbp.save_screenshot(cell.locator, artifacts_dir / "kit-explorer-after.png")
        assert nbp.error_outputs(page) == []
    finally:
        _shutdown_kernels(server, rel)


# --- every lab: the explanations render as written ---------------------------------------

LAB_NUMS = sorted(p.name[:2] for p in LAB_SOURCE.glob("[0-9][0-9]-*") if p.is_dir())


@pytest.mark.parametrize("num", LAB_NUMS)
def test_lab_markdown_renders(page: Any, server: LabServer, num: str) -> None:
    """Diagrams, tables and images in the markdown cells show in JupyterLab (no run needed)."""
    rel = _lab_rel_path(server, num)
    try:
        nbp.open_notebook(page, server, rel, wait_kernel=False)
        problems = nbp.markdown_problems(page, server.root / rel)
        assert not problems, f"{rel}:\n" + "\n".join(problems)
    finally:
        _shutdown_kernels(server, rel)


# --- labs 04 and 05 ---------------------------------------------------------------------


def _lab_rel_path(server: LabServer, num: str) -> str:
    found = sorted((server.root / "source").glob(f"{num}-*/{num}-*.ipynb"))
    if len(found) != 1:
        pytest.fail(f"want one notebook labs/source/{num}-*/{num}-*.ipynb, found {found}", pytrace=False)
    return found[0].relative_to(server.root).as_posix()


def _drive_control(page: Any, server: LabServer, rel: str, artifacts_dir: Path, stem: str, *,
                   label: str, option: str, fallback_profile: str) -> tuple[list[dict], list[dict], str]:
    """Change a dropdown next to a plot and wait for the redraw; returns (before, after, how).

    Prefers a control the lab itself shows. Under GDRLAB_QUICK=1 the labs show static figures,
    so otherwise the kit's crossover explorer is shown in an added cell (quick mode off for that
    one call) and driven instead; a warning says so.
    """
    own = [d for d in nbp.dropdowns(page) if d["label"] == label and option in d["options"]]
    if own:
        cell = nbp.find_widget_cell(page, label=label)
        how = f"the lab's own {label!r} dropdown"
    else:
        warnings.warn(f"{rel} shows no {label!r} dropdown under GDRLAB_QUICK=1; driving the kit's "
                      f"crossover explorer in an added cell instead", UserWarning, stacklevel=1)
        new_cell = nbp.append_and_run_cell(
            page, server, rel, lab_checks.EXPLORER_FALLBACK.format(profile=fallback_profile))
        cell = nbp.find_widget_cell(page, label=label, cells=new_cell)
        how = f"the crossover explorer's {label!r} dropdown in an added cell (the lab shows no control)"
    cell.locator.scroll_into_view_if_needed()
    before = nbp.plot_traces(cell.locator)
    assert before and cell.locator.locator(".js-plotly-plot").first.is_visible()
    nbp.save_screenshot(cell.locator, artifacts_dir / f"{stem}-control-before.png")
    _, old, new = nbp.choose_other_option(cell.locator, label, option)
    after = nbp.wait_for_plot_change(cell.locator, before,
                                     settled=lambda: server.kernel_states(rel) == ["idle"])
    nbp.save_screenshot(cell.locator, artifacts_dir / f"{stem}-control-after.png")
    return before, after, f"{how}: {old} -> {new}"


def _report(request: pytest.FixtureRequest, lines: list[str]) -> None:
    for line in lines:
        request.node.user_properties.append(("browser", line))
        _say(request, f"{request.node.name}: {line}")


def _reload_keeps_the_explorer(page: Any, server: LabServer, rel: str, artifacts_dir: Path,
                               drawn: list[dict], mark_bytes: int) -> str:
    """Save, reload the page, and check the explorer comes back as last drawn: log axes on both
    sides, the same traces and the crossover mark where the control change had put it."""
    nbp.save_and_reload(page, server, rel)
    cell = nbp.find_widget_cell(page, label="profile")
    cell.locator.scroll_into_view_if_needed()
    restored = [p for p in nbp.plot_traces(cell.locator) if p["traces"]]
    nbp.save_screenshot(cell.locator, artifacts_dir / "lab04-after-reload.png")
    assert restored, "after a reload the explorer shows no plot"
    axes = [(p["x_type"], p["y_type"]) for p in restored]
    assert all(a == ("log", "log") for a in axes), f"after a reload the explorer's axes are {axes}, want log/log"
    names_before = sorted(t["name"] or "" for p in drawn for t in p["traces"])
    names_after = sorted(t["name"] or "" for p in restored for t in p["traces"])
    assert names_after == names_before, f"traces before the reload {names_before}, after {names_after}"
    marks = [m for m in map(lab_checks.crossover_mark_bytes, restored) if m is not None]
    assert marks == [mark_bytes], f"after a reload the crossover marks are {marks}, before {mark_bytes} B"
    return f"saved and reloaded: log/log axes, {len(names_after)} traces and the mark at {mark_bytes} B kept"


def test_lab04_crossover_in_browser(page: Any, server: LabServer, artifacts_dir: Path,
                                    request: pytest.FixtureRequest) -> None:
    rel = _lab_rel_path(server, "04")
    try:
        _run_notebook(page, server, rel)
        nbp.save_notebook_screenshot(page, artifacts_dir / "lab04-notebook.png")
        texts = nbp.output_texts(page)
        assert any(t.startswith("quick mode: True") for t in texts), "GDRLAB_QUICK=1 did not reach the kernel"
        plots = nbp.plot_traces(page)
        assert all(p["width"] > 100 and p["height"] > 100 for p in plots), plots
        notes = lab_checks.check_lab04_plots(plots, texts)
        ivb_bytes = lab_checks.printed_int(texts, r"Ivy Bridge: (\d+) B")
        before, after, how = _drive_control(page, server, rel, artifacts_dir, "lab04", label="profile",
                                            option="kepler-ivb-2014", fallback_profile="kepler-snb-2013")
        # The redrawn mark moves to where exercise 1's sweep found Ivy Bridge's crossover.
        marks = [m for m in map(lab_checks.crossover_mark_bytes, after) if m is not None]
        assert len(marks) == 1 and lab_checks.near(marks[0], ivb_bytes), (
            f"after switching to kepler-ivb-2014 the crossover marks are {marks}, exercise 1 printed {ivb_bytes} B")
        notes.append(f"changed {how}; crossover mark now at {marks[0]} B (exercise 1 printed {ivb_bytes} B)")
        assert nbp.error_outputs(page) == []
        notes.append(_reload_keeps_the_explorer(page, server, rel, artifacts_dir, after, marks[0]))
        _report(request, notes)
    finally:
        _shutdown_kernels(server, rel)


def test_lab05_topology_in_browser(page: Any, server: LabServer, artifacts_dir: Path,
                                   request: pytest.FixtureRequest) -> None:
    rel = _lab_rel_path(server, "05")
    try:
        _run_notebook(page, server, rel)
        nbp.save_notebook_screenshot(page, artifacts_dir / "lab05-notebook.png")
        plots = nbp.plot_traces(page)
        assert all(p["width"] > 100 and p["height"] > 100 for p in plots), plots
        notes = lab_checks.check_lab05_plots(plots)
        before, after, how = _drive_control(page, server, rel, artifacts_dir, "lab05", label="placement",
                                            option="cross-socket", fallback_profile="kepler-ivb-2014")
        # Lab 05's point: across sockets the NIC reads GPU memory slowly, so GDR loses far earlier.
        was = [m for m in map(lab_checks.crossover_mark_bytes, before) if m]
        now = [m for m in map(lab_checks.crossover_mark_bytes, after) if m]
        if was and now:
            assert now[0] < was[0], f"cross-socket crossover {now[0]} B not below the default's {was[0]} B"
            notes.append(f"changed {how}; gdr/pipelined crossover {was[0]} B -> {now[0]} B")
        else:
            notes.append(f"changed {how}; plot redrawn")
        assert nbp.error_outputs(page) == []
        _report(request, notes)
    finally:
        _shutdown_kernels(server, rel)
