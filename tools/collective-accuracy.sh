#!/usr/bin/env bash
# Accuracy of `parallax collective --compare` on every bundled nccl-tests log, each against the
# bundled preset that matches where it was measured (no fitting). Prints, per log, the median
# |busbw error| over sizes >= 64 MiB and the ratio predicted/measured of the smallest size's time.
# Usage: tools/collective-accuracy.sh [path/to/parallax]
set -euo pipefail
cd "$(dirname "$0")/.."
cli="${1:-build/release/tools/parallax}"
[[ -x "$cli" ]] || { echo "build first: bash tools/build.sh (no $cli)" >&2; exit 1; }
logs=tests/data/nccl-tests
# log file                                          preset
pairs=(
  "dgx-h100-8gpu-1node-allreduce.txt                 dgx-h100"
  "oci-a100-40gb-8gpu-1node-allreduce.txt            dgx-a100-40gb"
  "crusoe-a100-80gb-2node-16gpu-ib-allreduce.txt     dgx-a100"
  "aws-p5-h100-2node-16gpu-efa-allreduce-nccl2.18.5.txt aws-p5"
  "pcie-1node-2x-rtx2080ti-allreduce.txt             pcie-2gpu-rtx2080ti"
  "pcie-1node-2x-rtx2080ti-allgather.txt             pcie-2gpu-rtx2080ti"
  "pcie-1node-2x-rtx2080ti-alltoall.txt              pcie-2gpu-rtx2080ti"
  "pcie-1node-2x-rtx2080ti-broadcast.txt             pcie-2gpu-rtx2080ti"
  "pcie-1node-2x-rtx2080ti-reduce.txt                pcie-2gpu-rtx2080ti"
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-52s %-20s %16s %18s\n' "log" "preset" "busbw err >=64MiB" "small time pred/meas"
for pair in "${pairs[@]}"; do
  read -r log preset <<<"$pair"
  "$cli" collective --topology "topologies/$preset.json" --compare "$logs/$log" --json "$tmp/out.json" > /dev/null
  python3 - "$tmp/out.json" "$log" "$preset" <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
large = [abs(r["busbw_error"]) for r in rows if r["size_bytes"] >= 64 << 20]
small = rows[0]
ratio = small["time_us"] / small["measured_time_us"]
med = "%.1f%%" % (100 * statistics.median(large)) if large else "n/a"
print("%-52s %-20s %16s %17.2fx" % (sys.argv[2], sys.argv[3], med, ratio))
PY
done
