#!/bin/bash
# Where a drain's time goes, by system call (strace -c -w: wall time inside
# each call), next to cp + sync of the same bytes. Three rounds. Strace slows
# both sides (cp of the sparse small-case file most: 80,000 traced calls), so
# read the shares, not the totals; bench/drain_vs_cp.py gives the throughput.
#
#   bench/drain_profile.sh DIR large|small
#
# large: 1 GiB, one epoch, 8 MiB writes; small: 16 epochs of 1,000 extents of
# 4..64 KiB (the cases of bench/drain_vs_cp.py). Needs ~3 GiB in DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:?DIR}; CASE=${2:?large|small}
case $CASE in
  large) ARGS=(1024 8192 1) ;;
  small) ARGS=(1000 16 7) ;;
  *) echo "case: large or small" >&2; exit 2 ;;
esac
W=$(mktemp -d "$DIR/paralog-prof-XXXXXX")
trap 'rm -rf "$W"' EXIT
cp "$ROOT/target/release/paralog" "$ROOT/target/release/libparalog_capture.so" "$W/"
cc -O2 -o "$W/w" "$ROOT/bench/drain_writer.c"
cd "$W"
mkdir pfs ref remote dst
./w "$CASE" ref/f "${ARGS[@]}" >/dev/null
summary() { awk 'NR>2 && $2+0>0.005 && $NF!="total" {printf "%s %.3f s (%d calls), ", $NF, $2, $4}' "$1"; }
for i in 1 2 3; do
  rm -rf remote/* local dst/*
  LD_PRELOAD=$W/libparalog_capture.so PARALOG_PREFIX=$W/pfs PARALOG_LOCAL=$W/local PARALOG_JOB=j \
    ./w "$CASE" pfs/f "${ARGS[@]}" >/dev/null
  sleep 1
  s=$(date +%s.%N)
  strace -f -c -w -o st.txt ./paralog recover --local local --remote "$W/remote" --job j >/dev/null
  e=$(date +%s.%N)
  echo "recover  $(echo "$e - $s" | bc) s: $(summary st.txt)"
  cmp remote/f ref/f
  sleep 1
  s=$(date +%s.%N)
  strace -f -c -w -o st.txt sh -c 'cp ref/f dst/f; sync dst/f dst'
  e=$(date +%s.%N)
  echo "cp+sync  $(echo "$e - $s" | bc) s: $(summary st.txt)"
done
