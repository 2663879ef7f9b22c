/* paralog's MPI shim: wraps MPI_File_open/sync/close/set_size/preallocate
 * (and their PMPI_ twins, which Open MPI's Fortran bindings and MPICH's
 * mpi_f08 call directly). It only translates MPI handles into integers and
 * runs the one agreement per consistency point on a private duplicate of the
 * file's communicator; everything else is in the capture library
 * (paralog_mpi_* functions, resolved from it at run time).
 *
 * Built once per MPI implementation by that MPI's mpicc (make shim). It does
 * not link libmpi: LD_PRELOAD reaches every process of a job (mpirun, shells,
 * tools), so MPI functions, and Open MPI's predefined handles (addresses of
 * library globals), are looked up when first needed. A program may load
 * libmpi itself, late and with local scope (Python's mpi4py and h5py do):
 * then only a handle to the loaded library finds its symbols. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The capture library's side (crates/capture/src/mpi.rs). */
extern int paralog_mpi_open_begin(const char *path, int amode, uint64_t *gen);
extern int64_t paralog_mpi_open_attach(const char *path, uint64_t gen, int rank, int size, int amode);
extern int paralog_mpi_commit_local(int64_t handle, uint64_t *size);
extern int paralog_mpi_complete(int64_t handle, uint64_t global_size);
extern int paralog_mpi_set_size(int64_t handle, uint64_t size);
extern int paralog_mpi_preallocate(int64_t handle, uint64_t size);
extern void paralog_mpi_release(int64_t handle);
extern void paralog_report(const char *msg);

enum { OPEN_WRITE = 1, OPEN_CREATE = 2 };

static void say(const char *fmt, const char *a, long b) {
    char line[1024];
    snprintf(line, sizeof line, fmt, a, b);
    paralog_report(line);
}

/* ---- MPI functions, found at run time -------------------------------- */

/* Sonames of the MPI libraries on these systems (Open MPI 4, MPICH 3/4). */
static const char *mpi_sonames[] = {"libmpi.so.40", "libmpich.so.12", "libmpi.so.12", "libmpi.so", NULL};

/* Functions: the next definition after ours (RTLD_NEXT). Data (Open MPI's
 * predefined handles): the default scope first, because a program that
 * names MPI_INFO_NULL owns a copy of the global (copy relocation) and that
 * copy's address is the handle it passes. */
static void *lookup(const char *name, int data) {
    void *p = dlsym(data ? RTLD_DEFAULT : RTLD_NEXT, name);
    if (!p) p = dlsym(data ? RTLD_NEXT : RTLD_DEFAULT, name);
    for (int i = 0; !p && mpi_sonames[i]; i++) {
        void *lib = dlopen(mpi_sonames[i], RTLD_LAZY | RTLD_NOLOAD);
        if (lib) p = dlsym(lib, name);
    }
    if (!p) say("MPI symbol %s not found in this process%.0ld", name, 0);
    return p;
}

static void *mpi_sym(const char *name) { return lookup(name, 0); }

