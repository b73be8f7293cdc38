"""'Is this number normal?' for every learner's rows: the model's prediction for that learner's
machine, as ``gdrlab bench --explain`` gives it on the machine itself.

The machine is the one its doctor report describes (the latest one the learner sent from that
machine fingerprint): :func:`gdrlab.model.machine.facts_from_doctor` turns the report into the
model's facts (GPU, its PCIe link as trained and at most, the RDMA port, NUMA nodes, the CPU named
in the report's provenance), :func:`gdrlab.model.profile_from_machine` makes a profile of it, and
:func:`gdrlab.model.explain_rows` gives each row its verdict (``normal``, ``low``, ``high``,
``not modelled``, ``not comparable``) and, for ``low``, the likeliest causes. Nothing here decides
a verdict itself (recorded or modelled rows a learner sends, e.g. a lab's recorded H200 sweep,
are ``not comparable`` there, by their provenance). Rows from a machine that has sent no doctor
report are ``not modelled``.

:class:`Verdicts` caches profiles per stored doctor report and verdicts per (row, report), so the
dashboard's live updates explain each row once.
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from .. import provenance
from ..model import explain_rows, predict, profile_from_machine
from ..model.core import NETWORK_PATHS
from ..model.machine import facts_from_doctor

__all__ = ["NO_REPORT", "VERDICTS", "Verdicts", "facts_of_report", "model_curve"]

#: The verdicts :func:`gdrlab.model.explain_rows` gives, in the order the dashboard's legend shows them.
VERDICTS = ("normal", "low", "high", "not comparable", "not modelled")
NO_REPORT = "no doctor report from this machine yet: `gdrlab class submit` sends it"
_CACHE_ROWS = 200_000


def facts_of_report(body: dict[str, Any]) -> dict[str, Any]:
    """The model's facts (:func:`gdrlab.model.machine.facts_from_doctor`) of a stored doctor body
    (``{"doctor": report, "topology": ...}``); the CPU is the one the report's provenance names."""
    report: dict[str, Any] = body["doctor"] if isinstance(body.get("doctor"), dict) else body
    prov: dict[str, Any] = report["provenance"] if isinstance(report.get("provenance"), dict) else {}
    detail: dict[str, Any] = prov["hardware_detail"] if isinstance(prov.get("hardware_detail"), dict) else {}
    cpu = detail.get("cpu") if isinstance(detail.get("cpu"), str) else None
    return facts_from_doctor(report, cpu)


