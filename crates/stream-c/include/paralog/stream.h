/* paralog/stream.h: shared event streams from C (docs/streams.md).
 *
 * A producer appends events to its own segment of a stream under the
 * node-local root; paralog_stream_flush makes them durable (one fdatasync);
 * the node server (or `paralog stream drain`) moves them to the remote,
 * where readers, alone or as a reader group, read them back.
 *
 * Link with -lparalog_stream (target/release/libparalog_stream.so). The
 * collective forms on an MPI communicator are in paralog/stream_mpi.h.
 *
 * Every function returns PARALOG_STREAM_OK (0) or a code below; after a
 * code other than OK and TIMEDOUT, paralog_stream_last_error() says what
 * failed, naming the stream, the file and the byte offset where there is
 * one. A handle is used by one thread at a time; the message is per thread.
 */
#ifndef PARALOG_STREAM_H
#define PARALOG_STREAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum paralog_stream_code {
    PARALOG_STREAM_OK = 0,
    /* paralog_stream_next: no event within the timeout (not an error). */
    PARALOG_STREAM_TIMEDOUT = 1,
    /* A bad argument: a name, a partition, a NULL handle. */
    PARALOG_STREAM_EINVAL = 2,
    /* The remote holds no such stream. */
    PARALOG_STREAM_EUNKNOWN = 3,
    /* The stream exists with another partition count. */
    PARALOG_STREAM_EPARTITIONS = 4,
    /* An event larger than PARALOG_STREAM_MAX_EVENT (key + payload). */
    PARALOG_STREAM_ETOOLARGE = 5,
    /* Bytes that do not check (the file and offset are in the message). */
    PARALOG_STREAM_ECORRUPT = 6,
    /* A system call failed (the file is in the message). */
    PARALOG_STREAM_EIO = 7,
    /* The stream's quota of undrained local bytes is full. */
    PARALOG_STREAM_EFULL = 8,
    /* A collective call failed on another rank. */
    PARALOG_STREAM_EPEER = 9,
    /* A bug in paralog (a Rust panic, caught at the boundary). */
    PARALOG_STREAM_EINTERNAL = 10,
    /* A reader's offset is below its partition's first segment (deleted by
     * `paralog stream trim`): read from earliest instead. */
    PARALOG_STREAM_ETRIMMED = 11,
    /* paralog_stream_next_all (paralog/stream_mpi.h): the group got events
     * this round, none for this rank (not an error: call again). */
    PARALOG_STREAM_NONE = 12
};

/* The largest event: key + payload bytes. */
#define PARALOG_STREAM_MAX_EVENT (16u << 20)

/* paralog_stream_append's partition: round-robin over the partitions, by
 * the key's hash (one key, one partition; round-robin without a key), or a
 * partition number (0 .. partitions - 1). */
#define PARALOG_STREAM_ROUND_ROBIN (-1)
#define PARALOG_STREAM_BY_KEY (-2)

/* paralog_stream_append's time: the producer's clock now. */
#define PARALOG_STREAM_NOW INT64_MIN

typedef struct paralog_stream paralog_stream;
typedef struct paralog_stream_reader paralog_stream_reader;

/* The message of this thread's last failure ("" if none). Valid until the
 * thread's next call. */
const char *paralog_stream_last_error(void);

/* Open this process's segment of `stream` under the node-local root
 * `local` (NULL: $PARALOG_LOCAL; "{node}" stands for the node's name),
 * creating the stream with `partitions` partitions (1 .. 65536) if the
 * node does not hold it yet. EPARTITIONS if it holds it with another count. */
int paralog_stream_open(const char *local, const char *stream, uint32_t partitions,
                        paralog_stream **out);

/* Append one event (not durable until the next flush). key == NULL: no
 * key. time_ns: ns since the epoch, or PARALOG_STREAM_NOW. partition:
 * PARALOG_STREAM_ROUND_ROBIN, PARALOG_STREAM_BY_KEY or a number. The
 * partition chosen and the event's sequence number (per producer, from 0)
 * are stored in *partition_out and *seq_out when they are not NULL. */
int paralog_stream_append(paralog_stream *s, const void *payload, size_t payload_len,
                          const void *key, size_t key_len, int64_t time_ns, int32_t partition,
                          uint32_t *partition_out, uint64_t *seq_out);

