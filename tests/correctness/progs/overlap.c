/* overlap: overlapping writes of different ranks in one epoch, ordered by
 * the program (issue 12, point 3). Usage: overlap FILE CASE
 *
 *   barrier    rank 1 writes 64 KiB independently, MPI_Barrier, rank 0
 *              overwrites the first half
 *   allreduce  the same, separated by MPI_Allreduce
 *   bcast      the same, separated by MPI_Bcast from rank 1 (the writer)
 *   collective rank 1 writes with write_at_all (others count 0), barrier,
 *              rank 0 overwrites with write_at_all
 *   rounds     8 rounds: one rank writes, a barrier, another rank
 *              overwrites part of it (a different pair each round); a size
 *              change in the middle
 *
 * Every rank uses MPI_COMM_WORLD; the file is closed at the end (one epoch).
 * The result must equal direct MPI-IO's (which orders them by time). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N (1 << 16)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *c = argv[2];
    MPI_File fh;
    MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    char *buf = malloc(N);
    memset(buf, 'A' + rank, N);
    int x = rank, y = 0;
    if (!strcmp(c, "rounds")) {
        for (int r = 0; r < 8; r++) {
            int last = r % size, first = (r + 1) % size;
            memset(buf, 'a' + (r * size + rank) % 26, N);
            if (rank == first) MPI_File_write_at(fh, (r % 3) * 1000, buf, N / 2, MPI_BYTE, MPI_STATUS_IGNORE);
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank == last) MPI_File_write_at(fh, (r % 3) * 1000 + 100, buf, N / 4, MPI_BYTE, MPI_STATUS_IGNORE);
            MPI_Barrier(MPI_COMM_WORLD);
            if (r == 4) MPI_File_set_size(fh, N / 3);
        }
    } else if (!strcmp(c, "collective")) {
        MPI_File_write_at_all(fh, 0, buf, rank == 1 ? N : 0, MPI_BYTE, MPI_STATUS_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_File_write_at_all(fh, 0, buf, rank == 0 ? N / 2 : 0, MPI_BYTE, MPI_STATUS_IGNORE);
    } else {
        if (rank == 1) MPI_File_write_at(fh, 0, buf, N, MPI_BYTE, MPI_STATUS_IGNORE);
        if (!strcmp(c, "barrier"))
            MPI_Barrier(MPI_COMM_WORLD);
        else if (!strcmp(c, "allreduce"))
            MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(c, "bcast"))
            MPI_Bcast(&x, 1, MPI_INT, 1, MPI_COMM_WORLD);
        else {
            if (rank == 0) fprintf(stderr, "overlap: unknown case %s\n", c);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (rank == 0) MPI_File_write_at(fh, 0, buf, N / 2, MPI_BYTE, MPI_STATUS_IGNORE);
    }
    int rc = MPI_File_close(&fh);
    MPI_Finalize();
    return rc != MPI_SUCCESS;
}
