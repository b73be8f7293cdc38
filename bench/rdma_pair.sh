#!/usr/bin/env bash
# Two-node GPUDirect RDMA measurement: gdrlab's verbs wire (gdr, staged, shared, pipelined, host)
# and, where perftest is installed, ib_write_bw / ib_write_lat on the same pair of HCAs for
# comparison (host memory, --use_cuda_dmabuf, and --use_cuda through nvidia-peermem).
#
# Like for like: gdrlab posts RDMA WRITE WITH IMMEDIATE, never inline, and polls a completion
# queue on both sides. The latency rows marked "like_for_like" run perftest the same way
# (--write_with_imm -I 0); the plain ib_write_lat rows (inline up to 220 B, the receiver polls
# the last byte in host memory) are kept because they are the figure usually quoted. perftest
# accepts GPU memory in a write latency test only with --write_with_imm (the 26.01 release, which
# prints "Version: 6.28": perftest's --version is its autoconf version, never the release tag).
# What a build accepts is found by asking it (--help lists the options; a GPU write-latency server
# started for 3 s either refuses at once or waits for a client), and the two nodes then agree on one
# list over a small TCP exchange (CTRL_PORT) before any perftest starts: a configuration either
# side lacks is skipped on both, with the reason. ib_send_lat --use_cuda runs only where the GPU
# write-with-imm latency did not, marked as a different verb.
# Bandwidth cannot be matched exactly: both stream (gdrlab keeps several windows unacknowledged and
# syncs once at the end), but ib_write_bw's plain writes cost the receiver nothing while gdrlab's
# writes with immediate cost it a completion each, so perftest's figure is an upper bound. Both
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
#   GDRLAB_IB_DEV       HCA and port, e.g. mlx5_0 or mlx5_0:1 (default: the ACTIVE HCA nearest the
#                       GPU among those GDRLAB_IB_HCA / NCCL_IB_HCA allow, for every path)
#   GDRLAB_IB_GID_INDEX RoCE GID index (or NCCL_IB_GID_INDEX; default: RoCE v2 IPv4-mapped)
#   GDRLAB_IB_TC, GDRLAB_IB_SL, GDRLAB_IB_PKEY_INDEX  traffic class, service level, P_Key index
#                       (or NCCL_IB_TC, NCCL_IB_SL, NCCL_IB_PKEY; default 0)
#                       perftest gets the HCA, port, GID index, TC, SL and P_Key index gdrlab
#                       resolved on each node (python -m gdrlab.hw.perftest args), so both tools
#                       run on the same NIC with the same class
#   GPU                 GPU ordinal for GPU paths (default 0); pick the GPU nearest the HCA
#                       (`gdrlab topo` shows the nearest NIC per GPU)
#   SIZES               gdrlab sizes (default 2:8M, the sizes of perftest -a)
#   PERF_PORT           perftest's first TCP port (default PORT+1; configuration i uses PERF_PORT+i,
#                       so two nodes whose perftest builds support different lists cannot pair
#                       one configuration with another)
#   CTRL_PORT           the TCP port of the agreement (default PERF_PORT + number of configurations)
#   PERF_TIMEOUT        seconds one server-side perftest may wait for its client (default 900)
#   SKIP_GDRLAB=1       run only the perftest part (no gdrlab serve / bench)
#
#   bench/rdma_pair.sh probe   prints what this node's perftest supports, one line per configuration
set -u -o pipefail
ROLE=${1:?usage: rdma_pair.sh server [PORT] | client SERVER_HOST [PORT] [OUTDIR] | probe}
PY=${PYTHON:-python3}
GPU=${GPU:-0}
SIZES=${SIZES:-2:8M}
SKIP_GDRLAB=${SKIP_GDRLAB:-0}
PERF_TIMEOUT=${PERF_TIMEOUT:-900}
step() { echo "=== $* ($(date -u +%H:%M:%S))" >&2; }