/* Backpressure: when this node holds more than `bytes` bytes of the
 * stream that the drain has not taken yet, paralog_stream_append waits up
 * to timeout_ms for the drain, then fails with EFULL (timeout_ms 0: fails
 * at once). bytes 0: no quota (the default). Counted after each batch this
 * producer writes: the stream may pass the quota by what its producers
 * write between two counts (docs/streams.md, "Backpressure"). */
int paralog_stream_set_quota(paralog_stream *s, uint64_t bytes, int timeout_ms);

/* Local retention: after a flush, once this producer's segment holds
 * `bytes` bytes (64 MiB by default; 0: never), it continues in a new
 * segment, and the drain deletes the old one once it is on the remote. The
 * producer's id (paralog_stream_id) is then the new segment's; sequence
 * numbers go on (docs/streams.md, "Local retention"). */
int paralog_stream_set_roll(paralog_stream *s, uint64_t bytes);

/* Make every event appended so far durable: one write and one fdatasync.
 * *durable_out (if not NULL): this producer's events with a sequence number
 * below it are durable. */
int paralog_stream_flush(paralog_stream *s, uint64_t *durable_out);

/* Flush, then free the handle (freed even when the flush fails). */
int paralog_stream_close(paralog_stream *s);

/* Where a reader starts. */
#define PARALOG_STREAM_FROM_EARLIEST 0
/* The group's committed offsets (earliest if it has none). */
#define PARALOG_STREAM_FROM_COMMITTED 1

/* How a reader merges the partitions (docs/streams.md, "What order means"). */
#define PARALOG_STREAM_ORDER_CUT 0
#define PARALOG_STREAM_ORDER_TIME 1
/* Strict event time: an event waits until every partition has passed its
 * time, or has had nothing new for the idle timeout (1000 ms, or
 * paralog_stream_set_idle); `next` waits for that within its timeout. */
#define PARALOG_STREAM_ORDER_WATERMARK 2

/* An event handed to a reader. The key and payload stay valid until the
 * reader's next call. */
typedef struct paralog_stream_event {
    uint64_t offset;   /* in its partition */
    uint64_t round;    /* the drain round that stored it */
    uint64_t producer; /* the producer's id */
    uint64_t seq;      /* the producer's sequence number */
    int64_t time_ns;   /* event time */
    const void *key;   /* NULL: no key */
    size_t key_len;
    const void *payload;
    size_t payload_len;
    uint32_t partition;
    uint32_t reserved;
} paralog_stream_event;

/* Read `stream` from the remote `remote` (a directory, or file:///path),
 * as the reader group `group` (NULL: alone, nothing to commit). */
int paralog_stream_join(const char *remote, const char *stream, const char *group, int from,
                        int order, paralog_stream_reader **out);

/* The same, starting each partition at its first event whose event time
 * is at or after time_ns (ns since the epoch); later events with earlier
 * times are delivered too (a partition is in cut order). */
int paralog_stream_join_time(const char *remote, const char *stream, const char *group,
                             int64_t time_ns, int order, paralog_stream_reader **out);

/* The idle timeout of a reader joined in PARALOG_STREAM_ORDER_WATERMARK:
 * a partition with nothing new for idle_ms is no longer waited for. */
int paralog_stream_set_idle(paralog_stream_reader *r, int64_t idle_ms);

/* The next event, waiting up to timeout_ms for the drain to publish one
 * (0: do not wait; -1: wait as long as it takes). TIMEDOUT if none came. */
int paralog_stream_next(paralog_stream_reader *r, int timeout_ms, paralog_stream_event *ev);

/* The event at `offset` of `partition`, and every earlier event of that
 * partition handed to this reader, are processed. */
int paralog_stream_ack(paralog_stream_reader *r, uint32_t partition, uint64_t offset);

/* Store the group's offsets: everything acknowledged. Delivery is at
 * least once: events handed out and not committed come again to the next
 * reader of the group. */
int paralog_stream_commit(paralog_stream_reader *r);

/* Commit (with a group), then free the handle (freed even on failure). */
int paralog_stream_leave(paralog_stream_reader *r);

/* This producer's id (the `producer` of its events). */
uint64_t paralog_stream_id(const paralog_stream *s);

/* The stream's name (valid while the handle is open). */
const char *paralog_stream_name(const paralog_stream *s);

/* The stream's partition count (of a producer's or a reader's stream). */
uint32_t paralog_stream_partitions(const paralog_stream *s);
uint32_t paralog_stream_reader_partitions(const paralog_stream_reader *r);

#ifdef __cplusplus
}
#endif
#endif
