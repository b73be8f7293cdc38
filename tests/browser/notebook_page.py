"""Drive one notebook in JupyterLab through a Playwright page.

Everything here reads what the learner would see: cell prompts, rendered
outputs, the plotly graph div (``.js-plotly-plot``, whose ``_fullData`` holds
the traces plotly.js actually drew) and the ipywidgets dropdowns
(``.widget-dropdown select``).
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .server import LabServer

__all__ = [
    "NotebookRunError",
    "WidgetCell",
    "open_notebook",
    "run_all_cells",
    "wait_for_run",
    "error_outputs",
    "output_texts",
    "plot_traces",
    "find_widget_cell",
    "dropdowns",
    "choose_other_option",
    "append_and_run_cell",
    "wait_for_plot_change",
    "save_screenshot",
    "save_notebook_screenshot",
    "save_and_reload",
    "collapse_left_sidebar",
    "markdown_problems",
]

# Prompts of code cells, as JupyterLab shows them: "[ ]:", "[*]:", "[12]:".
_PROMPTS_JS = """
() => Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell')).map(cell => {
  const p = cell.querySelector('.jp-InputPrompt');
  return p ? p.textContent.trim() : '';
})
"""

# Outputs that mean a cell failed: a traceback on stderr / an error output, or a
# widget the front end could not render (ipywidgets and JupyterLab both print
# these phrases into the output area).
_ERRORS_JS = r"""
() => {
  const found = [];
  const widgetFail = /Error displaying widget|Error rendering output|Failed to (display|render|load) (model|widget|view)|model not found/i;
  for (const el of document.querySelectorAll('.jp-OutputArea-output')) {
    const mime = el.getAttribute('data-mime-type') ||
      (el.querySelector('[data-mime-type]') || el).getAttribute('data-mime-type') || '';
    const text = el.innerText || '';
    const isStderr = mime === 'application/vnd.jupyter.stderr';
    if ((isStderr && /Traceback|^\s*\w*(Error|Exception)\b/m.test(text)) ||
        /Traceback \(most recent call last\)/.test(text) || widgetFail.test(text)) {
      found.push(text.slice(0, 3000));
    }
  }
  return found;
}
"""

_OUTPUT_TEXTS_JS = """
() => Array.from(document.querySelectorAll('.jp-OutputArea-output')).map(el => el.innerText || '')
"""

# Trace data as drawn: _fullData has typed/base64 arrays decoded by plotly.js.
_PLOTS_JS = """
(root) => Array.from(root.querySelectorAll('.js-plotly-plot')).map(gd => {
  const full = (gd._fullData && gd._fullData.length) ? gd._fullData : (gd.data || []);
  const rect = gd.getBoundingClientRect();
  const num = v => (v === null || v === undefined) ? null : Number(v);
  return {
    width: rect.width,
    height: rect.height,
    title: (gd._fullLayout && gd._fullLayout.title && gd._fullLayout.title.text) || null,
    y_title: (gd._fullLayout && gd._fullLayout.yaxis && gd._fullLayout.yaxis.title &&
              gd._fullLayout.yaxis.title.text) || null,
    marker_paths: gd.querySelectorAll('.scatterlayer .trace path.point').length,
    x_type: (gd._fullLayout && gd._fullLayout.xaxis && gd._fullLayout.xaxis.type) || null,
    y_type: (gd._fullLayout && gd._fullLayout.yaxis && gd._fullLayout.yaxis.type) || null,
    traces: full.map(t => ({
      name: (t.name === undefined || t.name === null) ? null : String(t.name),
      type: t.type || 'scatter',
      mode: t.mode || null,
      visible: t.visible === undefined ? true : t.visible,
      x: Array.from(t.x || [], v => (typeof v === 'number') ? v : String(v)),
      y: Array.from(t.y || [], num),
    })),
  };
})
"""


class NotebookRunError(AssertionError):
    """A notebook run that failed or did not finish; the message says what the page showed."""


@dataclass
class WidgetCell:
    """The cell whose output holds both a dropdown and a plotly plot."""

    index: int
    locator: Any


def open_notebook(
    page: Any, server: LabServer, rel_path: str, timeout_s: float = 90.0, wait_kernel: bool = True
) -> None:
    """Open ``rel_path`` in a fresh workspace and wait until its kernel is idle.

    A fresh named workspace keeps notebooks opened by earlier tests from being
    restored into this page. ``wait_kernel=False`` returns once the cells are shown.
    """
    workspace = f"t{secrets.token_hex(4)}"
    url = server.lab_url(rel_path).replace("/lab/tree/", f"/lab/workspaces/{workspace}/tree/", 1)
    page.goto(url, wait_until="domcontentloaded", timeout=timeout_s * 1000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=timeout_s * 1000)
    if not wait_kernel:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _accept_kernel_dialog(page)
        if server.kernel_states(rel_path) == ["idle"]:
            return
        time.sleep(0.3)
    raise NotebookRunError(
        f"kernel for {rel_path} not idle after {timeout_s:.0f} s: {server.kernel_states(rel_path)}\n"
        f"server log:\n{server.log_tail()}"
    )


def save_and_reload(page: Any, server: LabServer, rel_path: str, timeout_s: float = 90.0) -> None:
    """Save the notebook (Ctrl+S, as a learner would), reload the browser page, and wait until
    the notebook is shown again with its kernel (still running on the server) idle.

    JupyterLab reopens the notebook from disk and the widget manager restores each widget from
    the kernel's copy of its state: what survives is what that state holds.
    """
    page.locator(".jp-Notebook .jp-Cell").first.locator(".jp-InputPrompt").first.click()
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # the tab's dirty marker goes away once saved
        if not page.locator(".lm-TabBar-tab.jp-mod-dirty").count():
            break
        time.sleep(0.3)
    else:
        raise NotebookRunError(f"{rel_path}: not saved within {timeout_s:.0f} s")
    page.reload(wait_until="domcontentloaded", timeout=timeout_s * 1000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=timeout_s * 1000)
    while time.monotonic() < deadline:
        _accept_kernel_dialog(page)
        if server.kernel_states(rel_path) == ["idle"]:
            return
        time.sleep(0.3)
    raise NotebookRunError(f"{rel_path}: kernel not idle after the reload: {server.kernel_states(rel_path)}")


def _accept_kernel_dialog(page: Any) -> None:
    """Accept a 'Select Kernel' dialog (the default kernel) if one is up."""
    button = page.locator(".jp-Dialog .jp-mod-accept")
    if button.count() and button.first.is_visible():
        button.first.click()


def run_all_cells(page: Any) -> None:
    """Run > Run All Cells, through the menu bar as a learner would."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).first.click()


