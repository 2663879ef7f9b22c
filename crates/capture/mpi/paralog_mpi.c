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
#include <unistd.h>


/* The capture library's side (crates/capture/src/mpi.rs). */
extern int paralog_mpi_open_begin(const char *path, int amode, uint64_t *gen);
extern int64_t paralog_mpi_open_attach(const char *path, uint64_t gen, int rank, int size, int amode);
extern int paralog_mpi_commit_local(int64_t handle, uint64_t *size);
extern int paralog_mpi_complete(int64_t handle, uint64_t global_size);
extern int paralog_mpi_set_size(int64_t handle, uint64_t size);
extern int paralog_mpi_preallocate(int64_t handle, uint64_t size);
extern void paralog_mpi_release(int64_t handle);
extern void paralog_mpi_sync_point(int64_t handle);
extern int paralog_mpi_dirty(int64_t handle);
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
#define COMM_NULL OMPI_HANDLE(MPI_Comm, "ompi_mpi_comm_null")
#else
#define COMM_NULL MPI_COMM_NULL
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
REAL(int, PMPI_Comm_compare, (MPI_Comm, MPI_Comm, int *))
REAL(int, PMPI_Comm_test_inter, (MPI_Comm, int *))
REAL(int, PMPI_Comm_group, (MPI_Comm, MPI_Group *))
REAL(int, PMPI_Group_intersection, (MPI_Group, MPI_Group, MPI_Group *))
REAL(int, PMPI_Group_size, (MPI_Group, int *))
REAL(int, PMPI_Group_free, (MPI_Group *))
REAL(int, PMPI_Get_library_version, (char *, int *))

/* ---- the MPI the shim was built for, and the one in the process -------- */

#ifdef OPEN_MPI
#define BUILT_FOR "Open MPI"
#define OTHER_FLAVOUR "MPICH"
#define BUILT_FLAG "openmpi"
#define OTHER_FLAG "mpich"
#else
#define BUILT_FOR "MPICH"
#define OTHER_FLAVOUR "Open MPI"
#define BUILT_FLAG "mpich"
#define OTHER_FLAG "openmpi"
#endif

/* 1 when the process's MPI is the one this shim was compiled against. A
 * shim of the other flavour cannot even forward a call: its handle types
 * differ (MPICH's are ints, Open MPI's pointers), so the handles would be
 * cut short and the library would crash. Find out first, from the
 * library's own version string, and stop with one clear line. */
static int flavour_ok(void) {
    static int known = -1;
    if (known >= 0) return known;
    if (!real_PMPI_Get_library_version()) return 1; /* no MPI: nothing to check */
    static char version[8192]; /* MPICH's MPI_MAX_LIBRARY_VERSION_STRING; Open MPI's is 256 */
    int len = 0;
    memset(version, 0, sizeof version);
    if (real_PMPI_Get_library_version()(version, &len) != MPI_SUCCESS) return 1;
    int is_ompi = strstr(version, "Open MPI") != NULL;
#ifdef OPEN_MPI
    known = strstr(version, "MPICH") == NULL || is_ompi;
#else
    known = !is_ompi;
#endif
    if (!known) {
        char *nl = strpbrk(version, "\n,");
        if (nl) *nl = 0;
        for (char *c = version; *c; c++)
            if (*c == '\t') *c = ' ';
        char line[512];
        snprintf(line, sizeof line,
                 "the MPI shim in LD_PRELOAD was built for " BUILT_FOR " but this program runs " OTHER_FLAVOUR
                 " (%.60s): run it with `paralog run --mpi " OTHER_FLAG "` (or `paralog env --mpi " OTHER_FLAG
                 "`); stopping",
                 version);
        paralog_report(line);
    }
    return known;
}

/* Every wrapper calls this before it touches an MPI handle. */
static void check_flavour(void) {
    if (!flavour_ok()) _exit(1);
}

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
    MPI_Comm agree;  /* private duplicate of the file's communicator */
    MPI_Group group; /* its group, to tell which collectives every rank takes part in */
    int size;
    char path[64]; /* for messages */
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
    int64_t in[5];
    memcpy(in, v, n * sizeof *v);
    return real_PMPI_Allreduce()(in, v, n, TYPE_INT64, OP_MAX, comm);
}

/* ---- open ---------------------------------------------------------------- */

/* Reads during writes (two-phase I/O, data sieving) would need other
 * ranks' bytes, which are not local under capture: switch them off.
 * romio_no_indep_rw=true would force collective buffering back on. */
