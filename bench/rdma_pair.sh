#!/usr/bin/env bash
# Two-node GPUDirect RDMA measurement: gdrlab's verbs wire (gdr, staged, shared, pipelined, host)
# and, where perftest is installed, ib_write_bw / ib_write_lat on the same pair of HCAs for
# comparison (host memory, --use_cuda_dmabuf, and --use_cuda through nvidia-peermem).
#
# Like for like: gdrlab posts RDMA WRITE WITH IMMEDIATE, never inline, and polls a completion
# queue on both sides. The latency rows marked "like_for_like" run perftest the same way
# (--write_with_imm -I 0); the plain ib_write_lat rows (inline up to 220 B, the receiver polls
# the last byte in host memory) are kept because they are the figure usually quoted. perftest
# accepts GPU memory in a write latency test only with --write_with_imm (perftest 26.01+); older
# builds are skipped and ib_send_lat --use_cuda runs instead, marked as a different verb.
# Bandwidth cannot be matched: ib_write_bw keeps tx_depth writes in flight with no ACK, gdrlab
# waits for an ACK after each window, so perftest's figure is an upper bound for gdrlab's. Both
# tools cover the same sizes: perftest -a runs 2 B..8 MiB, so SIZES defaults to 2:8M.
#
#   node A:  GDRLAB_TOKEN=secret bench/rdma_pair.sh server [PORT]
#   node B:  GDRLAB_TOKEN=secret bench/rdma_pair.sh client NODE_A [PORT] [OUTDIR]
#
# Start the server first. Both sides run the same fixed list of perftest configurations in the
# same order (perftest serves one client per run). The client writes OUTDIR/rdma_pair/*.json:
# one gdrlab bench document per path, one perftest document per configuration, and summary.json.
#
# Environment (same meaning on both nodes):
#   GDRLAB_TOKEN        shared secret (required: the server listens on 0.0.0.0)
#   GDRLAB_IB_DEV       HCA and port, e.g. mlx5_0 or mlx5_0:1 (default: gdrlab takes the ACTIVE
#                       HCA nearest the GPU; perftest then uses its own default, so set it)
#   GDRLAB_IB_GID_INDEX RoCE GID index (default: RoCE v2 IPv4-mapped, chosen by gdrlab)
#   GDRLAB_IB_TC, GDRLAB_IB_SL, GDRLAB_IB_PKEY_INDEX  traffic class, service level, P_Key index
#                       (default 0); passed to perftest as --tclass, --sl, --pkey_index
#   GPU                 GPU ordinal for GPU paths (default 0); pick the GPU nearest the HCA
#                       (`gdrlab topo` shows the nearest NIC per GPU)
#   SIZES               gdrlab sizes (default 2:8M, the sizes of perftest -a)
#   PERF_PORT           perftest's first TCP port (default PORT+1; configuration i uses PERF_PORT+i,
#                       so two nodes whose perftest builds support different lists cannot pair
#                       one configuration with another)
set -u -o pipefail
ROLE=${1:?usage: rdma_pair.sh server [PORT] | client SERVER_HOST [PORT] [OUTDIR]}
PY=${PYTHON:-python3}
GPU=${GPU:-0}
SIZES=${SIZES:-2:8M}
: "${GDRLAB_TOKEN:?set GDRLAB_TOKEN to the same secret on both nodes}"
export GDRLAB_TOKEN PYTHONUNBUFFERED=1
step() { echo "=== $* ($(date -u +%H:%M:%S))" >&2; }

# perftest options for the HCA selection in GDRLAB_IB_DEV / GDRLAB_IB_GID_INDEX
PERF_DEV=()
if [ -n "${GDRLAB_IB_DEV:-}" ]; then
  PERF_DEV+=(-d "${GDRLAB_IB_DEV%%:*}")
  case "$GDRLAB_IB_DEV" in *:*) PERF_DEV+=(-i "${GDRLAB_IB_DEV##*:}") ;; esac
fi
[ -n "${GDRLAB_IB_GID_INDEX:-}" ] && PERF_DEV+=(-x "$GDRLAB_IB_GID_INDEX")
[ -n "${GDRLAB_IB_TC:-}" ] && PERF_DEV+=(--tclass="$GDRLAB_IB_TC")
[ -n "${GDRLAB_IB_SL:-}" ] && PERF_DEV+=(--sl="$GDRLAB_IB_SL")
[ -n "${GDRLAB_IB_PKEY_INDEX:-}" ] && PERF_DEV+=(--pkey_index="$GDRLAB_IB_PKEY_INDEX")

