/* The MPI program of tests/stream/api.py: ranks appending to one stream,
 * or reading it as one reader group, through the C API (paralog/stream.h,
 * paralog/stream_mpi.h).
 *
 *   api_producer produce LOCAL|- STREAM PARTITIONS EVENTS FLUSH_EVERY [ROLL_BYTES SLEEP_US]
 *       collective open; each rank appends EVENTS events (round-robin;
 *       odd ranks by key), payload "<producer id>:<seq>:r<rank>" (the id
 *       it opened with), a collective flush every FLUSH_EVERY; prints
 *       "producer ID" and "flushed N" after each flush returned. With
 *       ROLL_BYTES, its segment rolls at that size
 *       (paralog_stream_set_roll), and it sleeps SLEEP_US after each flush.
 *   api_producer mismatch LOCAL STREAM
 *       rank r asks for 3 + r partitions.
 *   api_producer toolarge LOCAL STREAM PARTITIONS
 *       appends an event of PARALOG_STREAM_MAX_EVENT + 1 bytes.
 *   api_producer groupread REMOTE STREAM GROUP SPREAD ACK_BELOW OUT
 *       the ranks join GROUP (paralog_stream_join_all, from committed,
 *       SPREAD 0 round-robin or 1 by key) and call next_all until a round
 *       times out on all of them; each rank writes the events it got to
 *       OUT.<rank>, one line "partition offset producer seq key payload"
 *       ("-" for no key), acknowledges those at offsets below ACK_BELOW,
 *       and the group commits and leaves. With GROUP_COMMIT_EVERY=N the
 *       group also commits every N rounds; with GROUP_KILL_RANK=K and
 *       GROUP_KILL_AFTER=R rank K kills itself (SIGKILL) after round R.
 * A failure prints "rank R code C: MESSAGE" and exits 3.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <paralog/stream_mpi.h>

static int rank;

static void failed(int rc)
{
    printf("rank %d code %d: %s\n", rank, rc, paralog_stream_last_error());
    fflush(stdout);
    MPI_Finalize();
    exit(3);
}

int main(int argc, char **argv)
{
    paralog_stream *s;
    int rc;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 4) {
        fprintf(stderr, "usage: api_producer produce|mismatch|toolarge LOCAL STREAM ...\n");
        return 2;
    }
    /* "-": the node-local root of the environment (PARALOG_LOCAL, which
     * `paralog run` sets for its program). */
    const char *mode = argv[1], *local = strcmp(argv[2], "-") ? argv[2] : NULL, *stream = argv[3];
    if (strcmp(mode, "mismatch") == 0) {
        if ((rc = paralog_stream_open_all(MPI_COMM_WORLD, local, stream, 3 + rank, &s)))
            failed(rc);
        printf("rank %d opened\n", rank);
    } else if (strcmp(mode, "toolarge") == 0) {
        size_t n = PARALOG_STREAM_MAX_EVENT + 1;
        char *big = calloc(n, 1);
        if ((rc = paralog_stream_open_all(MPI_COMM_WORLD, local, stream, atoi(argv[4]), &s)))
            failed(rc);
        if ((rc = paralog_stream_append(s, big, n, NULL, 0, PARALOG_STREAM_NOW,
                                        PARALOG_STREAM_ROUND_ROBIN, NULL, NULL)))
            failed(rc);
        printf("rank %d appended\n", rank);
    } else if (strcmp(mode, "groupread") == 0) {
        paralog_stream_group *g;
        paralog_stream_event ev;
        char path[4096];
        uint64_t below = strtoull(argv[6], NULL, 10);
        snprintf(path, sizeof path, "%s.%d", argv[7], rank);
        FILE *out = fopen(path, "w");
        if (!out)
            return 5;
        /* Line by line: a rank the launcher kills has its events on record. */
        setvbuf(out, NULL, _IOLBF, 0);
        if ((rc = paralog_stream_join_all(MPI_COMM_WORLD, argv[2], stream, argv[4],
                                          PARALOG_STREAM_FROM_COMMITTED, PARALOG_STREAM_ORDER_CUT,
                                          atoi(argv[5]), &g)))
            failed(rc);
        /* Optional (tests/stream/recover.py): a commit every N rounds,
         * and rank K killing itself (SIGKILL) after round R. */
        const char *ce = getenv("GROUP_COMMIT_EVERY"), *kr = getenv("GROUP_KILL_RANK"),
                   *ka = getenv("GROUP_KILL_AFTER");
        long commit_every = ce ? atol(ce) : 0, kill_after = ka ? atol(ka) : -1, rounds = 0;
        int kill_rank = kr ? atoi(kr) : -1;
        while ((rc = paralog_stream_next_all(g, 2000, &ev)) != PARALOG_STREAM_TIMEDOUT) {
            rounds++;
            if (rc != PARALOG_STREAM_NONE) {
                if (rc)
                    failed(rc);
                fprintf(out, "%u %" PRIu64 " %016" PRIx64 " %" PRIu64 " %.*s %.*s\n", ev.partition,
                        ev.offset, ev.producer, ev.seq, ev.key ? (int)ev.key_len : 1,
                        ev.key ? (const char *)ev.key : "-", (int)ev.payload_len,
                        (const char *)ev.payload);
                if (ev.offset < below && (rc = paralog_stream_group_ack(g, ev.partition, ev.offset)))
                    failed(rc);
            }
            if (rank == kill_rank && rounds == kill_after) {
                fflush(out); /* what it got is on record, then it dies */
                raise(SIGKILL);
            }
            if (commit_every && rounds % commit_every == 0 && (rc = paralog_stream_commit_all(g)))
                failed(rc);
        }
        fclose(out);
        if ((rc = paralog_stream_leave_all(g)))
            failed(rc);
        MPI_Finalize();
        return 0;
    } else {
        uint32_t parts = (uint32_t)atoi(argv[4]);
        long events = atol(argv[5]), every = atol(argv[6]);
        char payload[96], key[32];
        if ((rc = paralog_stream_open_all(MPI_COMM_WORLD, local, stream, parts, &s)))
            failed(rc);
        uint64_t id = paralog_stream_id(s);
        long pause_us = argc > 8 ? atol(argv[8]) : 0;
        if (argc > 7 && (rc = paralog_stream_set_roll(s, strtoull(argv[7], NULL, 10))))
            failed(rc);
        printf("producer %016" PRIx64 "\n", id);
        for (long i = 0; i < events; i++) {
            uint64_t seq;
            int len = snprintf(payload, sizeof payload, "%016" PRIx64 ":%ld:r%d", id, i, rank);
            int klen = snprintf(key, sizeof key, "k%ld", i % 7);
            if ((rc = paralog_stream_append(s, payload, (size_t)len, rank % 2 ? key : NULL,
                                            (size_t)klen, PARALOG_STREAM_NOW,
                                            rank % 2 ? PARALOG_STREAM_BY_KEY : PARALOG_STREAM_ROUND_ROBIN,
                                            NULL, &seq)))
                failed(rc);
            if (seq != (uint64_t)i) {
                printf("rank %d: seq %" PRIu64 " for event %ld\n", rank, seq, i);
                return 4;
            }
            if ((i + 1) % every == 0 || i + 1 == events) {
                if ((rc = paralog_stream_flush_all(MPI_COMM_WORLD, s)))
                    failed(rc);
                printf("flushed %ld\n", i + 1);
                fflush(stdout);
                if (pause_us > 0)
                    usleep((useconds_t)pause_us);
            }
        }
    }
    if ((rc = paralog_stream_close(s)))
        failed(rc);
    MPI_Finalize();
    return 0;
}
