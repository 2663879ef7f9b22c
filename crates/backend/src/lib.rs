//! Storage backends (POSIX, S3, object layout). Not built out yet.
