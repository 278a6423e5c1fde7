#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds the release preset and runs every
# test with CTest; then does the same under AddressSanitizer + UndefinedBehaviorSanitizer and
# fuzzes every input parser for a few seconds (tools/fuzz.sh).
# Pass --release-only to skip the sanitizer pass.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
presets=(release asan)
if [ "${1:-}" = "--release-only" ]; then
  presets=(release)
fi
for preset in "${presets[@]}"; do
  echo "== building and testing preset: $preset"
  bash tools/build.sh "$preset"
  # The sanitizer pass leaves out the longest end-to-end examples (label `long`), which the
  # release pass has run.
  skip=()
  [ "$preset" = release ] || skip=(-LE long)
  ctest --preset "$preset" -j "$(nproc)" "${skip[@]}"
done
if [ "${presets[*]}" != release ]; then
  # Every parser fuzzed briefly on its corpus after replaying the kept reproducers (the asan
  # build has the targets; tools/fuzz.sh with a larger FUZZ_SECONDS is the longer campaign).
  echo "== fuzzing each parser on ${FUZZ_RUNS:-2000} inputs (seed 1: the same inputs every run)"
  FUZZ_RUNS="${FUZZ_RUNS:-2000}" bash tools/fuzz.sh
fi
