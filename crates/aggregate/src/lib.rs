//! N-to-K checkpoint aggregation (docs/aggregate.md): file-per-process
//! checkpoints stored as K containers plus one set record per checkpoint
//! set, and read back member by member with every block verified.
//!
//! One job per module:
//! - `rule`: `--aggregate` rules: which paths are members of which set
//!   (feature `rule`);
//! - `format`: the set record, version 1, encode and strict decode;
//! - `container`: a container being written (feature `writer`);
//! - `publish`: `SetWriter` (members over K containers, the atomic
//!   record), `collect_orphans` (feature `writer`);
//! - `objset`: sets on the object layout (`objstore://`): the record and
//!   the containers as objects, published through the layout's own publish;
//! - `objcontainer`: a container being written on the object layout (one
//!   chunk, its marker until it is published; feature `writer`);
//! - `objpublish`: the record's publish and orphan collection on the object
//!   layout (feature `writer`);
//! - `remove`: a set whose every member was deleted, removed (feature
//!   `writer`);
//! - `store`: what sets need from a store reached through a client (S3:
//!   `paralog-s3` implements it): ranged reads; with `writer`, containers,
//!   the record's atomic put, listing, aborting uploads;
//! - `stored`: a record decoded for the set it was read as (every store);
//! - `regions`: the "own region" mode's placement, the same on every node;
//! - `reader`: open a set, list members, verified reads; plain file I/O,
//!   all the capture library links.

pub mod error;
pub mod format;
pub mod objset;
pub mod reader;
pub mod regions;
pub mod store;
pub mod stored;

#[cfg(feature = "writer")]
pub mod container;
#[cfg(feature = "writer")]
mod dirs;
#[cfg(feature = "writer")]
pub mod objcontainer;
#[cfg(feature = "writer")]
pub mod objpublish;
#[cfg(feature = "writer")]
pub mod publish;
#[cfg(feature = "writer")]
pub mod remove;
#[cfg(feature = "rule")]
pub mod rule;

pub use error::{AggError, Result};
pub use format::{Member, SetRecord};
pub use reader::{MemberReader, SetReader};
