//! Reading a node-local root: what it holds and which epochs are globally
//! committed (`reader/inventory/`), the logical file at an epoch, ranks
//! and epochs merged (`reader/logical.rs`), and checksum-verified reads of
//! its bytes (`reader/source.rs`); where a rank's manifest is, in either
//! format (`reader/record.rs`). Everything is used through this module.

mod cache;
mod inventory;
mod logical;
mod record;
mod source;

pub use cache::ScanCache;
pub use inventory::{
    committed_prefix, fmt_ids, origin_of, CommitStatus, EpochFiles, EpochId, FileInventory,
    GenInventory, Inventory, JobInventory, RankInventory,
};
pub use logical::{LogicalFile, SizeState, SourcePiece};
pub(crate) use record::{probe_data_log, Probe};
pub use record::{
    read_rank_manifest, read_rank_manifest_cached, ManifestAt, ManifestLoc, RankRecord,
};
pub use source::{SourceExtent, SourceReader};