def error_outputs(page: Any) -> list[str]:
    """Texts of outputs that show a traceback, an error, or a widget that failed to render."""
    return list(page.evaluate(_ERRORS_JS))


def output_texts(page: Any) -> list[str]:
    """Visible text of every output area, in notebook order."""
    return list(page.evaluate(_OUTPUT_TEXTS_JS))


def wait_for_run(
    page: Any, server: LabServer, rel_path: str, n_code_cells: int, timeout_s: float
) -> list[str]:
    """Wait until every non-empty code cell ran and the kernel is idle.

    Parameters
    ----------
    n_code_cells : int
        How many code cells have source (empty cells never get a number).

    Returns
    -------
    list of str
        The final prompts.

    Raises
    ------
    NotebookRunError
        On an error output (at once, with its text) or on timeout.
    """
    deadline = time.monotonic() + timeout_s
    numbered: list[str] = []
    prompts: list[str] = []
    while time.monotonic() < deadline:
        errors = error_outputs(page)
        if errors:
            raise NotebookRunError(f"{rel_path}: a cell shows an error:\n" + "\n---\n".join(errors))
        prompts = page.evaluate(_PROMPTS_JS)
        numbered = [p for p in prompts if re.fullmatch(r"\[\d+\]:", p)]
        busy = any("*" in p for p in prompts)
        if len(numbered) >= n_code_cells and not busy and server.kernel_states(rel_path) == ["idle"]:
            return prompts
        time.sleep(0.5)
    raise NotebookRunError(
        f"{rel_path}: {len(numbered)} of {n_code_cells} code cells ran in {timeout_s:.0f} s; "
        f"prompts {prompts}; kernel {server.kernel_states(rel_path)}"
    )


def plot_traces(scope: Any) -> list[dict]:
    """The plotly plots under ``scope`` (a page or a locator), with their traces as drawn."""
    if hasattr(scope, "goto"):  # a Page: search the whole document
        return list(scope.evaluate(_PLOTS_JS, scope.query_selector("body")))
    return list(scope.evaluate(_PLOTS_JS))  # a Locator: its element is the root


