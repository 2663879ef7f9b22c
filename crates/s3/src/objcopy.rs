//! Two more calls on whole small objects for the array objects on S3
//! (crates/objects: the Zarr view's chunk copies and `obj gc`): a
//! server-side CopyObject that returns the copy's CRC32C as the server
//! computed it, and a listing that gives each key's Last-Modified. Keys
//! are relative to the remote's prefix, as in `objects.rs`.

use std::time::SystemTime;

use aws_sdk_s3::types::ChecksumAlgorithm;
use base64::Engine;
use paralog_backend::BackendError;

use crate::errors::s3_error;
use crate::sink::encode_key;
use crate::S3Backend;

/// Server-side copies in flight at once, at most ([`S3Backend::copy_objects`]).
pub const COPIES_IN_FLIGHT: usize = 16;

/// One CopyObject of the whole key `src` to `key` (both full keys).
async fn copy_one(
    client: aws_sdk_s3::Client,
    bucket: String,
    src: String,
    key: String,
) -> Result<Option<u32>, BackendError> {
    let out = client
        .copy_object()
        .bucket(&bucket)
        .key(&key)
        .copy_source(format!("{bucket}/{}", encode_key(&src)))
        .checksum_algorithm(ChecksumAlgorithm::Crc32C)
        .send()
        .await
        .map_err(|e| s3_error(&bucket, &key, "copy object", &e))?;
    Ok(out
        .copy_object_result()
        .and_then(|r| r.checksum_crc32_c())
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| <[u8; 4]>::try_from(b.as_slice()).ok())
        .map(u32::from_be_bytes))
}

impl S3Backend {
    /// Copy `from` to `to` on the server (no byte through this process).
    /// Returns the CRC32C of the copy that the server computed (`None`
    /// when it gave none), so that the caller can check the copy is the
    /// bytes it expects. A missing source is an error (404).
    pub fn copy_object(&self, from: &str, to: &str) -> Result<Option<u32>, BackendError> {
        let (src, key) = (self.key(from.as_bytes()), self.key(to.as_bytes()));
        self.rt
            .block_on(copy_one(self.client.clone(), self.bucket.clone(), src, key))
    }

    /// [`S3Backend::copy_object`] of each pair `(from, to)`, at most
    /// [`COPIES_IN_FLIGHT`] at once (a version's view copies one object
    /// per chunk: one after the other, thousands of chunks took minutes).
    /// The results in the order of `pairs`.
    pub fn copy_objects(
        &self,
        pairs: &[(String, String)],
    ) -> Vec<Result<Option<u32>, BackendError>> {
        self.rt.block_on(async {
            let mut out = Vec::with_capacity(pairs.len());
            for window in pairs.chunks(COPIES_IN_FLIGHT) {
                let tasks: Vec<_> = window
                    .iter()
                    .map(|(from, to)| {
                        let (src, key) = (self.key(from.as_bytes()), self.key(to.as_bytes()));
                        self.rt
                            .spawn(copy_one(self.client.clone(), self.bucket.clone(), src, key))
                    })
                    .collect();
                for (t, (_, to)) in tasks.into_iter().zip(window) {
                    out.push(t.await.unwrap_or_else(|e| {
                        Err(self.err_msg(to, "copy object", format!("the copy's task failed: {e}")))
                    }));
                }
            }
            out
        })
    }

    /// The keys under `rel` (as [`S3Backend::list_objects`]) with when the
    /// store last wrote each (its Last-Modified, by the server's clock).
    pub fn list_objects_dated(&self, rel: &str) -> Result<Vec<(String, SystemTime)>, BackendError> {
        let full = format!("{}{rel}", self.key(b""));
        self.list_keys(rel)?
            .into_iter()
            .map(|(k, t)| {
                t.map(|t| (k.clone(), t)).ok_or_else(|| {
                    self.err_msg(&full, "list objects", format!("{k}: no Last-Modified"))
                })
            })
            .collect()
    }
}
