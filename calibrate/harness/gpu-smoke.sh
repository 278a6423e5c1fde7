#!/usr/bin/env bash
# One pass of parallax-nccl-bench on a borrowed GPU machine:
#   1. the machine: nvidia-smi, the binary's libraries (libnccl.so.2 and libcublasLt are looked
#      for where CUDA, the system and Python wheels keep them, and LD_LIBRARY_PATH is set);
#   2. collectives on the `self` group (one GPU: NCCL's launch cost), every collective,
#      8 B … 1 GiB ×2, -w 5 -n 20, out of place only (in place, one rank moves nothing);
#   3. the cuBLASLt GEMM sweep (bf16, and fp8 with and without fast accumulation where the GPU
#      has it), after ~1 s of untimed products that bring the clocks up;
#   4. the memcpy sweep (d2d, h2d, d2h; 1 MiB … 4 GiB);
#   5. where the machine has PyTorch with CUDA, the attention core (calibrate/scripts/
#      attention-bench.py: the fused kernels, forward and backward, head dims 64 and 128,
#      1k–16k tokens).
# After each part, the SM and memory clocks, power, temperature and throttle reasons go into
# machine.txt, so that a slow point can be told from a throttled GPU.
#
# Time on one H200: about 2 minutes (collectives ~15 s, GEMMs ~60 s, copies ~10 s, attention
# ~20 s, from the FLOPs and bytes of the sweeps at datasheet-like rates; not yet timed on one).
# Hard ceiling: under 7 minutes (every part has its own --time-limit and a `timeout` behind it
# inside a 390 s budget, and stops cleanly keeping what it measured); a part that fails does not
# stop the others. A collective point still running after 20 s (--point-timeout) is reported by name
# as a hang and its communicator aborted, well inside its part's budget.
#
# What the output calibrates: the GEMM efficiency table (bf16, fp8 fast and precise, transformer
# and MoE shapes) and the attention kernels' rates (`parallax train --gemm-table`), HBM bandwidth (d2d) and host-copy bandwidth
# over PCIe or C2C (h2d, d2h), and NCCL's one-rank launch cost. What it cannot: any NVLink,
# NVLS or network α/β — those need two or more GPUs (pair-intra, node) or nodes (one-per-node).
#
# Everything lands in OUT_DIR, seven files at most: measurements.jsonl (every part, FORMAT.md
# lines), collectives.txt, gemm.txt, memcpy.txt, attention.txt (each part's tables and messages,
# stdout and stderr together), machine.txt, summary.txt.
# Usage: gpu-smoke.sh PATH/TO/parallax-nccl-bench OUT_DIR
set -u