def find_widget_cell(
    page: Any, label: str | None = None, timeout_s: float = 60.0, cells: Any = None
) -> WidgetCell:
    """The first cell showing a dropdown (labelled ``label`` if given) and a plot with data.

    Waits because the widget front end renders after the kernel went idle.
    ``cells`` narrows the search (a locator of cells); default every cell.
    """
    cells = cells if cells is not None else page.locator(".jp-Notebook .jp-Cell")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for i in range(cells.count()):
            cell = cells.nth(i)
            if not cell.locator(".widget-dropdown select").count():
                continue
            if label is not None and not any(d["label"] == label for d in dropdowns(cell)):
                continue
            plots = plot_traces(cell)
            if plots and any(t["y"] for p in plots for t in p["traces"]):
                return WidgetCell(i, cell)
        time.sleep(0.5)
    raise NotebookRunError(
        f"no cell shows a dropdown{f' labelled {label!r}' if label else ''} together with a "
        f"plotly plot with data after {timeout_s:.0f} s; errors: {error_outputs(page)}"
    )


def dropdowns(scope: Any) -> list[dict]:
    """Dropdowns under ``scope``: label (description), options and the selected option."""
    found = []
    widgets = scope.locator(".widget-dropdown")
    for i in range(widgets.count()):
        widget = widgets.nth(i)
        select = widget.locator("select")
        label_loc = widget.locator("label")
        label = label_loc.first.inner_text().strip() if label_loc.count() else ""
        options = select.evaluate("s => Array.from(s.options).map(o => o.textContent.trim())")
        selected = select.evaluate("s => s.selectedIndex")
        found.append({"label": label, "options": options, "selected": selected, "index": i})
    return found


def choose_other_option(
    scope: Any, label: str | None = None, option: str | None = None
) -> tuple[str, str, str]:
    """Pick another option in a dropdown; return (label, old option, new option).

    Parameters
    ----------
    label : str, optional
        The dropdown's description; default the first dropdown with two or more options.
    option : str, optional
        The option to pick; default the one after the selected one.
    """
    candidates = [d for d in dropdowns(scope) if len(d["options"]) > 1]
    if label is not None:
        candidates = [d for d in candidates if d["label"] == label]
    if not candidates:
        raise NotebookRunError(f"no dropdown with two or more options (label {label!r})")
    chosen = candidates[0]
    if option is None:
        new_index = (chosen["selected"] + 1) % len(chosen["options"])
    elif option in chosen["options"]:
        new_index = chosen["options"].index(option)
    else:
        raise NotebookRunError(f"dropdown {chosen['label']!r} has no option {option!r}: {chosen['options']}")
    if new_index == chosen["selected"]:
        raise NotebookRunError(f"dropdown {chosen['label']!r} already shows {option!r}")
    select = scope.locator(".widget-dropdown").nth(chosen["index"]).locator("select")
    select.select_option(index=new_index)
    return chosen["label"], chosen["options"][chosen["selected"]], chosen["options"][new_index]


def append_and_run_cell(page: Any, server: LabServer, rel_path: str, source: str, timeout_s: float = 60.0) -> Any:
    """Add a code cell at the end of the notebook, type ``source`` into it and run it.

    Uses the keyboard as a learner would (select the last cell, B, Enter, type,
    Shift+Enter). Returns a locator of the new cell once it ran and the kernel is idle.
    """
    cells = page.locator(".jp-Notebook .jp-Cell")
    n_before = cells.count()
    cells.last.locator(".jp-InputPrompt").first.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.wait_for_function(
        f"() => document.querySelectorAll('.jp-Notebook .jp-Cell').length > {n_before}", timeout=timeout_s * 1000
    )
    new_cell = cells.nth(n_before)
    new_cell.locator(".jp-InputArea-editor").click()
    # insert_text is one input event: no auto-closed brackets or auto-indent on the way in.
    page.keyboard.insert_text(source)
    page.keyboard.press("Shift+Enter")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        errors = error_outputs(page)
        if errors:
            raise NotebookRunError(f"{rel_path}: the added cell shows an error:\n" + "\n---\n".join(errors))
        prompt = new_cell.locator(".jp-InputPrompt").first.inner_text().strip()
        if re.fullmatch(r"\[\d+\]:", prompt) and server.kernel_states(rel_path) == ["idle"]:
            return new_cell
        time.sleep(0.3)
    raise NotebookRunError(f"{rel_path}: the added cell did not finish in {timeout_s:.0f} s")


def _ys(plots: list[dict]) -> list[list[list[float | None]]]:
    return [[t["y"] for t in p["traces"]] for p in plots]


