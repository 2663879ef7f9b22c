/* The writer of bench/drain_vs_cp.py: a plain POSIX program (no MPI) that
 * writes one file in epochs, each ended by fsync (a consistency point of a
 * one-rank communicator), the last followed by close. Run it under capture
 * to make a node-local log, or directly to make the same bytes as a plain
 * file (the baseline's source). Deterministic: same arguments, same bytes.
 *
 *   drain_writer large PATH TOTAL_MIB XFER_KIB EPOCHS
 *       TOTAL_MIB of sequential XFER_KIB pwrites, EPOCHS equal epochs.
 *   drain_writer small PATH EXTENTS EPOCHS SEED
 *       EXTENTS pwrites per epoch of 4..64 KiB (4 KiB steps), each at its
 *       own 80 KiB slot (so no two writes touch or overlap, every write is
 *       a separate extent with a hole on both sides), slots in random order
 *       across the whole file, EPOCHS epochs.
 *
 * Prints one JSON line: {"bytes":N,"seconds":S,"extents":E}.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KIB 1024ull
#define MIB (1024ull * 1024ull)
#define SRC_LEN (64 * MIB)
#define SLOT (80 * KIB)

static uint64_t rng_state;

static uint64_t next(void) {
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "drain_writer: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void pwrite_all(int fd, const char *p, size_t n, uint64_t off) {
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            die("pwrite");
        }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: see the comment at the top of bench/drain_writer.c\n");
        return 2;
    }
    const char *mode = argv[1], *path = argv[2];
    rng_state = 42;
    char *src = malloc(SRC_LEN);
    if (!src)
        die("malloc");
    for (size_t i = 0; i < SRC_LEN; i += 8) {
        uint64_t v = next();
        memcpy(src + i, &v, 8);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        die("open");
    uint64_t bytes = 0, extents = 0;
    double t0 = now();
    if (strcmp(mode, "large") == 0 && argc == 6) {
        uint64_t total = strtoull(argv[3], 0, 10) * MIB, xfer = strtoull(argv[4], 0, 10) * KIB;
        uint64_t epochs = strtoull(argv[5], 0, 10);
        uint64_t per = total / epochs;
        for (uint64_t e = 0; e < epochs; e++) {
            for (uint64_t done = 0; done < per; done += xfer) {
                uint64_t off = e * per + done;
                uint64_t n = per - done < xfer ? per - done : xfer;
                /* a different slice of the source for each write */
                uint64_t at = (off / xfer * 4096 * 7) % (SRC_LEN - n);
                pwrite_all(fd, src + at, n, off);
                bytes += n;
            }
            if (fsync(fd))
                die("fsync");
        }
        extents = epochs;
    } else if (strcmp(mode, "small") == 0 && argc == 6) {
        uint64_t per = strtoull(argv[3], 0, 10), epochs = strtoull(argv[4], 0, 10);
        rng_state = strtoull(argv[5], 0, 10);
        uint64_t nslots = per * epochs;
        uint64_t *slot = malloc(nslots * sizeof *slot);
        if (!slot)
            die("malloc");
        for (uint64_t i = 0; i < nslots; i++)
            slot[i] = i;
        for (uint64_t i = nslots - 1; i > 0; i--) { /* Fisher-Yates */
            uint64_t j = next() % (i + 1), t = slot[i];
            slot[i] = slot[j];
            slot[j] = t;
        }
        for (uint64_t e = 0; e < epochs; e++) {
            for (uint64_t i = 0; i < per; i++) {
                uint64_t s = slot[e * per + i];
                uint64_t n = (1 + next() % 16) * 4 * KIB;
                uint64_t at = (next() % (SRC_LEN / 4096 - 16)) * 4096;
                pwrite_all(fd, src + at, n, s * SLOT);
                bytes += n;
                extents++;
            }
            if (fsync(fd))
                die("fsync");
        }
    } else {
        fprintf(stderr, "usage: see the comment at the top of bench/drain_writer.c\n");
        return 2;
    }
    if (close(fd))
        die("close");
    printf("{\"bytes\":%llu,\"seconds\":%.6f,\"extents\":%llu}\n", (unsigned long long)bytes,
           now() - t0, (unsigned long long)extents);
    return 0;
}
