/* header_subarray: header + 2-D subarray views, the layout of most
 * simulation checkpoints.
 *
 * Rank 0 writes a 64-byte header with MPI_File_write_at.  Every rank then
 * sets a file view (displacement 64) selecting its block of a 64x48 int32
 * global array over an MPI_Dims_create process grid (2x2 for 4 ranks) and
 * calls MPI_File_write_all; MPI_File_sync ends epoch 1.  Epoch 2 is a second
 * write_all through a new view: the sub-block rows 16..47, cols 8..39 split by
 * rows over all ranks, with new values, so most ranks overwrite bytes that
 * another rank wrote in epoch 1.  Close ends epoch 2.
 *
 * Hazards: each rank's part is many short row segments with gaps between
 * them; ROMIO two-phase collective buffering and OMPIO/ROMIO data sieving
 * read whole extents (the header, other ranks' rows, epoch-1 data) and write
 * them back.  Under capture those bytes are not in the rank's own log.
 */
#include "common.h"

enum { ROWS = 64, COLS = 48, HDR = 64, SUB_R0 = 16, SUB_NR = 32, SUB_C0 = 8, SUB_NC = 32 };

/* View of a [nr x nc] block at (r0, c0) of the global array; returns its element count. */
static int set_block_view(MPI_File fh, int r0, int nr, int c0, int nc)
{
    int sizes[2] = {ROWS, COLS}, sub[2] = {nr, nc}, starts[2] = {r0, c0};
    MPI_Datatype t;
    CHK(MPI_Type_create_subarray(2, sizes, sub, starts, MPI_ORDER_C, MPI_INT, &t));
    CHK(MPI_Type_commit(&t));
    CHK(MPI_File_set_view(fh, HDR, MPI_INT, t, "native", MPI_INFO_NULL));
    CHK(MPI_Type_free(&t));
    return nr * nc;
}

static void fill(int *buf, int epoch, int r0, int nr, int c0, int nc)
{
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nc; j++)
            buf[i * nc + j] = epoch * 1000000 + (r0 + i) * 1000 + (c0 + j);
}

int main(int argc, char **argv)
{
    int rank, size, dims[2] = {0, 0}, r0, nr, c0, nc, n;
    static int buf[ROWS * COLS];
    MPI_File fh;

    MPI_Init(&argc, &argv);
    setup(argc, argv, "header_subarray", 1, 1, NULL, "OUTDIR [--snapshot]");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (size > SUB_NR)
        die("supports at most %d ranks", SUB_NR);
    char *path = path_in(pos_args[0], "header_subarray.dat");

    CHK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));

    /* epoch 1: header by rank 0, then every rank's grid block */
    if (rank == 0) {
        char hdr[HDR] = {0};
        snprintf(hdr, sizeof hdr, "PLTEST header_subarray %dx%d int32 nprocs=%d\n", ROWS, COLS,
                 size);
        CHK(MPI_File_write_at(fh, 0, hdr, HDR, MPI_BYTE, MPI_STATUS_IGNORE));
    }
    CHK(MPI_Dims_create(size, 2, dims));
    split(ROWS, dims[0], rank / dims[1], &r0, &nr);
    split(COLS, dims[1], rank % dims[1], &c0, &nc);
    n = set_block_view(fh, r0, nr, c0, nc);
    fill(buf, 1, r0, nr, c0, nc);
    CHK(MPI_File_write_all(fh, buf, n, MPI_INT, MPI_STATUS_IGNORE));
    file_sync(fh, MPI_COMM_WORLD, path);

    /* epoch 2: a sub-block across the process grid, split by rows */
    split(SUB_NR, size, rank, &r0, &nr);
    n = set_block_view(fh, SUB_R0 + r0, nr, SUB_C0, SUB_NC);
    fill(buf, 2, SUB_R0 + r0, nr, SUB_C0, SUB_NC);
    CHK(MPI_File_write_all(fh, buf, n, MPI_INT, MPI_STATUS_IGNORE));
    file_close(&fh, MPI_COMM_WORLD, path);

    MPI_Finalize();
    return 0;
}
