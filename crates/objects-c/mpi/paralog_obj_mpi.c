/* The MPI form of the chunked PUT (include/paralog/objects_mpi.h),
 * compiled by each MPI's own mpicc: only the communication; every check
 * and every file operation is libparalog_obj's. */
#include <paralog/objects_mpi.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#define MSG 2048

/* Agree on the outcome of a step on every rank: the code and message of
 * the lowest rank that failed (prefixed with its rank), or OK. The
 * allreduce is also the barrier between steps. */
static int agree(MPI_Comm comm, int rc)
{
    int rank, first, mine;
    MPI_Comm_rank(comm, &rank);
    mine = rc ? rank : INT_MAX;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == INT_MAX)
        return PARALOG_OBJ_OK;
    char msg[MSG] = "";
    if (rank == first)
        snprintf(msg, sizeof msg, "rank %d: %s", rank, paralog_obj_errmsg());
    MPI_Bcast(msg, MSG, MPI_CHAR, first, comm);
    MPI_Bcast(&rc, 1, MPI_INT, first, comm);
    paralog_obj_set_error(msg);
    return rc;
}

/* Rank 0 gives up the put after a failure, keeping the failure's message. */
static void abort_put(int rank, paralog_obj_store *store, const char *name, const char *id)
{
    if (rank != 0 || !id[0])
        return;
    char keep[MSG];
    snprintf(keep, sizeof keep, "%s", paralog_obj_errmsg());
    paralog_obj_abort(store, name, id);
    paralog_obj_set_error(keep);
}

int paralog_obj_begin_mpi(MPI_Comm comm, paralog_obj_store *store, const char *name, int dtype,
                          int ndim, const uint64_t *shape, const uint64_t *chunks,
                          const char *attrs_json, paralog_obj_writer **writer)
{
    int rank;
    char id[PARALOG_OBJ_ID_LEN] = "";
    MPI_Comm_rank(comm, &rank);
    *writer = NULL;
    int rc = rank == 0 ? paralog_obj_begin(store, name, dtype, ndim, shape, chunks, attrs_json, id)
                       : PARALOG_OBJ_OK;
    if ((rc = agree(comm, rc)))
        return rc;
    MPI_Bcast(id, PARALOG_OBJ_ID_LEN, MPI_CHAR, 0, comm);
    rc = agree(comm, paralog_obj_join(store, name, id, dtype, ndim, shape, chunks, writer));
    if (rc) {
        paralog_obj_discard(*writer);
        *writer = NULL;
        abort_put(rank, store, name, id);
    }
    return rc;
}

int paralog_obj_commit_mpi(MPI_Comm comm, paralog_obj_store *store, const char *name,
                           paralog_obj_writer *writer, uint64_t *version)
{
    int rank;
    char id[PARALOG_OBJ_ID_LEN] = "";
    MPI_Comm_rank(comm, &rank);
    int rc = paralog_obj_writer_id(writer, id);
    rc = rc ? (paralog_obj_discard(writer), rc) : paralog_obj_finish(writer);
    /* Every rank has finished (or failed) here: the allreduce is the barrier. */
    if ((rc = agree(comm, rc))) {
        abort_put(rank, store, name, id);
        return rc;
    }
    uint64_t v = 0;
    rc = rank == 0 ? paralog_obj_commit(store, name, id, &v) : PARALOG_OBJ_OK;
    /* A refused commit published nothing (abort refuses a published put). */
    if ((rc = agree(comm, rc))) {
        abort_put(rank, store, name, id);
        return rc;
    }
    MPI_Bcast(&v, 1, MPI_UINT64_T, 0, comm);
    if (version)
        *version = v;
    return PARALOG_OBJ_OK;
}

/* Fortran callers pass their communicator as an integer handle. */
int paralog_obj_begin_mpi_f(MPI_Fint comm, paralog_obj_store *store, const char *name, int dtype,
                            int ndim, const uint64_t *shape, const uint64_t *chunks,
                            const char *attrs_json, paralog_obj_writer **writer)
{
    return paralog_obj_begin_mpi(MPI_Comm_f2c(comm), store, name, dtype, ndim, shape, chunks,
                                 attrs_json, writer);
}

int paralog_obj_commit_mpi_f(MPI_Fint comm, paralog_obj_store *store, const char *name,
                             paralog_obj_writer *writer, uint64_t *version)
{
    return paralog_obj_commit_mpi(MPI_Comm_f2c(comm), store, name, writer, version);
}
