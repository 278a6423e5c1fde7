#!/usr/bin/env bash
# Runs a command and checks its exit status and its stderr, for CTest tests of the harnesses'
# failure paths (no GPU → 3, bad arguments → 2): the status must be exactly EXPECTED and stderr
# exactly one line matching the extended regular expression PATTERN.
# Usage: check-exit.sh EXPECTED PATTERN COMMAND [ARGS...]
set -u
expected=$1
pattern=$2
shift 2
err=$(mktemp)
trap 'rm -f "$err"' EXIT
"$@" >/dev/null 2>"$err"
status=$?
fail() {
  echo "check-exit: $1" >&2
  echo "--- command: $*" >&2
  echo "--- stderr:" >&2
  cat "$err" >&2
  exit 1
}
[ "$status" -eq "$expected" ] || fail "exit status $status, expected $expected"
lines=$(grep -c '' "$err")
[ "$lines" -eq 1 ] || fail "stderr has $lines lines, expected one"
grep -Eq -- "$pattern" "$err" || fail "stderr does not match: $pattern"
echo "ok: exit $status: $(cat "$err")"
