/* paralog_stream_mpi: the collective forms of the stream C API
 * (paralog/stream_mpi.h). Compiled by each MPI's own mpicc, as the shims
 * are, and holding no logic: the MPI calls that make the ranks agree or
 * carry a reader group's events and acknowledgements, and the library's
 * calls (libparalog_stream.so) for everything else, including the messages
 * and the group's bookkeeping.
 */
#include <paralog/stream_mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* Every rank's code, agreed: the largest (a failure wins over OK). An
 * allreduce that fails is a failure of the collective too. */
static int agree(MPI_Comm comm, int mine)
{
    int all = mine;
    if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
        return PARALOG_STREAM_EPEER;
    return all;
}

int paralog_stream_open_all(MPI_Comm comm, const char *local, const char *stream,
                            uint32_t partitions, paralog_stream **out)
{
    unsigned asked[2] = {partitions, ~partitions}, got[2];
    int rc;
    *out = NULL;
    /* The largest count and the smallest (the largest complement). */
    if (MPI_Allreduce(asked, got, 2, MPI_UNSIGNED, MPI_MAX, comm) != MPI_SUCCESS)
        return paralog_stream_collective_error(PARALOG_STREAM_EPEER, stream, 0, 0);
    if (got[0] != ~got[1])
        return paralog_stream_collective_error(PARALOG_STREAM_EPARTITIONS, stream, ~got[1], got[0]);
    rc = paralog_stream_open(local, stream, partitions, out);
    int all = agree(comm, rc);
    if (all != PARALOG_STREAM_OK && rc == PARALOG_STREAM_OK) {
        paralog_stream_close(*out);
        *out = NULL;
        return paralog_stream_collective_error(PARALOG_STREAM_EPEER, stream, 0, 0);
    }
    return rc;
}

int paralog_stream_flush_all(MPI_Comm comm, paralog_stream *s)
{
    int rc = paralog_stream_flush(s, NULL);
    int all = agree(comm, rc);
    if (all != PARALOG_STREAM_OK && rc == PARALOG_STREAM_OK)
        return paralog_stream_collective_error(PARALOG_STREAM_EPEER, paralog_stream_name(s), 0, 0);
    return rc;
}

int paralog_stream_open_all_p(const MPI_Comm *comm, const char *local, const char *stream,
                              uint32_t partitions, paralog_stream **out)
{
    return paralog_stream_open_all(*comm, local, stream, partitions, out);
}

int paralog_stream_flush_all_p(const MPI_Comm *comm, paralog_stream *s)
{
    return paralog_stream_flush_all(*comm, s);
}

/* A reader group over a communicator: the MPI calls only; who gets which
 * event, the bytes that carry it and what the group commits are the
 * library's (paralog_stream_member_*). */
struct paralog_stream_group {
    MPI_Comm comm; /* a duplicate: the group's messages never meet the program's */
    int rank, size;
    paralog_stream_member *m;
    char stream[256];
    uint64_t *sizes;  /* rank 0: each rank's part of a round */
    int *counts, *displs;
    uint8_t *rbuf;    /* this rank's part */
    size_t rcap;
};

static int peer(const paralog_stream_group *g)
{
    return paralog_stream_collective_error(PARALOG_STREAM_EPEER, g->stream, 0, 0);
}

static void group_free(paralog_stream_group *g)
{
    paralog_stream_member_free(g->m);
    MPI_Comm_free(&g->comm);
    free(g->sizes);
    free(g->counts);
    free(g->displs);
    free(g->rbuf);
    free(g);
}

int paralog_stream_join_all(MPI_Comm comm, const char *remote, const char *stream,
                            const char *group, int from, int order, int spread,
                            paralog_stream_group **out)
{
    paralog_stream_group *g = calloc(1, sizeof *g);
    paralog_stream_reader *r = NULL;
    unsigned parts = 0;
    int rc = PARALOG_STREAM_OK;
    *out = NULL;
    if (!g || MPI_Comm_dup(comm, &g->comm) != MPI_SUCCESS) {
        free(g);
        return paralog_stream_collective_error(PARALOG_STREAM_EPEER, stream, 0, 0);
    }
    MPI_Comm_rank(g->comm, &g->rank);
    MPI_Comm_size(g->comm, &g->size);
    snprintf(g->stream, sizeof g->stream, "%s", stream ? stream : "?");
    g->sizes = calloc((size_t)g->size, sizeof *g->sizes);
    g->counts = calloc((size_t)g->size, sizeof *g->counts);
    g->displs = calloc((size_t)g->size, sizeof *g->displs);
    if (g->rank == 0) {
        rc = paralog_stream_join(remote, stream, group, from, order, &r);
        if (rc == PARALOG_STREAM_OK)
            parts = paralog_stream_reader_partitions(r);
    }
    int all = agree(g->comm, rc);
    if (all == PARALOG_STREAM_OK && MPI_Bcast(&parts, 1, MPI_UNSIGNED, 0, g->comm) != MPI_SUCCESS)
        all = PARALOG_STREAM_EPEER;
    if (all == PARALOG_STREAM_OK) {
        rc = paralog_stream_member_new(r, (uint32_t)g->size, parts, spread, &g->m);
        if (rc != PARALOG_STREAM_OK && r)
            paralog_stream_leave(r); /* not taken by a member */
        all = agree(g->comm, rc);
    } else if (r) {
        paralog_stream_leave(r);
    }
    if (all != PARALOG_STREAM_OK) {
        group_free(g);
        return rc != PARALOG_STREAM_OK ? rc
                                       : paralog_stream_collective_error(PARALOG_STREAM_EPEER, stream, 0, 0);
    }
    *out = g;
    return PARALOG_STREAM_OK;
}

