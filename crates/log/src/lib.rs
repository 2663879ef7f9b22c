//! paralog's node-local log.
//!
//! The log core knows nothing of MPI, sockets or remotes. It stores, per job,
//! per captured file (and which open of it), per rank and per epoch, an
//! append-only data log and a manifest of extents, commits epochs atomically,
//! and reads back the logical file at any globally committed epoch.
//! The format is specified in `docs/format.md`.

pub mod durable;
pub mod error;
pub mod extent_map;
pub mod format;
pub mod gc;
pub mod id;
pub mod layout;
pub mod reader;
pub mod single;
pub mod timeline;
pub mod writer;

pub use error::{LogError, Result};
pub use format::{Extent, FileIdent, Manifest, Op};
pub use reader::{CommitStatus, EpochId, FileInventory, Inventory, LogicalFile};
pub use writer::{
    next_generation, CommitSync, LocalCommit, RankLog, ReadRange, ReadSource, WriterConfig,
};
