#!/usr/bin/env bash
# Run the GPU tests under NVIDIA compute-sanitizer (memcheck): every CUDA memcpy the engine issues
# is checked against the allocations it touches, and device memory still allocated at process
# exit is reported (--leak-check full). Child processes (the local `gdrlab serve` peers) are
# checked too. Needs a GPU, its driver and compute-sanitizer (CUDA toolkit).
#   bench/gpu_memcheck.sh [PYTEST ARGS...]       default: tests -m gpu
# Environment: PYTHON (default .venv/bin/python, else python3), COMPUTE_SANITIZER.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
CS="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}"
for guess in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -z "$CS" ] && [ -x "$guess" ] && CS="$guess"
done
if [ -z "$CS" ]; then
  echo "gpu_memcheck.sh: compute-sanitizer not found (CUDA toolkit; or set COMPUTE_SANITIZER)" >&2
  exit 2
fi
"$PYTHON" - <<'PY'
from gdrlab.engine import cuda_status
st = cuda_status()
if not st["usable"]:
    raise SystemExit(f"gpu_memcheck.sh: no usable GPU: {st['reason']}")
PY
if [ $# -eq 0 ]; then
  set -- tests -m gpu
fi
LOG="$ROOT/build/gpu_memcheck.log"
mkdir -p "$ROOT/build"
rm -f "$LOG".*
# The engine probes capabilities with calls that are allowed to fail (e.g. asking the driver what
# a host pointer is); those are answers, not bugs, so API errors are not reported. Memory access
# errors and leaks are, and any of them makes the run fail.
set +e
"$CS" --tool memcheck --leak-check full --report-api-errors no --target-processes all \
  --error-exitcode 99 --log-file "$LOG.%p" \
  "$PYTHON" -m pytest -q -p no:cacheprovider "$@"
rc=$?
set -e
errors=$(cat "$LOG".* 2>/dev/null | grep -E "ERROR SUMMARY: [1-9]" || true)
cat "$LOG".* 2>/dev/null | grep -E "ERROR SUMMARY|Invalid|Leaked" | sort | uniq -c | head -40 >&2 || true
if [ -n "$errors" ] || [ "$rc" -ne 0 ]; then
  echo "gpu_memcheck.sh: FAILED (pytest/sanitizer exit $rc); logs: $LOG.*" >&2
  exit 1
fi
echo "gpu_memcheck.sh: no memcheck errors; logs: $LOG.*" >&2
