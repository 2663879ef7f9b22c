/* IOR-like shared-file output phases, timed by the program itself.
 * Usage: ior_like FILE XFER SEGMENTS EPOCHS [strided]
 * Each epoch every rank writes SEGMENTS blocks of XFER bytes with
 * MPI_File_write_at_all, segment-major (IOR's layout: block (s, r) at
 * (s * nranks + r) * XFER), then MPI_File_sync; the file is closed after the
 * last epoch. With "strided" the blocks are written independently
 * (MPI_File_write_at), each a separate noncontiguous piece.
 * Prints one JSON line (rank 0): output-phase seconds, the max over ranks. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 5) {
        if (rank == 0) fprintf(stderr, "usage: %s FILE XFER SEGMENTS EPOCHS [strided]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long xfer = atol(argv[2]), segments = atol(argv[3]), epochs = atol(argv[4]);
    int strided = argc > 5 && strcmp(argv[5], "strided") == 0;
    char *buf = malloc(xfer);
    for (long i = 0; i < xfer; i++) buf[i] = (char)(i * 7 + rank);
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    double spent = 0;
    for (long e = 0; e < epochs; e++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long s = 0; s < segments; s++) {
            MPI_Offset off = ((MPI_Offset)s * size + rank) * xfer;
            buf[0] = (char)e;
            int rc = strided ? MPI_File_write_at(fh, off, buf, (int)xfer, MPI_BYTE, MPI_STATUS_IGNORE)
                             : MPI_File_write_at_all(fh, off, buf, (int)xfer, MPI_BYTE, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
        }
        int rc = (e == epochs - 1) ? MPI_File_close(&fh) : MPI_File_sync(fh);
        if (rc != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
        spent += MPI_Wtime() - t0;
    }
    double max;
    MPI_Reduce(&spent, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("{\"output_seconds\": %.6f, \"bytes\": %ld}\n", max, xfer * segments * epochs * size);
    free(buf);
    MPI_Finalize();
    return 0;
}
