/* reopen_read: the write / close / reopen / read loop of issue 12.
 *
 * Usage: reopen_read FILE ITERATIONS [--independent]
 *
 * Every iteration, every rank writes its own 64 KiB block with a pattern of
 * (iteration, rank) (collectively, or independently), closes the file,
 * reopens it read-only and reads the WHOLE file back, other ranks' blocks
 * included, and checks every byte. Errors (any MPI return code, any wrong
 * byte) are counted; the ranks agree after every iteration so that one
 * failing rank never leaves the others waiting. Exit status 1 on any error.
 * Under paralog the server drains (and deletes) each epoch while the next
 * reopen reads it: the reads must never fail or return stale bytes. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK (1 << 16)

static unsigned char pattern(int it, int rank, int i) { return (unsigned char)(it * 7 + rank * 31 + i % 13); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: reopen_read FILE ITERATIONS [--independent]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = atoi(argv[2]), independent = argc > 3 && !strcmp(argv[3], "--independent");
    unsigned char *mine = malloc(BLOCK), *all = malloc((size_t)BLOCK * size);
    int errors = 0, wrong = 0;
    for (int it = 0; it < iters; it++) {
        MPI_File fh;
        char msg[MPI_MAX_ERROR_STRING];
        int len, rc, failed = 0;
        for (int i = 0; i < BLOCK; i++) mine[i] = pattern(it, rank, i);
#define TRY(what, call)                                                              \
    if ((rc = (call)) != MPI_SUCCESS) {                                              \
        MPI_Error_string(rc, msg, &len);                                             \
        fprintf(stderr, "rank %d iteration %d: %s: %s\n", rank, it, what, msg);      \
        failed = 1;                                                                  \
        goto agree;                                                                  \
    }
        TRY("open for writing", MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh));
        MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
        if (independent) {
            TRY("write", MPI_File_write_at(fh, (MPI_Offset)rank * BLOCK, mine, BLOCK, MPI_BYTE, MPI_STATUS_IGNORE));
        } else {
            TRY("write_at_all", MPI_File_write_at_all(fh, (MPI_Offset)rank * BLOCK, mine, BLOCK, MPI_BYTE, MPI_STATUS_IGNORE));
        }
        TRY("close after writing", MPI_File_close(&fh));
        TRY("open for reading", MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
        MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
        memset(all, 0xee, (size_t)BLOCK * size);
        TRY("read", MPI_File_read_at(fh, 0, all, BLOCK * size, MPI_BYTE, MPI_STATUS_IGNORE));
        TRY("close after reading", MPI_File_close(&fh));
        for (int r = 0; r < size && !failed; r++)
            for (int i = 0; i < BLOCK; i++)
                if (all[(size_t)r * BLOCK + i] != pattern(it, r, i)) {
                    fprintf(stderr, "rank %d iteration %d: stale or wrong byte at offset %ld (rank %d's block)\n", rank,
                            it, (long)r * BLOCK + i, r);
                    wrong++;
                    failed = 1;
                    break;
                }
    agree:
        errors += failed;
        int any = failed;
        MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any) break;
    }
    int total[2] = {errors, wrong};
    MPI_Allreduce(MPI_IN_PLACE, total, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("reopen_read: %d iteration(s), %d error(s), %d wrong read(s)\n", iters, total[0], total[1]);
    MPI_Finalize();
    return total[0] != 0;
}
