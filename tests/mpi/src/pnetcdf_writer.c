/* pnetcdf_writer: PnetCDF created over an existing file, collective puts,
 * ncmpi_sync, and a redef that adds an attribute between two data epochs.
 *
 * Rank 0 first writes 1 MiB of junk at the path with POSIX.  All ranks then
 * ncmpi_create it with NC_CLOBBER (PnetCDF truncates the existing file with
 * a POSIX call outside MPI-IO), define dims y=64, x=48, an int variable
 * "grid" and a global attribute, enddef, and write their row block with
 * ncmpi_put_vara_int_all; ncmpi_sync (MPI_File_sync).  Epoch 2: redef, add
 * a global attribute "history", enddef, and put_vara_int_all a sub-block
 * (rows 16..47, cols 8..39, split by rows) with new values; ncmpi_close.
 *
 * By default "history" is 2000 characters, more than the free space left in
 * the header, so enddef MOVES the variable's data (already written by all
 * ranks in epoch 1) to a higher offset: PnetCDF reads it back and rewrites
 * it.  --small-attr uses a 16-character attribute that fits in the header
 * padding (no data move; a different output file).
 *
 * Hazards: truncation by path outside MPI-IO (access + truncate), the
 * header written by rank 0 and rewritten at enddef, and (default) a collective
 * read-back and rewrite of data from an earlier epoch that other ranks wrote.
 */
#include "common.h"
#include <pnetcdf.h>

enum { ROWS = 64, COLS = 48, SUB_R0 = 16, SUB_NR = 32, SUB_C0 = 8, SUB_NC = 32 };

#define NC(x)                                                                       \
    do {                                                                            \
        int nc_err_ = (x);                                                          \
        if (nc_err_ != NC_NOERR)                                                    \
            die("%s:%d: %s failed: %s", __FILE__, __LINE__, #x, ncmpi_strerror(nc_err_)); \
    } while (0)

static void put_block(int nc, int var, int epoch, int r0, int nr, int c0, int ncols)
{
    static int buf[ROWS * COLS];
    MPI_Offset start[2] = {r0, c0}, count[2] = {nr, ncols};
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < ncols; j++)
            buf[i * ncols + j] = epoch * 1000000 + (r0 + i) * 1000 + (c0 + j);
    NC(ncmpi_put_vara_int_all(nc, var, start, count, buf));
}

int main(int argc, char **argv)
{
    int rank, size, nc, dims[2], var, r0, nr;
    static char history[2001];

    MPI_Init(&argc, &argv);
    static const char *const flags[] = {"--small-attr", NULL};
    setup(argc, argv, "pnetcdf_writer", 1, 1, flags, "OUTDIR [--snapshot] [--small-attr]");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (size > SUB_NR)
        die("supports at most %d ranks", SUB_NR);
    char *path = path_in(pos_args[0], "pnetcdf_writer.nc");

    if (rank == 0)
        write_junk(path, 1 << 20);
    CHK(MPI_Barrier(MPI_COMM_WORLD));

    /* epoch 1 */
    NC(ncmpi_create(MPI_COMM_WORLD, path, NC_CLOBBER, MPI_INFO_NULL, &nc));
    NC(ncmpi_def_dim(nc, "y", ROWS, &dims[0]));
    NC(ncmpi_def_dim(nc, "x", COLS, &dims[1]));
    NC(ncmpi_def_var(nc, "grid", NC_INT, 2, dims, &var));
    NC(ncmpi_put_att_text(nc, NC_GLOBAL, "title", 20, "paralog pnetcdf test"));
    NC(ncmpi_enddef(nc));
    split(ROWS, size, rank, &r0, &nr);
    put_block(nc, var, 1, r0, nr, 0, COLS);
    NC(ncmpi_sync(nc));
    CHK(MPI_Barrier(MPI_COMM_WORLD));
    epoch_done(MPI_COMM_WORLD, path);

    /* epoch 2 */
    int hlen = flag("--small-attr") ? 16 : 2000;
    for (int i = 0; i < hlen; i++)
        history[i] = (char)('a' + i % 26);
    NC(ncmpi_redef(nc));
    NC(ncmpi_put_att_text(nc, NC_GLOBAL, "history", hlen, history));
    NC(ncmpi_enddef(nc));
    split(SUB_NR, size, rank, &r0, &nr);
    put_block(nc, var, 2, SUB_R0 + r0, nr, SUB_C0, SUB_NC);
    NC(ncmpi_close(nc));
    epoch_done(MPI_COMM_WORLD, path);

    MPI_Finalize();
    return 0;
}
