/* A file-per-process checkpoint writer (tests/aggregate/run.py): for each
 * step, each rank writes PREFIX/ckpt/step-NNNNNN/rank-RRRRR.dat with POSIX
 * calls (open O_CREAT|O_TRUNC, write, fsync, close), sizes uneven by up
 * to +-20 %, bytes a function of (rank, step, CKPT_SALT).
 *   ckpt PREFIX NRANKS STEPS MEAN             write (NRANKS processes forked;
 *       CKPT_DIE=STEP:RANK kills that rank halfway through its file; with
 *       MPI, once the other ranks finished theirs)
 *   ckpt PREFIX NRANKS STEPS MEAN verify      read every member back: stat,
 *       open, read, pread, lseek; list each set directory (readdir, glob); prints
 *       "verified" or the problems and "VERIFY FAILED" (exit 1)
 * Built with -DUSE_MPI (mpicc), the ranks are MPI's (NRANKS is ignored
 * when writing), with a barrier between steps; CKPT_MPIIO=1 writes each
 * member with MPI-IO on MPI_COMM_SELF instead of POSIX calls, and
 * CKPT_SHARED=1 writes no members: each step is one shared file
 * ckpt/step-NNNNNN.dat, the ranks' bytes one after the other
 * (MPI_File_write_at_all at MPI_Exscan offsets: the N-1 baseline of
 * bench/aggregate.py). CKPT_SPREAD=P makes sizes uneven by up to +-P %
 * (default 20; 0: all equal); CKPT_COMPUTE_MS=T sleeps T ms after each
 * step's barrier (the computation between checkpoints); CKPT_WRITERS=N
 * (MPI): only ranks below N write, the others only meet the barriers (a
 * later job rewriting the members of some nodes only), CKPT_SKIP=N (MPI):
 * ranks below N do not write (a later job rewriting the members of the
 * other nodes only). CKPT_HOLES=1 (POSIX writes): each member's second
 * and fourth quarters are holes, read as zeros: the rank writes the first
 * quarter, seeks past the second (lseek) and writes the third, then
 * grows the file over the fourth with ftruncate. CKPT_RENAME=1 writes
 * each member under a temporary name in its set directory and renames it
 * into place after the fsync (numpy's and torch's way): even ranks
 * "rank-RRRRR.part.dat" (a name the rule claims too), odd ranks
 * ".rank-RRRRR.tmp" (a name outside it). CKPT_EMPTY=N: ranks from N on
 * write empty members, created 0600 (a group of nodes with no byte). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef USE_MPI
#include <mpi.h>
#endif

static unsigned long salt(void) {
    const char *s = getenv("CKPT_SALT");
    return s ? strtoul(s, NULL, 10) : 0;
}

static unsigned char byte_at(unsigned rank, unsigned step, unsigned long i) {
    unsigned long x = (i + 1) * 2654435761UL ^ (rank * 40503UL + step * 977UL + salt() * 7777UL);
    x ^= x >> 13;
    return (unsigned char)(x * 0x9E37u >> 7);
}

/* CKPT_EMPTY=N: rank's member is empty (and created 0600). */
static int empty_rank(unsigned rank) {
    const char *e = getenv("CKPT_EMPTY");
    return e && rank >= (unsigned)atoi(e);
}

static size_t size_of(unsigned rank, unsigned step, size_t mean) {
    if (empty_rank(rank)) return 0;
    const char *p = getenv("CKPT_SPREAD");
    long spread = (long)mean * (p ? atol(p) : 20) / 100;
    if (spread <= 0) return mean;
    long d = (long)((rank * 7919u + step * 104729u) % 1001u) * 2 * spread / 1000 - spread;
    return (size_t)((long)mean + d);
}

/* CKPT_HOLES=1: whether byte i of a member of n bytes is in a hole (its
 * second quarter, and from its fourth on). */
