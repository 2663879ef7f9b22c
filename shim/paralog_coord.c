/* paralog_coord: the few MPI operations the node servers of one job use to
 * act as one (docs/cluster.md). Compiled by each MPI's own mpicc and loaded
 * by `paralog server` at run time, so that the server binary itself stays
 * MPI-agnostic, as the capture library does with its shim.
 *
 * Every function returns 0 or an MPI error code; the caller turns a code
 * into a message with pl_error_string. All calls come from one thread (the
 * server's coordinator), which is the thread that called pl_init. Counts are
 * int64 at this boundary and checked against INT_MAX here, because MPI's
 * own counts are int.
 */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static MPI_Comm comm = MPI_COMM_NULL;

/* A zero-length buffer from Rust has the address 1, which Open MPI's
 * MPI_IN_PLACE is: give MPI a real address instead. */
static char no_bytes[1];
#define REAL(p, n) ((n) == 0 ? (void *)no_bytes : (void *)(p))


int pl_init(int *rank, int *size)
{
    int provided, rc, inited;
    MPI_Initialized(&inited);
    if (!inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    /* Errors come back as codes: the server says what it was doing. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    if (rc != MPI_SUCCESS)
        return rc;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, rank);
    MPI_Comm_size(comm, size);
    return 0;
}

int pl_finalize(void)
{
    if (comm != MPI_COMM_NULL)
        MPI_Comm_free(&comm);
    return MPI_Finalize();
}

void pl_abort(int code)
{
    MPI_Abort(MPI_COMM_WORLD, code);
}

void pl_error_string(int code, char *out, int len)
{
    char buf[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(code, buf, &n) != MPI_SUCCESS)
        n = 0;
    buf[n < MPI_MAX_ERROR_STRING ? n : MPI_MAX_ERROR_STRING - 1] = 0;
    if (len > 0) {
        strncpy(out, buf, (size_t)len - 1);
        out[len - 1] = 0;
    }
}

int pl_barrier(void)
{
    return MPI_Barrier(comm);
}

/* op: 0 sum, 1 max, 2 min. */
int pl_allreduce_i64(int64_t *vals, int n, int op)
{
    MPI_Op o = op == 1 ? MPI_MAX : op == 2 ? MPI_MIN : MPI_SUM;
    return MPI_Allreduce(MPI_IN_PLACE, vals, n, MPI_INT64_T, o, comm);
}

int pl_allgather_i64(int64_t mine, int64_t *all)
{
    return MPI_Allgather(&mine, 1, MPI_INT64_T, all, 1, MPI_INT64_T, comm);
}

int pl_bcast(void *buf, int64_t n, int root)
{
    if (n < 0 || n > INT_MAX)
        return MPI_ERR_COUNT;
    return MPI_Bcast(REAL(buf, n), (int)n, MPI_BYTE, root, comm);
}

/* counts/displs: one per process, in bytes; root == -1: all processes get
 * everything (allgatherv), else only root does (gatherv). */
int pl_gatherv(const void *send, int64_t n, void *recv, const int64_t *counts,
               const int64_t *displs, int root)
{
    int size, rc;
    MPI_Comm_size(comm, &size);
    if (n < 0 || n > INT_MAX)
        return MPI_ERR_COUNT;
    int *c = malloc(sizeof(int) * (size_t)size * 2);
    if (!c)
        return MPI_ERR_NO_MEM;
    int *d = c + size;
    int64_t total = 0;
    for (int i = 0; i < size; i++) {
        total += counts[i];
        if (counts[i] < 0 || counts[i] > INT_MAX || displs[i] < 0 || displs[i] > INT_MAX) {
            free(c);
            return MPI_ERR_COUNT;
        }
        c[i] = (int)counts[i];
        d[i] = (int)displs[i];
    }
    const void *s = REAL(send, n);
    void *r = REAL(recv, total);
    if (root < 0)
        rc = MPI_Allgatherv(s, (int)n, MPI_BYTE, r, c, d, MPI_BYTE, comm);
    else
        rc = MPI_Gatherv(s, (int)n, MPI_BYTE, r, c, d, MPI_BYTE, root, comm);
    free(c);
    return rc;
}
