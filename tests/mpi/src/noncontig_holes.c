/* noncontig_holes: strided (vector) file views with gaps, three epochs whose
 * rank->block mapping shifts by one each epoch, and holes never written.
 *
 * The file is a 4096-byte leading hole, then NREP rows of `size` slots of 16
 * int32.  In epoch e (0,1,2) rank r writes, in every row, ints [2e, 2e+8) of
 * slot (r+e) % size through an MPI_Type_vector filetype.  So epoch 1 and 2
 * overwrite bytes that ANOTHER rank wrote in the previous epoch and also write
 * next to them; ints [12,16) of every slot (and bytes 0..4095) are holes.
 * Epoch 0 uses MPI_File_write_all, epoch 1 MPI_File_write_at_all, epoch 2
 * independent MPI_File_write_at (ROMIO/OMPIO data sieving).  Epochs end with
 * MPI_File_sync, the last with close.
 *
 * Hazards: collective buffering and data sieving read-modify-write whole
 * extents, including holes (must stay zero) and other ranks' bytes from
 * earlier epochs (must not be written back stale); later epochs must win.
 */
#include "common.h"

enum { BL = 8, SLOT = 16, NREP = 32, DISP = 4096 };

int main(int argc, char **argv)
{
    int rank, size, buf[NREP * BL];
    MPI_File fh;
    MPI_Datatype vec;

    MPI_Init(&argc, &argv);
    setup(argc, argv, "noncontig_holes", 1, 1, NULL, "OUTDIR [--snapshot]");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    char *path = path_in(pos_args[0], "noncontig_holes.dat");

    CHK(MPI_Type_vector(NREP, BL, size * SLOT, MPI_INT, &vec));
    CHK(MPI_Type_commit(&vec));
    CHK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));

    for (int e = 0; e < 3; e++) {
        int slot = (rank + e) % size;
        MPI_Offset disp = DISP + (MPI_Offset)(slot * SLOT + 2 * e) * (MPI_Offset)sizeof(int);
        for (int k = 0; k < NREP * BL; k++)
            buf[k] = (e + 1) * 1000000 + rank * 10000 + k;
        CHK(MPI_File_set_view(fh, disp, MPI_INT, vec, "native", MPI_INFO_NULL));
        if (e == 0)
            CHK(MPI_File_write_all(fh, buf, NREP * BL, MPI_INT, MPI_STATUS_IGNORE));
        else if (e == 1)
            CHK(MPI_File_write_at_all(fh, 0, buf, NREP * BL, MPI_INT, MPI_STATUS_IGNORE));
        else
            CHK(MPI_File_write_at(fh, 0, buf, NREP * BL, MPI_INT, MPI_STATUS_IGNORE));
        if (e < 2)
            file_sync(fh, MPI_COMM_WORLD, path);
    }
    file_close(&fh, MPI_COMM_WORLD, path);
    CHK(MPI_Type_free(&vec));
    MPI_Finalize();
    return 0;
}