def _number(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f and abs(f) != float("inf") else None


def model_curve(profile: Any, path: str, wire: str | None, sizes: list[int]) -> dict[str, Any] | None:
    """The model's curve (:func:`gdrlab.model.predict`) of ``path`` over ``wire`` at ``sizes`` for
    ``profile``; None when the profile cannot run the path."""
    try:
        df = predict(profile, path, sorted(set(sizes)), wire=wire if path in NETWORK_PATHS else None)
    except Exception:  # noqa: BLE001 - a path this machine's model cannot run draws no curve
        return None
    return {"size": [int(s) for s in df["size"]], "bw_gbps": [_number(v) for v in df["bw_gbps"]],
            "lat_p50_us": [_number(v) for v in df["lat_us"]]}


class Verdicts:
    """Profiles per stored doctor report, verdicts per (row id, report); thread-safe."""

    def __init__(self) -> None:
        self._profiles: dict[int, tuple[Any, str, str]] = {}  # report submission id -> (profile, key, label)
        self._rows: OrderedDict[tuple[int, int], dict[str, Any]] = OrderedDict()
        self._curves: dict[tuple[str, str, str | None, tuple[int, ...]], dict[str, Any] | None] = {}
        self._lock = threading.Lock()
        self._computing = threading.Lock()  # one explanation at a time: a second asker finds it cached

    def profile(self, report_id: int, body: dict[str, Any]) -> tuple[Any, str, str] | None:
        """(profile, a key shared by machines the model sees alike, a label) of one stored report."""
        with self._lock:
            got = self._profiles.get(report_id)
        if got is not None:
            return got
        try:
            facts = facts_of_report(body)
            prof = profile_from_machine(facts)
        except Exception:  # noqa: BLE001 - a report the model cannot read: rows stay "not modelled"
            return None
        key = json.dumps(facts, sort_keys=True, default=str)
        gpu = facts.get("gpu_name") or "no GPU"
        link = f", PCIe Gen{facts['pcie_gen']} x{facts['pcie_width']}" if facts.get("pcie_gen") else ""
        got = (prof, key, f"model: {gpu}{link}")
        with self._lock:
            self._profiles[report_id] = got
        return got

    def explain(self, rows: list[dict[str, Any]], reports: dict[tuple[int, str], tuple[int, dict[str, Any]]],
                ) -> list[dict[str, Any]]:
        """For each row (as :meth:`Store.rows_after` gives it): ``verdict``, ``model_bw_gbps``,
        ``model_lat_us``, ``bottleneck``, ``cause`` and ``model_key`` (which model curve applies)."""
        with self._computing:
            return self._explain(rows, reports)

    def _explain(self, rows: list[dict[str, Any]], reports: dict[tuple[int, str], tuple[int, dict[str, Any]]],
                 ) -> list[dict[str, Any]]:
        import pandas as pd

        out: list[dict[str, Any] | None] = [None] * len(rows)
        todo: dict[tuple[int, int, str], list[int]] = {}
        for i, r in enumerate(rows):
            rep = reports.get((r["learner_id"], r["fingerprint"]))
            if rep is None:
                out[i] = {"verdict": "not modelled", "model_bw_gbps": None, "model_lat_us": None,
                          "bottleneck": None, "cause": NO_REPORT, "model_key": None}
                continue
            with self._lock:
                hit = self._rows.get((r["id"], rep[0]))
            if hit is not None:
                out[i] = hit
                continue
            prov = r.get("provenance") or {}
            todo.setdefault((rep[0], r["submission_id"], json.dumps(prov, sort_keys=True)), []).append(i)
        for (report_id, _sid, prov_text), idx in todo.items():
            body = next(rep[1] for rep in reports.values() if rep[0] == report_id)
            made = self.profile(report_id, body)
            if made is None:
                for i in idx:
                    out[i] = {"verdict": "not modelled", "model_bw_gbps": None, "model_lat_us": None,
                              "bottleneck": None, "cause": "the model cannot read this machine's doctor report",
                              "model_key": None}
                continue
            prof, key, _label = made
            df = pd.DataFrame([rows[i]["data"] for i in idx])
            stored = json.loads(prov_text)
            if stored.get("kind") in provenance.KINDS:  # explain_rows reads the kind and the peer from it
                provenance.attach(df, stored, column=False)
            explained = explain_rows(df, prof).to_dict(orient="records")
            for i, e in zip(idx, explained):
                got = {"verdict": e.get("verdict"), "model_bw_gbps": _number(e.get("model_bw_gbps")),
                       "model_lat_us": _number(e.get("model_lat_us")), "bottleneck": e.get("bottleneck"),
                       "cause": e.get("likely_causes") or "", "model_key": key}
                out[i] = got
                with self._lock:
                    self._rows[(rows[i]["id"], report_id)] = got
                    while len(self._rows) > _CACHE_ROWS:
                        self._rows.popitem(last=False)
        return [o if o is not None else {} for o in out]

    def curves(self, rows: list[dict[str, Any]], reports: dict[tuple[int, str], tuple[int, dict[str, Any]]],
               ) -> dict[str, list[dict[str, Any]]]:
        """Per path: the model curve of each machine model that has rows on it (machines the
        model sees alike share one), over the sizes those rows have."""
        wanted: dict[tuple[str, str, str | None], tuple[Any, str, set[int]]] = {}
        for r in rows:
            rep = reports.get((r["learner_id"], r["fingerprint"]))
            if rep is None:
                continue
            made = self.profile(rep[0], rep[1])
            if made is None:
                continue
            prof, key, label = made
            k = (key, str(r["path"]), r.get("wire"))
            wanted.setdefault(k, (prof, label, set()))[2].add(int(r["size"]))
        out: dict[str, list[dict[str, Any]]] = {}
        for (key, path, wire), (prof, label, sizes) in sorted(wanted.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            ck = (key, path, wire, tuple(sorted(sizes)))
            with self._lock:
                have = ck in self._curves
                curve = self._curves.get(ck)
            if not have:
                curve = model_curve(prof, path, wire, sorted(sizes))
                with self._lock:
                    self._curves[ck] = curve
            if curve is not None:
                out.setdefault(path, []).append({"key": key, "label": label + (f" ({wire})" if wire else ""),
                                                 "wire": wire, **curve})
        return out
