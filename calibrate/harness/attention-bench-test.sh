#!/usr/bin/env bash
# CTest check of calibrate/scripts/attention-bench.py on a machine without a usable GPU: --plan
# counts FLOPs as the compute model does (causal forward 2·(s²/2)·heads·batch·(d_qk + d_v)), and a
# measurement run refuses with exit 3 and a clear reason, leaving no output file. Where this
# Python does have PyTorch with a GPU, only the plan is checked.
# Usage: attention-bench-test.sh PYTHON SCRIPT SCRATCH_DIR
set -uo pipefail
python=$1
script=$2
scratch=$3
rm -rf "$scratch"
mkdir -p "$scratch"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
plan=$("$python" "$script" --plan --head-dims 128 --seqs 8192 --heads 16 --tokens 65536) || fail "--plan exited $?"
# batch 8: 2 · 8192²/2 · 16 · 8 · 256 = 2,199,023,255,552
[ "$plan" = '{"batch": 8, "heads": 16, "s": 8192, "d": 128, "flops_forward": 2199023255552.0}' ] ||
  fail "unexpected plan: $plan"
"$python" "$script" --plan --seqs 0 >/dev/null 2>"$scratch/err"
[ $? -eq 2 ] || fail "a bad --seqs did not exit 2"
grep -q "expected comma-separated positive integers" "$scratch/err" || fail "no reason for a bad --seqs: $(cat "$scratch/err")"
if "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  echo "ok: plan (this Python has a GPU: the measurement is not run here)"
  exit 0
fi
"$python" "$script" -o "$scratch/out.jsonl" 2>"$scratch/err"
status=$?
[ $status -eq 3 ] || fail "without a GPU the script exited $status, not 3"
grep -q "attention-bench: no usable GPU: " "$scratch/err" || fail "no reason given: $(cat "$scratch/err")"
[ ! -e "$scratch/out.jsonl" ] || fail "an output file was written without a GPU"
echo "ok: plan, bad arguments, no GPU ($(cat "$scratch/err"))"
