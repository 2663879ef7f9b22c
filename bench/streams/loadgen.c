/* The load generator of the streams benchmark (docs/benchmarks.md section 12).
 *
 *   loadgen paralog LOCAL STREAM PARTITIONS SECONDS SIZE FLUSH_MS [RATE]
 *       one producer: appends SIZE-byte events round-robin to STREAM under
 *       the node-local root LOCAL (libparalog_stream), as fast as it can
 *       (or RATE events/s, paced), with one paralog_stream_flush (one
 *       fdatasync) every FLUSH_MS ms, for SECONDS seconds, then closes (a
 *       last flush).
 *   loadgen file PATH SECONDS SIZE FLUSH_MS
 *       the raw baseline: the same events (no framing) buffered in memory
 *       and written to PATH (O_APPEND, created) with one write() and one
 *       fdatasync every FLUSH_MS ms. Several producers may name one PATH
 *       (the shared-file baseline: every batch is one O_APPEND write).
 *   loadgen read REMOTE STREAM GROUP COUNT_FILE SECONDS
 *       one reader of the group GROUP on the drained remote: takes events
 *       until it has as many as COUNT_FILE says (written by the runner
 *       when the producers are done) or SECONDS passed; per event the
 *       receive time minus the event time (the producer's append time),
 *       and the time from the first event to the last (a read rate).
 *
 * Each prints one JSON line on stdout: events, bytes, seconds and (read)
 * the latency percentiles in ms. Build: cc -O2 loadgen.c -Ipath/to/include
 * -Lpath/to/release -lparalog_stream -Wl,-rpath,path/to/release. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <paralog/stream.h>

static int64_t now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "loadgen: %s: %s\n", what, paralog_stream_last_error());
    exit(1);
}

static void fill(unsigned char *buf, size_t size, uint64_t seq) {
    /* Not constant, so that nothing on the way can shortcut it. */
    uint64_t x = seq * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < size; i += 8) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        memcpy(buf + i, &x, size - i < 8 ? size - i : 8);
    }
}

/* One producer's timed loop, the same for every method: append events in
 * small runs between clock reads, flush every flush_ns (its time is the
 * flush latency), stop at the first flush after secs; rate > 0 paces the
 * appends to that many events/s. Prints the producer's JSON report. */
struct sink {
    void (*append)(void *ctx, uint64_t seq);
    void (*flush)(void *ctx);
    void *ctx;
};

static int timed_loop(const struct sink *k, double secs, size_t size, int64_t flush_ns, double rate) {
    int64_t t0 = now_ns(CLOCK_MONOTONIC), end = t0 + (int64_t)(secs * 1e9);
    int64_t next_flush = t0 + flush_ns, worst = 0;
    uint64_t n = 0, flushes = 0;
    for (;;) {
        int64_t t = now_ns(CLOCK_MONOTONIC);
        if (t >= next_flush) {
            k->flush(k->ctx);
            int64_t d = now_ns(CLOCK_MONOTONIC) - t;
            if (d > worst) worst = d;
            flushes++;
            next_flush = t + flush_ns;
            if (t >= end) break;
        }
        if (rate > 0 && (double)n >= rate * (double)(t - t0) / 1e9) {
            int64_t wait = next_flush - t;
            usleep((useconds_t)((wait < 1000000 ? wait : 1000000) / 1000 + 1));
            continue;
        }
        for (int r = 0; r < (rate > 0 ? 1 : 16); r++) k->append(k->ctx, n++);
    }
    double el = (now_ns(CLOCK_MONOTONIC) - t0) / 1e9;
    printf("{\"events\": %llu, \"bytes\": %llu, \"seconds\": %.6f, \"flushes\": %llu, "
           "\"worst_flush_ms\": %.3f}\n",
           (unsigned long long)n, (unsigned long long)(n * size), el,
           (unsigned long long)flushes, worst / 1e6);
    return 0;
}

struct paralog_ctx {
    paralog_stream *s;
    unsigned char *buf;
    size_t size;
};

static void paralog_append(void *c, uint64_t seq) {
    struct paralog_ctx *p = c;
    fill(p->buf, p->size, seq);
    if (paralog_stream_append(p->s, p->buf, p->size, NULL, 0, PARALOG_STREAM_NOW,
                              PARALOG_STREAM_ROUND_ROBIN, NULL, NULL))
        die("append");
}

static void paralog_flush(void *c) {
    if (paralog_stream_flush(((struct paralog_ctx *)c)->s, NULL)) die("flush");
}

static int produce_paralog(char **a) {
    const char *local = a[0], *stream = a[1];
    uint32_t parts = (uint32_t)atoi(a[2]);
    double secs = atof(a[3]);
    size_t size = (size_t)atol(a[4]);
    int64_t flush_ns = (int64_t)(atof(a[5]) * 1e6);
    double rate = a[6] ? atof(a[6]) : 0;
    struct paralog_ctx p = {.buf = malloc(size), .size = size};
    if (paralog_stream_open(local, stream, parts, &p.s)) die("open");
    struct sink k = {paralog_append, paralog_flush, &p};
    timed_loop(&k, secs, size, flush_ns, rate);
    if (paralog_stream_close(p.s)) die("close");
    return 0;
}

