/* The chunked PUT of paralog's array objects over an MPI communicator
 * (docs/objects.md, "C"). Link with -lparalog_obj_mpi_mpich or
 * -lparalog_obj_mpi_openmpi (the one of your MPI) and -lparalog_obj.
 *
 *   paralog_obj_writer *w;
 *   paralog_obj_begin_mpi(comm, store, "run7/t", PARALOG_OBJ_INT32, 2, shape, chunks, NULL, &w);
 *   paralog_obj_write_chunk(w, coords, my_chunk, bytes);  // any chunks, any rank
 *   paralog_obj_commit_mpi(comm, store, "run7/t", w, &version);
 *
 * Both calls are collective, and return the same code on every rank: an
 * error on one rank (its message, prefixed with its rank, given to all)
 * fails the call everywhere, and the put is aborted (nothing published).
 * A put that succeeds makes 5 collectives (6 with attributes). */
#ifndef PARALOG_OBJECTS_MPI_H
#define PARALOG_OBJECTS_MPI_H

#include <mpi.h>
#include <paralog/objects.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Rank 0 begins the put and broadcasts its id (and attributes); every rank
 * joins it with its own idea of the array (a different type, shape or grid
 * is refused). On a logged store, ranks on other nodes (another `local`
 * directory than rank 0's) log their chunks on their own node, as a share
 * of the put that their node server copies to the store. */
int paralog_obj_begin_mpi(MPI_Comm comm, paralog_obj_store *store, const char *name, int dtype,
                          int ndim, const uint64_t *shape, const uint64_t *chunks,
                          const char *attrs_json, paralog_obj_writer **writer);
/* Every rank finishes its writer (freed; on a logged store a rank on
 * another node commits its share there), rank 0 gathers the shares and
 * commits; *version (if not NULL) on every rank. A chunk written by ranks
 * on two nodes is refused here (on one node: at its second write). */
int paralog_obj_commit_mpi(MPI_Comm comm, paralog_obj_store *store, const char *name,
                           paralog_obj_writer *writer, uint64_t *version);
/* The same for Fortran (paralog_objects.f90): the communicator's integer handle. */
int paralog_obj_begin_mpi_f(MPI_Fint comm, paralog_obj_store *store, const char *name, int dtype,
                            int ndim, const uint64_t *shape, const uint64_t *chunks,
                            const char *attrs_json, paralog_obj_writer **writer);
int paralog_obj_commit_mpi_f(MPI_Fint comm, paralog_obj_store *store, const char *name,
                             paralog_obj_writer *writer, uint64_t *version);

#ifdef __cplusplus
}
#endif
#endif
