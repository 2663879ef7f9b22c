/* second_handle: a second MPI handle of a file the process has open,
 * as PnetCDF's independent data mode makes one (MPI_File_open on
 * MPI_COMM_SELF beside the collective handle on the world).
 *
 * Usage: second_handle FILE ROUNDS
 *
 * Round k: every rank writes its 4 KiB block of row 2k through the
 * collective handle (write_at_all), then opens a second handle on
 * MPI_COMM_SELF, writes its block of row 2k+1 there, reads back row 2k's
 * own block and row 2k+1's through it, closes it, and all ranks pass a
 * barrier; then rank 0 overwrites the first 100 bytes of row 2k+1 through
 * the collective handle, which is synced. Exit status 1 on any error or
 * wrong byte read back. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 4096

static unsigned char pattern(int row, int rank, int i) { return (unsigned char)(row * 7 + rank * 31 + i % 13 + 1); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc < 3) {
        fprintf(stderr, "usage: second_handle FILE ROUNDS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rank, size, rounds = atoi(argv[2]), bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unsigned char mine[BLOCK], back[BLOCK];
    MPI_File fh, self;
    if (MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    for (int k = 0; k < rounds; k++) {
        MPI_Offset at = ((MPI_Offset)(2 * k) * size + rank) * BLOCK;
        MPI_Offset next = ((MPI_Offset)(2 * k + 1) * size + rank) * BLOCK;
        for (int i = 0; i < BLOCK; i++) mine[i] = pattern(2 * k, rank, i);
        bad |= MPI_File_write_at_all(fh, at, mine, BLOCK, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS;
        if (MPI_File_open(MPI_COMM_SELF, argv[1], MPI_MODE_RDWR, MPI_INFO_NULL, &self) != MPI_SUCCESS) {
            fprintf(stderr, "rank %d: the second open failed in round %d\n", rank, k);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        MPI_File_set_errhandler(self, MPI_ERRORS_RETURN);
        for (int i = 0; i < BLOCK; i++) mine[i] = pattern(2 * k + 1, rank, i);
        bad |= MPI_File_write_at(self, next, mine, BLOCK, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS;
        for (int row = 2 * k; row <= 2 * k + 1; row++) {
            MPI_Offset off = ((MPI_Offset)row * size + rank) * BLOCK;
            bad |= MPI_File_read_at(self, off, back, BLOCK, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS;
            for (int i = 0; i < BLOCK; i++)
                if (back[i] != pattern(row, rank, i)) {
                    fprintf(stderr, "rank %d: row %d byte %d reads %d through the second handle\n", rank, row, i, back[i]);
                    bad = 1;
                    break;
                }
        }
        bad |= MPI_File_close(&self) != MPI_SUCCESS;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            memset(mine, 0xEE, 100);
            bad |= MPI_File_write_at(fh, (MPI_Offset)(2 * k + 1) * size * BLOCK, mine, 100, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS;
        }
        bad |= MPI_File_sync(fh) != MPI_SUCCESS;
    }
    bad |= MPI_File_close(&fh) != MPI_SUCCESS;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return bad;
}
