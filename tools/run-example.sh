#!/usr/bin/env bash
# The main job on a bundled example: builds Parallax, then simulates one training iteration of
# Llama-3 70B on 64 DGX H100 nodes (TP 8 · PP 4 · DP 16, 1F1B, ZeRO-1, sequence 8192): iteration
# time, tokens/s, MFU, where the time goes per pipeline stage and memory per GPU. Then the
# all_reduce_perf table Parallax predicts for two of those nodes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
echo "building Parallax (release preset; the first build takes a few minutes)..." >&2
bash tools/build.sh release >/dev/null
parallax=build/release/tools/parallax
"$parallax" train workloads/train/llama3-70b-64xdgx-h100.json
echo
"$parallax" collective --topology topologies/dgx-h100.json --nodes 2 --gpus 16 --op all_reduce -b 8 -e 1G -f 4
