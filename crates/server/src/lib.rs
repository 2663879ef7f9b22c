//! The node server that drains committed epochs. Not built out yet.
