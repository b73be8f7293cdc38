#!/usr/bin/env bash
# Build the engine with AddressSanitizer + UndefinedBehaviorSanitizer into its own virtual
# environment and build directory, then run the CPU test suite against it.
#   bench/asan_tests.sh [PYTEST ARGS...]        default: the whole suite minus GPU/RDMA/notebook/browser
# Environment: ASAN_VENV (default build/asan-venv), PYTHON (default python3).
# The interpreter itself is not instrumented, so libasan is preloaded; Python's own allocations
# look like leaks to LeakSanitizer, so leak detection is off (fd and memory leaks are covered by
# tests/engine/test_resources.py). Any ASan or UBSan report aborts the process and fails the run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${ASAN_VENV:-$ROOT/build/asan-venv}"
PY="${PYTHON:-python3}"
CXX="${CXX:-g++}"
LIBASAN="$("$CXX" -print-file-name=libasan.so)"
# Python does not link libstdc++; ASan resolves its __cxa_throw interceptor when it starts, so
# libstdc++ must be preloaded with it or the first C++ exception aborts the interpreter.
LIBSTDCXX="$("$CXX" -print-file-name=libstdc++.so)"
PRELOAD="$LIBASAN $LIBSTDCXX"
if [ ! -e "$LIBASAN" ] || [ "$LIBASAN" = "libasan.so" ]; then
  echo "asan_tests.sh: libasan.so not found for $CXX (install libasan / gcc)" >&2
  exit 2
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
  # The engine's build and test needs, plus what the other CPU tests import (lab support figures).
  "$VENV/bin/pip" install -q nanobind scikit-build-core numpy pandas pytest pytest-timeout plotly nbformat \
    ${ASAN_EXTRA_PIP:-}
fi
# Editable, with its own build directory, so the instrumented _native never replaces the normal one.
GDRLAB_SANITIZE=ON CXX="$CXX" "$VENV/bin/pip" install -q --no-build-isolation -e . \
  -C build-dir="$ROOT/build/asan" -C cmake.build-type=RelWithDebInfo

LD_PRELOAD="$PRELOAD" ASAN_OPTIONS=detect_leaks=0 "$VENV/bin/python" - <<'PY'
import pathlib, gdrlab._native as n
so = pathlib.Path(n.__file__)
assert b"__asan_init" in so.read_bytes(), f"{so} is not instrumented"
print(f"asan_tests.sh: instrumented engine at {so}")
PY

if [ $# -eq 0 ]; then
  # Pure-Python checks of notebooks, grading and typing need Jupyter, jupytext and mypy, which this
  # venv leaves out: they run once, in the main suite.
  set -- tests -m "not gpu and not multigpu and not rdma and not notebook and not browser" \
    --ignore=tests/labs/test_grading_integrity.py --ignore=tests/labs/test_notebook_format.py --ignore=tests/package/test_package.py
fi
export LD_PRELOAD="$PRELOAD"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONMALLOC=malloc  # let ASan see Python-side buffers too
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
