"""A button a lab can show under a result: it sends the result (and this machine's doctor report)
to the class view the learner joined, and says in words what happened. It never raises into the
notebook: every failure (not joined yet, server unreachable, a refusal) becomes one line beside
the button."""
from __future__ import annotations

import html
import os
import threading
from pathlib import Path
from typing import Any

from .. import provenance
from .client import ClassError, load_config, submit

__all__ = ["NOT_JOINED", "submit_button"]

NOT_JOINED = ("Not in a class yet: run <code>gdrlab class join URL --name NAME</code> in a terminal, with the "
              "URL your instructor shared, then press the button again.")


class _Note:
    """What the notebook shows where no widget can be made: one line, as HTML and as text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_html_(self) -> str:
        return f'<p class="gdrlab-class-note">{html.escape(self.text)}</p>'

    def __repr__(self) -> str:
        return self.text


def _frames(df_or_result: Any) -> tuple[list[Any], list[str]]:
    """(DataFrames, result files) from what a lab has: a result DataFrame (or a list of them), a
    command's ``--json`` document (``rows`` + ``provenance``), or the path of such a file."""
    import pandas as pd

    items = df_or_result if isinstance(df_or_result, (list, tuple)) else [df_or_result]
    dfs, files = [], []
    for item in items:
        if item is None:
            continue
        if isinstance(item, (str, os.PathLike)):
            files.append(str(Path(item)))
        elif isinstance(item, dict) and isinstance(item.get("rows"), list):
            df = pd.DataFrame(item["rows"])
            if isinstance(item.get("provenance"), dict):  # without one the client says so, in one line
                provenance.attach(df, item["provenance"], column=False)
            dfs.append(df)
        elif hasattr(item, "to_dict") and hasattr(item, "attrs"):
            dfs.append(item)
        else:
            raise TypeError(f"cannot send a {type(item).__name__}: give a result DataFrame, the --json "
                            "document of a gdrlab command, or the path of one")
    return dfs, files


def submit_button(df_or_result: Any = None, *, lab: str | None = None, description: str = "Send to the class view",
                  doctor: bool = True, where: Path | None = None, timeout: float = 30.0) -> Any:
    """An ipywidgets button that sends ``df_or_result`` (a result DataFrame with its provenance, a
    list of them, a command's ``--json`` document or the path of one; None: only the doctor
    report) to the class joined with ``gdrlab class join``, tagged with ``lab``.

    The line beside it says whether the learner has joined a class (and how to, when not),
    then what the server stored. Sending runs on a thread, so the notebook stays usable; the
    widget's ``send()`` does the same in the caller's thread. Never raises: without ipywidgets
    it returns a note saying so."""
    try:
        import ipywidgets as w
    except ImportError:
        return _Note("The class view's button needs ipywidgets (pip install 'gdrlab[lab]'); "
                     "in a terminal, `gdrlab class submit` sends the same.")
    try:
        return _make(w, df_or_result, lab, description, doctor, where, timeout)
    except Exception as exc:  # noqa: BLE001 - never into the notebook
        return _Note(f"The class view's button could not be made: {type(exc).__name__}: {exc}")


def _make(w: Any, df_or_result: Any, lab: str | None, description: str, doctor: bool, where: Path | None,
          timeout: float) -> Any:

    class SubmitButton(w.VBox):
        """The button and its status line; ``send()`` sends now, in this thread."""

        def __init__(self) -> None:
            self.button = w.Button(description=description, icon="upload",
                                   tooltip="send this result and this machine's doctor report to the class view")
            self.status = w.HTML()
            super().__init__([w.HBox([self.button, self.status])])
            self.button.on_click(lambda _b: threading.Thread(target=self.send, daemon=True).start())
            self._lock = threading.Lock()
            self.outcome: dict[str, Any] | None = None
            self.refresh()

        def _say(self, state: str, text_html: str) -> None:
            self.status.value = f'<span class="gdrlab-class-{state}">{text_html}</span>'
            self.state = state

        def refresh(self) -> bool:
            """Says whether this learner has joined a class; True when they have."""
            try:
                cfg = load_config(where)
            except ClassError:
                self._say("not-joined", NOT_JOINED)
                return False
            except Exception as exc:  # noqa: BLE001
                self._say("error", "Cannot read the class file: " + html.escape(f"{type(exc).__name__}: {exc}"))
                return False
            self._say("ready", f"Joined the class at {html.escape(str(cfg['url']))} as "
                               f"{html.escape(str(cfg.get('name') or '?'))}.")
            return True

        def send(self) -> dict[str, Any] | None:
            """Sends now; returns the server's reply, or None (the line says why)."""
            if not self._lock.acquire(blocking=False):
                return None  # a send is already under way
            try:
                self.button.disabled = True
                if not self.refresh():
                    return None
                self._say("sending", "Sending...")
                try:
                    dfs, files = _frames(df_or_result)
                    reply = submit(dfs or None, files=files, doctor=doctor, lab=lab, where=where, timeout=timeout)
                except (ClassError, TypeError, ValueError, OSError) as exc:
                    self._say("error", "Not sent: " + html.escape(str(exc)))
                    return None
                except Exception as exc:  # noqa: BLE001 - never into the notebook
                    self._say("error", "Not sent: " + html.escape(f"{type(exc).__name__}: {exc}"))
                    return None
                self.outcome = reply
                self._say("sent", f"Sent to {html.escape(str(reply.get('url')))}: {int(reply.get('stored', 0))} new "
                                  f"({int(reply.get('rows', 0))} result rows), {int(reply.get('duplicates', 0))} "
                                  "already there.")
                return reply
            finally:
                self.button.disabled = False
                self._lock.release()

    return SubmitButton()
