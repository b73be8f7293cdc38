#!/usr/bin/env bash
# The timing-sensitive tests with CPU-bound load beside them, as on a shared CI runner: LOAD
# stress-ng workers spin while each file set runs RUNS times in a row, plain and then against the
# sanitizer build (bench/asan_tests.sh). The first failure stops the run with pytest's status.
#   bench/stress_tests.sh                              default files, 5 runs each, plain and sanitized
#   RUNS=2 MODES=plain bench/stress_tests.sh tests/serve/test_serve_load.py
# Environment: RUNS (5), LOAD (2 workers), MODES ("plain asan"), PY (.venv/bin/python).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUNS="${RUNS:-5}"
LOAD="${LOAD:-2}"
MODES="${MODES:-plain asan}"
PY="${PY:-$ROOT/.venv/bin/python}"
if [ $# -eq 0 ]; then
  # every file whose tests have a deadline or wait for another process or thread
  set -- tests/serve tests/engine/test_faults.py tests/engine/test_resources.py tests/engine/test_integrity.py \
    tests/labs/test_widgets.py
fi
command -v stress-ng >/dev/null || { echo "stress_tests.sh: stress-ng is not installed (scripts/install-system-deps.sh installs it)" >&2; exit 2; }
stress-ng --cpu "$LOAD" --timeout 4h --quiet &
LOADER=$!
trap 'kill "$LOADER" 2>/dev/null || true; wait "$LOADER" 2>/dev/null || true' EXIT
echo "stress_tests.sh: $LOAD CPU-bound stress-ng workers beside $* ($RUNS runs per mode: $MODES)"
for mode in $MODES; do
  for i in $(seq 1 "$RUNS"); do
    start=$(date +%s)
    if [ "$mode" = asan ]; then
      bash bench/asan_tests.sh "$@"
    else
      "$PY" -m pytest "$@" -q -p no:cacheprovider
    fi
    echo "stress_tests.sh: $mode run $i/$RUNS passed in $(( $(date +%s) - start )) s"
  done
done
