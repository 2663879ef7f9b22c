/* many_files: file-per-process output, many opens and closes, and a shared
 * file reopened for append later in the run.
 *
 * First all ranks write shared.dat on MPI_COMM_WORLD (one block each) and
 * close it.  Round 1: every rank creates 100 files r<rank>_f<i>.dat, each
 * opened on MPI_COMM_SELF, written (a size that depends on i) and closed.
 * Round 2: every rank reopens its 100 files (no MPI_MODE_CREATE), overwrites
 * a middle part and extends them, and closes them again.  Finally all ranks
 * reopen shared.dat on MPI_COMM_WORLD with MPI_MODE_APPEND (individual file
 * pointers start at the end), each seeks past the blocks of lower ranks and
 * appends its own block with MPI_File_write_all, and close.
 *
 * Hazards: hundreds of small per-rank epochs (per-open log bookkeeping,
 * descriptor reuse), close and reopen of the same path (the size and
 * content seen by the reopen must include the previous open's data), and a
 * communicator of one next to a communicator of all.  With --snapshot, each
 * close of a per-rank file is a consistency point of its MPI_COMM_SELF, so
 * the copies are r<rank>_f<i>.dat.epoch1 and .epoch2.
 */
#include "common.h"

enum { NF = 100, BLK = 512 };

static void fill(char *buf, int n, int a, int b)
{
    for (int i = 0; i < n; i++)
        buf[i] = (char)('A' + (a * 7 + b * 3 + i) % 26);
}

int main(int argc, char **argv)
{
    int rank, size;
    char buf[2048], name[64];
    MPI_File fh;

    MPI_Init(&argc, &argv);
    setup(argc, argv, "many_files", 1, 1, NULL, "OUTDIR [--snapshot]");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    char *shared = path_in(pos_args[0], "shared.dat");

    /* the shared file, first time */
    CHK(MPI_File_open(MPI_COMM_WORLD, shared, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL,
                      &fh));
    fill(buf, BLK, 0, rank);
    CHK(MPI_File_write_at_all(fh, (MPI_Offset)rank * BLK, buf, BLK, MPI_BYTE,
                              MPI_STATUS_IGNORE));
    file_close(&fh, MPI_COMM_WORLD, shared);

    /* two rounds over 100 files per rank, each on MPI_COMM_SELF */
    for (int round = 1; round <= 2; round++) {
        for (int i = 0; i < NF; i++) {
            snprintf(name, sizeof name, "r%03d_f%03d.dat", rank, i);
            char *path = path_in(pos_args[0], name);
            int amode = MPI_MODE_WRONLY | (round == 1 ? MPI_MODE_CREATE : 0);
            CHK(MPI_File_open(MPI_COMM_SELF, path, amode, MPI_INFO_NULL, &fh));
            if (round == 1) {
                int n = 100 + 10 * i;
                fill(buf, n, i, rank);
                CHK(MPI_File_write_at(fh, 0, buf, n, MPI_BYTE, MPI_STATUS_IGNORE));
            } else {
                /* overwrite from the middle, and grow by 500 bytes */
                int off = 50 + 5 * i, n = 100 + 10 * i - off + 500;
                fill(buf, n, i + 1000, rank);
                CHK(MPI_File_write_at(fh, off, buf, n, MPI_BYTE, MPI_STATUS_IGNORE));
            }
            file_close(&fh, MPI_COMM_SELF, path);
            free(path);
        }
        CHK(MPI_Barrier(MPI_COMM_WORLD));
    }

    /* the shared file again, appended to */
    CHK(MPI_File_open(MPI_COMM_WORLD, shared, MPI_MODE_APPEND | MPI_MODE_WRONLY, MPI_INFO_NULL,
                      &fh));
    fill(buf, BLK, 1, rank);
    CHK(MPI_File_seek(fh, (MPI_Offset)rank * BLK, MPI_SEEK_CUR));
    CHK(MPI_File_write_all(fh, buf, BLK, MPI_BYTE, MPI_STATUS_IGNORE));
    file_close(&fh, MPI_COMM_WORLD, shared);

    MPI_Finalize();
    return 0;
}
