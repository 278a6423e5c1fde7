#!/usr/bin/env bash
# Rewrites the golden transcripts in tests/golden/ from the current build (release preset).
# Read the diff (git diff tests/golden) before committing: every change must be explained.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash tools/build.sh release >/dev/null
PARALLAX_REFRESH_GOLDEN=1 ctest --preset release -R '^golden\.'
