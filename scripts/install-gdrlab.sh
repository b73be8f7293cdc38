#!/usr/bin/env bash
# Install gdrlab and its Python dependencies, at the versions CI tested (constraints.txt), into the
# environment of one Python. The Makefile (and so CI), the Dockerfile, the Apptainer definition and
# binder/postBuild all install through this script.
#   scripts/install-gdrlab.sh [--python PY] [--extra lab|test] [--editable]
#     --python PY   the interpreter whose environment receives gdrlab (default: python3 on PATH)
#     --extra X     the optional dependencies: lab (JupyterLab, nbgrader...; default) or test
#     --editable    an editable install of this checkout (development), not a regular one
# The engine is compiled here (g++, CMake: scripts/install-system-deps.sh); no CUDA toolkit needed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=python3
EXTRA=lab
EDITABLE=()
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PY=${2:?--python needs an interpreter}; shift 2 ;;
    --extra) EXTRA=${2:?--extra needs lab or test}; shift 2 ;;
    --editable) EDITABLE=(-e); shift ;;
    *) echo "install-gdrlab.sh: unknown option $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
done
case "$EXTRA" in lab|test) ;; *) echo "install-gdrlab.sh: --extra must be lab or test, not $EXTRA" >&2; exit 2 ;; esac
PIP=("$PY" -m pip install -q -c "$ROOT/constraints.txt")
# the build backend first, so the engine builds without isolation against these exact versions
"${PIP[@]}" "scikit-build-core>=0.10" "nanobind>=2.0"
"${PIP[@]}" --no-build-isolation "${EDITABLE[@]}" "${ROOT}[${EXTRA}]"
# the labs' kernel runs in this same environment
"$PY" -m ipykernel install --sys-prefix --name python3 >/dev/null
echo "install-gdrlab.sh: gdrlab[$EXTRA] installed for $PY"
