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

/* A reader group over a communicator: rank 0 is the read proxy, the only
 * rank that reads the remote; every call below but the ack is collective.
 * Events are handed to the ranks round-robin or by key (one key, one rank;
 * events without a key in turn). */
#define PARALOG_STREAM_SPREAD_ROUND_ROBIN 0
#define PARALOG_STREAM_SPREAD_BY_KEY 1

typedef struct paralog_stream_group paralog_stream_group;

/* Join `stream` on the remote as the reader group `group` (NULL: the
 * group commits nothing), `from` and `order` as paralog_stream_join.
 * Every rank gets the same code; on failure no rank holds a handle. */
int paralog_stream_join_all(MPI_Comm comm, const char *remote, const char *stream,
                            const char *group, int from, int order, int spread,
                            paralog_stream_group **out);
int paralog_stream_join_all_p(const MPI_Comm *comm, const char *remote, const char *stream,
                              const char *group, int from, int order, int spread,
                              paralog_stream_group **out);

/* One round: the proxy waits up to timeout_ms (-1: as long as it takes)
 * for an event, then hands at most one to each rank. OK: an event for this
 * rank in *ev (its bytes valid until the next call); NONE: the group got
 * events, none for this rank; TIMEDOUT: none came for the group (the same
 * on every rank: a loop ends there on all of them together). */
int paralog_stream_next_all(paralog_stream_group *g, int timeout_ms, paralog_stream_event *ev);

/* Not collective: the event at `offset` of `partition` handed to this
 * rank, and every earlier one of that partition handed to it, are
 * processed. */
int paralog_stream_group_ack(paralog_stream_group *g, uint32_t partition, uint64_t offset);

/* Store the group's offsets: per partition, up to its first event that
 * the rank it was handed to did not acknowledge (at least once). */
int paralog_stream_commit_all(paralog_stream_group *g);

/* Commit, then free the handle on every rank (freed even on failure). */
int paralog_stream_leave_all(paralog_stream_group *g);

/* For the helper (libparalog_stream_mpi_*.so): the group's bookkeeping in
 * libparalog_stream.so, so that the helper holds only the MPI calls. */
typedef struct paralog_stream_member paralog_stream_member;
int paralog_stream_member_new(paralog_stream_reader *reader, uint32_t ranks, uint32_t partitions,
                              int spread, paralog_stream_member **out);
int paralog_stream_member_round(paralog_stream_member *m, int timeout_ms, uint64_t *sizes,
                                const uint8_t **buf);
int paralog_stream_member_take(paralog_stream_member *m, const uint8_t *bytes, size_t len,
                               paralog_stream_event *ev);
int paralog_stream_member_ack(paralog_stream_member *m, uint32_t partition, uint64_t offset);
int paralog_stream_member_acks(paralog_stream_member *m, const uint8_t **buf, size_t *len);
int paralog_stream_member_commit(paralog_stream_member *m, const uint8_t *bytes, size_t len);
int paralog_stream_member_free(paralog_stream_member *m);

/* For the helper (libparalog_stream_mpi_*.so): sets this thread's message
 * for a collective failure and returns `code`. */
int paralog_stream_collective_error(int code, const char *stream, uint32_t min_partitions,
                                    uint32_t max_partitions);

#ifdef __cplusplus
}
#endif
#endif
