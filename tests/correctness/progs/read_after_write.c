/* read_after_write: every rank reads back, with a collective read and no
 * sync, what all ranks just wrote in the same open (PnetCDF's examples do
 * this after a collective put; direct MPI-IO on one file system shows the
 * bytes).
 *
 * Usage: read_after_write FILE ITERATIONS read_at_all|read_all|begin_end|iread
 *
 * Iteration k: every rank writes its 16 KiB block of row k (pattern of k
 * and rank) with an independent write, then all ranks read rows 0..k back
 * with the chosen collective read and check every byte. Exit status 1 on
 * any error or wrong byte. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK (1 << 14)

static unsigned char pattern(int row, int rank, int i) { return (unsigned char)(row * 5 + rank * 29 + i % 11 + 1); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: read_after_write FILE ITERATIONS read_at_all|read_all|begin_end|iread\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = atoi(argv[2]);
    const char *how = argv[3];
    size_t row = (size_t)BLOCK * size;
    unsigned char *mine = malloc(BLOCK), *all = malloc(row * iters);
    MPI_File fh;
    int errors = 0, wrong = 0;
    if (MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    for (int k = 0; k < iters; k++) {
        for (int i = 0; i < BLOCK; i++) mine[i] = pattern(k, rank, i);
        MPI_Offset at = (MPI_Offset)(k * row + (size_t)rank * BLOCK);
        errors += MPI_File_write_at(fh, at, mine, BLOCK, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS;
        memset(all, 0xee, row * iters);
        int n = (int)(row * (k + 1));
        MPI_Status st;
        if (!strcmp(how, "read_at_all")) {
            errors += MPI_File_read_at_all(fh, 0, all, n, MPI_BYTE, &st) != MPI_SUCCESS;
        } else if (!strcmp(how, "read_all")) {
            errors += MPI_File_seek(fh, 0, MPI_SEEK_SET) != MPI_SUCCESS;
            errors += MPI_File_read_all(fh, all, n, MPI_BYTE, &st) != MPI_SUCCESS;
        } else if (!strcmp(how, "begin_end")) {
            errors += MPI_File_read_at_all_begin(fh, 0, all, n, MPI_BYTE) != MPI_SUCCESS;
            errors += MPI_File_read_at_all_end(fh, all, &st) != MPI_SUCCESS;
        } else {
            MPI_Request rq;
            errors += MPI_File_iread_at_all(fh, 0, all, n, MPI_BYTE, &rq) != MPI_SUCCESS;
            errors += MPI_Wait(&rq, &st) != MPI_SUCCESS;
        }
        for (int r = 0; r <= k; r++)
            for (int q = 0; q < size; q++)
                for (int i = 0; i < BLOCK; i++)
                    if (all[r * row + (size_t)q * BLOCK + i] != pattern(r, q, i)) {
                        if (!wrong)
                            fprintf(stderr, "rank %d iteration %d: row %d rank %d byte %d is %d, not %d\n", rank, k, r, q,
                                    i, all[r * row + (size_t)q * BLOCK + i], pattern(r, q, i));
                        wrong++;
                    }
    }
    errors += MPI_File_close(&fh) != MPI_SUCCESS;
    int bad = errors + wrong, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("read_after_write %s: %d errors and wrong bytes over all ranks\n", how, any);
    free(mine);
    free(all);
    MPI_Finalize();
    return any ? 1 : 0;
}
