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
#ifdef OPEN_MPI
        /* A server waiting in a collective yields its core (to the
         * application's ranks on the node, or to other servers when nodes
         * are simulated) instead of spinning: the servers' collectives are
         * few and carry little, so polling buys nothing. An explicit
         * setting from the launcher wins. (setenv races only with a
         * concurrent getenv: the server's other threads, the S3 runtime's,
         * read their settings when they started.) */
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
#endif
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

/* Collective MPI-IO into a POSIX remote file (`--posix-writes collective`):
 * every server opens the file, each window is one MPI_File_write_all of
 * this server's blocks through an hindexed view, so that the MPI library's
 * own aggregation (ROMIO's two-phase, OMPIO's fcoll) and file-system
 * tuning apply. The handle is opaque to the caller. */
int pl_file_open(const char *path, void **out)
{
    MPI_File *fh = malloc(sizeof *fh);
    if (!fh)
        return MPI_ERR_NO_MEM;
    int rc = MPI_File_open(comm, path, MPI_MODE_WRONLY | MPI_MODE_CREATE, MPI_INFO_NULL, fh);
    if (rc != MPI_SUCCESS) {
        free(fh);
        return rc;
    }
    MPI_File_set_errhandler(*fh, MPI_ERRORS_RETURN);
    *out = fh;
    return 0;
}

/* This server's n blocks (file offsets, lengths, ascending and disjoint),
 * whose bytes lie back to back in buf. Every server calls it the same
 * number of times, n == 0 where it has nothing: a local error still takes
 * part in both collectives (with nothing), then is returned. */
int pl_file_write_all(void *h, const int64_t *offs, const int64_t *lens, int n, const void *buf)
{
    MPI_File fh = *(MPI_File *)h;
    MPI_Datatype ft = MPI_BYTE;
    int local = 0, typed = 0;
    int64_t total = 0;
    if (n > 0) {
        MPI_Aint *d = malloc(sizeof(MPI_Aint) * (size_t)n);
        int *l = malloc(sizeof(int) * (size_t)n);
        if (!d || !l)
            local = MPI_ERR_NO_MEM;
        for (int i = 0; !local && i < n; i++) {
            if (lens[i] < 0 || lens[i] > INT_MAX || offs[i] < 0)
                local = MPI_ERR_COUNT;
            else {
                d[i] = (MPI_Aint)offs[i];
                l[i] = (int)lens[i];
                total += lens[i];
            }
        }
        if (!local && total > INT_MAX)
            local = MPI_ERR_COUNT;
        if (!local) {
            local = MPI_Type_create_hindexed(n, l, d, MPI_BYTE, &ft);
            if (!local)
                local = MPI_Type_commit(&ft);
            typed = !local;
        }
        free(d);
        free(l);
        if (local) {
            ft = MPI_BYTE;
            total = 0;
        }
    }
    int rc = MPI_File_set_view(fh, 0, MPI_BYTE, ft, "native", MPI_INFO_NULL);
    MPI_Status st;
    int rc2 = MPI_File_write_all(fh, REAL(buf, total), (int)total, MPI_BYTE, &st);
    if (typed)
        MPI_Type_free(&ft);
    return local ? local : rc ? rc : rc2;
}

int pl_file_sync(void *h)
{
    return MPI_File_sync(*(MPI_File *)h);
}

int pl_file_close(void *h)
{
    MPI_File *fh = h;
    int rc = MPI_File_close(fh);
    free(fh);
    return rc;
}

/* Point-to-point, for the transfer of checkpoint-set members to their
 * group's leader (docs/aggregate.md, "Many nodes"): one blocking send per
 * fixed-size block (the leader's bounded pool would stall non-blocking
 * sends anyway), and a receive from any sender (src == -1) or one. */
int pl_send(const void *buf, int64_t n, int dest, int tag)
{
    if (n < 0 || n > INT_MAX)
        return MPI_ERR_COUNT;
    return MPI_Send(REAL(buf, n), (int)n, MPI_BYTE, dest, tag, comm);
}

/* Receive at most cap bytes; the sender, the tag and the length received
 * come back. A message longer than cap is an error (MPI_ERR_TRUNCATE). */
int pl_recv(void *buf, int64_t cap, int src, int tag, int *got_src, int *got_tag, int64_t *got_len)
{
    MPI_Status st;
    int n = 0;
    if (cap < 0 || cap > INT_MAX)
        return MPI_ERR_COUNT;
    int rc = MPI_Recv(REAL(buf, cap), (int)cap, MPI_BYTE, src < 0 ? MPI_ANY_SOURCE : src,
                      tag < 0 ? MPI_ANY_TAG : tag, comm, &st);
    if (rc != MPI_SUCCESS)
        return rc;
    MPI_Get_count(&st, MPI_BYTE, &n);
    *got_src = st.MPI_SOURCE;
    *got_tag = st.MPI_TAG;
    *got_len = n;
    return 0;
}
