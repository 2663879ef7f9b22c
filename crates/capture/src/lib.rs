//! The capture library, preloaded into an unmodified program (LD_PRELOAD).
//!
//! It intercepts the opens of files under `PARALOG_PREFIX` that are opened
//! for writing, hands the program a placeholder descriptor, and records
//! every write on it in the node-local log (`paralog-log`). Consistency
//! points commit epochs: `fsync`/last `close` for plain POSIX programs, and
//! `MPI_File_sync`/`MPI_File_close` through the MPI shim (`mpi/paralog_mpi.c`), which
//! calls the `paralog_mpi_*` functions. It starts no thread and does no
//! network I/O. See docs/capture.md.

pub mod aio;
pub mod append_end;
pub mod copy;
pub mod data;
pub mod dirlist;
pub mod dirops;
pub mod dprintf;
pub mod execl;
pub mod execpath;
pub mod ftw;
pub mod globbing;
pub mod guard;
pub mod inherit;
pub mod io;
pub mod ledger;
pub mod locks;
pub mod mmap;
pub mod mpi;
pub mod namespace;
pub mod posix;
pub mod real;
pub mod realpath;
pub mod remotedir;
pub mod remotefd;
pub mod report;
pub mod scandir;
pub mod sets;
pub mod shared;
pub mod stat;
pub mod state;
pub mod statfs;
pub mod stats;
pub mod stdio;
pub mod symlink;
pub mod tempname;
pub mod terminate;
pub mod timeline;
pub mod times;
pub mod umask;
pub mod view;
pub mod wait;
pub mod xattr;

// The settings and the symbol table live in `paralog-settings` (shared with
// the `paralog` command, which must not link this library).
pub use paralog_settings as settings;
pub use paralog_settings::SYMBOLS;
