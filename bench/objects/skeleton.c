/* The seed's skeleton program (OBJECTS.md, seed 004) for the array objects'
 * benchmark (bench/objects/run.py, docs/benchmarks.md section 11): CYCLES
 * cycles of computation, and every EVERY cycles an output phase in which
 * each rank writes its ROWS x 4096 int32 block of a [ROWS * ranks, 4096]
 * array:
 *
 *   --api hdf5     parallel HDF5 (mpio driver, one shared file per phase,
 *                  DIR/out_NNNNN.h5, a contiguous dataset /data, each rank
 *                  its hyperslab, collective H5Dwrite, H5Fclose; with
 *                  --flush, H5Fflush(GLOBAL) first: MPI_File_sync, the
 *                  file durable before the phase ends);
 *   --api obj      the objects' C API (paralog/objects_mpi.h): a new version
 *                  of the object "field" in the store URL per phase, each
 *                  rank its chunk (begin_mpi, write_chunk, commit_mpi);
 *                  with --local L the store is logged (node-local log L,
 *                  published by a node server); with --chunk-rows N the
 *                  chunks have N rows and each rank writes its rows with
 *                  write_part (chunks shared by ranks are written in
 *                  parts).
 *
 * Compute: each rank updates its block (an integer recurrence over every
 * element, real work on the CPU, no sleep) pass after pass until the
 * cycle's --compute-s seconds are spent; then a barrier. The values written
 * do not depend on the compute's pass count: element g (global row-major
 * index) of phase p is (uint32)(g * 2654435761 + p * 40503), so every
 * method's output can be checked against the same formula.
 *
 * Each phase is timed on rank 0 from a barrier before it to a barrier
 * after it (CLOCK_MONOTONIC, Python's time.monotonic()). The last line on
 * stdout (rank 0) is JSON: compute and output seconds, the phases'
 * [start, end], the program's start and end.
 *
 * Usage: skeleton --api hdf5|obj --out DIR|URL --rows R --cycles C
 *                 --every K --compute-s S [--local L] [--flush]
 *                 [--chunk-rows N]
 */
