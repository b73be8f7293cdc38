#!/usr/bin/env bash
# Install the Debian/Ubuntu packages that `make test` needs (and `make lab` uses where present).
# .ci/run, the container recipes (Dockerfile, gdrlab.def) and README all use this one list.
#   scripts/install-system-deps.sh            install everything (needs root, or sudo)
#   scripts/install-system-deps.sh --lab      only what building and running the labs needs (images)
#   scripts/install-system-deps.sh --print    print the package list, install nothing (with --lab too)
#
# For the labs (--lab and the full list):
#   g++ cmake make python3-venv python3-dev   build the engine in a virtual environment (nanobind
#                                 needs Python's headers)
#   openmpi-bin libopenmpi-dev openssh-client   `gdrlab bench --mpi` and the two-rank `mpirun` test
#   libibverbs1 libibverbs-dev    the verbs wire; for tests the "library present, no RDMA device"
#                                 case and the verbs ABI check
# For the tests only (full list):
#   clang libclang-rt-dev         the libFuzzer targets: on Debian 12 libFuzzer
#                                 (libclang_rt.fuzzer-x86_64.a) is in libclang-rt-14-dev, which
#                                 clang only recommends; libclang-rt-dev pulls the one matching
#                                 the default clang, and libclang-rt-14-dev is named for bookworm
#   chromium                      the browser test of the labs in JupyterLab
#   and "shellcheck"              tests/package/test_deploy.py checks every shell script and recipe with it
#   stress-ng                     `make test-stress`: CPU-bound load beside the timing-sensitive tests
#   postgresql                    the class view's storage tests against a real PostgreSQL server
#                                 (tests/classroom starts its own in a temporary folder; the
#                                 package's cluster need not run)
#   node-configurable-http-proxy  JupyterHub's proxy, for tests/hub (a real hub started from
#                                 examples/jupyterhub/; jupyterhub itself comes from PyPI, [test])
set -euo pipefail
PACKAGES=(g++ cmake make python3-venv python3-dev
          openmpi-bin libopenmpi-dev openssh-client libibverbs1 libibverbs-dev)
LAB_ONLY=false
PRINT=false
for arg in "$@"; do
  case "$arg" in
    --lab) LAB_ONLY=true ;;
    --print) PRINT=true ;;
    *) echo "install-system-deps.sh: unknown option $arg (--lab, --print)" >&2; exit 2 ;;
  esac
done
if ! $LAB_ONLY; then
  PACKAGES+=(clang libclang-rt-dev chromium shellcheck stress-ng postgresql node-configurable-http-proxy)
  # Debian 12 (bookworm): name the package that owns libclang_rt.fuzzer explicitly as well.
  if [ -r /etc/os-release ] && grep -q 'VERSION_CODENAME=bookworm' /etc/os-release; then
    PACKAGES+=(libclang-rt-14-dev)
  fi
fi
if $PRINT; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-system-deps.sh: run as root or install sudo" >&2; exit 2; }
  SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
echo "install-system-deps.sh: installed ${PACKAGES[*]}"