# name|tool|extra options; the same list on both sides, in this order
LAT_LIKE="-a -F -I 0 --write_with_imm"  # gdrlab's verb, no inline, completion-queue polling
PERF_CONFIGS=(
  "write_bw_host|ib_write_bw|-a -F --report_gbits"
  "write_lat_host|ib_write_lat|-a -F"
  "write_imm_lat_host|ib_write_lat|$LAT_LIKE"
  "write_bw_cuda_dmabuf|ib_write_bw|-a -F --report_gbits --use_cuda=$GPU --use_cuda_dmabuf"
  "write_imm_lat_cuda_dmabuf|ib_write_lat|$LAT_LIKE --use_cuda=$GPU --use_cuda_dmabuf"
  "send_lat_cuda_dmabuf|ib_send_lat|-a -F -I 0 --use_cuda=$GPU --use_cuda_dmabuf"
  "write_bw_cuda_peermem|ib_write_bw|-a -F --report_gbits --use_cuda=$GPU"
  "write_imm_lat_cuda_peermem|ib_write_lat|$LAT_LIKE --use_cuda=$GPU"
  "send_lat_cuda_peermem|ib_send_lat|-a -F -I 0 --use_cuda=$GPU"
)

# Whether this perftest build supports a configuration (CUDA support is a build option;
# --write_with_imm arrived in 24.01, and with GPU memory in a latency test in 26.01).
perf_supported() {
  local tool=$1 opts=$2 help
  command -v "$tool" >/dev/null || return 1
  help=$("$tool" --help 2>&1)
  case "$opts" in *use_cuda_dmabuf*) grep -q use_cuda_dmabuf <<<"$help" || return 1 ;; esac
  case "$opts" in *use_cuda=*) grep -q use_cuda <<<"$help" || return 1 ;; esac
  case "$opts" in *write_with_imm*) grep -q write_with_imm <<<"$help" || return 1 ;; esac
  case "$tool $opts" in
    *ib_write_lat*use_cuda*) perf_version_at_least "$tool" 26 1 || return 1 ;;
    *ib_send_lat*use_cuda*)  # the fallback: only where write-with-imm GPU latency is not available
      perf_version_at_least ib_write_lat 26 1 && grep -q write_with_imm <<<"$(ib_write_lat --help 2>&1)" && return 1 ;;
  esac
  return 0
}

# perftest prints "Version: 26.01..." (older builds: "Version: 6.22"); true when >= MAJOR.MINOR.
perf_version_at_least() {
  local v major minor
  v=$("$1" --version 2>&1 | sed -n 's/.*[Vv]ersion:* *\([0-9][0-9]*\)\.\([0-9][0-9]*\).*/\1 \2/p' | head -n 1)
  [ -n "$v" ] || return 1
  read -r major minor <<<"$v"
  [ "$major" -gt "$2" ] || { [ "$major" -eq "$2" ] && [ "$minor" -ge "$3" ]; }
}

if [ "$ROLE" = server ]; then
  PORT=${2:-18515}
  PERF_PORT=${PERF_PORT:-$((PORT + 1))}
  step "gdrlab serve on 0.0.0.0:$PORT (GPU $GPU)"
  $PY -m gdrlab serve --listen "0.0.0.0:$PORT" --token "$GDRLAB_TOKEN" --device "$GPU" --timeout 60 &
  SERVE_PID=$!
  trap 'kill "$SERVE_PID" 2>/dev/null' EXIT
  trap 'exit 130' INT TERM  # exit through the EXIT trap, which stops gdrlab serve
  i=0
  for cfg in "${PERF_CONFIGS[@]}"; do
    IFS='|' read -r name tool opts <<<"$cfg"
    port=$((PERF_PORT + i)); i=$((i + 1))
    if ! perf_supported "$tool" "$opts"; then
      step "perftest $name: not supported by this perftest (or perftest missing); skipped"
      continue
    fi
    step "perftest $name: waiting for the client on port $port"
    # shellcheck disable=SC2086  # opts is a list of options
    "$tool" "${PERF_DEV[@]}" -p "$port" $opts >&2 || echo "perftest $name ended with $?" >&2
  done
  step "perftest done; gdrlab serve keeps running until you press Ctrl-C"
  wait "$SERVE_PID"
  exit 0
fi

[ "$ROLE" = client ] || { echo "unknown role '$ROLE' (server or client)" >&2; exit 2; }
SERVER=${2:?client needs the server host name or address}
PORT=${3:-18515}
PERF_PORT=${PERF_PORT:-$((PORT + 1))}
OUT=${4:-.}/rdma_pair
mkdir -p "$OUT"