# perftest options for the HCA, port, GID index, traffic class, service level and P_Key index that
# gdrlab resolves here (GDRLAB_ names, then NCCL's; unnamed HCA: the one nearest GPU $GPU). Without
# a usable gdrlab verbs layer, the same variables are translated here.
PERF_DEV=()
perf_dev_from_env() {
  PERF_DEV=()
  if [ -n "${GDRLAB_IB_DEV:-}" ]; then
    PERF_DEV+=(-d "${GDRLAB_IB_DEV%%:*}")
    case "$GDRLAB_IB_DEV" in *:*) PERF_DEV+=(-i "${GDRLAB_IB_DEV##*:}") ;; esac
  fi
  local gid=${GDRLAB_IB_GID_INDEX:-${NCCL_IB_GID_INDEX:-}} tc=${GDRLAB_IB_TC:-${NCCL_IB_TC:-}}
  local sl=${GDRLAB_IB_SL:-${NCCL_IB_SL:-}} pk=${GDRLAB_IB_PKEY_INDEX:-${NCCL_IB_PKEY:-}}
  [ -n "$gid" ] && [ "$gid" != -1 ] && PERF_DEV+=(-x "$gid")
  [ -n "$tc" ] && PERF_DEV+=(--tclass="$tc")
  [ -n "$sl" ] && PERF_DEV+=(--sl="$sl")
  [ -n "$pk" ] && PERF_DEV+=(--pkey_index="$pk")
  return 0
}
resolve_perf_dev() {
  local out
  if out=$($PY -m gdrlab.hw.perftest args --device "$GPU" 2>/dev/null) && [ -n "$out" ]; then
    mapfile -t PERF_DEV <<<"$out"
  else
    perf_dev_from_env
  fi
}

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

free_port() { $PY -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }

# Whether this perftest build runs a configuration; PERF_WHY says why not. Found by behaviour,
# never by version: every long option must be in --help, and a GPU write-latency test must get
# past perftest's own check (started as a server for 3 s: a build that refuses exits at once,
# one that accepts is still waiting for a client when the timeout stops it, status 124).
PERF_WHY=""
perf_supported() {
  local tool=$1 opts=$2 help o rc probe_out
  PERF_WHY=""
  command -v "$tool" >/dev/null || { PERF_WHY="$tool is not installed"; return 1; }
  help=$("$tool" --help 2>&1)
  for o in $opts; do
    case "$o" in
      --*) grep -q -- "${o%%=*}" <<<"$help" || { PERF_WHY="this $tool does not accept ${o%%=*}"; return 1; } ;;
    esac
  done
  case "$tool $opts" in
    *ib_write_lat*use_cuda*)
      # shellcheck disable=SC2086
      probe_out=$(timeout 3 "$tool" "${PERF_DEV[@]}" -p "$(free_port)" $opts 2>&1)
      rc=$?
      if [ "$rc" -ne 124 ]; then
        PERF_WHY="this $tool refuses GPU memory in a write-latency test (exit $rc: $(tr '\n' ' ' <<<"$probe_out" | cut -c1-200))"
        return 1
      fi ;;
  esac
  return 0
}

perf_version() { command -v "$1" >/dev/null && "$1" --version 2>&1 | head -n 1 || echo "not installed"; }

# This node's table: name<TAB>reason ("ok" when supported)<TAB>version of its tool (read with
# IFS=tab, which merges empty fields: none is ever empty).
perf_table() {
  local cfg name tool opts
  for cfg in "${PERF_CONFIGS[@]}"; do
    IFS='|' read -r name tool opts <<<"$cfg"
    perf_supported "$tool" "$opts"
    printf '%s\t%s\t%s\n' "$name" "${PERF_WHY:-ok}" "$(perf_version "$tool")"
  done
}

