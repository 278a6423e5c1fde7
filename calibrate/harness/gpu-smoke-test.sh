#!/usr/bin/env bash
# CTest check of gpu-smoke.sh without a GPU: a stand-in for parallax-nccl-bench records the
# arguments of each part and writes what the real one would (a line per part into -o, tables on
# stdout, notes on stderr). Checks: at most six files in the output folder, each part's stdout
# and stderr in one file, a point timeout well inside each part's time limit, the collective
# part out of place on the one-rank group, and the summary's line counts.
# Usage: gpu-smoke-test.sh GPU_SMOKE_SCRIPT SCRATCH_DIR
set -euo pipefail
smoke=$1
scratch=$2
rm -rf "$scratch"
mkdir -p "$scratch/bin"
fake=$scratch/bin/parallax-nccl-bench
calls=$scratch/calls.txt
cat >"$fake" <<FAKE
#!/usr/bin/env bash
if [ "\${1:-}" = "--version" ]; then echo "parallax-nccl-bench 0.1.0 (stand-in)"; exit 0; fi
echo "\$*" >>"$calls"
out=""
prev=""
for a in "\$@"; do
  [ "\$prev" = "-o" ] && out=\$a
  prev=\$a
done
kind=collective
case " \$* " in *" --gemm "*) kind=gemm ;; *" --memcpy "*) kind=memcpy ;; esac
echo '{"kind":"meta","run":"r"}' >>"\$out"
echo "{\"kind\":\"\$kind\",\"run\":\"r\"}" >>"\$out"
echo "# a table of \$kind"
echo "parallax-nccl-bench: a note on stderr about \$kind" >&2
FAKE
chmod +x "$fake"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
out=$scratch/out
bash "$smoke" "$fake" "$out" >"$scratch/stderr" 2>&1 || fail "gpu-smoke.sh exited $? (see $scratch/stderr)"

files=$(find "$out" -type f | wc -l)
[ "$files" -le 7 ] || fail "$files files in the output folder, at most 7 allowed: $(ls "$out" | tr '\n' ' ')"
for f in measurements.jsonl machine.txt summary.txt collectives.txt gemm.txt memcpy.txt; do
  [ -f "$out/$f" ] || fail "no $f"
done
grep -q "a note on stderr about gemm" "$out/gemm.txt" || fail "gemm.txt lacks the part's stderr"
grep -q "a table of gemm" "$out/gemm.txt" || fail "gemm.txt lacks the part's stdout"

[ "$(grep -c '' "$calls")" -eq 3 ] || fail "expected three parts, got: $(cat "$calls")"
collectives=$(grep -- "--groups self" "$calls") || fail "no collective part on the self group"
case " $collectives " in *" --placement out "*) ;; *) fail "the one-rank collectives are not out of place: $collectives" ;; esac
timeout_s=$(echo "$collectives" | sed -n 's/.*--point-timeout \([0-9]*\).*/\1/p')
limit_s=$(echo "$collectives" | sed -n 's/.*--time-limit \([0-9]*\).*/\1/p')
[ -n "$timeout_s" ] || fail "the collective part has no --point-timeout: $collectives"
[ "$timeout_s" -le 30 ] || fail "--point-timeout $timeout_s s: a hang would not be named before the part is killed"
[ "$timeout_s" -lt "$limit_s" ] || fail "--point-timeout $timeout_s s is not inside the part's --time-limit $limit_s s"

grep -q "^gemm lines: 1$" "$out/summary.txt" || fail "the summary does not count the gemm line"
grep -q "== clocks after memcpy" "$out/machine.txt" || fail "no clock record after the memcpy part"
echo "ok: $files files; point timeout ${timeout_s}s inside a ${limit_s}s part"
