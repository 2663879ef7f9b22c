/* paralog/stream_mpi.h: the collective forms of paralog/stream.h on an MPI
 * communicator (docs/streams.md). Include <mpi.h> first; link with
 * -lparalog_stream_mpi_mpich or -lparalog_stream_mpi_openmpi (the one built
 * by your MPI's mpicc) and -lparalog_stream.
 *
 * Both are collective: every rank of `comm` calls them, and every rank gets
 * the same code (a rank whose own call worked gets PARALOG_STREAM_EPEER
 * when another rank's failed; the failing rank gets its own code).
 */
#ifndef PARALOG_STREAM_MPI_H
#define PARALOG_STREAM_MPI_H

#include <mpi.h>
#include <paralog/stream.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Each rank opens its own segment of `stream` (one per rank), after the
 * ranks agree on the partition count (EPARTITIONS if they asked for
 * different ones). On failure no rank holds a handle. */
int paralog_stream_open_all(MPI_Comm comm, const char *local, const char *stream,
                            uint32_t partitions, paralog_stream **out);

/* Each rank's flush, then one allreduce (as MPI_File_sync agrees): when it
 * returns OK, every rank's events appended before the call are durable. */
int paralog_stream_flush_all(MPI_Comm comm, paralog_stream *s);

/* The same with a pointer to the communicator (for mpi4py, whose
 * MPI._addressof(comm) gives one). */
int paralog_stream_open_all_p(const MPI_Comm *comm, const char *local, const char *stream,
                              uint32_t partitions, paralog_stream **out);
int paralog_stream_flush_all_p(const MPI_Comm *comm, paralog_stream *s);

/* For the helper (libparalog_stream_mpi_*.so): sets this thread's message
 * for a collective failure and returns `code`. */
int paralog_stream_collective_error(int code, const char *stream, uint32_t min_partitions,
                                    uint32_t max_partitions);

#ifdef __cplusplus
}
#endif
#endif
