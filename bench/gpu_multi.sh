#!/usr/bin/env bash
# Two or more GPUs: the p2p / p2p-staged matrices, NCCL's transport choice in three configurations,
# and `gdrlab bench --mpi` under mpirun. Writes JSON (and the NCCL logs) to OUTDIR/gpu_multi/.
#   bench/gpu_multi.sh OUTDIR
# On a machine with fewer than two GPUs it records the commands' Unavailable answers and exits 0.
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

step "p2p-matrix"
# the outer timeouts add up to less than the 300 s gpu_suite.sh allows this script
timeout 70 $PY -m gdrlab p2p-matrix --sizes 8,256M --json > "$OUT/p2p_matrix.json" 2> "$OUT/p2p_matrix.err"
echo "exit $?"; tail -2 "$OUT/p2p_matrix.err"
$PY -c "import json, sys; from gdrlab.transfer.p2p import format_report; d = json.load(open(sys.argv[1]));
print(format_report(d) if 'error' not in d else d['error']['message'])" "$OUT/p2p_matrix.json" \
  | tee "$OUT/p2p_matrix.txt" | head -30

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

if command -v mpirun > /dev/null; then
  step "bench --mpi (two ranks on this host)"
  FLAGS=""; mpirun --version 2>&1 | grep -q "Open MPI" && FLAGS="--allow-run-as-root --oversubscribe"
  timeout 60 mpirun $FLAGS -n 2 -x NCCL_NVLS_ENABLE $PY -m gdrlab bench --mpi --path host --sizes 8,64K,1M --json \
    > "$OUT/bench_mpi_host.json" 2> "$OUT/bench_mpi_host.err"
  echo "exit $?"
fi
ls -la "$OUT"
