#!/usr/bin/env bash
# Everything that needs a GPU, in one command: build, GPU tests, benchmarks, recorded datasets.
#   bench/gpu_suite.sh OUTDIR [STAGES]     STAGES: comma list of build,tests,bench,parity,record,labs,extra
#                                          (default all) and compare (not in the default)
# compare: GDRLAB_BASELINE_SRC names an earlier source tree (e.g. `git archive REV | tar -x -C DIR`);
# both trees are installed side by side (non-editable, --target) and bench/bench_engine.py runs for
# each, alternating baseline and this tree, so a refactor is judged against the same run's spread.
# Results land in OUTDIR (JSON, logs) and OUTDIR/results.tgz.
set -u -o pipefail
OUT=${1:?usage: bench/gpu_suite.sh OUTDIR [STAGES]}
STAGES=${2:-build,tests,bench,parity,record,labs,extra}
R=${GDRLAB_SUITE_DIR:-/tmp/gdrlab-suite}/r
rm -rf "$R"; mkdir -p "$R" "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
has() { [[ ",$STAGES," == *",$1,"* ]]; }
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.current --format=csv | tee "$R/nvidia-smi.csv"
nvidia-smi -q > "$R/nvidia-smi-q.txt" 2>&1
nvidia-smi topo -m > "$R/nvidia-smi-topo.txt" 2>&1

if [ -d .whl ]; then $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site; fi

if has compare; then
  step "engine benchmarks: baseline tree vs this tree, alternating, same run"
  BASE=$(cd "${GDRLAB_BASELINE_SRC:?compare needs GDRLAB_BASELINE_SRC}" && pwd)
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  g++ -O2 -std=c++17 bench/raw_copy.cpp -I"$CUDA_HOME/include" -L"$CUDA_HOME/lib64/stubs" -lcuda -o "$R/raw_copy"
  $PY -m pip install -q --no-build-isolation --no-deps --target "$R/site-base" "$BASE" 2>&1 | tail -3
  $PY -m pip install -q --no-build-isolation --no-deps --target "$R/site-new" . 2>&1 | tail -3
  ROOT=$PWD
  for round in 1 2; do
    for tree in base new; do
      src=$ROOT; [ $tree = base ] && src=$BASE
      (cd /tmp && PYTHONPATH="$R/site-$tree:${PYTHONPATH:-}" $PY "$src/bench/bench_engine.py" \
        --out "$R/bench_${tree}_$round.json" --raw-copy "$R/raw_copy" --reps 3 > "$R/bench_${tree}_$round.log" 2>&1)
      echo "$tree round $round: exit $?"; tail -4 "$R/bench_${tree}_$round.log"
    done
  done
  cp "$R"/bench_*.json "$OUT"/ 2>/dev/null
fi

if has build; then
  step "build"
  $PY -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | tail -5 || exit 1
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  g++ -O2 -std=c++17 bench/raw_copy.cpp -I"$CUDA_HOME/include" -L"$CUDA_HOME/lib64/stubs" -lcuda -o "$R/raw_copy" \
    || echo "raw_copy build failed"
  (cd /tmp && $PY -c "import gdrlab.engine as e; print(e.cuda_status()); print(e.gpus())")
fi

if has tests; then
  step "tests (gpu marker + engine)"
  $PY -m pytest tests -m "gpu or multigpu" -rs -q -p no:cacheprovider 2>&1 | tee "$R/pytest-gpu.txt" | tail -40
  $PY -m pytest tests/engine/test_engine.py tests/engine/test_units.py tests/engine/test_native_cuda.py tests/verbs/test_native_verbs.py tests/serve/test_native_wire.py -q -rs -p no:cacheprovider 2>&1 | tee "$R/pytest-native.txt" | tail -12
fi

if has bench; then
  step "benchmarks"
  $PY bench/bench_engine.py --out "$R/bench_engine.json" --raw-copy "$R/raw_copy" --reps 5 2>&1 | tee "$R/bench_engine.log" | tail -25
fi

if has parity; then
  step "parity: spin budgets, sweep speed, copy engines, UCX, each against a reference of the same run"
  [ -z "${SKIP_SPIN:-}" ] && timeout 240 $PY bench/host_latency.py --spin 0,50 --reps 7 --iters 20000 --json "$R/host_latency_spin.json" 2>&1 | tail -12
  [ -f bench/sweep_speed.py ] && timeout 300 $PY bench/sweep_speed.py "$R/sweep_speed" --reps 3 2>&1 | tail -20
  [ -z "${SKIP_COPY:-}" ] && [ -f bench/copy_engines.py ] && timeout 240 $PY bench/copy_engines.py "$R/copy_engines" --raw-copy "$R/raw_copy" 2>&1 | tail -20
  [ -f bench/ucx_reference.sh ] && timeout 240 bash bench/ucx_reference.sh "$R/ucx" 2>&1 | tail -20
  [ -f bench/ucx_reference.py ] && timeout 150 $PY bench/ucx_reference.py "$R/ucx" --reps 3 2>&1 | tail -8
  [ -f bench/ucx_reference.py ] && timeout 150 $PY bench/ucx_reference.py "$R/ucx_cuda" --mem cuda --reps 3 2>&1 | tail -8
  timeout 60 $PY -m gdrlab ucx protocols --mem cuda --json > "$R/ucx_protocols_cuda.json" 2> "$R/ucx_protocols_cuda.err"
  echo "ucx protocols --mem cuda: exit $?"; tail -3 "$R/ucx_protocols_cuda.err"
  [ -f bench/mpi_wire.py ] && timeout 120 $PY bench/mpi_wire.py "$R/mpi_wire" --reps 3 2>&1 | tail -8
  cp -r "$R"/host_latency_spin.json "$R"/sweep_speed "$R"/copy_engines "$R"/ucx "$R"/ucx_cuda "$R"/ucx_protocols_cuda.json \
    "$R"/mpi_wire "$OUT"/ 2>/dev/null
fi

if has record; then
  step "record datasets"
  mkdir -p "$R/recorded"
  $PY bench/record_h200.py "$R/recorded" 2>&1 | tail -30
  $PY bench/diag_peer.py > "$R/recorded/diag_peer.json" 2> "$R/diag_peer.txt"; cat "$R/diag_peer.txt"
  [ -f bench/capture_sysfs.py ] && $PY bench/capture_sysfs.py "$R/sysfs-h200" 2>&1 | tail -3
  $PY -m gdrlab doctor --json > "$R/doctor.json" 2> "$R/doctor.err"
  $PY -m gdrlab topo --json > "$R/topo.json" 2> "$R/topo.err"
  $PY -m gdrlab topo > "$R/topo.txt" 2>&1
fi

if has labs; then
  step "labs (executed live, outputs kept out of the repository)"
  if [ -d .whl ]; then $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site; fi
  timeout 900 $PY bench/run_labs.py "$R/labs" --timeout 240 2>&1 | grep -v "without encryption" | tail -12
fi

if has extra; then
  step "extra"
  PYTHON=$PY timeout 240 bash bench/gpu_memcheck.sh tests/engine/test_engine_gpu.py -m gpu > "$R/memcheck.txt" 2>&1
  echo "memcheck exit $?"; tail -15 "$R/memcheck.txt"
  [ -x bench/gpu_multi.sh ] && timeout 300 bash bench/gpu_multi.sh "$R" 2>&1 | tail -10
fi

step "pack"
tar -czf "$OUT/results.tgz" -C "$(dirname "$R")" r && ls -la "$OUT"
