/* nonblocking: nonblocking and shared-file-pointer writes.
 *
 * Region A (epoch 1): MPI_File_iwrite_at of each rank's block, MPI_Wait.
 * Region B (epoch 1): MPI_File_seek + MPI_File_iwrite_all, and
 * MPI_File_iwrite_at_all, each completed with MPI_Wait (skipped with
 * --no-iwrite-all, see below); sync.  Region C (epoch 2): the shared file
 * pointer: MPI_File_seek_shared, then MPI_File_write_shared, one rank at a
 * time in rank order (a token passed with MPI_Send/MPI_Recv makes the order,
 * hence the bytes, deterministic), a barrier, then MPI_File_write_ordered;
 * close.
 *
 * Hazards: MPICH's iwrite_at and OMPIO's nonblocking calls use POSIX AIO
 * (aio_write; glibc's helper thread calls pwrite64 internally, bypassing a
 * pwrite wrapper).  The shared file pointer lives in ROMIO's hidden
 * ".<file>.shfp.*" file (locked, read and written by every rank; it must
 * pass through capture untouched) or in OMPIO's sharedfp component.
 *
 * --no-iwrite-all skips region B: Open MPI 4.1.4's romio321 segfaults in
 * the nonblocking collectives.  Region B is then absent (a hole is left in
 * its place), so outputs with and without the flag differ.
 */
#include "common.h"

enum { BLK = 1024 };

static void fill(char *buf, int n, int tag, int rank)
{
    for (int i = 0; i < n; i++)
        buf[i] = (char)(tag * 16 + rank * 3 + i % 9 + 1);
}

int main(int argc, char **argv)
{
    int rank, size, token = 0;
    char buf[BLK];
    MPI_File fh;
    MPI_Request req;

    MPI_Init(&argc, &argv);
    static const char *const flags[] = {"--no-iwrite-all", NULL};
    setup(argc, argv, "nonblocking", 1, 1, flags, "OUTDIR [--snapshot] [--no-iwrite-all]");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    char *path = path_in(pos_args[0], "nonblocking.dat");
    const MPI_Offset P = size, regA = 0, regB = P * BLK, regC = 3 * P * BLK;

    CHK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));

    /* region A: iwrite_at */
    fill(buf, BLK, 1, rank);
    CHK(MPI_File_iwrite_at(fh, regA + rank * BLK, buf, BLK, MPI_BYTE, &req));
    CHK(MPI_Wait(&req, MPI_STATUS_IGNORE));

    /* region B: nonblocking collectives */
    if (!flag("--no-iwrite-all")) {
        fill(buf, BLK, 2, rank);
        CHK(MPI_File_seek(fh, regB + rank * BLK, MPI_SEEK_SET));
        CHK(MPI_File_iwrite_all(fh, buf, BLK, MPI_BYTE, &req));
        CHK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        fill(buf, BLK / 2, 3, rank);
        CHK(MPI_File_iwrite_at_all(fh, regB + P * BLK + rank * BLK, buf, BLK / 2, MPI_BYTE,
                                   &req));
        CHK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    }
    file_sync(fh, MPI_COMM_WORLD, path);

    /* region C: shared file pointer, write_shared in rank order, then write_ordered */
    CHK(MPI_File_seek_shared(fh, regC, MPI_SEEK_SET));
    if (rank > 0)
        CHK(MPI_Recv(&token, 1, MPI_INT, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    fill(buf, 100 + rank * 10, 4, rank);
    CHK(MPI_File_write_shared(fh, buf, 100 + rank * 10, MPI_BYTE, MPI_STATUS_IGNORE));
    if (rank < size - 1)
        CHK(MPI_Send(&token, 1, MPI_INT, rank + 1, 0, MPI_COMM_WORLD));
    CHK(MPI_Barrier(MPI_COMM_WORLD)); /* else write_ordered may start before the last write_shared */
    fill(buf, 200 - rank * 10, 5, rank);
    CHK(MPI_File_write_ordered(fh, buf, 200 - rank * 10, MPI_BYTE, MPI_STATUS_IGNORE));
    file_close(&fh, MPI_COMM_WORLD, path);

    MPI_Finalize();
    return 0;
}