/* The raw baseline: the events of a flush interval buffered, then one
 * write and one fdatasync. */
struct file_ctx {
    int fd;
    unsigned char *batch;
    size_t cap, len, size;
};

static void file_append(void *c, uint64_t seq) {
    struct file_ctx *f = c;
    if (f->len + f->size > f->cap) {
        f->cap *= 2;
        f->batch = realloc(f->batch, f->cap);
        if (!f->batch) { perror("realloc"); exit(1); }
    }
    fill(f->batch + f->len, f->size, seq);
    f->len += f->size;
}

static void file_flush(void *c) {
    struct file_ctx *f = c;
    size_t off = 0;
    while (off < f->len) {
        ssize_t w = write(f->fd, f->batch + off, f->len - off);
        if (w < 0) { if (errno == EINTR) continue; perror("write"); exit(1); }
        off += (size_t)w;
    }
    if (fdatasync(f->fd)) { perror("fdatasync"); exit(1); }
    f->len = 0;
}

static int produce_file(char **a) {
    const char *path = a[0];
    double secs = atof(a[1]);
    size_t size = (size_t)atol(a[2]);
    int64_t flush_ns = (int64_t)(atof(a[3]) * 1e6);
    struct file_ctx f = {.fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644),
                         .cap = 1 << 20, .size = size};
    if (f.fd < 0) { perror(path); return 1; }
    f.batch = malloc(f.cap);
    struct sink k = {file_append, file_flush, &f};
    timed_loop(&k, secs, size, flush_ns, 0);
    close(f.fd);
    return 0;
}

static int cmp64(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

static long long read_count(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long long c = -1;
    if (fscanf(f, "%lld", &c) != 1) c = -1;
    fclose(f);
    return c;
}

static int read_group(char **a) {
    const char *remote = a[0], *stream = a[1], *group = a[2], *count_file = a[3];
    double secs = atof(a[4]);
    paralog_stream_reader *r = NULL;
    int64_t t0 = now_ns(CLOCK_MONOTONIC), end = t0 + (int64_t)(secs * 1e9);
    /* The stream exists on the remote after the drain's first round. */
    while (paralog_stream_join(remote, stream, group, PARALOG_STREAM_FROM_COMMITTED,
                               PARALOG_STREAM_ORDER_CUT, &r)) {
        if (now_ns(CLOCK_MONOTONIC) > end) die("join");
        usleep(20000);
    }
    size_t cap = 1 << 20, n = 0;
    int64_t *lat = malloc(cap * sizeof *lat);
    uint64_t bytes = 0;
    long long want = -1;
    int64_t t_first = 0, t_last = 0;
    paralog_stream_event ev;
    while (now_ns(CLOCK_MONOTONIC) < end) {
        int rc = paralog_stream_next(r, 200, &ev);
        if (rc == PARALOG_STREAM_TIMEDOUT) {
            if (want < 0) want = read_count(count_file);
            if (want >= 0 && (long long)n >= want) break;
            continue;
        }
        if (rc) die("next");
        int64_t l = now_ns(CLOCK_REALTIME) - ev.time_ns;
        t_last = now_ns(CLOCK_MONOTONIC);
        if (n == 0) t_first = t_last;
        if (n == cap) {
            cap *= 2;
            lat = realloc(lat, cap * sizeof *lat);
        }
        lat[n++] = l;
        bytes += ev.payload_len;
        if ((n & 8191) == 0) {
            paralog_stream_ack(r, ev.partition, ev.offset);
        }
    }
    if (paralog_stream_leave(r)) die("leave");
    double el = (now_ns(CLOCK_MONOTONIC) - t0) / 1e9;
    qsort(lat, n, sizeof *lat, cmp64);
#define PCT(p) (n ? lat[(size_t)((n - 1) * (p))] / 1e6 : 0.0)
    printf("{\"events\": %zu, \"bytes\": %llu, \"seconds\": %.6f, \"expected\": %lld, "
           "\"first_to_last_s\": %.6f, "
           "\"lat_p50_ms\": %.3f, \"lat_p99_ms\": %.3f, \"lat_max_ms\": %.3f}\n",
           n, (unsigned long long)bytes, el, want, (t_last - t_first) / 1e9, PCT(0.5), PCT(0.99),
           PCT(1.0));
    return 0;
}

int main(int argc, char **argv) {
    if ((argc == 8 || argc == 9) && !strcmp(argv[1], "paralog")) return produce_paralog(argv + 2);
    if (argc == 6 && !strcmp(argv[1], "file")) return produce_file(argv + 2);
    if (argc == 7 && !strcmp(argv[1], "read")) return read_group(argv + 2);
    fprintf(stderr,
            "usage: loadgen paralog LOCAL STREAM PARTITIONS SECONDS SIZE FLUSH_MS [RATE]\n"
            "       loadgen file PATH SECONDS SIZE FLUSH_MS\n"
            "       loadgen read REMOTE STREAM GROUP COUNT_FILE SECONDS\n");
    return 2;
}
