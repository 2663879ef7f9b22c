/* hdf5_writer: parallel HDF5 (MPI-IO file driver) created over an existing
 * file, collective dataset writes, H5Fflush, an attribute rewritten.
 *
 * Rank 0 first writes 1 MiB of junk at the path with POSIX.  All ranks then
 * H5Fcreate it with H5F_ACC_TRUNC (so the truncation matters), create a
 * 64x48 int32 dataset "grid" (contiguous) with an int attribute "epoch" = 1
 * and write their row block collectively (H5FD_MPIO_COLLECTIVE); H5Fflush
 * (HDF5 calls MPI_File_sync).  Epoch 2: the attribute is rewritten to 2 and
 * the sub-block rows 16..47, cols 8..39 is rewritten collectively with new
 * values, split by rows across ranks; H5Fclose.  Object timestamps are
 * disabled (H5Pset_obj_track_times) so the file is byte-identical run to run.
 *
 * Hazards: HDF5 checks the size of the file it opens against its own
 * bookkeeping (lseek SEEK_END), rank 0 writes the metadata while all ranks
 * write raw data, metadata (superblock, object headers, the attribute) is
 * rewritten in place at flush and close, and the file is truncated over
 * existing content at create (MPI_File_set_size(0) on all ranks).  With
 * --snapshot, a copy is taken after H5Fflush and after H5Fclose; HDF5 1.10.8
 * calls MPI_File_sync exactly once here (in H5Fflush, not in H5Fclose), so
 * the snapshots match the consistency points.
 */
#include "common.h"
#include <hdf5.h>

enum { ROWS = 64, COLS = 48, SUB_R0 = 16, SUB_NR = 32, SUB_C0 = 8, SUB_NC = 32 };

static hid_t h5chk(hid_t v, const char *what, int line)
{
    if (v < 0)
        die("%s:%d: %s failed (HDF5 error stack above)", __FILE__, line, what);
    return v;
}
#define H(x) h5chk((hid_t)(x), #x, __LINE__)

/* Collectively write the [nr x COLS-or-nc] block at (r0, c0) with values for `epoch`. */
static void write_block(hid_t dset, hid_t dxpl, int epoch, int r0, int nr, int c0, int nc)
{
    static int buf[ROWS * COLS];
    hsize_t start[2] = {(hsize_t)r0, (hsize_t)c0}, count[2] = {(hsize_t)nr, (hsize_t)nc};
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nc; j++)
            buf[i * nc + j] = epoch * 1000000 + (r0 + i) * 1000 + (c0 + j);
    hid_t mem = H(H5Screate_simple(2, count, NULL));
    hid_t file = H(H5Dget_space(dset));
    H(H5Sselect_hyperslab(file, H5S_SELECT_SET, start, NULL, count, NULL));
    H(H5Dwrite(dset, H5T_NATIVE_INT, mem, file, dxpl, buf));
    H(H5Sclose(file));
    H(H5Sclose(mem));
}

int main(int argc, char **argv)
{
    int rank, size, r0, nr, value;
    hsize_t dims[2] = {ROWS, COLS};

    MPI_Init(&argc, &argv);
    setup(argc, argv, "hdf5_writer", 1, 1, NULL, "OUTDIR [--snapshot]");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (size > SUB_NR)
        die("supports at most %d ranks", SUB_NR);
    char *path = path_in(pos_args[0], "hdf5_writer.h5");

    if (rank == 0)
        write_junk(path, 1 << 20);
    CHK(MPI_Barrier(MPI_COMM_WORLD));

    hid_t fapl = H(H5Pcreate(H5P_FILE_ACCESS));
    H(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    hid_t fcpl = H(H5Pcreate(H5P_FILE_CREATE));
    H(H5Pset_obj_track_times(fcpl, 0));
    hid_t f = H(H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl));
    hid_t dcpl = H(H5Pcreate(H5P_DATASET_CREATE));
    H(H5Pset_obj_track_times(dcpl, 0));
    hid_t space = H(H5Screate_simple(2, dims, NULL));
    hid_t dset = H(H5Dcreate2(f, "grid", H5T_STD_I32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    hid_t ascalar = H(H5Screate(H5S_SCALAR));
    hid_t attr = H(H5Acreate2(dset, "epoch", H5T_STD_I32LE, ascalar, H5P_DEFAULT, H5P_DEFAULT));
    hid_t dxpl = H(H5Pcreate(H5P_DATASET_XFER));
    H(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));

    /* epoch 1 */
    value = 1;
    H(H5Awrite(attr, H5T_NATIVE_INT, &value));
    split(ROWS, size, rank, &r0, &nr);
    write_block(dset, dxpl, 1, r0, nr, 0, COLS);
    H(H5Fflush(f, H5F_SCOPE_GLOBAL));
    CHK(MPI_Barrier(MPI_COMM_WORLD));
    epoch_done(MPI_COMM_WORLD, path);

    /* epoch 2 */
    value = 2;
    H(H5Awrite(attr, H5T_NATIVE_INT, &value));
    split(SUB_NR, size, rank, &r0, &nr);
    write_block(dset, dxpl, 2, SUB_R0 + r0, nr, SUB_C0, SUB_NC);

    H(H5Aclose(attr));
    H(H5Sclose(ascalar));
    H(H5Dclose(dset));
    H(H5Sclose(space));
    H(H5Pclose(dxpl));
    H(H5Pclose(dcpl));
    H(H5Pclose(fcpl));
    H(H5Pclose(fapl));
    H(H5Fclose(f));
    epoch_done(MPI_COMM_WORLD, path);

    MPI_Finalize();
    return 0;
}
