/* outside_prefix: files inside and outside the capture prefix in one run,
 * and reads of an existing file.
 *
 * Usage: outside_prefix OUTDIR OTHERDIR INPUT [REFERENCE] [--snapshot]
 *  - INPUT is read by every rank with MPI-IO (MPI_File_read_at_all of the
 *    whole file) and with POSIX read; the two must agree on every rank, and
 *    with REFERENCE (read with POSIX) when given.  INPUT can be a file in the
 *    prefix written by an earlier captured program (it must read as that
 *    program's final output), REFERENCE a copy of it made by a direct run.
 *  - OUTDIR/inside.dat and OTHERDIR/outside.dat are open at the same time,
 *    written in the same epochs (write_at_all, sync both, write_at_all,
 *    close both); inside.dat is then reopened read-only and every rank checks
 *    its own bytes with MPI_File_read_at_all.
 *
 * Hazards: OTHERDIR is outside the prefix and must pass through capture
 * untouched (invariant 6), even when interleaved with captured writes on
 * the same ranks; reading a captured file after close (in this run or from
 * an earlier one) must see its committed content, never the stale remote.
 */
#include "common.h"
#include <sys/stat.h>

enum { BLK = 1500 };

static char *read_posix(const char *path, long *len)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) != 0)
        die("cannot open %s: %s", path, strerror(errno));
    char *buf = malloc((size_t)st.st_size + 1);
    long got = 0;
    while (buf && got < st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)(st.st_size - got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            die("read %s: %s", path, r < 0 ? strerror(errno) : "unexpected end of file");
        got += r;
    }
    if (!buf)
        die("out of memory");
    close(fd);
    *len = got;
    return buf;
}

static void check_input(const char *input, const char *reference)
{
    long len, rlen;
    MPI_Offset size;
    MPI_File fh;
    char *posix = read_posix(input, &len);

    CHK(MPI_File_open(MPI_COMM_WORLD, input, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
    CHK(MPI_File_get_size(fh, &size));
    if (size != len)
        die("%s: MPI_File_get_size says %lld bytes, POSIX read %ld", input, (long long)size, len);
    char *mpi = malloc((size_t)len + 1);
    if (!mpi)
        die("out of memory");
    CHK(MPI_File_read_at_all(fh, 0, mpi, (int)len, MPI_BYTE, MPI_STATUS_IGNORE));
    CHK(MPI_File_close(&fh));
    if (memcmp(mpi, posix, (size_t)len) != 0)
        die("%s: MPI-IO and POSIX reads differ", input);
    if (reference) {
        char *ref = read_posix(reference, &rlen);
        if (rlen != len || memcmp(ref, posix, (size_t)len) != 0)
            die("%s differs from %s (%ld vs %ld bytes)", input, reference, len, rlen);
        free(ref);
    }
    free(mpi);
    free(posix);
}

static void fill(char *buf, int tag, int rank)
{
    for (int i = 0; i < BLK; i++)
        buf[i] = (char)(tag * 40 + rank * 5 + i % 3);
}

int main(int argc, char **argv)
{
    int rank;
    char buf[BLK], back[BLK];
    MPI_File in, out;

    MPI_Init(&argc, &argv);
    setup(argc, argv, "outside_prefix", 3, 4, NULL,
          "OUTDIR OTHERDIR INPUT [REFERENCE] [--snapshot]");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    char *inside = path_in(pos_args[0], "inside.dat");
    char *outside = path_in(pos_args[1], "outside.dat");

    check_input(pos_args[2], npos_args > 3 ? pos_args[3] : NULL);

    CHK(MPI_File_open(MPI_COMM_WORLD, inside, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL,
                      &in));
    CHK(MPI_File_open(MPI_COMM_WORLD, outside, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL,
                      &out));
    fill(buf, 1, rank);
    CHK(MPI_File_write_at_all(in, (MPI_Offset)rank * BLK, buf, BLK, MPI_BYTE, MPI_STATUS_IGNORE));
    fill(buf, 2, rank);
    CHK(MPI_File_write_at_all(out, (MPI_Offset)rank * BLK, buf, BLK, MPI_BYTE, MPI_STATUS_IGNORE));
    file_sync(in, MPI_COMM_WORLD, inside);
    file_sync(out, MPI_COMM_WORLD, outside);
    fill(buf, 3, rank);
    CHK(MPI_File_write_at_all(out, (MPI_Offset)rank * BLK + 100, buf, 200, MPI_BYTE,
                              MPI_STATUS_IGNORE));
    fill(buf, 4, rank);
    CHK(MPI_File_write_at_all(in, (MPI_Offset)rank * BLK + 100, buf, 200, MPI_BYTE,
                              MPI_STATUS_IGNORE));
    file_close(&out, MPI_COMM_WORLD, outside);
    file_close(&in, MPI_COMM_WORLD, inside);

    /* read inside.dat back: own block = epoch-1 bytes with the epoch-2 patch */
    fill(buf, 1, rank);
    fill(back, 4, rank);
    memcpy(buf + 100, back, 200);
    CHK(MPI_File_open(MPI_COMM_WORLD, inside, MPI_MODE_RDONLY, MPI_INFO_NULL, &in));
    CHK(MPI_File_read_at_all(in, (MPI_Offset)rank * BLK, back, BLK, MPI_BYTE, MPI_STATUS_IGNORE));
    CHK(MPI_File_close(&in));
    if (memcmp(buf, back, BLK) != 0)
        die("%s reads back different bytes than were written", inside);

    MPI_Finalize();
    return 0;
}
