#!/usr/bin/env bash
# CTest check of `mpirun -np 2 parallax search`: two ranks on one host give the same ranking and
# counts, byte for byte, as one process. Usage: search-mpi-test.sh MPIEXEC PARALLAX WORKLOAD SCRATCH
set -euo pipefail
mpiexec=$1
parallax=$2
workload=$3
scratch=$4
mkdir -p "$scratch"
# Sanitized builds: Open MPI's own leaks from MPI_Init/MPI_Finalize are suppressed.
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$(cd "$(dirname "$0")/.." && pwd)/calibrate/harness/lsan-mpi.supp"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
launcher=("$mpiexec")
if "$mpiexec" --version 2>&1 | grep -Eq "Open MPI|OpenRTE"; then
  launcher+=(--allow-run-as-root --oversubscribe)
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
fi
# A small space: the sanitized build's full unwinding on every allocation (for the suppressions
# above) makes a whole default search take minutes.
echo '{"zero": [1, 3], "micro_batch": [1, 4], "recompute": ["none"], "schedule": ["1f1b", "zb_h1"]}' > "$scratch/space.json"
args=(search "$workload" --space "$scratch/space.json" --jobs 1 --top 5)
"$parallax" "${args[@]}" --json "$scratch/one.json" > "$scratch/one.txt"
"${launcher[@]}" -np 2 "$parallax" "${args[@]}" --json "$scratch/two.json" > "$scratch/two.txt"
cmp "$scratch/one.json" "$scratch/two.json"
cmp "$scratch/one.txt" "$scratch/two.txt"
echo "2 MPI ranks rank as one process: $(tail -1 "$scratch/two.txt")"
