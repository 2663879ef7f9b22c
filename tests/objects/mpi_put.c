/* An MPI program putting one int32 array by the C API's chunked PUT
 * (paralog/objects_mpi.h), as the seed's skeleton does: each rank one
 * chunk of ROWS x 4096, rank r at grid row r; values (global row * 4096 +
 * column + SALT). Rank 0 then reads the array back with paralog_obj_get.
 *
 *   mpi_put STORE_URL NAME ROWS SALT [ok|parts|partsoverlap|mismatch|dtype|outside|overlap|nowriter [LOCAL]]
 *   parts: chunks of 1.5 x ROWS rows, so that most chunks are written in
 *   parts by two ranks (paralog_obj_write_part of each rank's rows) and
 *   the last is an edge chunk; partsoverlap: the same, the last rank's
 *   rows starting one row early (the commit refuses); partskill: parts,
 *   and the last rank killed as in killwriter, after its part's bytes
 *   are durable, before its claim;
 *   mismatch: rank 1 joins with another shape; dtype: with float32;
 *   outside: the last rank writes a chunk past the grid; overlap: the last
 *   rank writes rank 0's chunk (refused at its write on one node, at the
 *   commit across nodes); killwriter: the
 *   last rank is killed (SIGKILL, the library's objects.mid_chunk crash
 *   point) after its chunk file is durable, before its claim, while the
 *   others go on to the commit (tests/objects/crash.py); killclaim: the
 *   same at objects.claim_staged, after the claim's temporary name and
 *   before any byte of the chunk file; nowriter: rank 1 gives its
 *   writer up and passes none to the commit (refused on that rank, so the
 *   commit fails on every rank with rank 1's message). LOCAL: a logged
 *   store (paralog_obj_open_logged): rank 0 prints "logged" instead.
 * Prints "version N" and "read back equal" (rank 0), or on an error
 * "rank R: error CODE: MESSAGE" and exits 3. */
#include <paralog/objects_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(int rank, int rc)
{
    printf("rank %d: error %d: %s\n", rank, rc, paralog_obj_errmsg());
    fflush(stdout);
    MPI_Finalize();
    exit(3);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 5) {
        fprintf(stderr, "usage: mpi_put STORE NAME ROWS SALT [MODE]\n");
        return 2;
    }
    const char *mode = argc > 5 ? argv[5] : "ok";
    uint64_t rows = strtoull(argv[3], NULL, 10), cols = 4096;
    int32_t salt = atoi(argv[4]);
    int parts = !strncmp(mode, "parts", 5);
    uint64_t shape[2] = {rows * size, cols}, chunks[2] = {parts ? rows + rows / 2 : rows, cols};
    int dtype = PARALOG_OBJ_INT32;
    if (rank == 1 && !strcmp(mode, "mismatch"))
        shape[0] += 1;
    if (rank == 1 && !strcmp(mode, "dtype"))
        dtype = PARALOG_OBJ_FLOAT32;
    paralog_obj_store *store;
    const char *local = argc > 6 ? argv[6] : NULL;
    int rc = local ? paralog_obj_open_logged(argv[1], local, &store) : paralog_obj_open(argv[1], &store);
    if (rc)
        fail(rank, rc);
    paralog_obj_writer *w;
    rc = paralog_obj_begin_mpi(MPI_COMM_WORLD, store, argv[2], dtype, 2, shape, chunks,
                               "{\"writer\": \"mpi_put\"}", &w);
    if (rc)
        fail(rank, rc);
    int32_t *mine = malloc(rows * cols * 4);
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t c = 0; c < cols; c++)
            mine[r * cols + c] = (int32_t)((rank * rows + r) * cols + c) + salt;
    if (rank == size - 1 && (!strcmp(mode, "killwriter") || !strcmp(mode, "partskill")))
        setenv("PARALOG_FAILPOINT", "objects.mid_chunk", 1); /* read at the first crash point */
    if (rank == size - 1 && !strcmp(mode, "killclaim"))
        setenv("PARALOG_FAILPOINT", "objects.claim_staged", 1);
    uint64_t at[2] = {rank, 0};
    if (rank == size - 1 && !strcmp(mode, "outside"))
        at[0] = size;
    if (rank == size - 1 && !strcmp(mode, "overlap"))
        at[0] = 0;
    if (parts) {
        uint64_t start[2] = {rank * rows, 0}, count[2] = {rows, cols};
        if (rank == size - 1 && rank > 0 && !strcmp(mode, "partsoverlap"))
            start[0] -= 1;
        rc = paralog_obj_write_part(w, start, count, mine, rows * cols * 4);
    } else {
        rc = paralog_obj_write_chunk(w, at, mine, rows * cols * 4);
    }
    if (rc) /* reported, then the collective commit (which will refuse) */
        printf("rank %d: write error %d: %s\n", rank, rc, paralog_obj_errmsg());
    uint64_t version;
    if (rank == 1 && !strcmp(mode, "nowriter")) {
        paralog_obj_discard(w);
        w = NULL;
    }
    rc = paralog_obj_commit_mpi(MPI_COMM_WORLD, store, argv[2], w, &version);
    if (rc)
        fail(rank, rc);
    if (rank == 0 && local) {
        printf("logged\n");
    } else if (rank == 0) {
        printf("version %llu\n", (unsigned long long)version);
        size_t n = shape[0] * cols;
        int32_t *all = malloc(n * 4);
        uint64_t got;
        rc = paralog_obj_get(store, argv[2], (int64_t)version, NULL, NULL, all, n * 4, &got);
        if (rc)
            fail(rank, rc);
        for (size_t i = 0; i < n; i++)
            if (all[i] != (int32_t)i + salt) {
                printf("rank 0: read back differs at element %zu\n", i);
                return 4;
            }
        printf("read back equal\n");
        free(all);
    }
    free(mine);
    paralog_obj_close(store);
    MPI_Finalize();
    return 0;
}
