"""The wire seam: a wire is one table entry with the operations the driver needs (open, run one
size, close, describe), so a library wire plugs in beside tcp and verbs; the MPI launcher takes
the driver's options object and spells no bench call of its own."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

from gdrlab import vocab
from gdrlab.transfer import driver, mpi

TRANSFER = Path(driver.__file__).resolve().parent


def test_every_wire_of_the_vocabulary_is_one_entry_with_the_five_operations():
    assert set(driver._WIRES) == set(vocab.WIRES) | set(vocab.LIBRARY_WIRES)
    assert not set(vocab.WIRES) & set(vocab.LIBRARY_WIRES)
    for name, wire in driver._WIRES.items():
        assert isinstance(wire, driver.Wire), name
        for op in ("require", "open", "run", "close", "describe"):
            assert callable(getattr(wire, op)), (name, op)


def test_a_library_wire_plugs_in_as_one_entry(monkeypatch):
    """A stand-in library wire replaces the tcp entry: the driver opens it once for the whole
    sweep, runs each size through it, puts what it describes in the provenance, and closes it."""
    calls: list[Any] = []

    class Link:
        closed = False

    def open_(opts: driver.BenchOptions, peer: str | None, token: str | None, local_peer: str) -> tuple[Link, str]:
        calls.append(("open", opts.sizes, peer))
        return Link(), "rank 1 (stand-in)"

    def run(link: Link, opts: driver.BenchOptions, size: int) -> driver.SizeResult:
        calls.append(("run", size))
        row = {"path": opts.path, "wire": opts.wire, "size": size, "iters": 1, "lat_min_us": 1.0, "lat_p50_us": 1.0,
               "lat_p99_us": 1.0, "lat_mean_us": 1.0, "bw_gbps": size / 1e3, "verified": True}
        return row, {}, {"library": "stand-in 1.0"}

    def close(link: Link) -> None:
        calls.append(("close",))
        link.closed = True

    def describe(link: Link | None, info: dict[str, Any]) -> dict[str, Any]:
        return {"library": info.get("library", "")}

    monkeypatch.setitem(driver._WIRES, "tcp", driver.Wire(lambda path: None, open_, run, close, describe))
    df = driver.run(driver.options("host", [8, 64, 1024], wire="tcp"))
    assert calls == [("open", (8,), None), ("run", 8), ("run", 64), ("run", 1024), ("close",)]
    assert list(df["size"]) == [8, 64, 1024] and list(df["bw_gbps"]) == [0.008, 0.064, 1.024]
    prov = df.attrs["provenance"]
    assert prov["library"] == "stand-in 1.0" and prov["peer"] == "rank 1 (stand-in)" and prov["kind"] == "live"


def test_a_refusing_wire_stops_before_it_opens(monkeypatch):
    from gdrlab.errors import Unavailable

    def refuse(path: str) -> None:
        raise Unavailable(f"{path}: the stand-in library is not installed")

    opened = []
    monkeypatch.setitem(driver._WIRES, "tcp", driver.Wire(refuse, lambda *a: opened.append(a), None, None, None))
    with pytest.raises(Unavailable, match="stand-in library"):
        driver.run(driver.options("host", [8]))
    assert opened == []


def test_the_mpi_launcher_takes_the_options_object_and_spells_no_bench_call():
    assert inspect.signature(mpi.bench_mpi).parameters["opts"].annotation in ("BenchOptions", driver.BenchOptions)
    tree = ast.parse(Path(mpi.__file__).read_text())
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "run" in called and "bench" not in called
    for f in TRANSFER.glob("*.py"):  # the CLI's argparse stays above the transfer layer
        imported = {a.name for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.ImportFrom)}
        assert "argparse" not in imported, f.name


def test_memory_kinds_are_in_the_vocabulary_and_the_engine_agrees():
    from gdrlab.engine import native

    assert vocab.MEMORY_KINDS == ("pageable", "pinned", "device")
    assert vocab.HOST_MEMORY_KINDS == ("pageable", "pinned")
    assert tuple(native().MEMORY_KIND_NAMES) == vocab.MEMORY_KINDS
    with pytest.raises(Exception, match="valid: pageable, pinned, device"):
        native().Buffer("shared", 8)