static int holes(void) {
    static int on = -1;
    if (on < 0) {
        const char *h = getenv("CKPT_HOLES");
        on = h && strcmp(h, "1") == 0;
    }
    return on;
}

static int in_hole(size_t i, size_t n) {
    size_t q = n / 4;
    return holes() && ((i >= q && i < 2 * q) || i >= 3 * q);
}

/* The byte a member holds at i: zero in a hole. */
static unsigned char expected(unsigned rank, unsigned step, size_t i, size_t n) {
    return in_hole(i, n) ? 0 : byte_at(rank, step, i);
}

/* PREFIX/ckpt/step-STEP/rank-RANK.dat into path, its directories made. */
static int member_path(const char *prefix, unsigned rank, unsigned step, char *path, size_t n) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ckpt", prefix);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/ckpt/step-%06u", prefix, step);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) { perror(dir); return 1; }
    snprintf(path, n, "%s/rank-%05u.dat", dir, rank);
    return 0;
}

static int write_rank(const char *prefix, unsigned rank, unsigned step, size_t mean) {
    char path[4200];
    if (member_path(prefix, rank, step, path, sizeof path)) return 1;
    const char *rename_env = getenv("CKPT_RENAME");
    int renamed = rename_env && strcmp(rename_env, "1") == 0;
    char tmp[4300];
    if (renamed) {
        char *slash = strrchr(path, '/');
        if (rank % 2 == 0)
            snprintf(tmp, sizeof tmp, "%.*s/rank-%05u.part.dat", (int)(slash - path), path, rank);
        else
            snprintf(tmp, sizeof tmp, "%.*s/.rank-%05u.tmp", (int)(slash - path), path, rank);
    }
    const char *target = renamed ? tmp : path;
    int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC, empty_rank(rank) ? 0600 : 0644);
    if (fd < 0) { perror(target); return 1; }
    size_t n = size_of(rank, step, mean);
    /* CKPT_DIE=STEP:RANK: that rank is killed halfway through its file. */
    const char *die = getenv("CKPT_DIE");
    unsigned die_step = 0, die_rank = 0;
    int dying = die && sscanf(die, "%u:%u", &die_step, &die_rank) == 2 && die_step == step && die_rank == rank;
    unsigned char buf[65536];
    for (size_t off = 0; off < n;) {
        if (in_hole(off, n)) {
            size_t q = n / 4;
            if (off >= 3 * q) break; /* the tail: ftruncate below */
            off = 2 * q;
            if (lseek(fd, (off_t)off, SEEK_SET) < 0) { perror("lseek"); return 1; }
            continue;
        }
        if (dying && off >= n / 2) {
#ifdef USE_MPI
            /* The other ranks finish (write, fsync, close) their members of
             * this step first: this barrier is theirs after the step. */
            MPI_Barrier(MPI_COMM_WORLD);
#endif
            raise(SIGKILL);
        }
        /* Up to the next hole (or the end). */
        size_t stop = !holes() ? n : off < n / 4 ? n / 4 : 3 * (n / 4);
        size_t k = stop - off < sizeof buf ? stop - off : sizeof buf;
        for (size_t i = 0; i < k; i++) buf[i] = byte_at(rank, step, off + i);
        ssize_t w = write(fd, buf, k);
        if (w <= 0) { perror("write"); return 1; }
        off += (size_t)w;
    }
    if (holes() && ftruncate(fd, (off_t)n) != 0) { perror("ftruncate"); return 1; }
    if (fsync(fd) != 0) { perror("fsync"); return 1; }
    if (close(fd) != 0) { perror("close"); return 1; }
    if (renamed && rename(tmp, path) != 0) { perror(path); return 1; }
    return 0;
}

/* Read every member back: stat, open, read, pread, lseek; list each set
 * directory. Prints one line per problem; returns the number of them. */
