#!/bin/sh
# as_node.sh COMMAND...: run COMMAND as a process of simulated node
# n<rank / RANKS_PER_NODE> (PARALOG_NODE), the rank being the MPI launcher's
# (MPICH's Hydra: PMI_RANK; Open MPI: OMPI_COMM_WORLD_RANK).
r=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}
PARALOG_NODE=n$((r / ${RANKS_PER_NODE:-2}))
export PARALOG_NODE
exec "$@"
