#!/bin/bash
# A multi-node job under paralog (docs/cluster.md). The servers run as one
# MPI job, one process per node, next to the application; `paralog wait`
# ends the allocation only once every committed epoch is on the remote.
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=32
#SBATCH --time=02:00:00
set -euo pipefail

PARALOG=${PARALOG:-$HOME/paralog/target/release/paralog}
export PARALOG_JOB=$SLURM_JOB_ID
# Node-local SSD on every node; the output directory on the parallel file system.
LOCAL=/local/$USER/paralog
PREFIX=/scratch/$USER/run-$SLURM_JOB_ID
REMOTE=$PREFIX                      # or s3://bucket/run-$SLURM_JOB_ID, objstore:///...
mkdir -p "$PREFIX"

# 1. The servers: one per node (Slurm's PMI tells them they are one job).
srun --ntasks-per-node=1 --overlap --export=ALL \
    "$PARALOG" server --local "$LOCAL" --remote "$REMOTE" --job "$PARALOG_JOB" &
servers=$!

# 2. The application, unchanged, with capture turned on.
eval "$("$PARALOG" env --mpi mpich --prefix "$PREFIX" --local "$LOCAL" --remote "$REMOTE" --job "$PARALOG_JOB")"
srun ./simulation --output "$PREFIX"
unset LD_PRELOAD

# 3. Safe to end the allocation only when everything committed is drained.
"$PARALOG" wait --local "$LOCAL" --job "$PARALOG_JOB"
wait "$servers"
