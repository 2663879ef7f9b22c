/* paralog's array objects from C and Fortran (docs/objects.md, "C").
 * Link with -lparalog_obj (target/release/libparalog_obj.so); the MPI
 * form is in paralog/objects_mpi.h.
 *
 * Every function returns PARALOG_OBJ_OK (0) or an error code; then
 * paralog_obj_errmsg() gives this thread's last message, naming the
 * object, the version and the chunk. Nothing panics across this API.
 * Arrays are row-major (C order), values little-endian as in memory on
 * x86-64 and aarch64. Handles: a store outlives its writers. */
#ifndef PARALOG_OBJECTS_H
#define PARALOG_OBJECTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types (the codes of the array record, docs/objects-format.md). */
enum {
    PARALOG_OBJ_INT8 = 1,
    PARALOG_OBJ_INT16 = 2,
    PARALOG_OBJ_INT32 = 3,
    PARALOG_OBJ_INT64 = 4,
    PARALOG_OBJ_UINT8 = 5,
    PARALOG_OBJ_UINT16 = 6,
    PARALOG_OBJ_UINT32 = 7,
    PARALOG_OBJ_UINT64 = 8,
    PARALOG_OBJ_FLOAT32 = 9,
    PARALOG_OBJ_FLOAT64 = 10
};

/* Error codes. */
enum {
    PARALOG_OBJ_OK = 0,
    PARALOG_OBJ_EINVAL = 1,    /* an argument, a buffer, a type/shape/grid mismatch, a chunk outside the grid */
    PARALOG_OBJ_ENAME = 2,     /* a name that is not a path inside the store */
    PARALOG_OBJ_ENOTFOUND = 3, /* no such object or version */
    PARALOG_OBJ_ECHUNK = 4,    /* a chunk missing, truncated, failing its checksum, or another chunk in its place */
    PARALOG_OBJ_EOVERLAP = 5,  /* a chunk already written by another writer of the put */
    PARALOG_OBJ_EPUT = 6,      /* a chunked put that cannot be joined or committed */
    PARALOG_OBJ_EDAMAGED = 7,  /* a record that does not decode */
    PARALOG_OBJ_EIO = 8,       /* an I/O error (the path in the message) */
    PARALOG_OBJ_EURL = 9,      /* a store URL that names no usable store */
    PARALOG_OBJ_EINTERNAL = 10 /* a bug in paralog (reported, not crashed) */
};

#define PARALOG_OBJ_MAX_NDIM 32
#define PARALOG_OBJ_ID_LEN 33 /* a put's id: 32 hex digits and a NUL */

typedef struct paralog_obj_store paralog_obj_store;
typedef struct paralog_obj_writer paralog_obj_writer;

typedef struct {
    int dtype;
    int ndim;
    uint64_t shape[PARALOG_OBJ_MAX_NDIM];
    uint64_t chunks[PARALOG_OBJ_MAX_NDIM];
    uint64_t version;     /* the version described */
    uint64_t n_chunks;
    uint64_t chunk_bytes; /* bytes of one whole chunk */
    char id[PARALOG_OBJ_ID_LEN];
} paralog_obj_array;

/* This thread's last error message ("" if none); valid until its next call. */
const char *paralog_obj_errmsg(void);
/* Set this thread's error (the MPI glue passes on another rank's). */
void paralog_obj_set_error(const char *msg);

/* A store: objstore:///ROOT?dirs=N&keep=K, /ROOT, file:///ROOT, or
   s3://BUCKET/STORE (made by `paralog obj init`). */
int paralog_obj_open(const char *url, paralog_obj_store **store);
/* A store whose puts are logged: chunks written to the node-local
 * directory `local` (the node server's --local), the commit made there;
 * the node server publishes the version (or `paralog recover`), so a
 * commit's *version is 0 (numbered when published). Reads go to `url`
 * (a directory layout or s3://). Writers on other nodes than the one
 * that began the put: the MPI form only (objects_mpi.h). */
int paralog_obj_open_logged(const char *url, const char *local, paralog_obj_store **store);
/* Closing a store waits for the views of its commits (as does the
 * process's exit); see paralog_obj_wait_views. */
void paralog_obj_close(paralog_obj_store *store);
/* A commit returns once its version is durable; its Zarr and HDF5 views
 * are made after, by a thread of this process. Wait for those of every
 * commit made through `store` so far (a view that could not be made is no
 * error here: `paralog obj info` says why). */
