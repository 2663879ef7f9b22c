#!/usr/bin/env bash
# Installs what paralog needs on Debian 12 (idempotent). Run as root or with sudo available.
# Each step checks first, so a second run costs seconds.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install packages" >&2; exit 1; }
  SUDO="sudo"
fi

PKGS=(
  build-essential pkg-config gfortran cmake
  mpich libmpich-dev
  openmpi-bin libopenmpi-dev
  libhdf5-mpich-dev libhdf5-openmpi-dev hdf5-tools
  libpnetcdf-dev
  python3-mpi4py python3-h5py-mpi python3-numpy
  iproute2 util-linux bc
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Rust toolchain (stable) if absent.
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  echo "setup: installing the Rust toolchain with rustup"
  if ! command -v curl >/dev/null; then
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl ca-certificates >/dev/null
  fi
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain stable -c rustfmt,clippy
fi
echo "setup: ok"
