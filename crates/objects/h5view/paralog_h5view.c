/* paralog-h5view: write and list the HDF5 view of an array version
 * (docs/objects-format.md, "The HDF5 view"). The Rust library decides what
 * the view holds; this helper only speaks HDF5 (Debian's 1.10.8).
 *
 *   paralog-h5view make OUT DTYPE NDIM SHAPE... CHUNKS...
 *       stdin: one line of JSON (the dataset's "attributes" string), then
 *       one absolute chunk file path per line, chunks in row-major order.
 *       Writes OUT (which must not exist): dataset /data, a virtual dataset
 *       whose mapping i is chunk i's box of the array onto /chunks/<i>, an
 *       external-storage dataset of the chunk shape over the first C bytes
 *       of chunk file i. Edge chunks map only their part inside the array.
 *   paralog-h5view list FILE
 *       One line per mapping of /data: "START COUNT SOURCE SSTART SCOUNT
 *       OFFSET SIZE FILE" (the virtual box, the source dataset and its box,
 *       comma-separated; the external file last, the rest of the line),
 *       after a first line
 *       "DTYPE SHAPE" for the dataset itself: what `paralog obj verify`
 *       compares with the version (a missing source reads as zeros).
 *   paralog-h5view serve
 *       Many `make`s from one process (docs/objects-format.md, "The HDF5
 *       view's co-process", protocol version 1): the start (loading 44
 *       shared libraries, about 7 ms of a 10 ms view) is paid once.
 * Exit 0 on success; 1 with a line on stderr otherwise. */
#define _GNU_SOURCE
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXD 32
#define SERVE_VERSION 1

/* Where failures are told: stderr, or a request's answer when serving. */
static FILE *diag;

static int die(const char *what)
{
    fprintf(diag ? diag : stderr, "paralog-h5view: %s\n", what);
    return 1;
}

static const struct {
    const char *name;
    hid_t *type;
} TYPES[] = {
    {"int8", &H5T_STD_I8LE_g},     {"int16", &H5T_STD_I16LE_g},   {"int32", &H5T_STD_I32LE_g},
    {"int64", &H5T_STD_I64LE_g},   {"uint8", &H5T_STD_U8LE_g},    {"uint16", &H5T_STD_U16LE_g},
    {"uint32", &H5T_STD_U32LE_g},  {"uint64", &H5T_STD_U64LE_g},  {"float32", &H5T_IEEE_F32LE_g},
    {"float64", &H5T_IEEE_F64LE_g},
};

static hid_t type_of(const char *name)
{
    H5open();
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (!strcmp(TYPES[i].name, name))
            return *TYPES[i].type;
    return -1;
}

static const char *name_of(hid_t t)
{
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (H5Tequal(t, *TYPES[i].type) > 0)
            return TYPES[i].name;
    return "other";
}

/* A line of `in` without its newline, or NULL at the end. */
static char *line(FILE *in)
{
    char *s = NULL;
    size_t cap = 0;
    ssize_t n = getline(&s, &cap, in);
    if (n < 0) {
        free(s);
        return NULL;
    }
    if (n > 0 && s[n - 1] == '\n')
        s[n - 1] = 0;
    return s;
}

/* `make`, its input (the attributes line, then the chunk paths) read
 * from `in`. */