static int verify(const char *prefix, unsigned nranks, unsigned steps, size_t mean) {
    int bad = 0;
    for (unsigned s = 1; s <= steps; s++) {
        unsigned step = s * 100;
        char dir[4096], path[4200];
        snprintf(dir, sizeof dir, "%s/ckpt/step-%06u", prefix, step);
        DIR *d = opendir(dir);
        if (!d) { perror(dir); bad++; continue; }
        unsigned seen = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            if (strncmp(e->d_name, "rank-", 5) != 0) { printf("unexpected entry %s/%s\n", dir, e->d_name); bad++; }
            else seen++;
        }
        closedir(d);
        if (seen != nranks) { printf("%s lists %u members, not %u\n", dir, seen, nranks); bad++; }
        char pattern[4200];
        snprintf(pattern, sizeof pattern, "%s/rank-*.dat", dir);
        glob_t g;
        int grc = glob(pattern, 0, NULL, &g);
        if (grc != 0 || g.gl_pathc != nranks) { printf("glob %s: rc %d, %zu matches, not %u\n", pattern, grc, grc ? 0 : g.gl_pathc, nranks); bad++; }
        if (grc == 0) globfree(&g);
        for (unsigned r = 0; r < nranks; r++) {
            snprintf(path, sizeof path, "%s/rank-%05u.dat", dir, r);
            size_t n = size_of(r, step, mean);
            struct stat st;
            if (stat(path, &st) != 0) { perror(path); bad++; continue; }
            if ((size_t)st.st_size != n || !S_ISREG(st.st_mode)) { printf("%s: stat size %ld, want %zu\n", path, (long)st.st_size, n); bad++; }
            if (empty_rank(r) && (st.st_mode & 07777) != 0600) { printf("%s: mode %o, want 600\n", path, (unsigned)(st.st_mode & 07777)); bad++; }
            int fd = open(path, O_RDONLY);
            if (fd < 0) { perror(path); bad++; continue; }
            off_t end = lseek(fd, 0, SEEK_END);
            if (end != (off_t)n) { printf("%s: lseek end %ld, want %zu\n", path, (long)end, n); bad++; }
            lseek(fd, 0, SEEK_SET);
            unsigned char buf[70000];
            size_t off = 0;
            for (;;) {
                ssize_t k = read(fd, buf, sizeof buf);
                if (k < 0) { perror("read"); bad++; break; }
                if (k == 0) break;
                for (ssize_t i = 0; i < k; i++)
                    if (buf[i] != expected(r, step, off + (size_t)i, n)) { printf("%s: byte %zu differs\n", path, off + (size_t)i); bad++; i = k; off = n + 1; }
                off += (size_t)k;
            }
            if (off != n) { printf("%s: read %zu bytes, want %zu\n", path, off, n); bad++; }
            size_t at = n / 3;
            /* A member too short for it (CKPT_EMPTY): a pread at 0 must give nothing. */
            ssize_t want = n < at + 1000 ? (ssize_t)(n - at) : 1000;
            ssize_t k = pread(fd, buf, 1000, (off_t)at);
            if (k != want) { printf("%s: pread gave %ld, not %ld\n", path, (long)k, (long)want); bad++; }
            else if (want == 1000) for (int i = 0; i < 1000; i++) if (buf[i] != expected(r, step, at + (size_t)i, n)) { printf("%s: pread byte %zu differs\n", path, at + (size_t)i); bad++; break; }
            close(fd);
        }
    }
    return bad;
}

