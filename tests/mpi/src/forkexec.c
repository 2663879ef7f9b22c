/* forkexec: the program runs a child process (system("true"), i.e. fork +
 * exec of /bin/sh) while an MPI file is open, then keeps writing.
 *
 * Epoch 1: write_at_all of each rank's first block, system("true"), an
 * independent write_at of a second block; sync.  Epoch 2: system("true")
 * again, then a write_at_all that overwrites half of every rank's first
 * block; close.
 *
 * Hazards: the child inherits the open descriptors and the LD_PRELOAD
 * environment (the capture library is loaded into /bin/sh and true); its
 * exit must neither close nor commit anything of the parent's log, and the
 * parent's next writes must still be captured.
 */
#include "common.h"

enum { BLK = 2048 };

static void fill(char *buf, int n, int tag)
{
    for (int i = 0; i < n; i++)
        buf[i] = (char)(tag * 13 + i % 11);
}

static void run_child(void)
{
    int rc = system("true");
    if (rc != 0)
        die("system(\"true\") returned %d", rc);
}

int main(int argc, char **argv)
{
    int rank, size;
    char buf[BLK];
    MPI_File fh;

    MPI_Init(&argc, &argv);
    setup(argc, argv, "forkexec", 1, 1, NULL, "OUTDIR [--snapshot]");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    char *path = path_in(pos_args[0], "forkexec.dat");
    const MPI_Offset mine = (MPI_Offset)rank * 2 * BLK;

    CHK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL,
                      &fh));
    fill(buf, BLK, 1 + rank);
    CHK(MPI_File_write_at_all(fh, mine, buf, BLK, MPI_BYTE, MPI_STATUS_IGNORE));
    run_child();
    fill(buf, BLK, 20 + rank);
    CHK(MPI_File_write_at(fh, mine + BLK, buf, BLK, MPI_BYTE, MPI_STATUS_IGNORE));
    file_sync(fh, MPI_COMM_WORLD, path);

    run_child();
    fill(buf, BLK / 2, 40 + rank);
    CHK(MPI_File_write_at_all(fh, mine + BLK / 4, buf, BLK / 2, MPI_BYTE, MPI_STATUS_IGNORE));
    file_close(&fh, MPI_COMM_WORLD, path);

    MPI_Finalize();
    return 0;
}