static int open_with_hints(MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh) {
    MPI_Info hints;
    if (info == INFO_NULL)
        real_PMPI_Info_create()(&hints);
    else
        real_PMPI_Info_dup()(info, &hints);
    real_PMPI_Info_set()(hints, "romio_cb_write", "disable");
    real_PMPI_Info_set()(hints, "romio_ds_write", "disable");
    real_PMPI_Info_set()(hints, "romio_no_indep_rw", "false");
    int rc = real_PMPI_File_open()(comm, filename, amode, hints, fh);
    real_PMPI_Info_free()(&hints);
    return rc;
}

static int shim_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh) {
    check_flavour();
    if (depth || !real_PMPI_File_open()) return real_PMPI_File_open()(comm, filename, amode, info, fh);
    depth++;
    const char *path = strip_driver(filename);
    int flags = ((amode & (MPI_MODE_WRONLY | MPI_MODE_RDWR)) ? OPEN_WRITE : 0) | ((amode & MPI_MODE_CREATE) ? OPEN_CREATE : 0);
    uint64_t gen = 0;
    int decision = paralog_mpi_open_begin(path, flags, &gen);
    /* [error anywhere, captured anywhere, not captured anywhere, open
     * generation, already open under capture anywhere] */
    int64_t v[5] = {decision < 0, decision == 1, decision == 0, (int64_t)gen, decision == 2};
    int rc = agree_max(comm, v, 5);
    if (rc != MPI_SUCCESS) goto out;
    if (v[0] || (v[1] && v[2]) || (v[4] && (v[1] || v[2]))) {
        if (v[4] && decision >= 0)
            say("MPI_File_open(%s): some ranks have it open under capture already, others not; a second open must come from ranks that all hold the first%.0ld", filename, 0);
        else if (v[1] && v[2] && decision >= 0)
            say("MPI_File_open(%s): ranks disagree on whether the file is captured (different PARALOG_* settings?)%.0ld", filename, 0);
        rc = MPI_ERR_IO;
        goto out;
    }
    if (v[4]) {
        /* A second handle of a file every rank here has open under capture
         * (PnetCDF's independent data mode opens one on MPI_COMM_SELF): the
         * library's opens join the first open's log, its sync and close are
         * not consistency points of their own (the first handle's are), and
         * it gets the same hints. */
        rc = open_with_hints(comm, filename, amode, info, fh);
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
    rc = open_with_hints(comm, filename, amode, info, fh);
    if (rc != MPI_SUCCESS) {
        paralog_mpi_release(handle);
        real_PMPI_Comm_free()(&agree);
        goto out;
    }
    report_hints(*fh, path);
    entry_t e = {.fh = *fh, .handle = handle, .agree = agree, .size = size};
    real_PMPI_Comm_group()(agree, &e.group);
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
    check_flavour();
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
    check_flavour();
    if (depth || !fh || !find(*fh, &e)) return real_PMPI_File_close()(fh);
    depth++;
    /* Close first: the library may still write buffered data through us. */
    int rc = real_PMPI_File_close()(fh);
    drop(e.fh);
    rc = consistency_point(&e, rc);
    paralog_mpi_release(e.handle);
    real_PMPI_Group_free()(&e.group);
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
#define SIZE_OP(name, record)                                              \
    static int shim_##name(MPI_File fh, MPI_Offset size) {                 \
        entry_t e;                                                         \
        check_flavour();                                                   \
        if (depth || !find(fh, &e)) return real_PMPI_File_##name()(fh, size); \
        if (size < 0) return MPI_ERR_ARG;                                  \
        return record(e.handle, (uint64_t)size) ? MPI_ERR_IO : MPI_SUCCESS; \
    }                                                                      \
    int MPI_File_##name(MPI_File fh, MPI_Offset size) { return shim_##name(fh, size); } \
    int PMPI_File_##name(MPI_File fh, MPI_Offset size) { return shim_##name(fh, size); }

SIZE_OP(set_size, paralog_mpi_set_size)
SIZE_OP(preallocate, paralog_mpi_preallocate)

/* ---- program order across ranks: synchronizing points ------------------ */

/* Writes of different ranks to the same bytes in one epoch are merged in
 * the order the program gave them (docs/format.md, "Phases"). The points
 * that give an order are the ones every rank of the file passes: the
 * collective I/O calls on the file (start and end), and collectives on a
 * communicator that holds every rank of the file. Each such point starts a
 * new phase on every rank alike; the capture library numbers them. */

/* Does `comm` hold every rank of the file (so that every rank of the file
 * takes part in a collective on it)? */
static int covers(MPI_Comm comm, const entry_t *e) {
    static MPI_Comm null;
    static int null_known;
    if (!null_known) {
        null = COMM_NULL;
        null_known = 1;
    }
    if (comm == null) return 0;
    int cmp, inter = 0, n = 0;
    if (real_PMPI_Comm_compare()(comm, e->agree, &cmp) != MPI_SUCCESS) return 0;
    if (cmp == MPI_IDENT || cmp == MPI_CONGRUENT || cmp == MPI_SIMILAR) return 1;
    if (real_PMPI_Comm_test_inter()(comm, &inter) != MPI_SUCCESS || inter) return 0;
    if (real_PMPI_Comm_size()(comm, &n) != MPI_SUCCESS || n < e->size) return 0;
    MPI_Group g, both;
    if (real_PMPI_Comm_group()(comm, &g) != MPI_SUCCESS) return 0;
    int common = 0;
    if (real_PMPI_Group_intersection()(g, e->group, &both) == MPI_SUCCESS) {
        real_PMPI_Group_size()(both, &common);
        real_PMPI_Group_free()(&both);
    }
    real_PMPI_Group_free()(&g);
    return common == e->size;
}

/* A collective on `comm` returned: a new phase for every captured file all
 * of whose ranks took part. Costs nothing while no MPI file is captured. */
static void sync_point_comm(MPI_Comm comm) {
    if (depth || __atomic_load_n(&n_entries, __ATOMIC_RELAXED) == 0) return;
    depth++;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_entries; i++)
        if (covers(comm, &table[i])) paralog_mpi_sync_point(table[i].handle);
    pthread_mutex_unlock(&mu);
    depth--;
}

