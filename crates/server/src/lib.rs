//! The node server: finds committed epochs in the node-local log, drains
//! them to the remote in order, records durable progress, deletes what is
//! safely remote, and reports status. See docs/server.md.

pub mod aggregate;
pub mod cluster;
pub mod delete;
pub mod drain;
pub mod failpoint;
pub mod limit;
pub mod node;
pub mod open_files;
pub mod pool;
pub mod priority;
pub mod puts;
pub mod recover;
pub mod remote;
pub mod rename;
pub mod retry;
pub mod service;
pub mod status;
pub mod step;
pub mod stop;
pub mod stream_store;
pub mod streams;
pub mod timeline;
pub mod tree_watch;
pub mod watch;
