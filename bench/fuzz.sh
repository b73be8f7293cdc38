#!/usr/bin/env bash
# Build the libFuzzer targets for the tcp wire and run them.
#   bench/fuzz.sh [SECONDS] [TARGET...]     default: 60 seconds shared by fuzz_frame and fuzz_session
# Needs clang++ and libFuzzer (Debian 12: apt-get install clang libclang-rt-14-dev). Work files go to build/fuzz/: the growing corpus
# (build/fuzz/corpus-<target>, seeded from native/fuzz/corpus/), crash inputs (build/fuzz/artifacts)
# and logs. Exits non-zero if a target finds a crash, leak, timeout or sanitizer report.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_TOTAL="${1:-60}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(fuzz_frame fuzz_session)
CXX="${CXX_FUZZ:-$(command -v clang++ || true)}"
OUT="$ROOT/build/fuzz"
mkdir -p "$OUT/artifacts"
# Locally a missing clang or libFuzzer skips fuzzing with one line; under CI=true it fails.
missing() {
  if [ "${CI:-}" = "true" ]; then
    echo "fuzz.sh: FAILED: $1 (CI=true: fuzzing is required; see scripts/install-system-deps.sh)" >&2
    exit 2
  fi
  echo "fuzz.sh: skipped: $1 (install it with scripts/install-system-deps.sh)" >&2
  exit 0
}
[ -n "$CXX" ] || missing "clang++ not found (Debian: apt-get install clang libclang-rt-dev)"
# Debian 12's clang only recommends libclang-rt-14-dev, which holds libclang_rt.fuzzer: probe a link.
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long){return 0;}\n' >"$OUT/probe.cc"
if ! "$CXX" -fsanitize=fuzzer "$OUT/probe.cc" -o "$OUT/probe" >"$OUT/probe.log" 2>&1; then
  missing "libFuzzer does not link with $CXX (Debian 12: apt-get install libclang-rt-14-dev; $(grep -m1 -o 'cannot find [^ ]*' "$OUT/probe.log" || echo 'see build/fuzz/probe.log'))"
fi
cmake -S "$ROOT" -B "$OUT/cmake" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGDRLAB_FUZZ=ON >"$OUT/cmake.log"
cmake --build "$OUT/cmake" -j"$(nproc)" --target "${TARGETS[@]}" >>"$OUT/cmake.log"

per=$(( SECONDS_TOTAL / ${#TARGETS[@]} ))
[ "$per" -lt 1 ] && per=1
status=0
for t in "${TARGETS[@]}"; do
  seeds="$ROOT/native/fuzz/corpus/${t#fuzz_}"
  work="$OUT/corpus-$t"
  mkdir -p "$work"
  bin="$(find "$OUT/cmake" -name "$t" -type f -perm -u+x | head -n1)"
  echo "fuzz.sh: $t for ${per}s (corpus $work, seeds $seeds)" >&2
  # Small inputs keep every exchange inside the socket buffers; -timeout catches hangs (the
  # engine's own timeouts are 200 ms in the session target).
  if ! ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1}" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
      "$bin" -max_total_time="$per" -max_len=4096 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$OUT/artifacts/$t-" "$work" "$seeds" 2>&1 | tee "$OUT/$t.log" | grep -E "^(#[0-9]+ +(DONE|INITED)|stat::|==[0-9]+==ERROR|SUMMARY)" >&2; then
    :
  fi
  if grep -qE "ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: " "$OUT/$t.log"; then
    echo "fuzz.sh: $t FOUND A PROBLEM: see $OUT/$t.log and $OUT/artifacts/" >&2
    # The log's own lines (the harness's reason, a sanitizer's stack), without libFuzzer's progress
    # lines, so a CI log that keeps only the tail still says what went wrong.
    grep -vE "^#[0-9]+ |^INFO: |^MS: |^base unit: |^0x|^\\x" "$OUT/$t.log" | tail -n 40 >&2 || true
    ls -l "$OUT/artifacts/" >&2 || true
    status=1
  fi
done
exit $status
