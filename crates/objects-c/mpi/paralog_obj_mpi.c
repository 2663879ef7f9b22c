/* The MPI form of the chunked PUT (include/paralog/objects_mpi.h),
 * compiled by each MPI's own mpicc: only the communication; every check
 * and every file operation is libparalog_obj's. */
#include <paralog/objects_mpi.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MSG 2048

/* Whether this node runs more ranks than it has processors online, read
 * once per process from what the launcher tells each rank: MPICH's Hydra
 * (MPI_LOCALNRANKS) and Open MPI (OMPI_COMM_WORLD_LOCAL_SIZE) give the
 * number of the job's ranks on this node. Not asked of MPI: the first
 * MPI_Comm_split_type took 40-60 ms with MPICH on 4 ranks on 2 cores, a
 * put's whole time. Unknown (another launcher): no, MPI's own waits. */
static int outnumbered(void)
{
    static int known = -1;
    if (known >= 0)
        return known;
    const char *here = getenv("MPI_LOCALNRANKS");
    if (!here)
        here = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long ranks = here ? strtol(here, NULL, 10) : 0, cpus = sysconf(_SC_NPROCESSORS_ONLN);
    known = cpus > 0 && ranks > cpus;
    return known;
}

/* Wait for a collective when ranks outnumber processors (else MPI_Wait).
 * MPICH and Open MPI spin in their waits, which is right when each rank
 * has a processor; otherwise the ranks waiting for rank 0's begin or
 * commit took its CPU (4 ranks on 2 cores: docs/objects.md "Waiting
 * without spinning"). So: spin on MPI_Test for a short while (a balanced
 * collective completes in microseconds), then sleep between tests, a
 * little longer each time up to a cap, which bounds what the sleep adds
 * to a wait (the cap plus the kernel's timer slack, 50 us by default). */
#define SPIN_S 50e-6
#define PAUSE_FIRST_NS 10000L
#define PAUSE_CAP_NS 40000L

static void wait_politely(MPI_Request *req)
{
    int done = 0;
    long pause = 0;
    double t0 = MPI_Wtime();
    for (;;) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done)
            return;
        if (pause) {
            struct timespec ts = {0, pause};
            nanosleep(&ts, NULL);
            pause = 2 * pause > PAUSE_CAP_NS ? PAUSE_CAP_NS : 2 * pause;
        } else if (MPI_Wtime() - t0 > SPIN_S) {
            pause = PAUSE_FIRST_NS;
        }
    }
}

/* A collective on `comm`, always in its nonblocking form (MPI_I...): a
 * blocking and a nonblocking collective do not match (MPI 4.0, 6.12), and
 * ranks on different nodes may decide differently whether they are
 * outnumbered; only how each rank waits is its own choice. The arguments
 * are those of the blocking form before the communicator. */
#define COLLECTIVE(nonblocking, comm, ...)                                                         \
    do {                                                                                           \
        MPI_Request req_;                                                                          \
        nonblocking(__VA_ARGS__, comm, &req_);                                                     \
        if (outnumbered())                                                                         \
            wait_politely(&req_);                                                                  \
        else                                                                                       \
            MPI_Wait(&req_, MPI_STATUS_IGNORE);                                                    \
    } while (0)

/* Give every rank the error of rank `from` (its code is already known to
 * all): its message, prefixed with its rank. */
static int spread_error(MPI_Comm comm, int from, int rc)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    char msg[MSG] = "";
    if (rank == from)
        snprintf(msg, sizeof msg, "rank %d: %s", rank, paralog_obj_errmsg());
    COLLECTIVE(MPI_Ibcast, comm, msg, MSG, MPI_CHAR, from);
    paralog_obj_set_error(msg);
    return rc;
}

/* Agree on the outcome of a step on every rank: the code and message of
 * the lowest rank that failed, or OK. The allreduce is also the barrier
 * between steps. */