#include <mpi.h>
#include <hdf5.h>
#include <paralog/objects_mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COLS 4096

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, const char *more)
{
    fprintf(stderr, "skeleton: %s%s\n", what, more ? more : "");
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void fill(uint32_t *out, uint64_t first, uint64_t n, int phase)
{
    for (uint64_t i = 0; i < n; i++)
        out[i] = (uint32_t)((first + i) * 2654435761u + (uint64_t)phase * 40503u);
}

static int flush_hdf5;

static void write_hdf5(const char *dir, int phase, int rank, int size, uint64_t rows, const uint32_t *out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/out_%05d.h5", dir, phase);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0)
        die("H5Fcreate failed: ", path);
    hsize_t dims[2] = {rows * size, COLS}, start[2] = {rows * rank, 0}, count[2] = {rows, COLS};
    hid_t fspace = H5Screate_simple(2, dims, NULL);
    hid_t d = H5Dcreate2(f, "data", H5T_STD_I32LE, fspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0)
        die("H5Dcreate failed: ", path);
    H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t mspace = H5Screate_simple(2, count, NULL);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
    if (H5Dwrite(d, H5T_STD_I32LE, mspace, fspace, dxpl, out) < 0)
        die("H5Dwrite failed: ", path);
    H5Pclose(dxpl);
    H5Sclose(mspace);
    H5Sclose(fspace);
    H5Dclose(d);
    if (flush_hdf5 && H5Fflush(f, H5F_SCOPE_GLOBAL) < 0)
        die("H5Fflush failed: ", path);
    if (H5Fclose(f) < 0)
        die("H5Fclose failed: ", path);
}

static uint64_t chunk_rows;

static void write_obj(paralog_obj_store *store, int rank, int size, uint64_t rows, const uint32_t *out)
{
    uint64_t shape[2] = {rows * size, COLS}, chunks[2] = {chunk_rows ? chunk_rows : rows, COLS};
    uint64_t at[2] = {rank, 0}, version;
    paralog_obj_writer *w;
    if (paralog_obj_begin_mpi(MPI_COMM_WORLD, store, "field", PARALOG_OBJ_INT32, 2, shape, chunks, NULL, &w))
        die("begin: ", paralog_obj_errmsg());
    if (chunk_rows) {
        uint64_t start[2] = {rank * rows, 0}, count[2] = {rows, COLS};
        if (paralog_obj_write_part(w, start, count, out, rows * COLS * 4))
            die("write_part: ", paralog_obj_errmsg());
    } else if (paralog_obj_write_chunk(w, at, out, rows * COLS * 4)) {
        die("write_chunk: ", paralog_obj_errmsg());
    }
    if (paralog_obj_commit_mpi(MPI_COMM_WORLD, store, "field", w, &version))
        die("commit: ", paralog_obj_errmsg());
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *api = NULL, *out_to = NULL, *local = NULL;
    uint64_t rows = 16;
    int cycles = 20, every = 5;
    double compute_s = 0.1;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--flush")) {
            flush_hdf5 = 1;
            continue;
        }
        if (i + 1 == argc)
            die("no value for ", k);
        const char *v = argv[++i];
        if (!strcmp(k, "--api")) api = v;
        else if (!strcmp(k, "--out")) out_to = v;
        else if (!strcmp(k, "--local")) local = v;
        else if (!strcmp(k, "--rows")) rows = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--cycles")) cycles = atoi(v);
        else if (!strcmp(k, "--every")) every = atoi(v);
        else if (!strcmp(k, "--compute-s")) compute_s = atof(v);
        else if (!strcmp(k, "--chunk-rows")) chunk_rows = strtoull(v, NULL, 10);
        else die("unknown option ", k);
    }
    if (!api || !out_to || rows == 0 || every <= 0 || (strcmp(api, "hdf5") && strcmp(api, "obj")))
        die("usage: skeleton --api hdf5|obj --out DIR|URL --rows R --cycles C --every K --compute-s S [--local L] [--flush]",
            NULL);
    paralog_obj_store *store = NULL;
    if (!strcmp(api, "obj") && (local ? paralog_obj_open_logged(out_to, local, &store)
                                      : paralog_obj_open(out_to, &store)))
        die("open: ", paralog_obj_errmsg());
    uint64_t n = rows * COLS;
    uint32_t *block = malloc(n * 4), *out = malloc(n * 4);
    fill(block, 0, n, rank);
    int outputs = cycles / every;
    double *phases = calloc(2 * (size_t)outputs + 2, sizeof(double));
    double compute = 0, output = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double start = now();
    for (int c = 0, p = 0; c < cycles; c++) {
        double t0 = now();
        uint32_t x = (uint32_t)c;
        do {
            for (uint64_t i = 0; i < n; i++)
                x = block[i] = block[i] * 1664525u + 1013904223u + x;
        } while (now() - t0 < compute_s);
        MPI_Barrier(MPI_COMM_WORLD);
        compute += now() - t0;
        if ((c + 1) % every)
            continue;
        fill(out, (uint64_t)rank * n, n, p);
        double o0 = now();
        if (!strcmp(api, "hdf5"))
            write_hdf5(out_to, p, rank, size, rows, out);
        else
            write_obj(store, rank, size, rows, out);
        MPI_Barrier(MPI_COMM_WORLD);
        double o1 = now();
        output += o1 - o0;
        phases[2 * p] = o0;
        phases[2 * p + 1] = o1;
        p++;
    }
    double end = now();
    if (store)
        paralog_obj_close(store);
    if (rank == 0) {
        printf("{\"api\": \"%s\", \"ranks\": %d, \"rows\": %llu, \"outputs\": %d, \"compute_s\": %.6f, "
               "\"output_s\": %.6f, \"start\": %.6f, \"end\": %.6f, \"sink\": %u, \"phases\": [",
               api, size, (unsigned long long)rows, outputs, compute, output, start, end, block[0] & 1);
        for (int p = 0; p < outputs; p++)
            printf("%s[%.6f, %.6f]", p ? ", " : "", phases[2 * p], phases[2 * p + 1]);
        printf("]}\n");
    }
    free(block);
    free(out);
    free(phases);
    MPI_Finalize();
    return 0;
}
