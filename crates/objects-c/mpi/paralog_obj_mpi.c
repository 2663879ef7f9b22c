/* The MPI form of the chunked PUT (include/paralog/objects_mpi.h),
 * compiled by each MPI's own mpicc: only the communication; every check
 * and every file operation is libparalog_obj's. */
#include <paralog/objects_mpi.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
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

/* Rank 0 gives up the put after a failure, keeping the failure's message;
 * after the writers finished (`shares`), every rank also removes its
 * node's share of a logged put (a no-op elsewhere). */
static void abort_put(int rank, paralog_obj_store *store, const char *name, const char *id,
                      int shares)
{
    if (!id[0] || (rank != 0 && !shares))
        return;
    char keep[MSG];
    snprintf(keep, sizeof keep, "%s", paralog_obj_errmsg());
    if (shares)
        paralog_obj_discard_share(store, name, id);
    if (rank == 0)
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
    /* Rank 0's attributes: a share of a logged put on another node holds
     * the put's array record, attributes included. */
    int alen = rank == 0 && attrs_json ? (int)strlen(attrs_json) + 1 : 0;
    MPI_Bcast(&alen, 1, MPI_INT, 0, comm);
    char *attrs = alen ? malloc(alen) : NULL;
    if (alen && !attrs)
        MPI_Abort(comm, 1);
    if (rank == 0 && alen)
        memcpy(attrs, attrs_json, alen);
    if (alen)
        MPI_Bcast(attrs, alen, MPI_CHAR, 0, comm);
    rc = agree(comm, paralog_obj_join_any(store, name, id, dtype, ndim, shape, chunks, attrs,
                                          writer));
    free(attrs);
    if (rc) {
        paralog_obj_discard(*writer);
        *writer = NULL;
        abort_put(rank, store, name, id, 0);
    }
    return rc;
}

/* Rank 0 gathers every rank's share record (empty but for a logged
 * put's writers on other nodes) into *all (*total bytes). */
static int gather_shares(MPI_Comm comm, const uint8_t *share, size_t len, uint8_t **all,
                         size_t *total)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int mine = (int)len, *lens = NULL, *displs = NULL, rc = PARALOG_OBJ_OK;
    *all = NULL;
    *total = 0;
    if (rank == 0) {
        lens = malloc(size * sizeof *lens);
        displs = malloc(size * sizeof *displs);
        if (!lens || !displs)
            MPI_Abort(comm, 1);
    }
    MPI_Gather(&mine, 1, MPI_INT, lens, 1, MPI_INT, 0, comm);
    if (rank == 0) {
        size_t sum = 0;
        for (int r = 0; r < size; r++) {
            displs[r] = (int)sum;
            sum += (size_t)lens[r];
        }
        if (sum > INT_MAX) {
            paralog_obj_set_error("the ranks' share records exceed 2 GiB");
            rc = PARALOG_OBJ_EINVAL;
            memset(lens, 0, size * sizeof *lens);
            memset(displs, 0, size * sizeof *displs);
            sum = 0;
        }
        *all = malloc(sum ? sum : 1);
        if (!*all)
            MPI_Abort(comm, 1);
        *total = sum;
    }
    /* Over the limit: every rank still takes part, rank 0 receiving nothing. */
    int over = rc != PARALOG_OBJ_OK;
    MPI_Bcast(&over, 1, MPI_INT, 0, comm);
    MPI_Gatherv(share, over ? 0 : mine, MPI_BYTE, *all, lens, displs, MPI_BYTE, 0, comm);
    free(lens);
    free(displs);
    return rc;
}

int paralog_obj_commit_mpi(MPI_Comm comm, paralog_obj_store *store, const char *name,
                           paralog_obj_writer *writer, uint64_t *version)
{
    int rank;
    char id[PARALOG_OBJ_ID_LEN] = "";
    MPI_Comm_rank(comm, &rank);
    uint8_t *share = NULL;
    size_t len = 0;
    int rc = paralog_obj_writer_id(writer, id);
    rc = rc ? (paralog_obj_discard(writer), rc) : paralog_obj_finish_share(writer, &share, &len);
    if (!rc && len > INT_MAX) {
        paralog_obj_set_error("this rank's share record exceeds 2 GiB");
        rc = PARALOG_OBJ_EINVAL;
    }
    /* Every rank has finished (or failed) here: the allreduce is the barrier. */
    if ((rc = agree(comm, rc))) {
        paralog_obj_share_free(share, len);
        abort_put(rank, store, name, id, 1);
        return rc;
    }
    uint8_t *all;
    size_t total;
    rc = gather_shares(comm, share, len, &all, &total);
    paralog_obj_share_free(share, len);
    uint64_t v = 0;
    if (rank == 0 && !rc)
        rc = paralog_obj_commit_shares(store, name, id, all, total, &v);
    free(all);
    /* A refused commit published nothing (abort refuses a published put). */
    if ((rc = agree(comm, rc))) {
        abort_put(rank, store, name, id, 1);
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
