#!/usr/bin/env bash
# The serving simulator's speed benchmark (its target: under 30 s on one core and under 2 GiB):
# one million requests of the Azure 2023 conversation trace (repeated end to end, 30× its own
# rate, ~160 requests/s) on 64 Llama-3 70B TP4 instances on 32 DGX H100 nodes, cache-aware
# routing. Prints the simulator's summary, then wall time and peak memory (GNU time).
# Usage: bench/serve-1m.sh [PATH/TO/parallax] [REQUESTS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
parallax=${1:-$root/build/release/tools/parallax}
requests=${2:-1000000}
/usr/bin/time -f "wall %e s, peak memory %M KiB" "$parallax" serve "$root/workloads/serve/llama3-70b-64xtp4-32xdgx-h100.json" \
  --replay "$root/tests/data/serving-traces/azure-llm-2023-conv.csv" --rate-scale 30 --requests "$requests"
