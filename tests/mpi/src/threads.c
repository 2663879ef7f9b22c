/* threads: MPI_THREAD_MULTIPLE, two pthreads per rank writing through the
 * same file handle at the same time.
 *
 * Each rank owns a region of 2*K chunks of 4 KiB; thread t writes chunks
 * t, t+2, t+4, ... of it with MPI_File_write_at (interleaved, disjoint).
 * Both threads are joined, then the main thread calls MPI_File_sync (epoch
 * 1).  Epoch 2: the threads overwrite every other chunk of their own with
 * new values; joined; close.
 *
 * Hazards: concurrent pwrite calls on one descriptor from two threads of a
 * rank (the capture's per-rank log must be thread-safe and keep per-write
 * extents exact); MPI libraries serialise or not internally.  If the MPI
 * library does not provide MPI_THREAD_MULTIPLE the program prints a SKIP
 * line on rank 0 and exits with status 77 without writing anything.
 */
#include "common.h"
#include <pthread.h>

enum { CH = 4096, K = 8 };

static MPI_File fh;
static int rank;

struct job { int thread, epoch; };

static void *writer(void *arg)
{
    const struct job *j = arg;
    static __thread char buf[CH];
    for (int k = j->thread; k < 2 * K; k += 2) {
        if (j->epoch == 2 && (k / 2) % 2 == 1)
            continue;
        for (int i = 0; i < CH; i++)
            buf[i] = (char)(j->epoch * 50 + rank * 10 + k + i % 5);
        MPI_Offset off = ((MPI_Offset)rank * 2 * K + k) * CH;
        CHK(MPI_File_write_at(fh, off, buf, CH, MPI_BYTE, MPI_STATUS_IGNORE));
    }
    return NULL;
}

static void run_threads(int epoch)
{
    pthread_t tid[2];
    struct job jobs[2] = {{0, epoch}, {1, epoch}};
    for (int t = 0; t < 2; t++)
        if (pthread_create(&tid[t], NULL, writer, &jobs[t]) != 0)
            die("pthread_create failed");
    for (int t = 0; t < 2; t++)
        pthread_join(tid[t], NULL);
}

int main(int argc, char **argv)
{
    int provided;

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    setup(argc, argv, "threads", 1, 1, NULL, "OUTDIR [--snapshot]");
    CHK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0)
            printf("threads: SKIP: MPI_THREAD_MULTIPLE not provided (level %d)\n", provided);
        MPI_Finalize();
        return 77;
    }
    char *path = path_in(pos_args[0], "threads.dat");

    CHK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL,
                      &fh));
    run_threads(1);
    file_sync(fh, MPI_COMM_WORLD, path);
    run_threads(2);
    file_close(&fh, MPI_COMM_WORLD, path);

    MPI_Finalize();
    return 0;
}
