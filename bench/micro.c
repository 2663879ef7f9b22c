/* Micro benchmark of POSIX write patterns (bench/micro.py runs it raw and
 * under `paralog run`; docs/benchmarks.md section 7).
 *
 * Usage: micro MODE PATH SIZE N [fsync]
 *   files   N new files PATH.0 .. PATH.N-1: open(O_CREAT|O_TRUNC), one
 *           write of SIZE bytes, close (with "fsync": fsync before close);
 *   append  one file PATH: N writes of SIZE bytes at the end, fsync, close;
 *   seek    one file PATH: N writes of SIZE bytes, each after an lseek to
 *           its slot (slot i at i * SIZE), slots in a shuffled order (a
 *           fixed permutation), fsync, close: the same bytes as append.
 * Prints one JSON line: seconds for the whole loop (opens and closes
 * included), bytes written.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fail(const char *what) {
    fprintf(stderr, "micro: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void write_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            fail("write");
        }
        buf += w;
        n -= (size_t)w;
    }
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s files|append|seek PATH SIZE N [fsync]\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1], *path = argv[2];
    size_t size = strtoull(argv[3], NULL, 10);
    long n = atol(argv[4]);
    int do_fsync = argc > 5 && !strcmp(argv[5], "fsync");
    char *buf = malloc(size);
    if (!buf) fail("malloc");
    for (size_t i = 0; i < size; i++) buf[i] = (char)(i * 131 + 7);
    long *order = malloc(sizeof(long) * (size_t)n);
    for (long i = 0; i < n; i++) order[i] = i;
    unsigned long long x = 88172645463325252ULL; /* xorshift: a fixed shuffle */
    for (long i = n - 1; i > 0; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        long j = (long)(x % (unsigned long long)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    char name[4096];
    double t0 = now(), t_open = 0, t_written = 0, t_synced = 0;
    if (!strcmp(mode, "files")) {
        for (long i = 0; i < n; i++) {
            snprintf(name, sizeof name, "%s.%ld", path, i);
            int fd = open(name, O_CREAT | O_TRUNC | O_WRONLY, 0644);
            if (fd < 0) fail("open");
            buf[0] = (char)i;
            write_all(fd, buf, size);
            if (do_fsync && fsync(fd) != 0) fail("fsync");
            if (close(fd) != 0) fail("close");
        }
    } else if (!strcmp(mode, "append") || !strcmp(mode, "seek")) {
        int seek = !strcmp(mode, "seek");
        int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        if (fd < 0) fail("open");
        t_open = now();
        for (long i = 0; i < n; i++) {
            long slot = seek ? order[i] : i;
            if (seek && lseek(fd, (off_t)slot * (off_t)size, SEEK_SET) < 0) fail("lseek");
            buf[0] = (char)slot;
            write_all(fd, buf, size);
        }
        t_written = now();
        if (fsync(fd) != 0) fail("fsync");
        t_synced = now();
        if (close(fd) != 0) fail("close");
    } else {
        fprintf(stderr, "micro: unknown mode %s\n", mode);
        return 2;
    }
    double dt = now() - t0;
    printf("{\"seconds\": %.6f, \"bytes\": %llu", dt, (unsigned long long)size * (unsigned long long)n);
    /* Where an append or seek run's time went: the open, the writes, the
     * fsync (under paralog, the consistency point), the close. */
    if (t_open > 0)
        printf(", \"open\": %.6f, \"writes\": %.6f, \"fsync\": %.6f, \"close\": %.6f", t_open - t0,
               t_written - t_open, t_synced - t_written, dt - (t_synced - t0));
    printf("}\n");
    free(order);
    free(buf);
    return 0;
}
