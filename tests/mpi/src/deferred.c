/* deferred: collective-only writes with the ROMIO hint romio_no_indep_rw=true
 * (deferred open).
 *
 * The file is rows of P blocks of 512 bytes.  Epoch 1: rank r writes block
 * r of rows 0..7 with MPI_File_write_all through a resized contiguous
 * filetype (cyclic distribution); sync.  Epoch 2: the view moves by one rank
 * and half a block (rank r now covers the second half of block r+1 and the
 * first half of block r+2), and two MPI_File_write_at_all calls write rows
 * 4..5 (over other ranks' epoch-1 bytes) and rows 10..13 (rows 8..9 stay a
 * hole); close.
 *
 * Hazards: with romio_no_indep_rw=true ROMIO opens the file only on the
 * collective-buffering aggregators (one per node by default: rank 0 here)
 * and the other ranks open lazily (never, in this program); all data reaches
 * the file through the aggregator, which also reads holes and other ranks'
 * bytes in two-phase I/O.  Capture sees one rank opening, writing and
 * syncing, while the consistency point is still collective over all ranks.
 * OMPIO ignores the hint (ordinary collective writes).
 */
#include "common.h"

enum { BLK = 512, NB = 16 };

int main(int argc, char **argv)
{
    int rank, size;
    static char buf[NB * BLK];
    MPI_File fh;
    MPI_Info info;
    MPI_Datatype blk, ftype;

    MPI_Init(&argc, &argv);
    setup(argc, argv, "deferred", 1, 1, NULL, "OUTDIR [--snapshot]");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    char *path = path_in(pos_args[0], "deferred.dat");

    CHK(MPI_Info_create(&info));
    CHK(MPI_Info_set(info, "romio_no_indep_rw", "true"));
    CHK(MPI_Type_contiguous(BLK, MPI_BYTE, &blk));
    CHK(MPI_Type_create_resized(blk, 0, (MPI_Aint)size * BLK, &ftype));
    CHK(MPI_Type_commit(&ftype));
    CHK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, info, &fh));

    /* epoch 1: block `rank` of rows 0..7 */
    for (int i = 0; i < NB * BLK; i++)
        buf[i] = (char)(1 + rank * 17 + i / BLK);
    CHK(MPI_File_set_view(fh, (MPI_Offset)rank * BLK, MPI_BYTE, ftype, "native", MPI_INFO_NULL));
    CHK(MPI_File_write_all(fh, buf, 8 * BLK, MPI_BYTE, MPI_STATUS_IGNORE));
    file_sync(fh, MPI_COMM_WORLD, path);

    /* epoch 2: shifted by one rank and half a block; rows 4..5 and 10..13 */
    for (int i = 0; i < NB * BLK; i++)
        buf[i] = (char)(128 + rank * 17 + i / BLK);
    CHK(MPI_File_set_view(fh, (MPI_Offset)((rank + 1) % size) * BLK + BLK / 2, MPI_BYTE, ftype,
                          "native", MPI_INFO_NULL));
    CHK(MPI_File_write_at_all(fh, 4 * BLK, buf, 2 * BLK, MPI_BYTE, MPI_STATUS_IGNORE));
    CHK(MPI_File_write_at_all(fh, 10 * BLK, buf + 2 * BLK, 4 * BLK, MPI_BYTE,
                              MPI_STATUS_IGNORE));
    file_close(&fh, MPI_COMM_WORLD, path);

    CHK(MPI_Info_free(&info));
    CHK(MPI_Type_free(&ftype));
    CHK(MPI_Type_free(&blk));
    MPI_Finalize();
    return 0;
}
