#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds the release preset and runs every
# test with CTest; then does the same under AddressSanitizer + UndefinedBehaviorSanitizer.
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
  ctest --preset "$preset" -j "$(nproc)"
done