static void sync_point_file(MPI_File fh) {
    entry_t e;
    if (find(fh, &e)) paralog_mpi_sync_point(e.handle);
}

REAL(int, PMPI_Barrier, (MPI_Comm c))
REAL(int, PMPI_Bcast, (void *b, int n, MPI_Datatype t, int root, MPI_Comm c))
REAL(int, PMPI_Reduce, (const void *s, void *r, int n, MPI_Datatype t, MPI_Op o, int root, MPI_Comm c))
REAL(int, PMPI_Scan, (const void *s, void *r, int n, MPI_Datatype t, MPI_Op o, MPI_Comm c))
REAL(int, PMPI_Exscan, (const void *s, void *r, int n, MPI_Datatype t, MPI_Op o, MPI_Comm c))
REAL(int, PMPI_Allgather, (const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm c))
REAL(int, PMPI_Gather, (const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root, MPI_Comm c))
REAL(int, PMPI_Scatter, (const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root, MPI_Comm c))
REAL(int, PMPI_Alltoall, (const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm c))
REAL(int, PMPI_Reduce_scatter, (const void *s, void *r, const int *rn, MPI_Datatype t, MPI_Op o, MPI_Comm c))
REAL(int, PMPI_Reduce_scatter_block, (const void *s, void *r, int rn, MPI_Datatype t, MPI_Op o, MPI_Comm c))
REAL(int, PMPI_Allgatherv, (const void *s, int sn, MPI_Datatype st, void *r, const int *rn, const int *rd, MPI_Datatype rt, MPI_Comm c))
REAL(int, PMPI_Gatherv, (const void *s, int sn, MPI_Datatype st, void *r, const int *rn, const int *rd, MPI_Datatype rt, int root, MPI_Comm c))
REAL(int, PMPI_Scatterv, (const void *s, const int *sn, const int *sd, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root, MPI_Comm c))
REAL(int, PMPI_Alltoallv, (const void *s, const int *sn, const int *sd, MPI_Datatype st, void *r, const int *rn, const int *rd, MPI_Datatype rt, MPI_Comm c))

/* Wrappers of the collectives: MPI_ and PMPI_ names (Open MPI's Fortran
 * bindings call the PMPI_ ones). A collective the MPI library makes inside
 * a wrapped call (depth > 0) is part of that call, not a point of its own. */
#define COLL(name, params, args, comm)                                     \
    static int shim_##name params {                                        \
        check_flavour();                                                   \
        if (depth || !real_PMPI_##name()) return real_PMPI_##name() args;  \
        int rc = real_PMPI_##name() args;                                  \
        if (rc == MPI_SUCCESS) sync_point_comm(comm);                      \
        return rc;                                                         \
    }                                                                      \
    int MPI_##name params { return shim_##name args; }                     \
    int PMPI_##name params { return shim_##name args; }

