//! Array objects (issue 18, docs/objects.md): typed n-dimensional arrays
//! stored as immutable versions in the object layout (`objstore://`, or a
//! plain directory holding the same layout), put whole by one process or
//! chunk by chunk by many, read whole or by hyperslab with every chunk's
//! CRC-32C verified, and published with a Zarr v3 view that unmodified
//! readers open, and an HDF5 virtual-dataset view.
//!
//! An array version IS an object-layout version (crates/backend
//! `objstore`): its pieces are the array's chunks, one chunk file each,
//! followed by the array record (docs/objects-format.md). So publishing,
//! "two publishers never replace each other", retention and `recover --gc`
//! are the object layout's own, not a second protocol.

mod error;
mod gc;
mod grid;
mod h5serve;
pub mod hdf5;
mod input;
pub mod logged;
mod logged_record;
mod part_write;
mod parts;
pub mod pending;
mod publish;
pub mod put;
pub mod read;
pub mod record;
mod remote_put;
mod s3gc;
mod s3parts;
pub mod s3put;
mod s3share;
pub mod s3store;
mod s3view;
mod share;
mod staging;
pub mod store;
mod stored;
pub mod views;
pub mod zarr;

pub use error::{Error, Result};
pub use gc::PutInProgress;
pub use grid::{DType, Element};
pub use h5serve::ViewServer;
pub use logged::{publish_committed, publish_round, LoggedStore, Published};
pub use pending::{Pending, Round};
pub use put::{Committed, Put};
pub use read::ArrayVersion;
pub use record::{ArrayMeta, Attrs};
pub use s3gc::S3Collected;
pub use s3put::S3Put;
pub use s3store::S3Store;
pub use store::{ObjectInfo, Store, VersionInfo};
pub use views::ViewState;

/// Where a put can be killed by the crash tests (`PARALOG_FAILPOINT`,
/// docs/objects.md "Crashes"), in order: a writer between its durable
/// chunk file and its claim; the commit before and after it publishes
/// (a logged put: before and after its local `logged` mark); the
/// publisher of logged puts after its first chunk copied to the remote,
/// after the remote publish, before the node-local put is removed, and
/// while it is removed.
pub const CRASH_POINTS: &[&str] = &[
    "objects.claim_staged",
    "objects.mid_chunk",
    "objects.before_commit",
    "objects.after_commit",
    "objects.publish_mid_copy",
    "objects.publish_after_remote",
    "objects.publish_mid_cleanup",
];

/// A crash point of [`CRASH_POINTS`]; the line goes to standard error
/// (this library runs inside application ranks, which have no other log).
pub(crate) fn failpoint(name: &str) {
    debug_assert!(CRASH_POINTS.contains(&name));
    paralog_settings::failpoint::hit_then(name, || {
        eprintln!("paralog objects: failpoint {name} reached: killing the process")
    });
}

/// A version id: the UUID `begin` makes, shared with the other writers.
pub type VersionId = [u8; 16];

/// A version id as 32 lowercase hex digits (how it is shared and shown).
pub fn id_hex(id: &VersionId) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The inverse of [`id_hex`].
pub fn parse_id(s: &str) -> Option<VersionId> {
    if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(id)
}
