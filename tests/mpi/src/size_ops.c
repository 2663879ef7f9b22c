/* size_ops: file size changes mixed with writes, sizes checked each step.
 *
 * Epoch 1: every rank writes 1 KiB at rank*1KiB (write_at_all); sync; size
 * must be P KiB.  Epoch 2: MPI_File_set_size shrinks into the middle of the
 * data, then each rank writes 256 bytes far beyond the end (leaving a hole);
 * sync; sizes checked after each step.  Epoch 3: set_size grows the file
 * (sparse tail), MPI_File_preallocate grows it further, a smaller preallocate
 * must change nothing; sync.  Epoch 4: a write into the shrunk-then-regrown
 * range; sync.  Then close (an empty last epoch).  Every MPI_File_get_size
 * is compared with the expected value and the job aborts if it differs (a
 * barrier follows each check: size changes are collective but do not
 * synchronize, see check_size).  The file is also truncated to 0 right after
 * open, in case the directory is reused.
 *
 * Hazards: truncation and growth are metadata operations (ftruncate by one
 * rank) that must be ordered with the data in the log; the size query
 * (lseek SEEK_END on whichever rank asks) must include other ranks' writes;
 * ROMIO's and OMPIO's preallocate read the existing bytes and write them back
 * and fill the rest with zeros.
 *
 * --no-preallocate replaces MPI_File_preallocate by an equivalent set_size
 * (same resulting bytes): Open MPI 4.1.4's OMPIO preallocate is broken (it
 * reads [0,n) through the individual file pointer and writes it back at the
 * advanced pointer, duplicating the data to [n,2n)).
 */
#include "common.h"

enum { CH = 1024, FAR = 256 };

/* MPI_File_preallocate, or with --no-preallocate the same effect by set_size. */
static void preallocate(MPI_File fh, MPI_Offset n)
{
    MPI_Offset cur;
    if (!flag("--no-preallocate")) {
        CHK(MPI_File_preallocate(fh, n));
        return;
    }
    CHK(MPI_File_get_size(fh, &cur));
    CHK(MPI_Barrier(MPI_COMM_WORLD)); /* all ranks decide on the same size */
    if (n > cur)
        CHK(MPI_File_set_size(fh, n));
}

static void fill(char *buf, int n, int epoch, int rank)
{
    for (int i = 0; i < n; i++)
        buf[i] = (char)(epoch * 64 + rank * 8 + i % 7 + 1);
}

int main(int argc, char **argv)
{
    int rank, size;
    char buf[CH];
    MPI_File fh;

    MPI_Init(&argc, &argv);
    static const char *const flags[] = {"--no-preallocate", NULL};
    setup(argc, argv, "size_ops", 1, 1, flags, "OUTDIR [--snapshot] [--no-preallocate]");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    char *path = path_in(pos_args[0], "size_ops.dat");
    const MPI_Offset P = size;

    CHK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));
    CHK(MPI_File_set_size(fh, 0)); /* in case the directory is reused */

    /* epoch 1 */
    fill(buf, CH, 1, rank);
    CHK(MPI_File_write_at_all(fh, rank * CH, buf, CH, MPI_BYTE, MPI_STATUS_IGNORE));
    file_sync(fh, MPI_COMM_WORLD, path);
    check_size(fh, P * CH, "after epoch-1 writes");

    /* epoch 2: shrink, then write beyond the end */
    const MPI_Offset shrunk = P * CH / 2 + 100;
    CHK(MPI_File_set_size(fh, shrunk));
    check_size(fh, shrunk, "after set_size shrink");
    fill(buf, FAR, 2, rank);
    CHK(MPI_File_write_at_all(fh, 3 * P * CH + rank * CH, buf, FAR, MPI_BYTE,
                              MPI_STATUS_IGNORE));
    file_sync(fh, MPI_COMM_WORLD, path);
    check_size(fh, 3 * P * CH + (P - 1) * CH + FAR, "after writing beyond the end");

    /* epoch 3: grow, preallocate, no-op preallocate */
    const MPI_Offset grown = 4 * P * CH + 512, prealloc = 5 * P * CH;
    CHK(MPI_File_set_size(fh, grown));
    check_size(fh, grown, "after set_size grow");
    preallocate(fh, prealloc);
    check_size(fh, prealloc, "after preallocate");
    preallocate(fh, CH);
    check_size(fh, prealloc, "after a smaller preallocate");
    file_sync(fh, MPI_COMM_WORLD, path);
    check_size(fh, prealloc, "after epoch-3 sync");

    /* epoch 4: write into the range that was cut off and regrown as zeros */
    fill(buf, 100, 4, rank);
    CHK(MPI_File_write_at_all(fh, shrunk + rank * 200, buf, 100, MPI_BYTE, MPI_STATUS_IGNORE));
    file_sync(fh, MPI_COMM_WORLD, path);
    check_size(fh, prealloc, "after epoch-4 writes");
    file_close(&fh, MPI_COMM_WORLD, path);

    MPI_Finalize();
    return 0;
}