#define REAL(ret, name, args)                                              \
    typedef ret(*name##_fn) args;                                          \
    static name##_fn real_##name(void) {                                   \
        static name##_fn f;                                                \
        if (!f) f = (name##_fn)mpi_sym(#name);                             \
        return f;                                                          \
    }

/* Predefined handles: constants in MPICH, library globals in Open MPI. */
#ifdef OPEN_MPI
#define OMPI_HANDLE(type, global) ((type)lookup(global, 1))
#define OP_MAX OMPI_HANDLE(MPI_Op, "ompi_mpi_op_max")
#define TYPE_INT64 OMPI_HANDLE(MPI_Datatype, "ompi_mpi_int64_t")
#define INFO_NULL OMPI_HANDLE(MPI_Info, "ompi_mpi_info_null")
#else
#define OP_MAX MPI_MAX
#define TYPE_INT64 MPI_INT64_T
#define INFO_NULL MPI_INFO_NULL
#endif

REAL(int, PMPI_File_open, (MPI_Comm, const char *, int, MPI_Info, MPI_File *))
REAL(int, PMPI_File_sync, (MPI_File))
REAL(int, PMPI_File_close, (MPI_File *))
REAL(int, PMPI_File_set_size, (MPI_File, MPI_Offset))
REAL(int, PMPI_File_preallocate, (MPI_File, MPI_Offset))
REAL(int, PMPI_File_call_errhandler, (MPI_File, int))
REAL(int, PMPI_Allreduce, (const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm))
REAL(int, PMPI_Comm_dup, (MPI_Comm, MPI_Comm *))
REAL(int, PMPI_Comm_free, (MPI_Comm *))
REAL(int, PMPI_Comm_rank, (MPI_Comm, int *))
REAL(int, PMPI_Comm_size, (MPI_Comm, int *))
REAL(int, PMPI_Info_create, (MPI_Info *))
REAL(int, PMPI_Info_dup, (MPI_Info, MPI_Info *))
REAL(int, PMPI_Info_set, (MPI_Info, const char *, const char *))
REAL(int, PMPI_Info_free, (MPI_Info *))
REAL(int, PMPI_Info_get, (MPI_Info, const char *, int, char *, int *))
REAL(int, PMPI_File_get_info, (MPI_File, MPI_Info *))

/* PARALOG_VERBOSE=1: say which read-avoiding settings are in force for a
 * captured file, as the MPI library reports them (the tests check it). */
static void report_hints(MPI_File fh, const char *path) {
    const char *v = getenv("PARALOG_VERBOSE");
    if (!v || strcmp(v, "1") != 0) return;
    MPI_Info info;
    if (real_PMPI_File_get_info()(fh, &info) != MPI_SUCCESS) return;
    char cb[64] = "unset", ds[64] = "unset";
    int flag;
    real_PMPI_Info_get()(info, "romio_cb_write", sizeof cb - 1, cb, &flag);
    real_PMPI_Info_get()(info, "romio_ds_write", sizeof ds - 1, ds, &flag);
    real_PMPI_Info_free()(&info);
    const char *fcoll = getenv("OMPI_MCA_fcoll");
    char line[1024];
    snprintf(line, sizeof line, "%s: hints in force: romio_cb_write=%s romio_ds_write=%s OMPI_MCA_fcoll=%s", path, cb, ds,
             fcoll ? fcoll : "unset");
    paralog_report(line);
}

/* ---- captured files: MPI_File -> capture handle ------------------------ */

typedef struct {
    MPI_File fh;
    int64_t handle;
    MPI_Comm agree; /* private duplicate of the file's communicator */
    char path[64];  /* for messages */
} entry_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static entry_t *table;
static int n_entries, cap_entries;

static int find(MPI_File fh, entry_t *out) {
    int found = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_entries; i++)
        if (table[i].fh == fh) {
            *out = table[i];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&mu);
    return found;
}

static int add(entry_t e) {
    int ok = 1;
    pthread_mutex_lock(&mu);
    if (n_entries == cap_entries) {
        int cap = cap_entries ? 2 * cap_entries : 16;
        entry_t *t = realloc(table, cap * sizeof *t);
        if (t) {
            table = t;
            cap_entries = cap;
        } else
            ok = 0;
    }
    if (ok) table[n_entries++] = e;
    pthread_mutex_unlock(&mu);
    return ok;
}

static void drop(MPI_File fh) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_entries; i++)
        if (table[i].fh == fh) {
            table[i] = table[--n_entries];
            break;
        }
    pthread_mutex_unlock(&mu);
}

/* A wrapper entered from inside another (the MPI library calling its own
 * PMPI_File_* through the PLT) passes straight through. */
static __thread int depth;

/* ROMIO accepts "ufs:/path", "nfs:/path"...: the POSIX open sees the rest. */
static const char *strip_driver(const char *name) {
    static const char *drivers[] = {"ufs:", "nfs:", "lustre:", "gpfs:", "pvfs2:", "panfs:", "xfs:", "testfs:", "daos:", "quobytefs:", "ime:", NULL};
    for (int i = 0; drivers[i]; i++) {
        size_t n = strlen(drivers[i]);
        if (strncmp(name, drivers[i], n) == 0) return name + n;
    }
    return name;
}