static int make(int argc, char **argv, FILE *in)
{
    if (argc < 5)
        return die("usage: make OUT DTYPE NDIM SHAPE... CHUNKS...");
    const char *out = argv[2];
    hid_t type = type_of(argv[3]);
    int d = atoi(argv[4]);
    if (type < 0 || d < 1 || d > MAXD || argc != 5 + 2 * d)
        return die("bad type or dimensions");
    hsize_t shape[MAXD], chunk[MAXD], grid[MAXD], c[MAXD] = {0};
    unsigned long long n = 1;
    for (int i = 0; i < d; i++) {
        shape[i] = strtoull(argv[5 + i], NULL, 10);
        chunk[i] = strtoull(argv[5 + d + i], NULL, 10);
        if (chunk[i] == 0)
            return die("empty chunk side");
        grid[i] = (shape[i] + chunk[i] - 1) / chunk[i];
        n *= grid[i];
    }
    hsize_t cbytes = H5Tget_size(type);
    for (int i = 0; i < d; i++)
        cbytes *= chunk[i];
    char *attrs = line(in);
    if (!attrs)
        return die("no attributes line on stdin");

    /* A server makes many views: nothing may leak on a failure. */
    hid_t f = H5Fcreate(out, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        free(attrs);
        return die("cannot create the view file");
    }
    hid_t g = H5Gcreate2(f, "chunks", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t vspace = H5Screate_simple(d, shape, NULL);
    hid_t cspace = H5Screate_simple(d, chunk, NULL);
    hid_t vdcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_obj_track_times(vdcpl, 0);
    int rc = g < 0 || vspace < 0 || cspace < 0 || vdcpl < 0;
    for (unsigned long long k = 0; k < n && !rc; k++) {
        char *path = line(in);
        if (!path) {
            rc = die("fewer chunk paths than chunks");
            break;
        }
        hsize_t origin[MAXD], valid[MAXD], zero[MAXD] = {0};
        for (int i = 0; i < d; i++) {
            origin[i] = c[i] * chunk[i];
            valid[i] = shape[i] - origin[i] < chunk[i] ? shape[i] - origin[i] : chunk[i];
        }
        char src[40];
        snprintf(src, sizeof src, "%llu", k);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        rc |= dcpl < 0 || H5Pset_obj_track_times(dcpl, 0) < 0 ||
              H5Pset_external(dcpl, path, 0, cbytes) < 0;
        hid_t ds = rc ? -1 : H5Dcreate2(g, src, type, cspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        rc |= ds < 0;
        snprintf(src, sizeof src, "/chunks/%llu", k);
        rc |= H5Sselect_hyperslab(vspace, H5S_SELECT_SET, origin, NULL, valid, NULL) < 0 ||
              H5Sselect_hyperslab(cspace, H5S_SELECT_SET, zero, NULL, valid, NULL) < 0 ||
              H5Pset_virtual(vdcpl, vspace, ".", src, cspace) < 0;
        if (ds >= 0)
            H5Dclose(ds);
        if (dcpl >= 0)
            H5Pclose(dcpl);
        free(path);
        for (int i = d - 1; i >= 0; i--) {
            if (++c[i] < grid[i])
                break;
            c[i] = 0;
        }
        if (rc)
            die("cannot map a chunk");
    }
    H5Sselect_all(vspace);
    hid_t v = rc ? -1 : H5Dcreate2(f, "data", type, vspace, H5P_DEFAULT, vdcpl, H5P_DEFAULT);
    if (!rc && v < 0)
        rc = die("cannot create the virtual dataset");
    if (!rc) {
        hid_t st = H5Tcopy(H5T_C_S1);
        H5Tset_size(st, strlen(attrs) + 1);
        hid_t as = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(v, "attributes", st, as, H5P_DEFAULT, H5P_DEFAULT);
        if (a < 0 || H5Awrite(a, st, attrs) < 0)
            rc = die("cannot write the attributes");
        H5Aclose(a);
        H5Sclose(as);
        H5Tclose(st);
    }
    free(attrs);
    if (v >= 0)
        H5Dclose(v);
    H5Pclose(vdcpl);
    H5Sclose(cspace);
    H5Sclose(vspace);
    H5Gclose(g);
    if (H5Fclose(f) < 0 && !rc)
        rc = die("cannot close the view file");
    return rc;
}

static void print_box(hid_t space)
{
    int d = H5Sget_simple_extent_ndims(space);
    hsize_t a[MAXD], b[MAXD];
    if (d < 1 || d > MAXD || H5Sget_select_bounds(space, a, b) < 0) {
        printf("? ?");
        return;
    }
    for (int i = 0; i < d; i++)
        printf("%s%llu", i ? "," : "", (unsigned long long)a[i]);
    printf(" ");
    for (int i = 0; i < d; i++)
        printf("%s%llu", i ? "," : "", (unsigned long long)(b[i] - a[i] + 1));
}

static int list(int argc, char **argv)
{
    if (argc != 3)
        return die("usage: list FILE");
    hid_t f = H5Fopen(argv[2], H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t v = f < 0 ? -1 : H5Dopen2(f, "data", H5P_DEFAULT);
    if (v < 0)
        return die("cannot open /data");
    hid_t t = H5Dget_type(v), s = H5Dget_space(v), dcpl = H5Dget_create_plist(v);
    int d = H5Sget_simple_extent_ndims(s);
    hsize_t shape[MAXD];
    if (d < 1 || d > MAXD)
        return die("bad rank");
    H5Sget_simple_extent_dims(s, shape, NULL);
    printf("%s ", name_of(t));
    for (int i = 0; i < d; i++)
        printf("%s%llu", i ? "," : "", (unsigned long long)shape[i]);
    printf("\n");
    size_t n = 0;
    if (H5Pget_layout(dcpl) != H5D_VIRTUAL || H5Pget_virtual_count(dcpl, &n) < 0)
        return die("/data is not a virtual dataset");
    for (size_t k = 0; k < n; k++) {
        char file[4096] = "", dset[4096] = "";
        H5Pget_virtual_filename(dcpl, k, file, sizeof file);
        H5Pget_virtual_dsetname(dcpl, k, dset, sizeof dset);
        hid_t vs = H5Pget_virtual_vspace(dcpl, k);
        print_box(vs);
        H5Sclose(vs);
        /* The source: only this file's external datasets are expected. */
        hid_t src = strcmp(file, ".") ? -1 : H5Dopen2(f, dset, H5P_DEFAULT);
        hid_t sp = src < 0 ? -1 : H5Dget_create_plist(src);
        char ext[4096] = "?";
        off_t off = -1;
        hsize_t size = 0;
        if (sp < 0 || H5Pget_external_count(sp) != 1 ||
            H5Pget_external(sp, 0, sizeof ext, ext, &off, &size) < 0)
            snprintf(ext, sizeof ext, "?");
        printf(" %s ", dset);
        hid_t ss = H5Pget_virtual_srcspace(dcpl, k);
        print_box(ss);
        H5Sclose(ss);
        printf(" %lld %llu %s\n", (long long)off, (unsigned long long)size, ext);
        if (sp >= 0)
            H5Pclose(sp);
        if (src >= 0)
            H5Dclose(src);
    }
    H5Pclose(dcpl);
    H5Sclose(s);
    H5Tclose(t);
    H5Dclose(v);
    H5Fclose(f);
    return fflush(stdout) ? die("cannot write the listing") : 0;
}

/* Read `n` lines of stdin into a buffer, each with its newline; NULL if
 * stdin ends first. */
static char *lines(unsigned long n, size_t *len)
{
    char *buf = NULL;
    FILE *m = open_memstream(&buf, len);
    if (!m)
        return NULL;
    int ok = 1;
    for (unsigned long i = 0; i < n && ok; i++) {
        char *s = line(stdin);
        ok = s != NULL;
        if (ok)
            fprintf(m, "%s\n", s);
        free(s);
    }
    fclose(m);
    if (!ok) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* One request: "make NARGS NLINES", NARGS argument lines (make's, after
 * "make"), NLINES lines of its input. Every line is read before any is
 * used, so a request that fails leaves the stream at the next one. The
 * answer: "ok", or "fail BYTES" and that many bytes (what the one-shot
 * `make` says on stderr, HDF5's error stack included). 0: answered; 1:
 * stdin ended or the request is not one (the stream is lost: exit). */
static int serve_one(const char *head)
{
    unsigned long nargs, nlines;
    char tail;
    if (sscanf(head, "make %lu %lu%c", &nargs, &nlines, &tail) != 2 || nargs > 3 + 2 * MAXD)
        return 1;
    char *argv[5 + 2 * MAXD] = {"paralog-h5view", "make"};
    int ok = 1;
    for (unsigned long i = 0; i < nargs; i++)
        ok &= (argv[2 + i] = line(stdin)) != NULL;
    size_t len = 0;
    char *input = ok ? lines(nlines, &len) : NULL;
    if (!input) {
        for (unsigned long i = 0; i < nargs; i++)
            free(argv[2 + i]);
        return 1;
    }
    char *said = NULL;
    size_t n_said = 0;
    diag = open_memstream(&said, &n_said);
    FILE *in = len ? fmemopen(input, len, "r") : fopen("/dev/null", "r");
    int rc = diag && in ? 0 : 1;
    if (!rc) {
        H5Eset_auto2(H5E_DEFAULT, (H5E_auto2_t)H5Eprint2, diag);
        rc = make(2 + (int)nargs, argv, in);
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    }
    if (in)
        fclose(in);
    if (diag)
        fclose(diag);
    diag = NULL;
    if (rc && !said)
        said = strdup("paralog-h5view: out of memory\n"), n_said = said ? strlen(said) : 0;
    if (rc)
        printf("fail %zu\n%.*s", n_said, (int)n_said, said ? said : "");
    else
        printf("ok\n");
    free(said);
    free(input);
    for (unsigned long i = 0; i < nargs; i++)
        free(argv[2 + i]);
    return fflush(stdout) ? 1 : 0;
}

/* Requests on stdin until it ends or says "quit". A request that leaves
 * an HDF5 object open ends the server after its answer: its client
 * starts a fresh one for the next view. */
static int serve(void)
{
    /* It lives as long as its client: holding none of its descriptors,
     * it keeps no pipe or file of that program open. */
    close_range(3, ~0U, 0);
    H5open();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    printf("paralog-h5view serve %d\n", SERVE_VERSION);
    if (fflush(stdout))
        return 1;
    for (;;) {
        char *head = line(stdin);
        if (!head || !strcmp(head, "quit")) {
            free(head);
            return 0;
        }
        int rc = serve_one(head);
        free(head);
        if (rc)
            return 1;
        if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) != 0)
            return 1;
    }
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "make"))
        return make(argc, argv, stdin);
    if (argc >= 2 && !strcmp(argv[1], "list"))
        return list(argc, argv);
    if (argc == 2 && !strcmp(argv[1], "serve"))
        return serve();
    return die("usage: paralog-h5view make|list ...|serve");
}
