#!/usr/bin/env bash
# CTest checks of parallax-mpi-bench over shared memory on one host (calibrate/FORMAT.md lines):
#   np2     2 ranks, 7 collectives × 9 sizes (8 B … 512 KiB, ×4) × out/in-place = 126 points, less
#           all_gather, reduce_scatter and all_to_all at 8 B (4 B per rank is under nccl-tests'
#           16 B) in both placements: 120 lines, a meta line, every line JSON, one line per point,
#           and nccl-tests tables on stdout;
#   resume  the same command twice: the second run appends a meta line and no collective line;
#   repair  a file cut mid-line (a killed run) with its last points missing: the partial line is
#           dropped, the missing points measured, none twice;
#   kill    the job SIGKILLed once the file holds 1, 17, 58 and 103 points, then rerun: every
#           point once, none lost;
#   np4     4 ranks over groups all, pair-intra, one-per-node, self (see the count below);
#   fault   rank 1's warm-up fails (PARALLAX_BENCH_FAULT): the run ends with exit 1 instead of
#           hanging, names the fault, abandons the group, and still measures rank 0 alone.
# Usage: mpi-bench-test.sh MODE MPIEXEC BENCH SCRATCH_DIR
set -euo pipefail
mode=$1
mpiexec=$2
bench=$3
scratch=$4
rm -rf "$scratch"
mkdir -p "$scratch"
out=$scratch/measurements.jsonl

# In sanitized builds: Open MPI's own leaks from MPI_Init/MPI_Finalize are suppressed (see the
# file); full unwinding lets the suppressions see through its frame-pointer-less libraries.
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$(cd "$(dirname "$0")" && pwd)/lsan-mpi.supp"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"

launcher=("$mpiexec")
if "$mpiexec" --version 2>&1 | grep -Eq "Open MPI|OpenRTE"; then
  launcher+=(--allow-run-as-root --oversubscribe)
  # Containers often forbid the cross-memory attach Open MPI's shared-memory transport uses.
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
fi

run() {  # run NP [ARGS...]: the sweep of this test, into $out
  local np=$1
  shift
  "${launcher[@]}" -np "$np" "$bench" -n 5 -w 2 -o "$out" "$@" >"$scratch/stdout" 2>"$scratch/stderr" || {
    echo "parallax-mpi-bench failed (exit $?); stderr:" >&2
    cat "$scratch/stderr" >&2
    exit 1
  }
}
fail() {
  echo "FAIL: $*" >&2
  echo "--- stderr of the last run:" >&2
  cat "$scratch/stderr" >&2
  exit 1
}
count() {
  if [ -f "$out" ]; then grep -c "\"kind\":\"$1\"" "$out" || true; else echo 0; fi
}
expect_lines() {  # expect_lines KIND N
  local got
  got=$(count "$1")
  [ "$got" -eq "$2" ] || fail "$got $1 lines in $out, expected $2"
}
# One line per point: the lines less their run id and measured values must all differ.
expect_unique() {
  local dups
  dups=$(grep '"kind":"collective"' "$out" | sed -e 's/"run":"[^"]*",//' -e 's/,"warmup".*//' | sort | uniq -d)
  [ -z "$dups" ] || fail "points measured twice: $dups"
}
expect_json() {
  if command -v python3 >/dev/null; then
    python3 -c 'import json,sys
for n, line in enumerate(open(sys.argv[1]), 1):
    assert line.endswith("\n"), f"line {n} has no newline"
    json.loads(line)' "$out" || fail "a line is not JSON"
  fi
}

