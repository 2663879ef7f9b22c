#!/bin/bash
# A job under paralog (docs/cluster.md). The servers run as one job step,
# one process per node, next to the application; `paralog wait` ends the
# allocation only once every committed epoch is on the remote.
# tests/slurm/run.py submits this very script to a real Slurm.
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=32
#SBATCH --time=02:00:00
set -euo pipefail

# Settings, each with a default for a typical cluster; override them in the
# environment of sbatch (sbatch --export=ALL,PREFIX=...,LAUNCH=...).
PARALOG=${PARALOG:-$HOME/paralog/target/release/paralog}
MPI=${MPI:-mpich}                           # the MPI the program was built with
LOCAL=${LOCAL:-/local/$USER/paralog}        # node-local SSD on every node
PREFIX=${PREFIX:-/scratch/$USER/run-$SLURM_JOB_ID}   # the output directory
REMOTE=${REMOTE:-$PREFIX}                   # or s3://bucket/run-..., objstore:///...
# How ranks start: srun where the MPI speaks Slurm's PMI, else its own
# launcher inside the allocation (mpirun.mpich -n N, mpirun.openmpi -n N).
LAUNCH=${LAUNCH:-srun}
PROGRAM=${PROGRAM:-./simulation --output $PREFIX}
export PARALOG_JOB=$SLURM_JOB_ID
mkdir -p "$PREFIX"

# 1. The servers: one per node.
srun --nodes="$SLURM_NNODES" --ntasks="$SLURM_NNODES" --ntasks-per-node=1 --overlap --export=ALL \
    "$PARALOG" server --local "$LOCAL" --remote "$REMOTE" --job "$PARALOG_JOB" &
servers=$!

# 2. The application, unchanged, with capture turned on.
eval "$("$PARALOG" env --mpi "$MPI" --prefix "$PREFIX" --local "$LOCAL" --remote "$REMOTE" --job "$PARALOG_JOB")"
# shellcheck disable=SC2086  # LAUNCH and PROGRAM are command lines
$LAUNCH $PROGRAM
unset LD_PRELOAD

# 3. Safe to end the allocation only when everything committed is drained.
"$PARALOG" wait --local "$LOCAL" --job "$PARALOG_JOB"
wait "$servers"