def wait_for_plot_change(
    scope: Any,
    before: list[dict],
    settled: Callable[[], bool] | None = None,
    timeout_s: float = 60.0,
) -> list[dict]:
    """Wait until the plot traces' y data under ``scope`` differ from ``before``.

    Parameters
    ----------
    settled : callable, optional
        Returns True once the work the change started is over (for example the
        kernel went idle again); the plot is read once more after that so a
        sweep that streams points in is seen complete.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = plot_traces(scope)
        if _ys(now) != _ys(before) and any(t["y"] for p in now for t in p["traces"]):
            while settled is not None and not settled() and time.monotonic() < deadline:
                time.sleep(0.3)
            # The front end applies the last batch a moment after the kernel is idle.
            time.sleep(0.5)
            while time.monotonic() < deadline:
                again = plot_traces(scope)
                if _ys(again) == _ys(now):
                    return again
                now = again
                time.sleep(0.5)
        time.sleep(0.3)
    raise NotebookRunError(f"plot did not change within {timeout_s:.0f} s of the control change")


# Per markdown cell: how it rendered. Inline <svg> is removed by JupyterLab's HTML
# sanitizer, and text that dedent left indented turns into a code block (a markdown
# table inside <pre>); images must have loaded.
_MARKDOWN_JS = r"""
(indices) => {
  const cells = document.querySelectorAll('.jp-Notebook .jp-Cell');
  return indices.map(i => {
    const md = cells[i] ? cells[i].querySelector('.jp-RenderedMarkdown') : null;
    if (!md) return {index: i, rendered: false};
    return {
      index: i,
      rendered: true,
      svg: md.querySelectorAll('svg').length,
      table_in_pre: Array.from(md.querySelectorAll('pre')).filter(p => /\|\s*-{3,}\s*\|/.test(p.innerText)).length,
      broken_img: Array.from(md.querySelectorAll('img')).filter(im => !im.complete || im.naturalWidth === 0)
        .map(im => im.getAttribute('src') || '').map(s => s.slice(0, 80)),
      head: (md.innerText || '').trim().slice(0, 70),
    };
  });
}
"""


def markdown_problems(page: Any, notebook: Path, timeout_s: float = 20.0) -> list[str]:
    """Markdown cells that do not render as written: lost inline SVG, tables shown as code, broken images.

    Compares the notebook file's markdown sources with what the page rendered
    (cells are matched by position, which needs windowing off).
    """
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    specs = {i: c.source for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.strip()}
    deadline = time.monotonic() + timeout_s
    while True:
        n_cells = page.evaluate("() => document.querySelectorAll('.jp-Notebook .jp-Cell').length")
        states = page.evaluate(_MARKDOWN_JS, list(specs))
        pending = [s for s in states if not s["rendered"] or s["broken_img"]]
        if (n_cells == len(nb.cells) and not pending) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if n_cells != len(nb.cells):
        return [f"the page shows {n_cells} cells, the notebook has {len(nb.cells)}"]
    problems = []
    for st in states:
        where = f"markdown cell {st['index']}"
        if not st["rendered"]:
            problems.append(f"{where} did not render")
            continue
        if "<svg" in specs[st["index"]] and st["svg"] == 0:
            problems.append(f"{where} ({st['head']!r}...): its inline <svg> was removed by JupyterLab's "
                            "HTML sanitizer; only the SVG's text shows (an <img> with a "
                            "data:image/svg+xml;base64 src, or an .svg file beside the notebook, renders)")
        if st["table_in_pre"]:
            problems.append(f"{where} ({st['head']!r}...): a markdown table shows as a code block "
                            "(the text is indented)")
        if st["broken_img"]:
            problems.append(f"{where}: images did not load: {st['broken_img']}")
    return problems


def collapse_left_sidebar(page: Any) -> None:
    """Hide the file browser so screenshots show the notebook at full width."""
    tab = page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
    if tab.count():
        tab.first.click()


def save_notebook_screenshot(page: Any, path: Path, max_height_px: int = 16000) -> Path:
    """Screenshot the whole notebook, top to bottom, by growing the viewport to its height.

    JupyterLab scrolls the notebook inside its own panel, so a plain full-page
    screenshot would only show one screen of it.
    """
    size = page.viewport_size
    height = page.evaluate(
        "() => { const s = document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer');"
        " if (!s) return 0; s.scrollTop = 0; return s.scrollHeight; }"
    )
    try:
        if height:
            page.set_viewport_size({"width": size["width"], "height": min(int(height) + 200, max_height_px)})
            page.wait_for_timeout(800)  # plotly redraws on resize
        return save_screenshot(page, path)
    finally:
        page.set_viewport_size(size)


def save_screenshot(target: Any, path: Path) -> Path:
    """Screenshot a page (viewport) or an element to ``path``; return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    target.screenshot(path=str(path))
    return path