COLL(Barrier, (MPI_Comm c), (c), c)
COLL(Bcast, (void *b, int n, MPI_Datatype t, int root, MPI_Comm c), (b, n, t, root, c), c)
COLL(Allreduce, (const void *s, void *r, int n, MPI_Datatype t, MPI_Op o, MPI_Comm c), (s, r, n, t, o, c), c)
COLL(Reduce, (const void *s, void *r, int n, MPI_Datatype t, MPI_Op o, int root, MPI_Comm c), (s, r, n, t, o, root, c), c)
COLL(Scan, (const void *s, void *r, int n, MPI_Datatype t, MPI_Op o, MPI_Comm c), (s, r, n, t, o, c), c)
COLL(Exscan, (const void *s, void *r, int n, MPI_Datatype t, MPI_Op o, MPI_Comm c), (s, r, n, t, o, c), c)
COLL(Allgather, (const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm c),
     (s, sn, st, r, rn, rt, c), c)
COLL(Allgatherv,
     (const void *s, int sn, MPI_Datatype st, void *r, const int *rn, const int *rd, MPI_Datatype rt, MPI_Comm c),
     (s, sn, st, r, rn, rd, rt, c), c)
COLL(Gather, (const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root, MPI_Comm c),
     (s, sn, st, r, rn, rt, root, c), c)
COLL(Gatherv,
     (const void *s, int sn, MPI_Datatype st, void *r, const int *rn, const int *rd, MPI_Datatype rt, int root,
      MPI_Comm c),
     (s, sn, st, r, rn, rd, rt, root, c), c)
COLL(Scatter, (const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root, MPI_Comm c),
     (s, sn, st, r, rn, rt, root, c), c)
COLL(Scatterv,
     (const void *s, const int *sn, const int *sd, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root,
      MPI_Comm c),
     (s, sn, sd, st, r, rn, rt, root, c), c)
COLL(Alltoall, (const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm c),
     (s, sn, st, r, rn, rt, c), c)
COLL(Alltoallv,
     (const void *s, const int *sn, const int *sd, MPI_Datatype st, void *r, const int *rn, const int *rd,
      MPI_Datatype rt, MPI_Comm c),
     (s, sn, sd, st, r, rn, rd, rt, c), c)
COLL(Reduce_scatter, (const void *s, void *r, const int *rn, MPI_Datatype t, MPI_Op o, MPI_Comm c),
     (s, r, rn, t, o, c), c)
COLL(Reduce_scatter_block, (const void *s, void *r, int rn, MPI_Datatype t, MPI_Op o, MPI_Comm c),
     (s, r, rn, t, o, c), c)

/* Collective calls on a captured file: a point at the start (the call's
 * writes come after every rank's earlier ones) and at the end. */
