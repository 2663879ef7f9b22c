#!/bin/bash
# run_direct.sh FLAVOUR MODE PROGRAM OUTDIR [ARGS...]
#
# Runs one of paralog's MPI test programs directly (no capture) with NP
# ranks (default 4) and exits with the launcher's status.
#   FLAVOUR  mpich | openmpi
#   MODE     mpich: romio (or "-", "default": MPICH has ROMIO only)
#            openmpi: ompio | romio321   (passed as --mca io MODE)
#   PROGRAM  a program name (looked up in $OUT/FLAVOUR/, e.g. header_subarray
#            or h5py_writer.py) or a path; *.py runs with /usr/bin/python3
#   OUTDIR   created if missing; passed as the program's first argument
#   ARGS     further program arguments (--snapshot, --no-iwrite-all, ...)
# Environment: OUT (build dir, default ../../target/mpi-tests next to this
# script), NP (ranks, default 4), TIMEOUT (seconds, default 120).
set -euo pipefail

usage() {
    sed -n '2,16s/^# \{0,1\}//p' "$0" >&2
    exit 2
}
[ $# -ge 4 ] || usage
flavour=$1 mode=$2 prog=$3 outdir=$4
shift 4

here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/../../target/mpi-tests}
NP=${NP:-4}
TIMEOUT=${TIMEOUT:-120}

case $flavour in
mpich)
    case $mode in romio | default | -) ;; *) echo "run_direct: MODE for mpich is romio" >&2; exit 2 ;; esac
    launcher=(mpirun.mpich -n "$NP")
    ;;
openmpi)
    case $mode in ompio | romio321) ;; *) echo "run_direct: MODE for openmpi is ompio or romio321" >&2; exit 2 ;; esac
    # Open MPI refuses to run as root without these; 4 ranks on 2 cores need --oversubscribe.
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    launcher=(mpirun.openmpi -n "$NP" --oversubscribe --mca io "$mode")
    ;;
*) usage ;;
esac

case $prog in
*/*) path=$prog ;;
*) path=$OUT/$flavour/$prog ;;
esac
if [ ! -e "$path" ]; then
    echo "run_direct: $path not found (built by 'make' in $here? pnetcdf_writer and the" \
         "Python programs exist for openmpi only)" >&2
    exit 2
fi
case $path in
*.py) cmd=(/usr/bin/python3 "$path") ;;
*) cmd=("$path") ;;
esac

mkdir -p "$outdir"
exec timeout -k 10 "$TIMEOUT" "${launcher[@]}" "${cmd[@]}" "$outdir" "$@"