#ifdef USE_MPI
/* The same member written with MPI-IO on MPI_COMM_SELF (CKPT_MPIIO=1). */
static int write_rank_mpiio(const char *prefix, unsigned rank, unsigned step, size_t mean) {
    char path[4200];
    if (member_path(prefix, rank, step, path, sizeof path)) return 1;
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS) {
        fprintf(stderr, "MPI_File_open %s failed\n", path);
        return 1;
    }
    MPI_File_set_size(fh, 0);
    size_t n = size_of(rank, step, mean);
    unsigned char buf[65536];
    for (size_t off = 0; off < n;) {
        size_t k = n - off < sizeof buf ? n - off : sizeof buf;
        for (size_t i = 0; i < k; i++) buf[i] = byte_at(rank, step, off + i);
        if (MPI_File_write_at(fh, (MPI_Offset)off, buf, (int)k, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 1;
        off += k;
    }
    return MPI_File_close(&fh) != MPI_SUCCESS;
}

/* Step STEP as one shared file: rank r's bytes (its member's) at the sum
 * of the sizes of the ranks before it, in one collective write. */
static int write_shared(const char *prefix, unsigned rank, unsigned step, size_t mean) {
    char path[4200];
    snprintf(path, sizeof path, "%s/ckpt", prefix);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/ckpt/step-%06u.dat", prefix, step);
    size_t n = size_of(rank, step, mean);
    unsigned long long mine = n, before = 0;
    MPI_Exscan(&mine, &before, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) before = 0; /* MPI_Exscan leaves rank 0's result undefined */
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) { perror("malloc"); return 1; }
    for (size_t i = 0; i < n; i++) buf[i] = byte_at(rank, step, i);
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) { fprintf(stderr, "MPI_File_open %s failed\n", path); free(buf); return 1; }
    rc = MPI_File_write_at_all(fh, (MPI_Offset)before, buf, (int)n, MPI_BYTE, MPI_STATUS_IGNORE);
    rc |= MPI_File_sync(fh);
    rc |= MPI_File_close(&fh);
    free(buf);
    return rc != MPI_SUCCESS;
}
#endif

static void compute_pause(void) {
    const char *c = getenv("CKPT_COMPUTE_MS");
    long ms = c ? atol(c) : 0;
    if (ms <= 0) return;
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

int main(int argc, char **argv) {
    if (argc >= 6 && strcmp(argv[5], "verify") == 0) {
        int bad = verify(argv[1], (unsigned)atoi(argv[2]), (unsigned)atoi(argv[3]), (size_t)atol(argv[4]));
        printf("%s\n", bad ? "VERIFY FAILED" : "verified");
        return bad != 0;
    }
    if (argc < 5) { fprintf(stderr, "usage: %s PREFIX NRANKS STEPS MEAN [RANK]\n", argv[0]); return 2; }
    const char *prefix = argv[1];
    unsigned nranks = (unsigned)atoi(argv[2]), steps = (unsigned)atoi(argv[3]);
    size_t mean = (size_t)atol(argv[4]);
#ifdef USE_MPI
    (void)nranks;
    MPI_Init(&argc, &argv);
    int r, s;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    int rc = 0;
    const char *mpiio = getenv("CKPT_MPIIO"), *shared = getenv("CKPT_SHARED");
    const char *writers = getenv("CKPT_WRITERS"), *skip = getenv("CKPT_SKIP");
    int writes = (!writers || r < atoi(writers)) && (!skip || r >= atoi(skip));
    for (unsigned step = 1; step <= steps; step++) {
        if (!writes)
            ;
        else if (shared && strcmp(shared, "1") == 0)
            rc |= write_shared(prefix, (unsigned)r, step * 100, mean);
        else if (mpiio && strcmp(mpiio, "1") == 0)
            rc |= write_rank_mpiio(prefix, (unsigned)r, step * 100, mean);
        else
            rc |= write_rank(prefix, (unsigned)r, step * 100, mean);
        MPI_Barrier(MPI_COMM_WORLD);
        compute_pause();
    }
    MPI_Finalize();
    return rc;
#else
    for (unsigned step = 1; step <= steps; step++) {
        for (unsigned r = 0; r < nranks; r++) {
            pid_t p = fork();
            if (p == 0) _exit(write_rank(prefix, r, step * 100, mean));
        }
        int st, rc = 0;
        while (wait(&st) > 0) rc |= !WIFEXITED(st) || WEXITSTATUS(st);
        if (rc) return 1;
        compute_pause();
    }
    return 0;
#endif
}