int paralog_stream_join_all_p(const MPI_Comm *comm, const char *remote, const char *stream,
                              const char *group, int from, int order, int spread,
                              paralog_stream_group **out)
{
    return paralog_stream_join_all(*comm, remote, stream, group, from, order, spread, out);
}

int paralog_stream_next_all(paralog_stream_group *g, int timeout_ms, paralog_stream_event *ev)
{
    const uint8_t *buf = NULL;
    uint64_t mine = 0;
    int rc = PARALOG_STREAM_OK;
    if (g->rank == 0)
        rc = paralog_stream_member_round(g->m, timeout_ms, g->sizes, &buf);
    int all = rc;
    if (MPI_Bcast(&all, 1, MPI_INT, 0, g->comm) != MPI_SUCCESS)
        return peer(g);
    if (all == PARALOG_STREAM_TIMEDOUT)
        return all;
    if (all != PARALOG_STREAM_OK)
        return g->rank == 0 ? rc : peer(g);
    if (g->rank == 0)
        for (int i = 0, at = 0; i < g->size; at += (int)g->sizes[i], i++) {
            g->counts[i] = (int)g->sizes[i];
            g->displs[i] = at;
        }
    if (MPI_Scatter(g->sizes, 1, MPI_UINT64_T, &mine, 1, MPI_UINT64_T, 0, g->comm) != MPI_SUCCESS)
        return peer(g);
    if (mine > g->rcap) {
        uint8_t *b = realloc(g->rbuf, mine);
        if (!b)
            return paralog_stream_collective_error(PARALOG_STREAM_EINTERNAL, g->stream, 0, 0);
        g->rbuf = b;
        g->rcap = mine;
    }
    if (MPI_Scatterv(buf, g->counts, g->displs, MPI_BYTE, g->rbuf, (int)mine, MPI_BYTE, 0, g->comm) !=
        MPI_SUCCESS)
        return peer(g);
    return paralog_stream_member_take(g->m, g->rbuf, (size_t)mine, ev);
}

int paralog_stream_group_ack(paralog_stream_group *g, uint32_t partition, uint64_t offset)
{
    return paralog_stream_member_ack(g->m, partition, offset);
}

int paralog_stream_commit_all(paralog_stream_group *g)
{
    const uint8_t *mine = NULL;
    size_t len = 0;
    uint8_t *all_acks = NULL;
    int rc = paralog_stream_member_acks(g->m, &mine, &len);
    int n = (int)len, total = 0;
    if (MPI_Gather(&n, 1, MPI_INT, g->counts, 1, MPI_INT, 0, g->comm) != MPI_SUCCESS)
        return peer(g);
    if (g->rank == 0) {
        for (int i = 0; i < g->size; i++) {
            g->displs[i] = total;
            total += g->counts[i];
        }
        all_acks = malloc(total ? (size_t)total : 1);
    }
    if (MPI_Gatherv(mine, n, MPI_BYTE, all_acks, g->counts, g->displs, MPI_BYTE, 0, g->comm) !=
        MPI_SUCCESS) {
        free(all_acks);
        return peer(g);
    }
    if (g->rank == 0 && rc == PARALOG_STREAM_OK)
        rc = all_acks ? paralog_stream_member_commit(g->m, all_acks, (size_t)total)
                      : paralog_stream_collective_error(PARALOG_STREAM_EINTERNAL, g->stream, 0, 0);
    free(all_acks);
    int all = agree(g->comm, rc);
    if (all != PARALOG_STREAM_OK && rc == PARALOG_STREAM_OK)
        return peer(g);
    return rc;
}

int paralog_stream_leave_all(paralog_stream_group *g)
{
    if (!g)
        return PARALOG_STREAM_OK;
    int rc = paralog_stream_commit_all(g);
    group_free(g);
    return rc;
}