sweep2=(-b 8 -e 1M -f 4)
case "$mode" in
  np2)
    run 2 "${sweep2[@]}"
    expect_lines meta 1
    expect_lines collective 120
    expect_unique
    expect_json
    grep -q '"mpi":"' "$out" || fail "the meta line names no MPI library"
    grep -q '"cpu":"' "$out" || fail "the meta line names no CPU"
    grep -q "^# Collective test starting: all_reduce_perf" "$scratch/stdout" || fail "no nccl-tests table on stdout"
    [ "$(grep -c '^ *524288 ' "$scratch/stdout")" -eq 7 ] || fail "expected one 512 KiB row per collective"
    ;;
  resume)
    run 2 "${sweep2[@]}"
    run 2 "${sweep2[@]}"
    expect_lines meta 2
    expect_lines collective 120
    expect_unique
    grep -q "resuming" "$scratch/stderr" || fail "the second run did not say it resumed"
    grep -q "measured 0 points" "$scratch/stderr" || fail "the second run measured something"
    ;;
  repair)
    run 2 "${sweep2[@]}"
    # Keep all but the last 20 points, then half of the next line without its newline.
    total=$(grep -c '' "$out")
    head -n $((total - 20)) "$out" >"$scratch/cut"
    sed -n "$((total - 19))p" "$out" | head -c 60 >>"$scratch/cut"
    mv "$scratch/cut" "$out"
    run 2 "${sweep2[@]}"
    grep -q "partial last line" "$scratch/stderr" || fail "the partial line was not reported"
    grep -q "measured 20 points" "$scratch/stderr" || fail "expected the 20 missing points to be measured"
    expect_lines meta 2
    expect_lines collective 120
    expect_unique
    expect_json
    ;;
  kill)
    # SIGKILL to the whole job (launcher and ranks, as a batch system's kill would) once the file
    # holds k points, for several k, then the same command again: every point once, none lost.
    for k in 1 17 58 103; do
      rm -f "$out"
      setsid "${launcher[@]}" -np 2 "$bench" -n 500 -w 2 -o "$out" "${sweep2[@]}" >"$scratch/stdout" 2>"$scratch/stderr" &
      job=$!
      while kill -0 "$job" 2>/dev/null && [ "$(count collective)" -lt "$k" ]; do sleep 0.005; done
      # The job's session: the launcher's group and the ranks, which Open MPI's daemon may have
      # put in groups of their own.
      kill -KILL -- "-$job" 2>/dev/null || true
      pkill -KILL -s "$job" 2>/dev/null || true
      wait "$job" 2>/dev/null || true
      # As a user would: rerun once the killed job's processes are gone (a rank still exiting
      # holds the file's lock, and the rerun is refused; on a loaded machine that takes a while).
      # Zombies waiting for a slow init to reap them hold no lock: only live processes count.
      for _ in $(seq 3000); do pgrep -s "$job" -r R,S,D,T,t >/dev/null || break; sleep 0.01; done
      before=$(count collective)
      run 2 "${sweep2[@]}"
      expect_lines collective 120
      expect_unique
      expect_json
      echo "killed at $before points: resumed to 120, none twice"
    done
    ;;
  np4)
    # Sizes 8 B … 4 KiB ×8 (4). Groups: all (4 ranks), pair-intra (2), self (1); one-per-node needs
    # two hosts and is skipped. 7 ops × 4 sizes × 2 = 56 points per group, less all_gather,
    # reduce_scatter and all_to_all at 8 B (under 16 B per rank) in both placements, 6 per group;
    # and on self the in-place points of the 5 ops that move nothing there on one rank: 5 × 4 =
    # 20, of which the 2 at 8 B (all_gather, reduce_scatter) are already gone. 50 + 50 + 32 = 132.
    run 4 -b 8 -e 4K -f 8 --groups all,pair-intra,one-per-node,self
    grep -q "skipping group one-per-node" "$scratch/stderr" || fail "one-per-node should be skipped on one host"
    expect_lines meta 1
    expect_lines collective 132
    expect_unique
    expect_json
    ;;
  fault)
    # Before warm-ups were agreed on, the failing rank skipped the barrier the other waited in
    # and the run hung: the timeout's 124 is the failure this checks for.
    export PARALLAX_BENCH_FAULT=warmup:1
    forward=()
    if "$mpiexec" --version 2>&1 | grep -Eq "Open MPI|OpenRTE"; then forward=(-x PARALLAX_BENCH_FAULT); fi
    status=0
    timeout -k 5 40 "${launcher[@]}" "${forward[@]}" -np 2 "$bench" -n 5 -w 2 -o "$out" --groups all,self \
      --ops all_reduce -b 8 -e 512 -f 4 >"$scratch/stdout" 2>"$scratch/stderr" || status=$?
    [ "$status" -ne 124 ] && [ "$status" -ne 137 ] || fail "the run hung after a failed warm-up (exit $status)"
    [ "$status" -eq 1 ] || fail "exit $status after a failed warm-up, expected 1"
    grep -q "fault injected by PARALLAX_BENCH_FAULT" "$scratch/stderr" || fail "the failing rank's error was not reported"
    grep -q "abandoning group all" "$scratch/stderr" || fail "the group of the failed warm-up was not abandoned"
    grep -q "another rank's warm-up failed" "$scratch/stderr" && fail "a rank reported its peer's failure as its own"
    # self is rank 0 alone: all_reduce out of place at 8, 32, 128 and 512 B (in place moves nothing).
    expect_lines collective 4
    ;;
  *)
    echo "unknown mode $mode" >&2
    exit 2
    ;;
esac
echo "ok: $mode: $(count collective) collective lines in $out"
