/* The demo's simulation output: every rank owns a block of a shared 1-D field
 * of doubles, written collectively with MPI-IO at three consistency points
 * (two MPI_File_sync and the close), each "timestep" overwriting the field. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define N_PER_RANK (256 * 1024) /* 2 MiB of doubles per rank */

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUTPUT_FILE\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double *field = malloc(N_PER_RANK * sizeof(double));
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "rank %d: MPI_File_open(%s) failed\n", rank, argv[1]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Offset off = (MPI_Offset)rank * N_PER_RANK * sizeof(double);
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < N_PER_RANK; i++)
            field[i] = step * 1e6 + rank * 1e3 + i * 1e-3;
        rc = MPI_File_write_at_all(fh, off, field, N_PER_RANK, MPI_DOUBLE, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS && step < 2)
            rc = MPI_File_sync(fh);
        if (rc != MPI_SUCCESS) {
            fprintf(stderr, "rank %d: write/sync failed at step %d\n", rank, step);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    rc = MPI_File_close(&fh);
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "rank %d: MPI_File_close failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(field);
    MPI_Finalize();
    return 0;
}
