/* epochs: many epochs of noncontiguous overwrites and size changes, for the
 * server crash tests (tests/server/crash.py).
 *
 * Usage: epochs OUTDIR [--epochs=N] [--kib=K] [--sleep-ms=M]
 *               [--progress=FILE] [--kill-in-sync=E:R:USEC] [--snapshot]
 *
 * Writes OUTDIR/epochs.dat in N epochs (default 8).  Epochs 1..N-1 end with
 * MPI_File_sync (+ barrier), epoch N with MPI_File_close, so the file has
 * exactly N consistency points and --snapshot makes epochs.dat.epoch1..N.
 * Each rank writes about K KiB per epoch (default 512), in blocks of 4000
 * bytes (8-byte aligned, not page aligned) chosen by a hash of (epoch,
 * block): about 2/3 of the blocks of the epoch's range are written, each by
 * one rank (ranks write disjoint bytes within an epoch), so every epoch
 * overwrites parts of earlier epochs and leaves other parts alone.  In the
 * collective (even) epochs every block past the end of the file is written:
 * ROMIO's two-phase write in a direct run would fill a hole there with
 * garbage (tests/mpi/README.md, noncontig_holes), and the direct runs are
 * the reference.
 *
 * The epoch's range and size operation follow a cycle of four:
 *   1: blocks [1, R+1): block 0 stays a hole (in the first epoch);
 *   2: blocks [R/2, 3R/2): the file grows;
 *   3: MPI_File_set_size shrinks the file first (into the middle of a
 *      block), then blocks [R/4, 3R/4) are written: zeros between the cut
 *      and the new writes, old bytes past the cut never come back;
 *   4: blocks [0, R), then set_size grows the file (a sparse tail), or in
 *      every second cycle shrinks it into the epoch's own writes.
 * R = 3/2 * ranks * K KiB / 4000 blocks.  Odd epochs use independent
 * MPI_File_write_at calls, one per run of adjacent blocks in descending
 * order, and first write junk over the rank's first run (overwritten later
 * in the same epoch: the junk must never reach any file).  Even epochs use
 * one collective MPI_File_write_at_all through an indexed-block view.
 *
 * Every 8-byte word of epoch e at word index w holds splitmix64(e, w): a
 * byte's epoch can be told from its value, so a byte of an epoch that was
 * never committed is recognisable.
 *
 * --sleep-ms=M: all ranks sleep about M ms after each consistency point
 * (M/2, M or 3M/2, varying by epoch): "compute" between epochs, so that
 * kills land at varied moments.  --progress=FILE: rank 0 appends
 * "syncing N" just before the consistency point of epoch N and
 * "committed N" right after it returned (one write(2) each, O_APPEND,
 * outside MPI: the file must be outside the captured prefix).  The crash
 * tests read it while the program runs (stdout would die with mpirun).
 *
 * --kill-in-sync=E:R:USEC: rank R arms a one-shot POSIX timer that sends
 * itself SIGKILL USEC microseconds after it enters the consistency point of
 * epoch E (MPI_File_sync, or the close for the last epoch).  A consistency
 * point takes a few ms (fdatasync, manifest, agreement): a kill from outside
 * the process rarely lands inside it on a busy machine; this one does,
 * unless the sync returned first (then the rank dies soon after it).
 */
#include "common.h"
#include <signal.h>
#include <stdint.h>
#include <time.h>

enum { BLK = 4000 };

static int progress_fd = -1;