# The agreement: the client sends its table, the server answers with its own; both then run the
# configurations both support, except an ib_send_lat fallback whose write-with-imm twin runs.
# Prints the merged table: name<TAB>run|skip<TAB>reason<TAB>client version<TAB>server version.
agree() {  # agree server|client HOST PORT TABLE_FILE
  $PY - "$@" <<'PYEOF'
import hashlib, hmac, json, os, socket, sys, time
role, host, port, table = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
mine = [line.rstrip("\n").split("\t") for line in open(table) if line.strip()]
auth = hashlib.sha256(("gdrlab-rdma-pair:" + os.environ["GDRLAB_TOKEN"]).encode()).hexdigest()
if role == "server":
    srv = socket.create_server(("0.0.0.0", port))
    while True:
        conn, _ = srv.accept()
        with conn:
            try:
                msg = json.loads(conn.makefile().readline())
            except ValueError:
                continue
            if not hmac.compare_digest(str(msg.get("auth", "")), auth):
                conn.sendall(b'{"error": "token mismatch"}\n')
                continue
            conn.sendall((json.dumps({"table": mine}) + "\n").encode())
            theirs = msg["table"]
            break
    client, server = theirs, mine
else:
    deadline = time.monotonic() + float(os.environ.get("AGREE_TIMEOUT", "120"))
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=10)
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit(f"rdma_pair.sh: no agreement: nothing answers on {host}:{port} (is the server side running?)")
            time.sleep(1)
    with conn:
        conn.sendall((json.dumps({"auth": auth, "table": mine}) + "\n").encode())
        reply = json.loads(conn.makefile().readline())
    if "error" in reply:
        sys.exit("rdma_pair.sh: the server refused the agreement: " + reply["error"])
    client, server = mine, reply["table"]
srv_by = {r[0]: r for r in server}
rows, runs = [], set()
for name, why, version in client:
    s = srv_by.get(name, [name, "the server does not list this configuration", "?"])
    reason = ("client: " + why) if why != "ok" else ""
    if s[1] != "ok":
        reason += ("; " if reason else "") + "server: " + s[1]
    rows.append([name, "skip" if reason else "run", reason or "ok", version, s[2]])
    if not reason:
        runs.add(name)
for r in rows:
    twin = r[0].replace("send_lat_", "write_imm_lat_")
    if r[0].startswith("send_lat_") and r[1] == "run" and twin in runs:
        r[1], r[2] = "skip", f"not needed: {twin}, the like-for-like row, runs on both nodes"
for r in rows:
    print("\t".join(r))
PYEOF
}

if [ "$ROLE" = probe ]; then
  resolve_perf_dev
  echo "perftest options for this node's HCA: ${PERF_DEV[*]:-(none: perftest defaults)}"
  perf_table | while IFS=$'\t' read -r name why version; do
    if [ "$why" = ok ]; then printf '%-28s yes  %s\n' "$name" "$version"; else printf '%-28s no   %s\n' "$name" "$why"; fi
  done
  exit 0
fi

: "${GDRLAB_TOKEN:?set GDRLAB_TOKEN to the same secret on both nodes}"
export GDRLAB_TOKEN PYTHONUNBUFFERED=1
resolve_perf_dev
TABLE=$(mktemp)
AGREED=$(mktemp)
trap 'rm -f "$TABLE" "$AGREED"' EXIT