if [ $# -ne 2 ]; then
  echo "usage: $0 PATH/TO/parallax-nccl-bench OUT_DIR" >&2
  exit 2
fi
bin=$1
out=$2
mkdir -p "$out" || exit 2
start=$(date +%s)
budget=390  # seconds for the whole script: 7 minutes less a margin
point_timeout=20
results=()

log() { echo "[gpu-smoke +$(($(date +%s) - start))s] $*" | tee -a "$out/summary.txt" >&2; }
left() { echo $((budget - ($(date +%s) - start))); }

if [ ! -x "$bin" ]; then
  log "not an executable: $bin"
  exit 2
fi

# The GPUs' clocks, power, temperature and throttle reasons, appended to machine.txt.
# nvidia-smi renamed clocks_throttle_reasons to clocks_event_reasons; either is asked for.
record_clocks() {
  local fields=index,name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu
  {
    echo "== clocks $1: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    timeout 10 nvidia-smi --query-gpu="$fields,clocks_event_reasons.active" --format=csv 2>/dev/null ||
      timeout 10 nvidia-smi --query-gpu="$fields,clocks_throttle_reasons.active" --format=csv 2>&1 ||
      echo "(nvidia-smi failed or is missing)"
  } >>"$out/machine.txt" 2>&1
}

# ---- 1. the machine and the libraries ---------------------------------------------------------
{
  echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(hostname)"
  echo "== uname: $(uname -a)"
  echo "== glibc: $(ldd --version 2>&1 | head -1)"
  echo "== nvidia-smi"
  timeout 30 nvidia-smi 2>&1 || echo "(nvidia-smi failed or is missing)"
  echo "== nvidia-smi topo -m"
  timeout 30 nvidia-smi topo -m 2>&1 || true
  echo "== /proc/driver/nvidia/version"
  cat /proc/driver/nvidia/version 2>&1 || true
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt" >&2
record_clocks "before the run (idle)"

# The directory of a library the binary needs: from Python's NVIDIA wheels (nvidia/nccl/lib,
# nvidia/cublas/lib, nvidia/cu13/lib, ...), the loader cache, or a bounded search of the usual
# roots; empty when nowhere to be found.
find_library_dir() {
  local name=$1 py nv hit
  for py in python3 /opt/torch/.venv/bin/python3 /opt/*/.venv/bin/python3 /usr/local/bin/python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    nv=$(timeout 20 "$py" -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null) || continue
    [ -n "$nv" ] || continue
    hit=$(find "$nv" -maxdepth 4 -name "$name*" \( -type f -o -type l \) -print -quit 2>/dev/null)
    if [ -n "$hit" ]; then
      dirname "$hit"
      return
    fi
  done
  hit=$(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n { print $NF; exit }')
  if [ -n "$hit" ]; then
    dirname "$hit"
    return
  fi
  local roots=()
  for r in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /opt /usr/local /usr/lib \
           /root /home; do
    [ -d "$r" ] && roots+=("$r")
  done
  hit=$(timeout 40 find "${roots[@]}" -maxdepth 8 -name "$name*" \( -type f -o -type l \) -print -quit 2>/dev/null)
  [ -n "$hit" ] && dirname "$hit"
}

missing=$(ldd "$bin" 2>/dev/null | awk '/not found/ { print $1 }')
for lib in $missing; do
  dir=$(find_library_dir "$lib")
  if [ -n "$dir" ]; then
    log "found $lib in $dir"
    export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    log "did not find $lib anywhere (looked in Python wheels, the loader cache, /usr/local/cuda, /opt, /usr, /root, /home)"
  fi
done
{
  echo "== LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  echo "== ldd $bin"
  ldd "$bin" 2>&1
  echo "== $bin --version"
  "$bin" --version 2>&1
} >>"$out/machine.txt" 2>&1
tail -n 20 "$out/machine.txt" >&2
if ldd "$bin" 2>/dev/null | grep -q "not found"; then
  log "the binary still misses libraries (see machine.txt); trying anyway"
fi

# NCCL says why it fails at WARN; the setting is recorded in the meta line's env.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

# ---- 2-4. the measurements ------------------------------------------------------------------
# part NAME PLANNED_SECONDS ARGS...: runs the program (`runner`: the binary, or the attention
# script) with --time-limit min(PLANNED, what is left less a grace), SIGINT at the limit + 20 s
# (it stops after the current point), KILL 15 s later; its stdout and stderr go to NAME.txt.
runner=("$bin")
part() {
  local name=$1 planned=$2
  shift 2
  local remaining limit status
  remaining=$(left)
  limit=$((remaining - 40 < planned ? remaining - 40 : planned))
  if [ "$limit" -lt 10 ]; then
    log "$name: skipped, only ${remaining}s left"
    results+=("$name: skipped (no time left)")
    return
  fi
  log "$name: starting (--time-limit $limit): ${runner[*]} $* -o $out/measurements.jsonl"
  timeout -s INT -k 15 $((limit + 20)) "${runner[@]}" "$@" --time-limit "$limit" -o "$out/measurements.jsonl" \
    >"$out/$name.txt" 2>&1
  status=$?
  tail -n 5 "$out/$name.txt" >&2
  case $status in
    0) results+=("$name: ok") ;;
    124 | 130) results+=("$name: stopped by its time guard (exit $status); what it measured is kept") ;;
    137) results+=("$name: killed after its time guard (exit 137)") ;;
    3) results+=("$name: no usable GPU (exit 3; see $name.txt)") ;;
    *) results+=("$name: FAILED (exit $status; see $name.txt)") ;;
  esac
  log "$name: exit $status"
  record_clocks "after $name (exit $status)"
}

part collectives 100 --groups self --placement out --ops all -b 8 -e 1G -f 2 -w 5 -n 20 \
  --point-timeout "$point_timeout"
part gemm 150 --no-collectives --gemm -w 5 -n 20
part memcpy 70 --no-collectives --memcpy --memcpy-max 4G -w 3 -n 10

# The attention core needs PyTorch: the first Python that imports it with a CUDA device.
attention_python=""
for py in python3 /opt/torch/.venv/bin/python3 /opt/*/.venv/bin/python3 /usr/local/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  if timeout 60 "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    attention_python=$py
    break
  fi
done
if [ -n "$attention_python" ]; then
  runner=("$attention_python" "$(dirname "$0")/../scripts/attention-bench.py")
  part attention 40 --head-dims 64,128 --seqs 1024,2048,4096,8192,16384 -w 3 -n 10
else
  log "attention: skipped, no Python with PyTorch and a CUDA device"
  results+=("attention: skipped (no PyTorch)")
fi

# ---- summary ----------------------------------------------------------------------------------
{
  echo "== results"
  printf '%s\n' "${results[@]}"
  if [ -f "$out/measurements.jsonl" ]; then
    for kind in meta collective gemm memcpy attention; do
      echo "$kind lines: $(grep -c "\"kind\":\"$kind\"" "$out/measurements.jsonl")"
    done
  fi
  echo "elapsed: $(($(date +%s) - start)) s"
} | tee -a "$out/summary.txt" >&2
for r in "${results[@]}"; do
  case "$r" in *FAILED* | *"no usable GPU"* | *killed*) exit 1 ;; esac
done
exit 0
