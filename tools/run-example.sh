#!/usr/bin/env bash
# The main job on a bundled example: builds Parallax, then describes a 2-node DGX H100 cluster
# runs a set of contending flows on it with the flow-level network model, and predicts an
# nccl-tests all_reduce_perf sweep on its 16 GPUs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
echo "building Parallax (release preset; the first build takes a few minutes)..." >&2
bash tools/build.sh release >/dev/null
parallax=build/release/tools/parallax
"$parallax" topo show topologies/dgx-h100.json --nodes 2
echo
"$parallax" flows --topology topologies/dgx-h100.json --nodes 2 --flows workloads/flows/dgx-h100-contention.json
echo
"$parallax" collective --topology topologies/dgx-h100.json --nodes 2 --gpus 16 --op all_reduce -b 8 -e 1G -f 4