$PY -m gdrlab doctor --json > "$OUT/doctor.json" 2> "$OUT/doctor.err" || true
for path in gdr pipelined shared staged host; do
  step "gdrlab bench --wire verbs --path $path"
  $PY -m gdrlab bench --wire verbs --path "$path" --peer "$SERVER:$PORT" --token "$GDRLAB_TOKEN" \
    --sizes "$SIZES" --device "$GPU" --timeout 60 --json > "$OUT/verbs-$path.json" 2> "$OUT/verbs-$path.err"
  echo "exit $?" >&2
done
step "gdrlab bench --wire tcp --path staged (the pre-RDMA baseline on the same pair)"
$PY -m gdrlab bench --wire tcp --path staged --peer "$SERVER:$PORT" --token "$GDRLAB_TOKEN" \
  --sizes "$SIZES" --device "$GPU" --timeout 60 --json > "$OUT/tcp-staged.json" 2> "$OUT/tcp-staged.err"

i=0
for cfg in "${PERF_CONFIGS[@]}"; do
  IFS='|' read -r name tool opts <<<"$cfg"
  port=$((PERF_PORT + i)); i=$((i + 1))
  if ! perf_supported "$tool" "$opts"; then
    echo "{\"tool\": \"$tool\", \"config\": \"$name\", \"skipped\": \"not supported by this perftest or perftest missing\"}" \
      > "$OUT/perftest-$name.json"
    continue
  fi
  step "perftest $name"
  ok=0
  for _ in $(seq 1 30); do  # the server side may still be finishing the previous run
    # shellcheck disable=SC2086
    if "$tool" "${PERF_DEV[@]}" -p "$port" $opts "$SERVER" > "$OUT/perftest-$name.txt" 2>&1; then ok=1; break; fi
    sleep 2
  done
  version=$("$tool" --version 2>&1 | head -n 1)
  $PY - "$OUT/perftest-$name.txt" "$name" "$tool ${PERF_DEV[*]} $opts" "$ok" "$version" > "$OUT/perftest-$name.json" <<'PYEOF'
import json, sys
path, name, cmd, ok, version = sys.argv[1:]
rows = []
for line in open(path, errors="replace"):
    f = line.split()
    try:
        nums = [float(x) for x in f]
    except ValueError:
        continue
    if len(nums) >= 4 and nums[0] >= 1 and nums[0] == int(nums[0]):
        rows.append(nums)
bw = "bw" in name
cols = (["size", "iters", "bw_peak_gbits", "bw_avg_gbits", "msg_rate_mpps"] if bw else
        ["size", "iters", "lat_min_us", "lat_max_us", "lat_typical_us", "lat_avg_us", "lat_stdev_us",
         "lat_p99_us", "lat_p999_us"])
if "write_imm_lat" in name:
    note = "like for like with gdrlab lat: RDMA WRITE WITH IMM, no inline, completion-queue polling"
elif "send_lat" in name:
    note = ("a different verb (SEND/RECV): this perftest cannot run a GPU write-latency test "
            "(needs --write_with_imm, perftest 26.01+)")
elif "write_lat" in name:
    note = ("not like for like: plain RDMA WRITE, inline up to 220 B, the receiver polls host memory; "
            "compare gdrlab with the write_imm_lat rows")
else:
    note = ("not like for like: ib_write_bw keeps tx_depth writes in flight without an ACK per window; "
            "an upper bound for gdrlab's windowed bandwidth")
out = {"tool": cmd.split()[0], "config": name, "command": cmd, "ok": ok == "1", "perftest_version": version,
       "comparison": note, "rows": [dict(zip(cols, r)) for r in rows],
       "provenance": {"kind": "live", "what": "perftest " + cmd}}
print(json.dumps(out))
PYEOF
done

$PY - "$OUT" > "$OUT/summary.json" <<'PYEOF'
import glob, json, os, sys
out = sys.argv[1]
summary = {}
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    name = os.path.basename(f)[:-5]
    if name in ("summary", "doctor"):
        continue
    try:
        doc = json.load(open(f))
    except ValueError:
        summary[name] = {"error": "no JSON (see the .err file)"}
        continue
    if "error" in doc:
        summary[name] = {"error": doc["error"]["message"] if isinstance(doc["error"], dict) else doc["error"]}
    elif "rows" in doc and doc["rows"]:
        last = doc["rows"][-1]
        summary[name] = {k: last.get(k) for k in ("size", "bw_gbps", "bw_avg_gbits", "lat_p50_us", "lat_typical_us")
                         if k in last}
        if "comparison" in doc:
            summary[name]["comparison"] = doc["comparison"]
        prov = doc.get("provenance", {})
        if "registration" in prov:
            summary[name]["registration"] = prov["registration"]
    else:
        summary[name] = {k: doc.get(k) for k in ("skipped", "ok") if k in doc}
print(json.dumps(summary, indent=1))
PYEOF
cat "$OUT/summary.json"
