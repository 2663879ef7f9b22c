//! Shared event streams (SLoG, issue 17; docs/streams.md and
//! docs/streams-format.md): partitioned append-only logs of events.
//!
//! - [`Producer`]: a process appends framed events to its own segment under
//!   the node-local root; `flush` is one group commit with one fdatasync.
//! - [`drain`]: rounds that cut the producers' committed batches into
//!   per-partition remote segments with contiguous offsets, recording each
//!   cut durably before applying it (exactly once in storage).
//! - [`Reader`]: reads a remote stream below its high watermark, merged in
//!   cut or event-time order, alone or as a group with committed offsets.

mod base;
pub mod drain;
pub mod error;
pub mod failpoint;
mod follow;
pub mod format;
pub mod job_root;
mod lag;
pub mod layout;
pub mod listing;
mod local;
pub mod nodes;
pub mod object_compact;
pub mod object_reader;
pub mod object_remote;
mod object_rounds;
pub mod object_trim;
pub mod objects;
pub mod producer;
mod publish;
pub mod quota;
pub mod reader;
mod records;
pub mod release;
pub mod remote;
mod remote_stream;
pub mod retention;
mod round_plan;
pub mod segment;
mod take;
mod time_gate;

pub use drain::{drain_all, drain_stream, DrainOptions, DrainReport, Drainer};
pub use error::{Result, StreamError};
pub use format::Event;
pub use object_compact::Compaction;
pub use object_remote::{ObjectRemote, ObjectStore};
pub use producer::{Partitioner, Producer};
pub use quota::Quota;
pub use reader::{Delivered, From, Order, Reader, RemoteStream};
pub use remote::{PosixRemote, RoundWrite, StreamPlace, StreamRemote};
