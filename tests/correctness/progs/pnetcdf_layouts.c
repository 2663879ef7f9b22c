/* pnetcdf_layouts: PnetCDF writes in fill mode with the decompositions of
 * PnetCDF's own examples (column-wise, block-cyclic), issue 12 point 3.
 * Usage: pnetcdf_layouts FILE colwise|blockcyclic
 *
 * Two variables of NY x NX ints in fill mode: enddef writes the fill values
 * (collectively), then every rank writes its part with put_vara_int_all in
 * one epoch, over the fill values. Column-wise: rank r owns columns r,
 * r+P, r+2P, ... (one call per column). Block-cyclic: blocks of 2 columns
 * dealt round-robin. The file is reopened and every value read back and
 * checked (exit 1 on a wrong value); under paralog the data must win over
 * the fill values exactly as in direct MPI-IO. */
#include <mpi.h>
#include <pnetcdf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NY 10
#define NX 24
#define CHECK(call)                                                                        \
    do {                                                                                   \
        int e_ = (call);                                                                   \
        if (e_ != NC_NOERR) {                                                              \
            fprintf(stderr, "rank %d line %d: %s\n", rank, __LINE__, ncmpi_strerror(e_)); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
        }                                                                                  \
    } while (0)

static int value(int v, int y, int x) { return 1000 * (v + 1) + 100 * y + x; }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, ncid, dims[2], var[2];
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int blockcyclic = argc > 2 && !strcmp(argv[2], "blockcyclic");
    int width = blockcyclic ? 2 : 1;
    CHECK(ncmpi_create(MPI_COMM_WORLD, argv[1], NC_CLOBBER, MPI_INFO_NULL, &ncid));
    CHECK(ncmpi_set_fill(ncid, NC_FILL, NULL));
    CHECK(ncmpi_def_dim(ncid, "Y", NY, &dims[0]));
    CHECK(ncmpi_def_dim(ncid, "X", NX, &dims[1]));
    CHECK(ncmpi_def_var(ncid, "a", NC_INT, 2, dims, &var[0]));
    CHECK(ncmpi_def_var(ncid, "b", NC_INT, 2, dims, &var[1]));
    CHECK(ncmpi_enddef(ncid));
    int buf[NY * 2];
    /* The number of column blocks differs between ranks: the collective
     * calls are padded with empty ones so every rank makes the same number. */
    int blocks = NX / width, rounds = (blocks + size - 1) / size;
    for (int v = 0; v < 2; v++)
        for (int k = 0; k < rounds; k++) {
            int blk = k * size + rank;
            MPI_Offset start[2] = {0, 0}, count[2] = {0, 0};
            if (blk < blocks) {
                start[1] = blk * width;
                count[0] = NY;
                count[1] = width;
                for (int y = 0; y < NY; y++)
                    for (int w = 0; w < width; w++) buf[y * width + w] = value(v, y, blk * width + w);
            }
            CHECK(ncmpi_put_vara_int_all(ncid, var[v], start, count, buf));
        }
    CHECK(ncmpi_close(ncid));
    /* Read back everything, every rank, and check. */
    int all[NY * NX], bad = 0;
    CHECK(ncmpi_open(MPI_COMM_WORLD, argv[1], NC_NOWRITE, MPI_INFO_NULL, &ncid));
    CHECK(ncmpi_begin_indep_data(ncid));
    for (int v = 0; v < 2; v++) {
        CHECK(ncmpi_get_var_int(ncid, var[v], all));
        for (int y = 0; y < NY; y++)
            for (int x = 0; x < NX; x++)
                if (all[y * NX + x] != value(v, y, x)) {
                    if (!bad) fprintf(stderr, "rank %d: var %d [%d][%d] = %d, want %d\n", rank, v, y, x, all[y * NX + x], value(v, y, x));
                    bad++;
                }
    }
    CHECK(ncmpi_close(ncid));
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("pnetcdf_layouts %s: %d wrong value(s)\n", blockcyclic ? "blockcyclic" : "colwise", bad);
    MPI_Finalize();
    return bad != 0;
}