/* The agreement: elementwise max over the communicator of n int64 values. */
static int agree_max(MPI_Comm comm, int64_t *v, int n) {
    int64_t in[4];
    memcpy(in, v, n * sizeof *v);
    return real_PMPI_Allreduce()(in, v, n, TYPE_INT64, OP_MAX, comm);
}

/* ---- open ---------------------------------------------------------------- */

static int shim_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh) {
    if (depth || !real_PMPI_File_open()) return real_PMPI_File_open()(comm, filename, amode, info, fh);
    depth++;
    const char *path = strip_driver(filename);
    int flags = ((amode & (MPI_MODE_WRONLY | MPI_MODE_RDWR)) ? OPEN_WRITE : 0) | ((amode & MPI_MODE_CREATE) ? OPEN_CREATE : 0);
    uint64_t gen = 0;
    int decision = paralog_mpi_open_begin(path, flags, &gen);
    /* [error anywhere, captured anywhere, not captured anywhere, open generation] */
    int64_t v[4] = {decision < 0, decision == 1, decision == 0, (int64_t)gen};
    int rc = agree_max(comm, v, 4);
    if (rc != MPI_SUCCESS) goto out;
    if (v[0] || (v[1] && v[2])) {
        if (v[1] && v[2] && decision >= 0)
            say("MPI_File_open(%s): ranks disagree on whether the file is captured (different PARALOG_* settings?)%.0ld", filename, 0);
        rc = MPI_ERR_IO;
        goto out;
    }
    if (!v[1]) {
        rc = real_PMPI_File_open()(comm, filename, amode, info, fh);
        goto out;
    }
    MPI_Comm agree;
    rc = real_PMPI_Comm_dup()(comm, &agree);
    if (rc != MPI_SUCCESS) goto out;
    int rank, size;
    real_PMPI_Comm_rank()(agree, &rank);
    real_PMPI_Comm_size()(agree, &size);
    int64_t handle = paralog_mpi_open_attach(path, (uint64_t)v[3], rank, size, flags);
    int64_t failed[1] = {handle <= 0};
    rc = agree_max(agree, failed, 1);
    if (rc != MPI_SUCCESS || failed[0]) {
        if (handle > 0) paralog_mpi_release(handle);
        real_PMPI_Comm_free()(&agree);
        if (rc == MPI_SUCCESS) rc = MPI_ERR_IO;
        goto out;
    }
    /* Reads during writes (two-phase I/O, data sieving) would need other
     * ranks' bytes, which are not local under capture: switch them off.
     * romio_no_indep_rw=true would force collective buffering back on. */
    MPI_Info hints;
    if (info == INFO_NULL)
        real_PMPI_Info_create()(&hints);
    else
        real_PMPI_Info_dup()(info, &hints);
    real_PMPI_Info_set()(hints, "romio_cb_write", "disable");
    real_PMPI_Info_set()(hints, "romio_ds_write", "disable");
    real_PMPI_Info_set()(hints, "romio_no_indep_rw", "false");
    rc = real_PMPI_File_open()(comm, filename, amode, hints, fh);
    real_PMPI_Info_free()(&hints);
    if (rc != MPI_SUCCESS) {
        paralog_mpi_release(handle);
        real_PMPI_Comm_free()(&agree);
        goto out;
    }
    report_hints(*fh, path);
    entry_t e = {.fh = *fh, .handle = handle, .agree = agree};
    snprintf(e.path, sizeof e.path, "%s", path);
    if (!add(e)) {
        paralog_report("out of memory registering a captured MPI file");
        rc = MPI_ERR_NO_MEM;
    }
out:
    depth--;
    return rc;
}

int MPI_File_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh) {
    return shim_open(comm, filename, amode, info, fh);
}
int PMPI_File_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh) {
    return shim_open(comm, filename, amode, info, fh);
}

/* ---- consistency points ---------------------------------------------- */

/* Local commit on every rank, then one allreduce: the call succeeds only if
 * every rank committed (and then every rank marks the epoch). */
