/* report_phases: compute and output phases with a known number of
 * consistency points, for `paralog report` (tests/correctness/report.py).
 *
 * Usage: report_phases FILE CYCLES KIB COMPUTE_MS
 *
 * CYCLES cycles of COMPUTE_MS ms of computation (a busy loop, then a
 * barrier) and an output phase: every rank writes KIB KiB of its own bytes
 * into FILE with MPI_File_write_at_all, at an offset of its own, never
 * overwriting anything. Cycles 1..CYCLES-1 end with MPI_File_sync, the last
 * with MPI_File_close: every rank goes through exactly CYCLES consistency
 * points, and every byte written is drained once (captured bytes ==
 * drained bytes == CYCLES * ranks * KIB KiB). Rank 0 prints
 * "report_phases: CYCLES cycles, RANKS ranks, BYTES bytes" at the end. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void compute(double ms) {
    double until = MPI_Wtime() + ms / 1000.0;
    volatile double x = 1.0;
    while (MPI_Wtime() < until)
        for (int i = 0; i < 10000; i++)
            x = x * 1.0000001 + 1e-9;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 5) {
        if (rank == 0) fprintf(stderr, "usage: report_phases FILE CYCLES KIB COMPUTE_MS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int cycles = atoi(argv[2]);
    long len = atol(argv[3]) * 1024;
    double ms = atof(argv[4]);
    if (cycles < 1 || len < 1) MPI_Abort(MPI_COMM_WORLD, 2);
    char *buf = malloc((size_t)len);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int c = 0; c < cycles; c++) {
        compute(ms);
        MPI_Barrier(MPI_COMM_WORLD);
        memset(buf, 'A' + (c * size + rank) % 26, (size_t)len);
        MPI_Offset off = ((MPI_Offset)c * size + rank) * len;
        if (MPI_File_write_at_all(fh, off, buf, (int)len, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 1);
        if (c + 1 < cycles) {
            if (MPI_File_sync(fh) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
        } else if (MPI_File_close(&fh) != MPI_SUCCESS) {
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    if (rank == 0)
        printf("report_phases: %d cycles, %d ranks, %ld bytes\n", cycles, size, (long)cycles * size * len);
    free(buf);
    MPI_Finalize();
    return 0;
}
