/* A simulation-like workload for the end-to-end benchmark (bench/e2e/run.py):
 * per cycle, SWEEPS sweeps of a 5-point Jacobi stencil on each rank's part of
 * a 2-D grid (rows split between ranks, halo rows exchanged with the
 * neighbours every sweep: real computation, no sleep), and every EVERY cycles
 * an output phase that writes BYTES bytes (all ranks together) of the grid's
 * values to a shared file, collectively:
 *
 *   --api mpiio   MPI_File_open, set_view at the rank's block,
 *                 MPI_File_write_all, then (--end) MPI_File_close, or
 *                 MPI_File_sync (one file for the whole run, one block per
 *                 output, closed at the end);
 *   --api hdf5    parallel HDF5 (mpio driver): one 1-D dataset of doubles
 *                 per output, each rank a hyperslab, collective H5Dwrite,
 *                 then H5Fclose, or H5Fflush (one file, one dataset per
 *                 output, which MPI_File_sync's).
 *
 * With --end close, output j goes to DIR/out_NNNNN.dat (.h5): a new file per
 * output, as a simulation writes its plot files; with --end sync, all to
 * DIR/out.dat (.h5).
 *
 * Rank 0 records the start and end of every phase (CLOCK_MONOTONIC, the
 * clock of Python's time.monotonic(), so the harness can line them up with
 * its own samples) and writes them to --timeline FILE at the end (outside the
 * measured I/O). The last line on stdout is a JSON summary: compute and
 * output seconds (max over ranks), the phase counts.
 *
 * Usage: workload --dir DIR --bytes B --every K --cycles C --sweeps S
 *                 [--grid N] [--api mpiio|hdf5] [--end close|sync]
 *                 [--timeline FILE]
 * K = 0: no output (compute only, for calibration). Every rank writes
 * B / nranks bytes (B must divide by 8 * nranks).
 */
