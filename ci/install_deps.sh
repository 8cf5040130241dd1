#!/usr/bin/env bash
# Installs the Debian packages horovodlite needs, if any are missing
# (apt-get update first). Safe to run again: does nothing when all are present.
set -euo pipefail

PACKAGES=(
  build-essential cmake git ccache libssl-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libcxxopts-dev nlohmann-json3-dev
  libtorch-dev python3-torch libopenblas0-pthread
  python3-dev python3-pip python3-venv pybind11-dev python3-pytest python3-numpy python3-matplotlib
  python3-mpi4py iproute2 clang-format
  python3-sklearn libgloo-dev openjdk-17-jre-headless
  slurm-wlm munge
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