static int consistency_point(entry_t *e, int local_rc) {
    uint64_t size = 0;
    int err = paralog_mpi_commit_local(e->handle, &size);
    int64_t v[2] = {local_rc != MPI_SUCCESS || err != 0, (int64_t)size};
    int rc = agree_max(e->agree, v, 2);
    if (rc != MPI_SUCCESS) return rc;
    if (v[0]) {
        if (!err && local_rc == MPI_SUCCESS) say("%s: another rank failed to commit this epoch; it is not committed%.0ld", e->path, 0);
        return MPI_ERR_IO;
    }
    /* A lost mark is re-derived from the manifests: not an error. */
    paralog_mpi_complete(e->handle, (uint64_t)v[1]);
    return MPI_SUCCESS;
}

static int shim_sync(MPI_File fh) {
    entry_t e;
    if (depth || !find(fh, &e)) return real_PMPI_File_sync()(fh);
    depth++;
    int rc = real_PMPI_File_sync()(fh);
    rc = consistency_point(&e, rc);
    if (rc != MPI_SUCCESS) real_PMPI_File_call_errhandler()(fh, rc);
    depth--;
    return rc;
}

int MPI_File_sync(MPI_File fh) { return shim_sync(fh); }
int PMPI_File_sync(MPI_File fh) { return shim_sync(fh); }

static int shim_close(MPI_File *fh) {
    entry_t e;
    if (depth || !fh || !find(*fh, &e)) return real_PMPI_File_close()(fh);
    depth++;
    /* Close first: the library may still write buffered data through us. */
    int rc = real_PMPI_File_close()(fh);
    drop(e.fh);
    rc = consistency_point(&e, rc);
    paralog_mpi_release(e.handle);
    real_PMPI_Comm_free()(&e.agree);
    depth--;
    return rc;
}

int MPI_File_close(MPI_File *fh) { return shim_close(fh); }
int PMPI_File_close(MPI_File *fh) { return shim_close(fh); }

/* ---- size operations --------------------------------------------------- */

/* Recorded on every rank (they are collective); the library's own versions
 * are not called: ROMIO's preallocate reads and rewrites the file, and a
 * truncation must reach the remote only as part of a committed epoch. */
static int shim_set_size(MPI_File fh, MPI_Offset size) {
    entry_t e;
    if (depth || !find(fh, &e)) return real_PMPI_File_set_size()(fh, size);
    if (size < 0) return MPI_ERR_ARG;
    return paralog_mpi_set_size(e.handle, (uint64_t)size) ? MPI_ERR_IO : MPI_SUCCESS;
}

int MPI_File_set_size(MPI_File fh, MPI_Offset size) { return shim_set_size(fh, size); }
int PMPI_File_set_size(MPI_File fh, MPI_Offset size) { return shim_set_size(fh, size); }

static int shim_preallocate(MPI_File fh, MPI_Offset size) {
    entry_t e;
    if (depth || !find(fh, &e)) return real_PMPI_File_preallocate()(fh, size);
    if (size < 0) return MPI_ERR_ARG;
    return paralog_mpi_preallocate(e.handle, (uint64_t)size) ? MPI_ERR_IO : MPI_SUCCESS;
}

int MPI_File_preallocate(MPI_File fh, MPI_Offset size) { return shim_preallocate(fh, size); }
int PMPI_File_preallocate(MPI_File fh, MPI_Offset size) { return shim_preallocate(fh, size); }

/* ---- process start ------------------------------------------------------ */

/* Open MPI's OMPIO reads its MCA parameters at MPI_Init: with capture on,
 * choose the collective component that writes each rank's own data
 * (no read-modify-write), and no data sieving in the POSIX fbtl. */
__attribute__((constructor)) static void paralog_shim_init(void) {
    const char *prefix = getenv("PARALOG_PREFIX");
    if (!prefix || !*prefix) return;
    setenv("OMPI_MCA_fcoll", "individual", 1);
    setenv("OMPI_MCA_fbtl_posix_write_datasieving", "0", 1);
}
