#!/usr/bin/env bash
# Two or more GPUs: the p2p / p2p-staged matrices (with --read, --bidir, the diagonal and SM copies),
# `gdrlab copy` between GPUs and in the host-to-all / all-to-one patterns, UCX between two processes on
# different GPUs beside gdrlab's wires, NCCL's transport choice in three configurations, `gdrlab bench
# --mpi` under mpirun, two class-view learners on the two GPUs of one node, and the multigpu tests.
# Writes JSON (and logs) to OUTDIR/gpu_multi/.
#   bench/gpu_multi.sh OUTDIR [STAGES]   STAGES: comma list of p2p,copy,ucx,nccl,mpi,class,tests (default all)
# On a machine with fewer than two GPUs it records the commands' Unavailable answers and exits 0.
# What each stage should show on 2x H200 (NVLink, NV18), for a reader checking a run:
#   p2p    p2p bandwidth ~390 GB/s one way at 256 MiB with peer access, --bidir about twice that,
#          --read close to write; the diagonal (a GPU to itself) ~1.5 TB/s; p2p-staged ~40 GB/s
#   copy   d2d between the GPUs like p2p; host-to-all about 2 x 55 GB/s (each GPU its own PCIe Gen5
#          x16); all-to-one bounded by the destination's NVLinks
#   ucx    cuda_ipc between processes on different GPUs near the p2p rate at 64 MiB; tcp+cuda_copy
#          bounded by host staging (a few GB/s); the protocol table names cuda_ipc for large sizes
#   class  two learners, two machine rows with different GPU bus ids on one host fingerprint
#   tests  every `multigpu` test passes (none skipped)
set -u -o pipefail
OUT=${1:?usage: bench/gpu_multi.sh OUTDIR}/gpu_multi
mkdir -p "$OUT"
PY=${PYTHON:-python3}
# NVLink multicast stays off in every NCCL run (gdrlab.nccl sets it too).
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
step() { echo "=== $* ($(date -u +%H:%M:%S))"; }

NGPU=$($PY -c "import gdrlab.engine as e; print(len(e.gpus()))" 2>/dev/null || echo 0)
echo "GPUs: $NGPU" | tee "$OUT/gpus.txt"
nvidia-smi topo -m > "$OUT/nvidia-smi-topo.txt" 2>&1

STAGES=${2:-p2p,copy,ucx,nccl,mpi,class,tests}
has() { [[ ",$STAGES," == *",$1,"* ]]; }

if has p2p; then
step "p2p-matrix"
# the outer timeouts add up to less than the 300 s gpu_suite.sh allows this script's default stages
timeout 70 $PY -m gdrlab p2p-matrix --sizes 8,256M --json > "$OUT/p2p_matrix.json" 2> "$OUT/p2p_matrix.err"
echo "exit $?"; tail -2 "$OUT/p2p_matrix.err"
$PY -c "import json, sys; from gdrlab.transfer.p2p import format_report; d = json.load(open(sys.argv[1]));
print(format_report(d) if 'error' not in d else d['error']['message'])" "$OUT/p2p_matrix.json" \
  | tee "$OUT/p2p_matrix.txt" | head -30