if [ "$ROLE" = server ]; then
  PORT=${2:-18515}
  PERF_PORT=${PERF_PORT:-$((PORT + 1))}
  CTRL_PORT=${CTRL_PORT:-$((PERF_PORT + ${#PERF_CONFIGS[@]}))}
  SERVE_PID=""
  if [ "$SKIP_GDRLAB" != 1 ]; then
    step "gdrlab serve on 0.0.0.0:$PORT (GPU $GPU)"
    $PY -m gdrlab serve --listen "0.0.0.0:$PORT" --token "$GDRLAB_TOKEN" --device "$GPU" --timeout 60 &
    SERVE_PID=$!
    trap 'kill "$SERVE_PID" 2>/dev/null; rm -f "$TABLE" "$AGREED"' EXIT
  fi
  trap 'exit 130' INT TERM  # exit through the EXIT trap, which stops gdrlab serve
  perf_table > "$TABLE"
  step "perftest: waiting for the client's list on port $CTRL_PORT (perftest options: ${PERF_DEV[*]:-defaults})"
  agree server - "$CTRL_PORT" "$TABLE" > "$AGREED" || { echo "no agreement with the client" >&2; exit 1; }
  i=0
  for cfg in "${PERF_CONFIGS[@]}"; do
    IFS='|' read -r name tool opts <<<"$cfg"
    port=$((PERF_PORT + i)); i=$((i + 1))
    IFS=$'\t' read -r _ verdict reason _ _ <<<"$(grep "^$name	" "$AGREED")"
    if [ "$verdict" != run ]; then
      step "perftest $name: skipped on both nodes ($reason)"
      continue
    fi
    step "perftest $name: waiting for the client on port $port"
    # shellcheck disable=SC2086  # opts is a list of options
    timeout "$PERF_TIMEOUT" "$tool" "${PERF_DEV[@]}" -p "$port" $opts >&2 || echo "perftest $name ended with $?" >&2
  done
  if [ -n "$SERVE_PID" ]; then
    step "perftest done; gdrlab serve keeps running until you press Ctrl-C"
    wait "$SERVE_PID"
  fi
  exit 0
fi

[ "$ROLE" = client ] || { echo "unknown role '$ROLE' (server, client or probe)" >&2; exit 2; }
SERVER=${2:?client needs the server host name or address}
PORT=${3:-18515}
PERF_PORT=${PERF_PORT:-$((PORT + 1))}
CTRL_PORT=${CTRL_PORT:-$((PERF_PORT + ${#PERF_CONFIGS[@]}))}
OUT=${4:-.}/rdma_pair
mkdir -p "$OUT"

if [ "$SKIP_GDRLAB" != 1 ]; then
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
fi

perf_table > "$TABLE"
step "perftest: agreeing on the configurations with $SERVER:$CTRL_PORT"
if ! agree client "$SERVER" "$CTRL_PORT" "$TABLE" > "$AGREED"; then
  echo "no agreement with the server: perftest rows not run" >&2
  : > "$AGREED"
fi
i=0
for cfg in "${PERF_CONFIGS[@]}"; do
  IFS='|' read -r name tool opts <<<"$cfg"
  port=$((PERF_PORT + i)); i=$((i + 1))
  IFS=$'\t' read -r _ verdict reason cver sver <<<"$(grep "^$name	" "$AGREED" || printf '%s\tskip\tno agreement with the server\t?\t?' "$name")"
  if [ "$verdict" != run ]; then
    $PY -c 'import json, sys; print(json.dumps({"tool": sys.argv[1], "config": sys.argv[2], "skipped": sys.argv[3],
      "perftest_version": sys.argv[4], "server_perftest_version": sys.argv[5]}))' \
      "$tool" "$name" "$reason" "$cver" "$sver" > "$OUT/perftest-$name.json"
    continue
  fi
  step "perftest $name"
  ok=0
  for _ in $(seq 1 30); do  # the server side may still be finishing the previous run
    # shellcheck disable=SC2086
    if "$tool" "${PERF_DEV[@]}" -p "$port" $opts "$SERVER" > "$OUT/perftest-$name.txt" 2>&1; then ok=1; break; fi
    sleep 2
  done
  $PY - "$OUT/perftest-$name.txt" "$name" "$tool ${PERF_DEV[*]} $opts" "$ok" "$cver" "$sver" > "$OUT/perftest-$name.json" <<'PYEOF'
import json, sys
path, name, cmd, ok, version, server_version = sys.argv[1:]
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
    note = ("a different verb (SEND/RECV), run because the GPU write-with-imm latency test could not run "
            "on both nodes (see perftest-" + name.replace("send_lat_", "write_imm_lat_") + ".json)")
elif "write_lat" in name:
    note = ("not like for like: plain RDMA WRITE, inline up to 220 B, the receiver polls host memory; "
            "compare gdrlab with the write_imm_lat rows")
else:
    note = ("not like for like: ib_write_bw streams plain writes (no receiver work) and reports the average; "
            "gdrlab streams writes with immediate (a receive completion and repost each) and reports the median window")
out = {"tool": cmd.split()[0], "config": name, "command": cmd, "ok": ok == "1", "perftest_version": version,
       "server_perftest_version": server_version,
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
