#!/usr/bin/env bash
# Installs the Debian packages Parallax builds with, when any is missing (apt-get, through sudo
# when not root). Safe to run again: it does nothing when everything is present.
set -euo pipefail

# openmpi-bin and libopenmpi-dev build parallax-mpi-bench and run its tests (calibrate/harness/);
# gnuplot-nox draws `parallax calibrate compare --plot`; clang builds the libFuzzer targets (fuzz/);
# procps (pgrep, pkill) lets the harness's kill test find a killed MPI job's processes.
packages=(g++ cmake ninja-build nlohmann-json3-dev libcli11-dev libspdlog-dev libboost-graph-dev
          googletest libgtest-dev libgmock-dev libbenchmark-dev openmpi-bin libopenmpi-dev gnuplot-nox
          python3 clang procps)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
