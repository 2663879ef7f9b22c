/* recreate: MPI files created over an existing, larger file.
 *
 * Before any MPI-IO, rank 0 writes 64 KiB of junk with POSIX at three
 * paths, then every rank waits.  Then:
 *  - recreate_delete.dat: MPI_File_delete (rank 0), then MPI_File_open with
 *    MPI_MODE_CREATE: a new, empty file;
 *  - recreate_setsize.dat: MPI_File_open with MPI_MODE_CREATE over the junk,
 *    then MPI_File_set_size(0): truncated by MPI;
 *  - recreate_keep.dat: MPI_File_open with MPI_MODE_CREATE over the junk and
 *    no truncation: MPI never truncates, so the junk beyond what the program
 *    writes must survive byte for byte.
 * Each file: every rank writes 1000 bytes at rank*1000 (write_at_all);
 * sync; each rank rewrites 100 bytes at rank*1000+450; close.
 *
 * Hazards: the remote file already has content that the capture layer did
 * not see written; an existing file must be truncated exactly when the
 * program truncates it (delete, set_size) and kept otherwise, and reads or
 * read-modify-writes of the old bytes must see the old bytes, not zeros.
 */
#include "common.h"

enum { JUNK = 65536, BLK = 1000 };

static void write_file(const char *path, int how, int rank)
{
    MPI_File fh;
    char buf[BLK];
    if (how == 0 && rank == 0)
        CHK(MPI_File_delete(path, MPI_INFO_NULL));
    if (how == 0)
        CHK(MPI_Barrier(MPI_COMM_WORLD));
    CHK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh));
    if (how == 1)
        CHK(MPI_File_set_size(fh, 0));
    for (int i = 0; i < BLK; i++)
        buf[i] = (char)('a' + (rank + i) % 26);
    CHK(MPI_File_write_at_all(fh, (MPI_Offset)rank * BLK, buf, BLK, MPI_BYTE, MPI_STATUS_IGNORE));
    file_sync(fh, MPI_COMM_WORLD, path);
    memset(buf, '0' + rank % 10, 100);
    CHK(MPI_File_write_at_all(fh, (MPI_Offset)rank * BLK + 450, buf, 100, MPI_BYTE,
                              MPI_STATUS_IGNORE));
    file_close(&fh, MPI_COMM_WORLD, path);
}

int main(int argc, char **argv)
{
    int rank;
    const char *names[3] = {"recreate_delete.dat", "recreate_setsize.dat", "recreate_keep.dat"};

    MPI_Init(&argc, &argv);
    setup(argc, argv, "recreate", 1, 1, NULL, "OUTDIR [--snapshot]");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    if (rank == 0)
        for (int i = 0; i < 3; i++)
            write_junk(path_in(pos_args[0], names[i]), JUNK);
    CHK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < 3; i++)
        write_file(path_in(pos_args[0], names[i]), i, rank);
    MPI_Finalize();
    return 0;
}