static int agree(MPI_Comm comm, int rc)
{
    int rank, first, mine;
    MPI_Comm_rank(comm, &rank);
    mine = rc ? rank : INT_MAX;
    COLLECTIVE(MPI_Iallreduce, comm, &mine, &first, 1, MPI_INT, MPI_MIN);
    if (first == INT_MAX)
        return PARALOG_OBJ_OK;
    COLLECTIVE(MPI_Ibcast, comm, &rc, 1, MPI_INT, first);
    return spread_error(comm, first, rc);
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

/* The collectives are few on purpose: each one is a latency at scale, and
 * a wait (above) when ranks outnumber cores. A put that succeeds makes 5
 * (6 with attributes): begin a broadcast and an allreduce, commit an
 * allgather, a gatherv and a broadcast. */

/* What rank 0 tells the others after its begin: its code, the put's id
 * and the length of its attributes. */
struct begun {
    int rc;
    int alen;
    char id[PARALOG_OBJ_ID_LEN];
};

int paralog_obj_begin_mpi(MPI_Comm comm, paralog_obj_store *store, const char *name, int dtype,
                          int ndim, const uint64_t *shape, const uint64_t *chunks,
                          const char *attrs_json, paralog_obj_writer **writer)
{
    int rank;
    struct begun b;
    memset(&b, 0, sizeof b);
    MPI_Comm_rank(comm, &rank);
    *writer = NULL;
    if (rank == 0) {
        b.rc = paralog_obj_begin(store, name, dtype, ndim, shape, chunks, attrs_json, b.id);
        b.alen = !b.rc && attrs_json ? (int)strlen(attrs_json) + 1 : 0;
    }
    COLLECTIVE(MPI_Ibcast, comm, &b, (int)sizeof b, MPI_BYTE, 0);
    if (b.rc)
        return spread_error(comm, 0, b.rc);
    /* Rank 0's attributes: a share of a logged put on another node holds
     * the put's array record, attributes included. */
    char *attrs = b.alen ? malloc(b.alen) : NULL;
    if (b.alen && !attrs)
        MPI_Abort(comm, 1);
    if (rank == 0 && b.alen)
        memcpy(attrs, attrs_json, b.alen);
    if (b.alen)
        COLLECTIVE(MPI_Ibcast, comm, attrs, b.alen, MPI_CHAR, 0);
    int rc = agree(comm, paralog_obj_join_any(store, name, b.id, dtype, ndim, shape, chunks,
                                              attrs, writer));
    free(attrs);
    if (rc) {
        paralog_obj_discard(*writer);
        *writer = NULL;
        abort_put(rank, store, name, b.id, 0);
    }
    return rc;
}

int paralog_obj_commit_mpi(MPI_Comm comm, paralog_obj_store *store, const char *name,
                           paralog_obj_writer *writer, uint64_t *version)
{
    int rank, size;
    char id[PARALOG_OBJ_ID_LEN] = "";
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    uint8_t *share = NULL;
    size_t len = 0;
    int rc = paralog_obj_writer_id(writer, id);
    rc = rc ? (paralog_obj_discard(writer), rc) : paralog_obj_finish_share(writer, &share, &len);
    if (!rc && len > INT_MAX) {
        paralog_obj_set_error("this rank's share record exceeds 2 GiB");
        rc = PARALOG_OBJ_EINVAL;
    }
    /* Every rank's outcome and share length, on every rank: the barrier
     * after the writers, and what each rank needs to decide alike whether
     * the shares can be gathered. */
    int mine[2] = {rc, rc ? 0 : (int)len};
    int *all = malloc(2 * (size_t)size * sizeof *all);
    int *lens = malloc((size_t)size * sizeof *lens), *displs = malloc((size_t)size * sizeof *displs);
    if (!all || !lens || !displs)
        MPI_Abort(comm, 1);
    COLLECTIVE(MPI_Iallgather, comm, mine, 2, MPI_INT, all, 2, MPI_INT);
    int first = -1;
    size_t sum = 0;
    for (int r = 0; r < size; r++) {
        if (all[2 * r] && first < 0)
            first = r;
        lens[r] = all[2 * r + 1];
        displs[r] = (int)(sum > INT_MAX ? 0 : sum);
        sum += (size_t)lens[r];
    }
    if (first >= 0)
        rc = spread_error(comm, first, all[2 * first]);
    else if (sum > INT_MAX) {
        rc = PARALOG_OBJ_EINVAL;
        paralog_obj_set_error("rank 0: the ranks' share records exceed 2 GiB");
    }
    free(all);
    if (rc) {
        free(lens);
        free(displs);
        paralog_obj_share_free(share, len);
        abort_put(rank, store, name, id, 1);
        return rc;
    }
    uint8_t *shares = rank == 0 ? malloc(sum ? sum : 1) : NULL;
    if (rank == 0 && !shares)
        MPI_Abort(comm, 1);
    COLLECTIVE(MPI_Igatherv, comm, share, (int)len, MPI_BYTE, shares, lens, displs, MPI_BYTE, 0);
    free(lens);
    free(displs);
    paralog_obj_share_free(share, len);
    /* Rank 0's commit: its code and version to all. */
    uint64_t out[2] = {0, 0};
    if (rank == 0) {
        uint64_t v = 0;
        out[0] = (uint64_t)(int64_t)paralog_obj_commit_shares(store, name, id, shares, sum, &v);
        out[1] = v;
    }
    free(shares);
    COLLECTIVE(MPI_Ibcast, comm, out, 2, MPI_UINT64_T, 0);
    rc = (int)(int64_t)out[0];
    /* A refused commit published nothing (abort refuses a published put). */
    if (rc) {
        spread_error(comm, 0, rc);
        abort_put(rank, store, name, id, 1);
        return rc;
    }
    if (version)
        *version = out[1];
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