for variant in "read:--read" "bidir:--bidir" "diagonal:--diagonal" "sm-read:--read --engine sm --diagonal"; do
  name=${variant%%:*}; flags=${variant#*:}
  timeout 60 $PY -m gdrlab p2p-matrix --sizes 8,256M $flags --json > "$OUT/p2p_matrix_$name.json" 2> "$OUT/p2p_matrix_$name.err"
  echo "p2p-matrix $flags: exit $?"
done
fi

if has copy; then
step "gdrlab copy between GPUs and in patterns"
for variant in "d2d-ce:--dir d2d --dst-device 1 --engine ce" "d2d-sm:--dir d2d --dst-device 1 --engine sm" \
               "d2d-read-sm:--dir d2d --dst-device 1 --engine sm --read" "d2d-bidir:--dir d2d --dst-device 1 --bidir" \
               "host-to-all:--pattern host-to-all" "all-to-host:--pattern host-to-all --dir d2h" \
               "all-to-one:--pattern all-to-one" "all-to-one-sm-read:--pattern all-to-one --engine sm --read"; do
  name=${variant%%:*}; flags=${variant#*:}
  timeout 40 $PY -m gdrlab copy $flags --sizes 8,64M --json > "$OUT/copy_$name.json" 2> "$OUT/copy_$name.err"
  echo "copy $flags: exit $?"
done
fi

if has ucx; then
step "UCX between two processes on different GPUs, beside gdrlab"
for tls in "cuda_ipc:tcp,cuda_copy,cuda_ipc" "tcp:tcp,cuda_copy"; do
  name=${tls%%:*}
  UCX_TLS=${tls#*:} timeout 60 $PY -m gdrlab bench --wire ucx --src-mem device --dst-mem device --device 1 \
    --local-peer process --sizes 8,64K,64M --json > "$OUT/ucx_$name.json" 2> "$OUT/ucx_$name.err"
  echo "bench --wire ucx ($name): exit $?"
  timeout 40 $PY -m gdrlab ucx protocols --mem cuda --tls "${tls#*:}" --json > "$OUT/ucx_protocols_$name.json" 2>&1
  echo "ucx protocols ($name): exit $?"
done
for path in p2p p2p-staged; do
  timeout 40 $PY -m gdrlab bench --path $path --sizes 8,64K,64M --json > "$OUT/bench_$path.json" 2> "$OUT/bench_$path.err"
  echo "bench --path $path: exit $?"
done
[ -f bench/ucx_reference.py ] && timeout 120 $PY bench/ucx_reference.py "$OUT/ucx_reference" --mem cuda --reps 3 2>&1 | tail -5
fi

if has nccl; then
step "nccl"
for cfg in default:"" p2p_off:p2p p2p_shm_off:p2p,shm; do
  name=${cfg%%:*}; disable=${cfg#*:}
  # --timeout lets gdrlab stop its own rank processes before the outer timeout would
  timeout 55 $PY -m gdrlab nccl --sizes 8,64K,1M,16M,256M ${disable:+--disable $disable} --timeout 45 --json \
    --save-log "$OUT/nccl-$name.log" > "$OUT/nccl-$name.json" 2> "$OUT/nccl-$name.err"
  rc=$?
  $PY - "$OUT/nccl-$name.json" "$name" "$rc" <<'PYEOF'
import json, sys
path, name, rc = sys.argv[1:]
try:
    doc = json.load(open(path))
except ValueError:
    print(f"{name}: exit {rc}, no JSON"); sys.exit()
if "error" in doc:
    print(f"{name}: exit {rc}: {doc['error']['type']}: {doc['error']['message'][:300]}")
else:
    big = max(doc["results"], key=lambda r: r["size"]); small = min(doc["results"], key=lambda r: r["size"])
    print(f"{name}: {doc['parsed']['summary']['transport']}  busbw {big['busbw_gbps']:.1f} GB/s at {big['size']} B,"
          f"  {small['time_us']:.1f} us at {small['size']} B, verified {all(r['verified'] for r in doc['results'])}")
PYEOF
done
fi

if has mpi && command -v mpirun > /dev/null; then
  step "bench --mpi (two ranks on this host)"
  FLAGS=""; mpirun --version 2>&1 | grep -q "Open MPI" && FLAGS="--allow-run-as-root --oversubscribe"
  timeout 60 mpirun $FLAGS -n 2 -x NCCL_NVLS_ENABLE $PY -m gdrlab bench --mpi --path host --sizes 8,64K,1M --json \
    > "$OUT/bench_mpi_host.json" 2> "$OUT/bench_mpi_host.err"
  echo "exit $?"
  # rank 1 on GPU 1: the bench moves data from and to GPU 1 (issue 33's device check)
  timeout 60 mpirun $FLAGS -n 2 $PY -m gdrlab bench --mpi --path staged --device 1 --sizes 8,1M --json \
    > "$OUT/bench_mpi_staged_gpu1.json" 2> "$OUT/bench_mpi_staged_gpu1.err"
  echo "bench --mpi --device 1: exit $?"
fi

if has class; then
step "class view: two learners on the two GPUs of one node"
PORT=$($PY -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
$PY -m gdrlab class serve --listen 127.0.0.1:$PORT --db "$OUT/class.sqlite" --gen-token --json > "$OUT/class_serve.json" 2> "$OUT/class_serve.err" &
CLASS_PID=$!
for _ in $(seq 100); do [ -s "$OUT/class_serve.json" ] && break; sleep 0.1; done
JOIN=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['join_url'])" "$OUT/class_serve.json")
TOKEN=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['token'])" "$OUT/class_serve.json")
for gpu in 0 1; do
  export GDRLAB_CONFIG_DIR="$OUT/learner-gpu$gpu"
  CUDA_VISIBLE_DEVICES=$gpu $PY -m gdrlab class join "$JOIN" --name "learner on GPU $gpu" > /dev/null
  path=staged; [ "$NGPU" -ge 2 ] || path=host   # without GPUs the plumbing still runs, with host rows
  CUDA_VISIBLE_DEVICES=$gpu $PY -m gdrlab bench --path $path --sizes 8,1M --json > "$OUT/class_bench_gpu$gpu.json"
  CUDA_VISIBLE_DEVICES=$gpu $PY -m gdrlab class submit "$OUT/class_bench_gpu$gpu.json" --lab 04 --json > "$OUT/class_submit_gpu$gpu.json"
  echo "learner on GPU $gpu: submit exit $?"
done
unset GDRLAB_CONFIG_DIR
$PY - "$PORT" "$TOKEN" "$OUT/class_state.json" <<'PYEOF'
import json, sys, urllib.request
port, token, out = sys.argv[1:]
req = urllib.request.Request(f"http://127.0.0.1:{port}/api/state", headers={"Authorization": f"Bearer {token}"})
state = json.load(urllib.request.urlopen(req, timeout=10))
json.dump(state, open(out, "w"), indent=1)
print(f"class view: {state['counts']['learners']} learners, {state['counts']['machines']} machines, "
      f"{state['counts']['rows']} rows")
PYEOF
kill $CLASS_PID; wait $CLASS_PID 2>/dev/null
fi

if has tests; then
step "multigpu tests"
timeout 240 $PY -m pytest tests -m multigpu -rs -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest-multigpu.txt" | tail -15
fi
ls -la "$OUT"
