#!/usr/bin/env bash
# The main job: a real MPI program (examples/demo/checkpoint.c, 4 ranks,
# MPICH) writes a shared file with MPI-IO, once directly and once under
# `paralog run`; the remote file must equal the direct one byte for byte.
# Embedded default remote: the prefix itself (a local directory here), so
# the program's file appears at its usual path once the server drained it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/paralog
work=$(mktemp -d /tmp/paralog-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/direct" "$work/pfs" target/demo
mpicc.mpich -O2 -Wall -o target/demo/checkpoint-mpich examples/demo/checkpoint.c

echo "== direct MPI-IO (MPICH, 4 ranks)"
t0=$(date +%s.%N)
mpirun.mpich -n 4 target/demo/checkpoint-mpich "$work/direct/field.dat"
t1=$(date +%s.%N)

echo "== the same program under paralog run (node-local log in $work/local, remote = the prefix)"
$bin run --prefix "$work/pfs" --local "$work/local" --job demo -- \
  mpirun.mpich -n 4 target/demo/checkpoint-mpich "$work/pfs/field.dat"
t2=$(date +%s.%N)

if cmp "$work/direct/field.dat" "$work/pfs/field.dat"; then
  printf 'demo: OK, the drained file equals direct MPI-IO byte for byte (%s bytes); direct %.2fs, paralog run (program and drain) %.2fs\n' \
    "$(stat -c %s "$work/pfs/field.dat")" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
else
  echo "demo: FAILED, the files differ" >&2
  exit 1
fi
