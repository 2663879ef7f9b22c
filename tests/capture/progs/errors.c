/* errors: the bad-input program. Every rank writes its block in two epochs
 * (EPOCH1 and EPOCH2 bytes per rank), with MPI_File_sync after each. It never
 * aborts: each failed call prints one line ("rank R: CALL: error") and the
 * program goes on, so that the test sees that every rank learned of a
 * failure (and that no rank hung). Exit status 3 if any call failed.
 * Usage: errors FILE EPOCH1 EPOCH2 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;
static int rank;

static void check(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len;
        MPI_Error_string(rc, msg, &len);
        printf("rank %d: %s: failed: %.*s\n", rank, what, len, msg);
        fflush(stdout);
        failed = 1;
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 4) {
        fprintf(stderr, "usage: %s FILE EPOCH1 EPOCH2\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long sizes[2] = {atol(argv[2]), atol(argv[3])};
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    check(rc, "MPI_File_open");
    if (rc == MPI_SUCCESS) {
        MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
        for (int e = 0; e < 2; e++) {
            char *buf = malloc(sizes[e]);
            memset(buf, 'a' + e * 8 + rank, sizes[e]);
            MPI_Offset off = (MPI_Offset)rank * sizes[e];
            check(MPI_File_write_at(fh, off, buf, (int)sizes[e], MPI_BYTE, MPI_STATUS_IGNORE), "MPI_File_write_at");
            check(MPI_File_sync(fh), e == 0 ? "MPI_File_sync 1" : "MPI_File_sync 2");
            free(buf);
        }
        check(MPI_File_close(&fh), "MPI_File_close");
    }
    MPI_Finalize();
    return failed ? 3 : 0;
}