int paralog_obj_wait_views(paralog_obj_store *store);

/* PUT a whole array by one process; *version (if not NULL) its number. */
int paralog_obj_put(paralog_obj_store *store, const char *name, int dtype, int ndim,
                    const uint64_t *shape, const uint64_t *chunks, const char *attrs_json,
                    const void *data, size_t nbytes, uint64_t *version);

/* Chunked PUT: one process begins (id: PARALOG_OBJ_ID_LEN bytes, shared
 * with the others), every writer joins (its type, shape and grid must be
 * the put's), writes whole chunks (edge chunks with their padding), and
 * finishes; then one commits. attrs_json: a JSON object or NULL. */
int paralog_obj_begin(paralog_obj_store *store, const char *name, int dtype, int ndim,
                      const uint64_t *shape, const uint64_t *chunks, const char *attrs_json,
                      char *id);
int paralog_obj_join(paralog_obj_store *store, const char *name, const char *id, int dtype,
                     int ndim, const uint64_t *shape, const uint64_t *chunks,
                     paralog_obj_writer **writer);
int paralog_obj_write_chunk(paralog_obj_writer *writer, const uint64_t *coords, const void *data,
                            size_t nbytes);
/* Write any box of the array: count[ndim] elements at start[ndim] (array
 * coordinates), data its row-major values. The chunks it covers whole are
 * written whole; of the others, its part, and the commit puts each such
 * chunk together from the parts its writers wrote (parts that overlap:
 * PARALOG_OBJ_EOVERLAP naming both writers; a hole: PARALOG_OBJ_EPUT;
 * nothing published). Every store; in a logged put across nodes, each
 * node's parts are copied to the remote and put together there. */
int paralog_obj_write_part(paralog_obj_writer *writer, const uint64_t *start,
                           const uint64_t *count, const void *data, size_t nbytes);
/* The id of the put a writer writes (PARALOG_OBJ_ID_LEN bytes). */
int paralog_obj_writer_id(const paralog_obj_writer *writer, char *id);
/* This writer is done (its chunks durable); frees the writer either way. */
int paralog_obj_finish(paralog_obj_writer *writer);
/* Drop a writer without finishing it (its chunks will not be committed). */
void paralog_obj_discard(paralog_obj_writer *writer);
int paralog_obj_commit(paralog_obj_store *store, const char *name, const char *id,
                       uint64_t *version);
int paralog_obj_abort(paralog_obj_store *store, const char *name, const char *id);

/* For the MPI form (objects_mpi.h), which calls them; a program calls the
 * MPI form instead. join_any: on a logged store, join the put if it was
 * begun on this node, else this node's share of it (attrs_json: the
 * put's, as rank 0 gave them). finish_share: finish the writer; a logged
 * writer in a share commits it on this node and hands back its record
 * (*share, *len; NULL and 0 otherwise; freed by share_free). commit_shares
 * (rank 0): commit with the gathered share records (len 0 on a direct
 * store). discard_share: after a refused commit, every rank: this node's
 * share of the put removed (best effort; nothing on a direct store). */
int paralog_obj_join_any(paralog_obj_store *store, const char *name, const char *id, int dtype,
                         int ndim, const uint64_t *shape, const uint64_t *chunks,
                         const char *attrs_json, paralog_obj_writer **writer);
int paralog_obj_finish_share(paralog_obj_writer *writer, uint8_t **share, size_t *len);
void paralog_obj_share_free(uint8_t *share, size_t len);
int paralog_obj_commit_shares(paralog_obj_store *store, const char *name, const char *id,
                              const uint8_t *shares, size_t len, uint64_t *version);
void paralog_obj_discard_share(paralog_obj_store *store, const char *name, const char *id);

/* GET a hyperslab (start, count; both NULL: the whole array) of a version
 * (version < 0: the latest) into buf of nbytes (exactly the slab's size);
 * every chunk touched verified. *got (if not NULL): the version read. */
int paralog_obj_get(paralog_obj_store *store, const char *name, int64_t version,
                    const uint64_t *start, const uint64_t *count, void *buf, size_t nbytes,
                    uint64_t *got);
int paralog_obj_info(paralog_obj_store *store, const char *name, int64_t version,
                     paralog_obj_array *info);

#ifdef __cplusplus
}
#endif
#endif
