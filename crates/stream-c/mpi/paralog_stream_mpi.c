/* paralog_stream_mpi: the collective forms of the stream C API
 * (paralog/stream_mpi.h). Compiled by each MPI's own mpicc, as the shims
 * are, and holding no logic: the MPI calls that make the ranks agree, and
 * the library's calls (libparalog_stream.so) for everything else,
 * including the messages.
 */
#include <paralog/stream_mpi.h>

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
