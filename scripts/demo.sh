#!/usr/bin/env bash
# The main job: a real MPI program (examples/demo/checkpoint.c, 4 ranks, MPICH)
# writes a shared file directly with MPI-IO, and again under paralog; the two
# files must be equal byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/paralog-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/direct" target/demo
mpicc.mpich -O2 -Wall -o target/demo/checkpoint-mpich examples/demo/checkpoint.c
echo "demo: direct MPI-IO run (MPICH, 4 ranks)"
mpirun.mpich -n 4 target/demo/checkpoint-mpich "$work/direct/field.dat"
ls -l "$work/direct/field.dat"
if [ ! -f target/release/libparalog_capture.so ] || ! nm -D --defined-only target/release/libparalog_capture.so | grep -qw pwrite64; then
  echo "demo: the capture library is not built out yet (issue 3), so nothing ran under paralog."
  echo "demo: what exists today is the log core: see 'make test' and 'paralog inspect/materialize'."
  exit 0
fi