#include <mpi.h>
#ifdef WITH_HDF5
#include <hdf5.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *msg) {
    fprintf(stderr, "workload: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

#define CHECK(call)                                   \
    do {                                              \
        if ((call) != MPI_SUCCESS) die(#call " failed"); \
    } while (0)

struct phase {
    char kind; /* 'c' compute, 'o' output */
    int index;
    double t0, t1;
};

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    double t_start = now();
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    const char *dir = NULL, *timeline = NULL, *api = "mpiio", *end = "close";
    long long bytes = 0;
    long every = 0, cycles = 0, sweeps = 0, grid = 512;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--dir")) dir = v;
        else if (!strcmp(k, "--bytes")) bytes = atoll(v);
        else if (!strcmp(k, "--every")) every = atol(v);
        else if (!strcmp(k, "--cycles")) cycles = atol(v);
        else if (!strcmp(k, "--sweeps")) sweeps = atol(v);
        else if (!strcmp(k, "--grid")) grid = atol(v);
        else if (!strcmp(k, "--api")) api = v;
        else if (!strcmp(k, "--end")) end = v;
        else if (!strcmp(k, "--timeline")) timeline = v;
        else die("unknown option");
    }
    int hdf5 = !strcmp(api, "hdf5");
    int use_sync = !strcmp(end, "sync");
    if (!hdf5 && strcmp(api, "mpiio")) die("--api mpiio|hdf5");
    if (!use_sync && strcmp(end, "close")) die("--end close|sync");
#ifndef WITH_HDF5
    if (hdf5) die("built without HDF5");
#endif
    if (cycles <= 0 || sweeps < 0 || grid < 4) die("need --cycles > 0, --sweeps >= 0, --grid >= 4");
    if (every > 0 && (!dir || bytes <= 0 || bytes % (8LL * size))) die("need --dir and --bytes (a multiple of 8 x ranks)");
    long long per = bytes / size; /* bytes per rank and output */

    /* The grid: grid x grid points per rank plus two halo rows. */
    long nx = grid, ny = grid;
    size_t npts = (size_t)(ny + 2) * nx;
    double *u = malloc(npts * sizeof *u), *v = malloc(npts * sizeof *v);
    char *out = every > 0 ? malloc((size_t)per) : NULL;
    if (!u || !v || (every > 0 && !out)) die("out of memory");
    for (long j = 0; j < ny + 2; j++)
        for (long i = 0; i < nx; i++) u[j * nx + i] = v[j * nx + i] = (double)((j * 31 + i * 17 + rank * 7) % 101) / 101.0;
    int up = rank > 0 ? rank - 1 : MPI_PROC_NULL, down = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;

    long outputs = every > 0 ? cycles / every : 0;
    size_t nphases = (size_t)(cycles + outputs);
    struct phase *ph = calloc(nphases, sizeof *ph);
    size_t np = 0;
    double compute_s = 0, output_s = 0;
#ifdef WITH_HDF5
    hid_t h5file = -1;
#endif
    MPI_File fh = MPI_FILE_NULL;
    char path[4096];

    for (long c = 1; c <= cycles; c++) {
        double t0 = now();
        for (long s = 0; s < sweeps; s++) {
            CHECK(MPI_Sendrecv(&u[1 * nx], (int)nx, MPI_DOUBLE, up, 0, &u[(ny + 1) * nx], (int)nx, MPI_DOUBLE, down, 0,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(MPI_Sendrecv(&u[ny * nx], (int)nx, MPI_DOUBLE, down, 1, &u[0], (int)nx, MPI_DOUBLE, up, 1,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            for (long j = 1; j <= ny; j++) {
                const double *a = &u[(j - 1) * nx], *b = &u[j * nx], *d = &u[(j + 1) * nx];
                double *w = &v[j * nx];
                w[0] = b[0];
                for (long i = 1; i < nx - 1; i++) w[i] = 0.25 * (a[i] + d[i] + b[i - 1] + b[i + 1]) + 1e-6 * b[i];
                w[nx - 1] = b[nx - 1];
            }
            double *t = u;
            u = v;
            v = t;
        }
        double t1 = now();
        compute_s += t1 - t0;
        ph[np++] = (struct phase){'c', (int)c, t0, t1};

        if (every > 0 && c % every == 0) {
            long j = c / every - 1; /* output index */
            t0 = now();
            /* The output: the rank's grid values, repeated to fill its block. */
            size_t have = (size_t)ny * nx * sizeof(double);
            const char *src = (const char *)&u[nx];
            for (long long o = 0; o < per; o += (long long)have) {
                size_t n = (size_t)(per - o) < have ? (size_t)(per - o) : have;
                memcpy(out + o, src, n);
            }
            if (!hdf5) {
                MPI_Offset base = 0;
                if (!use_sync) {
                    snprintf(path, sizeof path, "%s/out_%05ld.dat", dir, j);
                    CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh));
                } else {
                    if (fh == MPI_FILE_NULL) {
                        snprintf(path, sizeof path, "%s/out.dat", dir);
                        CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh));
                    }
                    base = (MPI_Offset)j * bytes;
                }
                CHECK(MPI_File_set_view(fh, base + (MPI_Offset)rank * per, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
                CHECK(MPI_File_write_all(fh, out, (int)per, MPI_BYTE, MPI_STATUS_IGNORE));
                if (use_sync) CHECK(MPI_File_sync(fh));
                else CHECK(MPI_File_close(&fh));
            }
#ifdef WITH_HDF5
            else {
                if (!use_sync || h5file < 0) {
                    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
                    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
                    if (use_sync) snprintf(path, sizeof path, "%s/out.h5", dir);
                    else snprintf(path, sizeof path, "%s/out_%05ld.h5", dir, j);
                    h5file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
                    H5Pclose(fapl);
                    if (h5file < 0) die("H5Fcreate failed");
                }
                char name[64];
                snprintf(name, sizeof name, "step_%05ld", j);
                hsize_t total = (hsize_t)(bytes / 8), count = (hsize_t)(per / 8), start = (hsize_t)rank * count;
                hid_t fspace = H5Screate_simple(1, &total, NULL);
                hid_t dset = H5Dcreate2(h5file, name, H5T_NATIVE_DOUBLE, fspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
                if (dset < 0) die("H5Dcreate failed");
                H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, NULL, &count, NULL);
                hid_t mspace = H5Screate_simple(1, &count, NULL);
                hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
                H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
                if (H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace, fspace, dxpl, out) < 0) die("H5Dwrite failed");
                H5Pclose(dxpl);
                H5Sclose(mspace);
                H5Sclose(fspace);
                H5Dclose(dset);
                if (use_sync) {
                    if (H5Fflush(h5file, H5F_SCOPE_GLOBAL) < 0) die("H5Fflush failed");
                } else {
                    if (H5Fclose(h5file) < 0) die("H5Fclose failed");
                    h5file = -1;
                }
            }
#endif
            t1 = now();
            output_s += t1 - t0;
            ph[np++] = (struct phase){'o', (int)j, t0, t1};
        }
    }
    double t_close0 = now();
    if (fh != MPI_FILE_NULL) CHECK(MPI_File_close(&fh));
#ifdef WITH_HDF5
    if (h5file >= 0 && H5Fclose(h5file) < 0) die("H5Fclose failed");
#endif
    double t_end = now();
    output_s += t_end - t_close0;

    double mine[2] = {compute_s, output_s}, most[2];
    MPI_Reduce(mine, most, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    double check = 0;
    for (long j = 1; j <= ny; j++) check += u[j * nx + nx / 2];
    double sum_check;
    MPI_Reduce(&check, &sum_check, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (timeline) {
            FILE *f = fopen(timeline, "w");
            if (!f) die("cannot write the timeline");
            fprintf(f, "{\"start\": %.6f, \"end\": %.6f, \"phases\": [", t_start, t_end);
            for (size_t i = 0; i < np; i++)
                fprintf(f, "%s[\"%c\", %d, %.6f, %.6f]", i ? ", " : "", ph[i].kind, ph[i].index, ph[i].t0, ph[i].t1);
            fprintf(f, "]}\n");
            fclose(f);
        }
        printf("{\"ranks\": %d, \"cycles\": %ld, \"sweeps\": %ld, \"grid\": %ld, \"outputs\": %ld, \"bytes_per_output\": %lld, "
               "\"compute_s\": %.6f, \"output_s\": %.6f, \"start\": %.6f, \"end\": %.6f, \"check\": %.9g}\n",
               size, cycles, sweeps, grid, outputs, bytes, most[0], most[1], t_start, t_end, sum_check);
        fflush(stdout);
    }
    free(ph);
    free(out);
    free(u);
    free(v);
    MPI_Finalize();
    return 0;
}
