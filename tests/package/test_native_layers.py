"""The engine's folders stand in layers, core < wire < paths < tcp/verbs < bind: a folder includes
its own files and lower folders only (tcp and verbs, on one floor, include neither each other),
checked on every `#include "..."` of native/src, native/bind and native/fuzz."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native"

#: Each folder's floor; a file may include a folder on a lower floor, or its own folder.
LAYERS = {"core": 0, "wire": 1, "paths": 2, "tcp": 3, "verbs": 3, "ucx": 3, "bind": 4, "fuzz": 4}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def _sources(native: Path) -> list[Path]:
    return sorted(f for d in ("src", "bind", "fuzz") for f in (native / d).rglob("*")
                  if f.suffix in (".cc", ".h"))


def _folder(native: Path, f: Path) -> str:
    rel = f.relative_to(native).parts
    return rel[1] if rel[0] == "src" else rel[0]


def include_edges(native: Path) -> list[tuple[str, str]]:
    """(file, included folder) for every `#include "..."` of the engine, the file relative to
    native/. An include without a folder ("common.h") is of the file's own folder."""
    edges = []
    for f in _sources(native):
        for target in INCLUDE.findall(f.read_text(errors="replace")):
            folder = target.split("/")[0] if "/" in target else _folder(native, f)
            edges.append((str(f.relative_to(native)), folder))
    return edges


def upward_includes(native: Path) -> list[str]:
    """Includes of a higher floor, of a sibling on the same floor, or of a folder not in LAYERS."""
    bad = []
    for rel, folder in include_edges(native):
        own = _folder(native, native / rel)
        if folder == own:
            continue
        if own not in LAYERS or folder not in LAYERS or LAYERS[folder] >= LAYERS[own]:
            bad.append(f"{rel} includes {folder}/")
    return bad


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_the_layer_check_finds_a_planted_upward_include(tmp_path):
    native = _plant(tmp_path, {
        "src/core/timing.h": '#include "core/vocab.h"\n#include "wire/frame.h"\n',
        "src/wire/frame.h": '#include "core/error.h"\n',
        "src/tcp/tcp.cc": '#include "verbs/qp.h"\n#include "paths/paths.h"\n',
        "src/paths/paths.cc": '#  include "paths/paths.h"\n#include <vector>\n',
        "bind/module.cc": '#include "common.h"\n#include "tcp/tcp.h"\n',
    })
    assert upward_includes(native) == ["src/core/timing.h includes wire/", "src/tcp/tcp.cc includes verbs/"]


def test_includes_point_down():
    edges = include_edges(NATIVE)
    assert len(edges) > 100 and {f for _, f in edges} >= set(LAYERS) - {"fuzz"}  # the scan saw the engine
    assert {_folder(NATIVE, f) for f in _sources(NATIVE)} <= set(LAYERS), "a folder the layers do not name"
    assert upward_includes(NATIVE) == []
