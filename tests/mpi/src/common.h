/* common.h - helpers shared by paralog's C MPI test programs.
 *
 * Every program: takes the output directory as its first argument, accepts
 * --snapshot, and aborts the whole job (MPI_Abort) with one clear line on any
 * MPI error.  With --snapshot, every consistency point the program reaches on
 * a file (MPI_File_sync, and the final MPI_File_close) is followed by
 * MPI_Barrier, a plain POSIX copy of the whole file by rank 0 of the file's
 * communicator to "<file>.epoch<N>" (N counts the file's consistency points,
 * 1, 2, ...; the state after close is the last N), and MPI_Barrier.  Those
 * copies are the per-epoch reference for paralog's capture tests.
 */
#ifndef PARALOG_MPITEST_COMMON_H
#define PARALOG_MPITEST_COMMON_H

#include <mpi.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *prog = "mpitest";
static int opt_snapshot;
static char *pos_args[8];  /* positional arguments, flags removed */
static int npos_args;
static const char *flags_set[8];
static int nflags_set;

__attribute__((noreturn, format(printf, 1, 2)))
static inline void die(const char *fmt, ...)
{
    int rank = -1, inited = 0, finalized = 0;
    va_list ap;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char line[2048];
    int n = snprintf(line, sizeof line - 1, "%s: rank %d: ", prog, rank);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - 1 - (size_t)n, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    if (write(2, line, strlen(line)) < 0) /* one write: ranks' lines do not interleave */
        exit(1);
    if (inited && !finalized)
        MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

__attribute__((noreturn))
static inline void die_mpi(int rc, const char *call, const char *file, int line)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error code %d", rc);
    die("%s:%d: %s failed: %s", file, line, call, msg);
}

/* Check the return code of an MPI call; abort the job on error. */
#define CHK(call)                                                   \
    do {                                                            \
        int chk_rc_ = (call);                                       \
        if (chk_rc_ != MPI_SUCCESS)                                 \
            die_mpi(chk_rc_, #call, __FILE__, __LINE__);            \
    } while (0)

static inline int flag(const char *name)
{
    for (int i = 0; i < nflags_set; i++)
        if (strcmp(flags_set[i], name) == 0)
            return 1;
    return 0;
}

/* Call right after MPI_Init.  `extra` lists the program's own flags
 * (NULL-terminated, may be NULL); --snapshot is always accepted.  Errors on
 * communicators and files return codes (checked by CHK) instead of the
 * library's default handling, so the message says which call failed. */
static inline void setup(int argc, char **argv, const char *name, int min_pos, int max_pos,
                  const char *const *extra, const char *usage)
{
    prog = name;
    CHK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    CHK(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            if (npos_args == (int)(sizeof pos_args / sizeof pos_args[0]))
                die("too many arguments; usage: %s %s", name, usage);
            pos_args[npos_args++] = argv[i];
            continue;
        }
        int ok = strcmp(a, "--snapshot") == 0;
        for (int j = 0; extra && extra[j] && !ok; j++)
            ok = strcmp(a, extra[j]) == 0;
        if (!ok || nflags_set == (int)(sizeof flags_set / sizeof flags_set[0]))
            die("unknown flag %s; usage: %s %s", a, name, usage);
        flags_set[nflags_set++] = a;
    }
    opt_snapshot = flag("--snapshot");
    if (npos_args < min_pos || npos_args > max_pos)
        die("usage: %s %s", name, usage);
}

/* "<dir>/<name>", allocated; never freed (the programs are short). */
static inline char *path_in(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p)
        die("out of memory");
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static inline void write_all_posix(int fd, const void *buf, size_t n, const char *what)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write %s: %s", what, strerror(errno));
        p += w;
        n -= (size_t)w;
    }
}

/* Copy src to dst with plain POSIX open/read/write. */
static inline void copy_file(const char *src, const char *dst)
{
    char buf[1 << 16];
    int in = open(src, O_RDONLY);
    if (in < 0)
        die("open %s: %s", src, strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0)
        die("create %s: %s", dst, strerror(errno));
    for (;;) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            die("read %s: %s", src, strerror(errno));
        if (r == 0)
            break;
        write_all_posix(out, buf, (size_t)r, dst);
    }
    if (close(out) != 0)
        die("close %s: %s", dst, strerror(errno));
    close(in);
}

/* Write `n` bytes of a deterministic junk pattern to `path` (POSIX, truncating). */
static inline void write_junk(const char *path, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        die("create %s: %s", path, strerror(errno));
    char buf[4096];
    for (size_t off = 0; off < n; off += sizeof buf) {
        size_t len = n - off < sizeof buf ? n - off : sizeof buf;
        for (size_t i = 0; i < len; i++)
            buf[i] = (char)(0xA0 ^ ((off + i) * 131 % 251));
        write_all_posix(fd, buf, len, path);
    }
    if (close(fd) != 0)
        die("close %s: %s", path, strerror(errno));
}

/* Per-path count of consistency points reached (for snapshot names). */
static struct { char *path; int n; } *epochs;
static int nepochs;

static inline int next_epoch(const char *path)
{
    for (int i = 0; i < nepochs; i++)
        if (strcmp(epochs[i].path, path) == 0)
            return ++epochs[i].n;
    epochs = realloc(epochs, (size_t)(nepochs + 1) * sizeof *epochs);
    if (!epochs || !(epochs[nepochs].path = strdup(path)))
        die("out of memory");
    epochs[nepochs].n = 1;
    return epochs[nepochs++].n;
}

/* A consistency point on `path` (opened on `comm`) was reached.  With
 * --snapshot: barrier, rank 0 of comm copies the file, barrier. */
static inline void epoch_done(MPI_Comm comm, const char *path)
{
    if (!opt_snapshot)
        return;
    int n = next_epoch(path), rank;
    char dst[4096];
    snprintf(dst, sizeof dst, "%s.epoch%d", path, n);
    CHK(MPI_Barrier(comm));
    CHK(MPI_Comm_rank(comm, &rank));
    if (rank == 0)
        copy_file(path, dst);
    CHK(MPI_Barrier(comm));
}

/* MPI_File_sync, then a barrier: the programs' next epoch may overwrite bytes
 * other ranks wrote in this one, which MPI orders only by sync + barrier. */
static inline void file_sync(MPI_File fh, MPI_Comm comm, const char *path)
{
    CHK(MPI_File_sync(fh));
    CHK(MPI_Barrier(comm));
    epoch_done(comm, path);
}

static inline void file_close(MPI_File *fh, MPI_Comm comm, const char *path)
{
    CHK(MPI_File_close(fh));
    epoch_done(comm, path);
}

/* Split n items into `parts` near-equal blocks; block `idx` is [*start, *start + *count). */
static inline void split(int n, int parts, int idx, int *start, int *count)
{
    int base = n / parts, rem = n % parts;
    *count = base + (idx < rem);
    *start = idx * base + (idx < rem ? idx : rem);
}

/* MPI_File_get_size must equal `expect`; then a barrier, because the next
 * (collective but not synchronizing) set_size or write may change the size
 * before a slower rank has asked. */
static inline void check_size(MPI_File fh, MPI_Offset expect, const char *when)
{
    MPI_Offset sz;
    CHK(MPI_File_get_size(fh, &sz));
    if (sz != expect)
        die("MPI_File_get_size %s: got %lld, expected %lld", when, (long long)sz,
            (long long)expect);
    CHK(MPI_Barrier(MPI_COMM_WORLD));
}

#endif