#define FCOLL_BEFORE(name, params, args, fh, before)                       \
    REAL(int, PMPI_File_##name, params)                                    \
    static int shim_File_##name params {                                   \
        check_flavour();                                                   \
        if (depth || !real_PMPI_File_##name()) return real_PMPI_File_##name() args; \
        depth++;                                                           \
        int rc = (before);                                                 \
        sync_point_file(fh);                                               \
        if (rc == MPI_SUCCESS) rc = real_PMPI_File_##name() args;          \
        else real_PMPI_File_call_errhandler()(fh, rc);                     \
        sync_point_file(fh);                                               \
        depth--;                                                           \
        return rc;                                                         \
    }                                                                      \
    int MPI_File_##name params { return shim_File_##name args; }           \
    int PMPI_File_##name params { return shim_File_##name args; }
#define FCOLL(name, params, args, fh) FCOLL_BEFORE(name, params, args, fh, MPI_SUCCESS)

FCOLL(write_all, (MPI_File f, const void *b, int n, MPI_Datatype t, MPI_Status *st), (f, b, n, t, st), f)
FCOLL(write_at_all, (MPI_File f, MPI_Offset o, const void *b, int n, MPI_Datatype t, MPI_Status *st),
      (f, o, b, n, t, st), f)
FCOLL(write_all_begin, (MPI_File f, const void *b, int n, MPI_Datatype t), (f, b, n, t), f)
FCOLL(write_all_end, (MPI_File f, const void *b, MPI_Status *st), (f, b, st), f)
FCOLL(write_at_all_begin, (MPI_File f, MPI_Offset o, const void *b, int n, MPI_Datatype t), (f, o, b, n, t), f)
FCOLL(write_at_all_end, (MPI_File f, const void *b, MPI_Status *st), (f, b, st), f)
FCOLL(write_ordered, (MPI_File f, const void *b, int n, MPI_Datatype t, MPI_Status *st), (f, b, n, t, st), f)
FCOLL(write_ordered_begin, (MPI_File f, const void *b, int n, MPI_Datatype t), (f, b, n, t), f)
FCOLL(write_ordered_end, (MPI_File f, const void *b, MPI_Status *st), (f, b, st), f)
FCOLL(iwrite_all, (MPI_File f, const void *b, int n, MPI_Datatype t, MPI_Request *rq), (f, b, n, t, rq), f)
FCOLL(iwrite_at_all, (MPI_File f, MPI_Offset o, const void *b, int n, MPI_Datatype t, MPI_Request *rq),
      (f, o, b, n, t, rq), f)

/* A collective read after writes. Direct MPI-IO on one file system shows
 * every rank the bytes the others just wrote, and programs rely on it
 * without a sync (PnetCDF's own examples read a variable back with a
 * collective get right after a collective put; MPI promises it only after
 * sync-barrier-sync). Under capture those bytes sit in the other ranks'
 * logs, so a collective read on a file that any rank changed since the last
 * consistency point is preceded by one (docs/capture.md, "Reads while
 * writing"): one allreduce per collective read, and the commit only when
 * something changed. Every rank of the file takes part in the call, so the
 * agreement is safe here; independent reads cannot have it. */
static int commit_before_read(MPI_File fh) {
    entry_t e;
    if (!find(fh, &e)) return MPI_SUCCESS;
    int64_t v[1] = {paralog_mpi_dirty(e.handle)};
    int rc = agree_max(e.agree, v, 1);
    if (rc != MPI_SUCCESS || !v[0]) return rc;
    return consistency_point(&e, MPI_SUCCESS);
}

#define FCOLL_READ(name, params, args, fh) FCOLL_BEFORE(name, params, args, fh, commit_before_read(fh))

FCOLL_READ(read_all, (MPI_File f, void *b, int n, MPI_Datatype t, MPI_Status *st), (f, b, n, t, st), f)
FCOLL_READ(read_at_all, (MPI_File f, MPI_Offset o, void *b, int n, MPI_Datatype t, MPI_Status *st),
           (f, o, b, n, t, st), f)
FCOLL_READ(read_all_begin, (MPI_File f, void *b, int n, MPI_Datatype t), (f, b, n, t), f)
FCOLL_READ(read_at_all_begin, (MPI_File f, MPI_Offset o, void *b, int n, MPI_Datatype t), (f, o, b, n, t), f)
FCOLL_READ(read_ordered, (MPI_File f, void *b, int n, MPI_Datatype t, MPI_Status *st), (f, b, n, t, st), f)
FCOLL_READ(read_ordered_begin, (MPI_File f, void *b, int n, MPI_Datatype t), (f, b, n, t), f)
FCOLL_READ(iread_all, (MPI_File f, void *b, int n, MPI_Datatype t, MPI_Request *rq), (f, b, n, t, rq), f)
FCOLL_READ(iread_at_all, (MPI_File f, MPI_Offset o, void *b, int n, MPI_Datatype t, MPI_Request *rq),
           (f, o, b, n, t, rq), f)
FCOLL(set_view, (MPI_File f, MPI_Offset d, MPI_Datatype et, MPI_Datatype ft, const char *rep, MPI_Info info),
      (f, d, et, ft, rep, info), f)

/* ---- process start ------------------------------------------------------ */

/* Is `dir` the prefix or below it? */
static int under(const char *dir, const char *prefix) {
    size_t n = strlen(prefix);
    while (n > 1 && prefix[n - 1] == '/') n--;
    return strncmp(dir, prefix, n) == 0 && (dir[n] == '\0' || dir[n] == '/');
}

/* Open MPI's OMPIO reads its MCA parameters at MPI_Init: with capture on,
 * choose the collective component that writes each rank's own data
 * (no read-modify-write), and no data sieving in the POSIX fbtl.
 * With TMPDIR under the prefix (so that a program's temporary files are
 * output like the rest), Open MPI's launcher would put its session
 * directory there too, and PMIx and hwloc share memory through writable
 * mappings of files in it, which capture refuses: that scratch of the
 * runtime goes to /tmp instead, unless the user chose its place. */
__attribute__((constructor)) static void paralog_shim_init(void) {
    const char *prefix = getenv("PARALOG_PREFIX");
    if (!prefix || !*prefix) return;
    setenv("OMPI_MCA_fcoll", "individual", 1);
    setenv("OMPI_MCA_fbtl_posix_write_datasieving", "0", 1);
    const char *tmp = getenv("TMPDIR");
    if (tmp && *tmp == '/' && under(tmp, prefix)) setenv("OMPI_MCA_orte_tmpdir_base", "/tmp", 0);
}
