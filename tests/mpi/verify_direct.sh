#!/bin/bash
# verify_direct.sh [WORKDIR]
#
# Checks that every test program is deterministic when run directly (no
# capture): each case runs, per flavour/mode (mpich, openmpi-ompio,
# openmpi-romio321), twice with --snapshot and once without, into separate
# directories; the two --snapshot runs must be byte-identical (all files,
# snapshots included; HDF5 files also pass h5diff -r), the run without
# --snapshot must have the same final files.  Then the modes are compared
# with each other, and programs that write the same bytes by design
# (header_subarray / f_usempi / f_mpif08 / mpi4py_writer after the 64-byte
# header; hdf5_writer / h5py_writer) with each other.
# Needs the programs built (make).  Prints one line per check and exits 1
# if any check failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
work=${1:-$(mktemp -d /tmp/paralog-mpi-verify.XXXXXX)}
mkdir -p "$work"
fails=0
slowest=0 slowest_name=

ok() { printf 'ok    %s\n' "$*"; }
bad() { printf 'FAIL  %s\n' "$*"; fails=$((fails + 1)); }

# case name | program | modes | extra args per mode ("mode=args;...")
cases=(
    "header_subarray|header_subarray|mpich ompio romio321|"
    "noncontig_holes|noncontig_holes|mpich ompio romio321|"
    "size_ops|size_ops|mpich ompio romio321|ompio=--no-preallocate"
    "f_usempi|f_usempi|mpich ompio romio321|"
    "f_mpif08|f_mpif08|mpich ompio romio321|"
    "hdf5_writer|hdf5_writer|mpich ompio romio321|"
    "pnetcdf_writer|pnetcdf_writer|ompio romio321|"
    "pnetcdf_small_attr|pnetcdf_writer|ompio romio321|ompio=--small-attr;romio321=--small-attr"
    "h5py_writer|h5py_writer.py|ompio romio321|"
    "mpi4py_writer|mpi4py_writer.py|ompio romio321|"
    "many_files|many_files|mpich ompio romio321|"
    "threads|threads|mpich ompio romio321|"
    "forkexec|forkexec|mpich ompio romio321|"
    "nonblocking|nonblocking|mpich ompio romio321|romio321=--no-iwrite-all"
    "nonblocking_no_iwrite_all|nonblocking|mpich ompio romio321|mpich=--no-iwrite-all;ompio=--no-iwrite-all;romio321=--no-iwrite-all"
    "deferred|deferred|mpich ompio romio321|"
    "recreate|recreate|mpich ompio romio321|"
    "outside_prefix|outside_prefix|mpich ompio romio321|"
)

# the input that outside_prefix reads, and its reference copy
seq 1 3000 >"$work/input.txt"
cp "$work/input.txt" "$work/input.ref"

run_one() { # case prog mode extra dir [--snapshot]
    local c=$1 prog=$2 mode=$3 extra=$4 dir=$5 snap=${6:-}
    local flavour=openmpi m=$mode args=()
    if [ "$mode" = mpich ]; then flavour=mpich m=romio; fi
    rm -rf "$dir"
    mkdir -p "$dir/out"
    [ -n "$snap" ] && args+=("$snap")
    [ -n "$extra" ] && args+=($extra)
    if [ "$prog" = outside_prefix ]; then
        mkdir -p "$dir/other"
        args=("$dir/other" "$work/input.txt" "$work/input.ref" "${args[@]}")
    fi
    local t0=$(date +%s.%N)
    if ! "$here/run_direct.sh" "$flavour" "$m" "$prog" "$dir/out" "${args[@]}" \
        >"$dir/log" 2>&1; then
        bad "$c $mode: exit status $? (log: $dir/log)"
        return 1
    fi
    local t=$(echo "$(date +%s.%N) - $t0" | bc)
    if [ "$(echo "$t > $slowest" | bc)" = 1 ]; then slowest=$t slowest_name="$c $mode"; fi
    rm -f "$dir/log"
    return 0
}

same_tree() { # label dir1 dir2 [diff options]
    local label=$1 a=$2 b=$3
    shift 3
    if diff -r -q "$@" "$a" "$b" >/dev/null; then
        ok "$label"
    else
        bad "$label: $(diff -r -q "$@" "$a" "$b" | head -3 | tr '\n' ' ')"
    fi
}

for entry in "${cases[@]}"; do
    IFS='|' read -r c prog modes extras <<<"$entry"
    for mode in $modes; do
        extra=$(tr ';' '\n' <<<"$extras" | sed -n "s/^$mode=//p")
        d=$work/$c/$mode
        run_one "$c" "$prog" "$mode" "$extra" "$d/run1" --snapshot || continue
        run_one "$c" "$prog" "$mode" "$extra" "$d/run2" --snapshot || continue
        run_one "$c" "$prog" "$mode" "$extra" "$d/nosnap" || continue
        n=$(find "$d/run1" -type f | wc -l)
        same_tree "$c $mode: run1 == run2 ($n files)" "$d/run1" "$d/run2"
        same_tree "$c $mode: no --snapshot gives the same final files" "$d/run1" "$d/nosnap" \
            -x '*.epoch*'
        for h5 in $(find "$d/run1" -name '*.h5' ! -name '*.epoch*'); do
            if h5diff -r "$h5" "${h5/run1/run2}" >/dev/null; then
                ok "$c $mode: h5diff -r run1 run2 $(basename "$h5")"
            else
                bad "$c $mode: h5diff -r reports differences in $(basename "$h5")"
            fi
        done
    done
    # across modes (same arguments give the same bytes, except nonblocking's
    # romio321 run, which needs --no-iwrite-all and so writes less)
    first=
    for mode in $modes; do
        [ -d "$work/$c/$mode/run1" ] || continue
        [ "$c" = nonblocking ] && [ "$mode" = romio321 ] && continue
        if [ -z "$first" ]; then first=$mode; continue; fi
        same_tree "$c: $first == $mode" "$work/$c/$first/run1" "$work/$c/$mode/run1"
    done
done

# across programs
tail_eq() { # label file1 file2: equal after the 64-byte header
    if [ -f "$2" ] && [ -f "$3" ] && cmp -s <(tail -c +65 "$2") <(tail -c +65 "$3"); then
        ok "$1"
    else
        bad "$1"
    fi
}
hs=$work/header_subarray/mpich/run1/out/header_subarray.dat
for p in f_usempi f_mpif08; do
    for mode in mpich ompio romio321; do
        for e in "" .epoch1 .epoch2; do
            tail_eq "$p $mode$e == header_subarray$e after the header" \
                "$work/$p/$mode/run1/out/$p.dat$e" "$hs$e"
        done
    done
done
for mode in ompio romio321; do
    tail_eq "mpi4py_writer $mode == header_subarray after the header" \
        "$work/mpi4py_writer/$mode/run1/out/mpi4py_writer.dat" "$hs"
    for e in "" .epoch1 .epoch2; do
        if cmp -s "$work/h5py_writer/$mode/run1/out/h5py_writer.h5$e" \
            "$work/hdf5_writer/mpich/run1/out/hdf5_writer.h5$e"; then
            ok "h5py_writer $mode$e == hdf5_writer$e (byte for byte)"
        else
            bad "h5py_writer $mode$e != hdf5_writer$e"
        fi
    done
done

echo "slowest run: $slowest_name, ${slowest}s; outputs in $work"
if [ "$fails" -gt 0 ]; then
    echo "$fails check(s) FAILED"
    exit 1
fi
echo "all checks passed"
