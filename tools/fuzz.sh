#!/usr/bin/env bash
# Builds the libFuzzer targets (with the `asan` preset: clang, ASan + UBSan) and runs each for
# FUZZ_SECONDS (default 20; or FUZZ_RUNS inputs from seed FUZZ_SEED, default 1) on a corpus
# seeded from the repository's real files, after replaying every reproducer kept in
# tests/data/fuzz-regressions/<target>/. A crash, a sanitizer report, an exception other than
# InputError or a single input over 10 s fails the run; the input is left in
# build/asan/fuzz-findings/<target>/ to be added to the regressions once fixed.
# Usage: tools/fuzz.sh [target ...]   (default: all)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${FUZZ_SECONDS:-20}"
# FUZZ_RUNS: a fixed count of inputs per target instead of a time, with a fixed seed, so that
# a run (CI's) explores the same inputs every time.
runs_limit=(-max_total_time="$seconds")
[ -z "${FUZZ_RUNS:-}" ] || runs_limit=(-runs="$FUZZ_RUNS" -seed="${FUZZ_SEED:-1}")
bash tools/build.sh asan >/dev/null
bin=build/asan/fuzz
work=build/asan/fuzz-corpora
findings=build/asan/fuzz-findings
rm -rf "$work"
mkdir -p "$work" "$findings"

seeds() {  # the real files a target starts from
  case "$1" in
    topology) ls topologies/*.json tests/data/topologies/*.json ;;
    workload) ls workloads/train/*.json tests/data/workloads/*.json ;;
    model) ls workloads/models/*.json tests/data/models/*.json ;;
    nccl_log) ls tests/data/nccl-tests/*.txt ;;
    measurements) ls tests/data/calibration/*.jsonl ;;
    validation_runs) ls workloads/validation/*.json ;;
    serving_trace) ls tests/data/serving-traces/*.csv tests/data/serving-traces/*.jsonl ;;
    fleet) ls workloads/serve/*.json tests/data/serve/*.json ;;
    flow_list) ls workloads/flows/*.json ;;
    scaling_measurements) ls workloads/scaling/*.csv ;;
  esac
}

dictionary() {  # the format's keys, seen in its seeds, and the units its values take
  local out="$work/$1.dict"
  seeds "$1" | xargs cat | grep -o '"[A-Za-z_][A-Za-z0-9_]*"' | sort -u | sed 's/^/kw=/' > "$out" || true
  printf '%s\n' 'u1="Gb/s"' 'u2="GB/s"' 'u3="us"' 'u4="ms"' 'u5="GiB"' 'u6="TFLOP/s"' 'u7="ns"' 'u8="TB/s"' 'u9="Gop/s"' \
    'n1="1e308"' 'n2="-1"' 'n3="0"' 'n4="4294967296"' 'n5="null"' 'n6="NaN"' >> "$out"
  # CSV headers are not quoted: the measured-scaling columns by name.
  [ "$1" != scaling_measurements ] || printf '%s\n' 'c1="gpus"' 'c2="step_time_s"' 'c3="step_time_ms"' 'c4="tokens_per_s"' \
    'c5="tokens_per_s_per_gpu"' 'c6="strategy"' 'c7="fsdp"' 'c8="zero3"' >> "$out"
  echo "$out"
}

run_target() {  # one target: its reproducers, then FUZZ_SECONDS of fuzzing; the verdict in $work/$1.verdict
  local t="$1" corpus="$work/$1" verdict="$work/$1.verdict"
  mkdir -p "$corpus" "$findings/$t"
  # Seeds cut to their first 200 lines: the long traces would only slow each run.
  for f in $(seeds "$t"); do head -n 200 "$f" > "$corpus/$(basename "$f")"; done
  local regressions=()
  if [ -d "tests/data/fuzz-regressions/$t" ]; then mapfile -t regressions < <(ls -d "tests/data/fuzz-regressions/$t"/* 2>/dev/null); fi
  if [ ${#regressions[@]} -gt 0 ] && ! "$bin/fuzz_$t" -timeout=10 "${regressions[@]}" >"$work/$t.regressions.log" 2>&1; then
    echo "FAIL fuzz $t: a kept reproducer fails again (see $work/$t.regressions.log)" > "$verdict"
    return
  fi
  if "$bin/fuzz_$t" "$corpus" -dict="$(dictionary "$t")" "${runs_limit[@]}" -timeout=10 -rss_limit_mb=4096 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$findings/$t/" >"$work/$t.log" 2>&1; then
    local runs
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t.log" | grep -o '[0-9]*$' || echo "?")
    echo "ok   fuzz $t: $runs inputs, ${#regressions[@]} reproducers: clean" > "$verdict"
  else
    { echo "FAIL fuzz $t: found a problem (input in $findings/$t/, log $work/$t.log)"; tail -n 30 "$work/$t.log"; } > "$verdict"
  fi
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(topology workload model nccl_log measurements validation_runs serving_trace fleet flow_list scaling_measurements)
# One target per core at a time.
jobs_max="$(nproc)"
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  run_target "$t" &
done
wait
failed=()
for t in "${targets[@]}"; do
  cat "$work/$t.verdict"
  grep -q '^ok ' "$work/$t.verdict" || failed+=("$t")
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: problems in ${failed[*]}" >&2; exit 1; }