static void note(const char *what, int e)
{
    if (progress_fd < 0)
        return;
    char line[64];
    int n = snprintf(line, sizeof line, "%s %d\n", what, e);
    write_all_posix(progress_fd, line, (size_t)n, "progress file");
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* The bytes of file block b as epoch e writes them (tag 0: real data,
 * tag 1: junk that is overwritten within the epoch). */
static void fill_block(char *dst, int64_t b, int e, int tag)
{
    uint64_t w0 = (uint64_t)b * (BLK / 8);
    for (int i = 0; i < BLK / 8; i++) {
        uint64_t v = splitmix64(((uint64_t)e << 40) ^ ((uint64_t)tag << 60) ^ (w0 + (uint64_t)i));
        memcpy(dst + 8 * i, &v, 8);
    }
}

/* Which rank writes block b of range [lo, hi) in epoch e, or -1 (a hole).
 * The first `ranks` blocks of the range go one to each rank (everyone
 * writes).  `dense_from`: blocks that end past this offset are never holes
 * (see main). */
static int owner(int64_t b, int64_t lo, int e, int ranks, int64_t dense_from)
{
    if (b - lo < ranks)
        return (int)(b - lo);
    uint64_t h = splitmix64(((uint64_t)e << 32) ^ (uint64_t)b ^ 0xB10C);
    if (h % 3 == 0 && (b + 1) * BLK <= dense_from)
        return -1;
    return (int)((h >> 8) % (uint64_t)ranks);
}

/* SIGKILL to this process `usec` microseconds from now. */
static void arm_kill(long usec)
{
    timer_t t;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = SIGKILL;
    if (timer_create(CLOCK_MONOTONIC, &ev, &t) != 0)
        die("timer_create: %s", strerror(errno));
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    its.it_value.tv_sec = usec / 1000000;
    its.it_value.tv_nsec = (usec % 1000000) * 1000 + 1; /* 0 would disarm */
    if (timer_settime(t, 0, &its, NULL) != 0)
        die("timer_settime: %s", strerror(errno));
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int main(int argc, char **argv)
{
    int rank, size, nepochs = 8;
    long kib = 512, sleep = 0;
    const char *progress = NULL;
    int kill_epoch = 0, kill_rank = -1;
    long kill_usec = 0;

    /* --key=value options are ours; the rest goes to setup(). */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0;
    if (!rest)
        return 1;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--epochs=", 9) == 0)
            nepochs = atoi(argv[i] + 9);
        else if (strncmp(argv[i], "--kib=", 6) == 0)
            kib = atol(argv[i] + 6);
        else if (strncmp(argv[i], "--sleep-ms=", 11) == 0)
            sleep = atol(argv[i] + 11);
        else if (strncmp(argv[i], "--progress=", 11) == 0)
            progress = argv[i] + 11;
        else if (strncmp(argv[i], "--kill-in-sync=", 15) == 0) {
            if (sscanf(argv[i] + 15, "%d:%d:%ld", &kill_epoch, &kill_rank, &kill_usec) != 3 ||
                kill_epoch < 1 || kill_rank < 0 || kill_usec < 0) {
                fprintf(stderr, "epochs: bad %s (want E:R:USEC)\n", argv[i]);
                return 2;
            }
        }
        else
            rest[nrest++] = argv[i];
    }

    MPI_Init(&argc, &argv);
    setup(nrest, rest, "epochs", 1, 1, NULL,
          "OUTDIR [--epochs=N] [--kib=K] [--sleep-ms=M] [--progress=FILE] "
          "[--kill-in-sync=E:R:USEC] [--snapshot]");
    if (nepochs < 1 || nepochs > 1000 || kib < 4 || kib > (1 << 20) || sleep < 0)
        die("bad --epochs, --kib or --sleep-ms");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (rank == 0 && progress) {
        progress_fd = open(progress, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (progress_fd < 0)
            die("open %s: %s", progress, strerror(errno));
    }
    char *path = path_in(pos_args[0], "epochs.dat");
    const int64_t R = 3 * (int64_t)size * kib * 1024 / BLK / 2;
    if ((2 * R + 8) * BLK > 0x7fffffff)
        die("--kib=%ld is too large for %d ranks (offsets are ints)", kib, size);

    MPI_File fh;
    CHK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));

    int *displs = malloc(sizeof(int) * (size_t)(2 * R + 8));
    char *buf = malloc((size_t)BLK * (size_t)(2 * R + 8));
    char *junk = malloc(BLK);
    if (!displs || !buf || !junk)
        die("out of memory");

    int64_t eof = 0; /* the file's size, as this program made it */
    for (int e = 1; e <= nepochs; e++) {
        int cycle = (e - 1) % 4, second = ((e - 1) / 4) % 2;
        int64_t lo, hi;
        switch (cycle) {
        case 0: lo = 1, hi = R + 1; break;
        case 1: lo = R / 2, hi = R / 2 + R; break;
        case 2: lo = R / 4, hi = 3 * R / 4; break;
        default: lo = 0, hi = R; break;
        }
        if (cycle == 2) {
            eof = (2 * R / 3) * BLK + 8 * 37;
            CHK(MPI_File_set_size(fh, (MPI_Offset)eof));
            CHK(MPI_Barrier(MPI_COMM_WORLD));
        }

        /* This rank's blocks, ascending.  A collective write leaves no hole
         * past the end of the file: ROMIO's two-phase write (direct runs)
         * reads such a hole short at EOF and writes back garbage. */
        int64_t dense_from = e % 2 == 0 ? eof : INT64_MAX;
        int n = 0;
        for (int64_t b = lo; b < hi; b++) {
            int o = owner(b, lo, e, size, dense_from);
            if (o >= 0 && (b + 1) * BLK > eof)
                eof = (b + 1) * BLK;
            if (o == rank) {
                displs[n] = (int)(b * BLK);
                fill_block(buf + (size_t)n * BLK, b, e, 0);
                n++;
            }
        }

        if (e % 2 == 1) {
            /* Independent writes, one per run, last run first; junk first. */
            int first_end = 1;
            while (first_end < n && displs[first_end] == displs[first_end - 1] + BLK)
                first_end++;
            for (int i = 0; i < first_end; i++) {
                fill_block(junk, displs[i] / BLK, e, 1);
                CHK(MPI_File_write_at(fh, displs[i], junk, BLK, MPI_BYTE, MPI_STATUS_IGNORE));
            }
            int end = n;
            while (end > 0) {
                int start = end - 1;
                while (start > 0 && displs[start - 1] + BLK == displs[start])
                    start--;
                CHK(MPI_File_write_at(fh, displs[start], buf + (size_t)start * BLK,
                                      (end - start) * BLK, MPI_BYTE, MPI_STATUS_IGNORE));
                end = start;
            }
        } else {
            MPI_Datatype ft;
            CHK(MPI_Type_create_indexed_block(n, BLK, displs, MPI_BYTE, &ft));
            CHK(MPI_Type_commit(&ft));
            CHK(MPI_File_set_view(fh, 0, MPI_BYTE, ft, "native", MPI_INFO_NULL));
            CHK(MPI_File_write_at_all(fh, 0, buf, n * BLK, MPI_BYTE, MPI_STATUS_IGNORE));
            CHK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
            CHK(MPI_Type_free(&ft));
        }

        if (cycle == 3) {
            CHK(MPI_Barrier(MPI_COMM_WORLD));
            eof = second ? (R / 2) * BLK + 8 * 5 : (R + 5) * BLK + 8 * 11;
            CHK(MPI_File_set_size(fh, (MPI_Offset)eof));
        }

        if (rank == 0)
            note("syncing", e);
        if (e == kill_epoch && rank == kill_rank)
            arm_kill(kill_usec);
        if (e < nepochs) {
            CHK(MPI_File_sync(fh));
            if (rank == 0)
                note("committed", e);
            CHK(MPI_Barrier(MPI_COMM_WORLD));
            epoch_done(MPI_COMM_WORLD, path);
            if (sleep > 0)
                sleep_ms(sleep * (1 + e % 3) / 2);
        } else {
            CHK(MPI_File_close(&fh));
            if (rank == 0)
                note("committed", e);
            epoch_done(MPI_COMM_WORLD, path);
        }
    }
    if (progress_fd >= 0)
        close(progress_fd);
    free(displs);
    free(buf);
    free(junk);
    free(rest);
    MPI_Finalize();
    return 0;
}
