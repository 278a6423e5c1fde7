#!/usr/bin/env bash
# Golden transcript check: runs a command and compares its standard output with an expected
# file, printing "expected ... / got ..." as a unified diff when they differ. With
# PARALLAX_REFRESH_GOLDEN=1 it rewrites the expected file instead (tools/refresh-golden.sh).
# Usage: check.sh EXPECTED_FILE COMMAND [ARG...]
set -uo pipefail
expected="$1"
shift
got="$(mktemp)"
trap 'rm -f "$got"' EXIT
"$@" >"$got"
status=$?
if [ $status -ne 0 ]; then
  echo "command failed with exit code $status: $*" >&2
  exit 1
fi
if [ "${PARALLAX_REFRESH_GOLDEN:-0}" = "1" ]; then
  cp "$got" "$expected"
  echo "refreshed $expected"
  exit 0
fi
if ! diff -u --label "expected ($expected)" --label "got ($*)" "$expected" "$got"; then
  exit 1
fi
