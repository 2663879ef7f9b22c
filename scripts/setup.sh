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
  libhdf5-mpich-dev libhdf5-openmpi-dev hdf5-tools libhdf5-doc
  libpnetcdf-dev
  python3-mpi4py python3-h5py-mpi python3-numpy python3-pytest python3-pytest-mpi
  iproute2 util-linux bc strace rsync zip unzip
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
# A toolchain older than the workspace's rust-version (Cargo.toml: the
# dependencies' minimum) is brought up to date when rustup manages it.
export PATH="$HOME/.cargo/bin:$PATH"
need=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$(dirname "$0")/../Cargo.toml")
have=$(rustc --version 2>/dev/null | awk '{print $2}')
if [ -n "$need" ] && [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
  if command -v rustup >/dev/null 2>&1; then
    echo "setup: rustc $have is older than the workspace's $need: rustup update stable"
    rustup update stable --no-self-update >/dev/null
  else
    echo "setup: rustc $have is older than $need (Cargo.toml rust-version) and rustup is absent: install Rust $need or newer" >&2
    exit 1
  fi
fi
# Test-only tools, kept inside the clone (target/): a real S3 server
# (MinIO, built from source with Go) and a standard S3 client (awscli).
if [ "${1:-}" = "--test" ]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  # A real Slurm for tests/slurm (the test configures and starts it).
  if [ ! -x /usr/sbin/slurmd ] || [ ! -x /usr/sbin/munged ]; then
    echo "setup: installing slurm-wlm and munge"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
  fi
  # Debian's Chromium: tests/correctness/report.py loads the HTML report
  # in it, headless.
  if ! command -v chromium >/dev/null; then
    echo "setup: installing chromium"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  fi
  # PnetCDF's example and test programs (tests/correctness/pnetcdf_examples.py): the
  # source of the libpnetcdf-dev Debian installs, from Debian's archive,
  # checked against the hash in its .dsc.
  PNETCDF=pnetcdf-1.12.3
  if [ ! -d "$root/target/$PNETCDF/test/testcases" ]; then
    echo "setup: fetching $PNETCDF's examples and test programs (Debian source)"
    if ! command -v curl >/dev/null || ! command -v xz >/dev/null; then
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl ca-certificates xz-utils >/dev/null
    fi
    tarball="$root/target/${PNETCDF/-/_}.orig.tar.xz"
    curl -sSfL -o "$tarball" "http://deb.debian.org/debian/pool/main/p/pnetcdf/${PNETCDF/-/_}.orig.tar.xz"
    echo "8f54023ffbbd3c8137e5422b44e32324113d5690f1da0cb7ecd5842c2de850a9  $tarball" | sha256sum -c --quiet
    tar -xJf "$tarball" -C "$root/target" "$PNETCDF/examples/C" "$PNETCDF/test/common" "$PNETCDF/test/testcases" "$PNETCDF/test/nonblocking"
    rm -f "$tarball"
  fi
  MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
  if [ ! -x "$root/target/go/bin/minio" ]; then
    GO=$(command -v go || true)
    [ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; }
    [ -n "$GO" ] || { echo "setup: the S3 tests need Go (>= 1.24) to build MinIO; install it and run again" >&2; exit 1; }
    echo "setup: building MinIO $MINIO_VERSION (a few minutes)"
    GOPATH="$root/target/go" GOBIN="$root/target/go/bin" GOFLAGS=-modcacherw "$GO" install "github.com/minio/minio@$MINIO_VERSION"
  fi
  if [ ! -d "$root/target/pylib/awscli" ]; then
    echo "setup: installing awscli into target/pylib"
    PY=$(command -v python3)
    if ! "$PY" -m pip --version >/dev/null 2>&1; then
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
      PY=/usr/bin/python3
    fi
    "$PY" -m pip install -q --disable-pip-version-check --break-system-packages --target "$root/target/pylib" awscli==1.46.3
  fi
  # mpi4py's own MPI-IO tests (tests/correctness/library_suites.py): the
  # sdist of the version Debian's python3-mpi4py is, checked by its hash.
  MPI4PY=mpi4py-3.1.4
  if [ ! -f "$root/target/$MPI4PY/test/test_io.py" ]; then
    echo "setup: fetching $MPI4PY's tests (PyPI sdist)"
    PY=$(command -v python3)
    "$PY" -m pip --version >/dev/null 2>&1 || PY=/usr/bin/python3
    "$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$root/target" "${MPI4PY/-/==}"
    echo "17858f2ebc623220d0120d1fa8d428d033dde749c4bc35b33d81a66ad7f93480  $root/target/$MPI4PY.tar.gz" | sha256sum -c --quiet
    tar -xzf "$root/target/$MPI4PY.tar.gz" -C "$root/target" "$MPI4PY/test"
    rm -f "$root/target/$MPI4PY.tar.gz"
  fi
  # zarr-python 3 and tensorstore for tests/objects (the Zarr views'
  # readers), from PyPI into a virtual environment: Debian's python3-zarr is 2.x (Zarr v2 only);
  # with s3fs, zarr-python's store for the views on s3:// (tensorstore has its own s3 driver).
  # Pinned in tests/objects/requirements.txt; redone when that file changes.
  venv="$root/target/objects-venv"
  req="$root/tests/objects/requirements.txt"
  if ! cmp -s "$req" "$venv/requirements.txt"; then
    echo "setup: installing zarr-python, tensorstore and s3fs into target/objects-venv"
    if ! /usr/bin/python3 -c 'import ensurepip' 2>/dev/null; then
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    fi
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    cp "$req" "$venv/requirements.txt"
  fi
fi
echo "setup: ok"
