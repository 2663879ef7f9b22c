//! Whole small objects under the remote's prefix, for the array objects
//! on S3 (crates/objects `s3store`, docs/objects.md): a PUT that may only
//! create (`If-None-Match: *`, how a version number is taken without ever
//! replacing another), GET, listing and deletion. Keys given here are
//! relative to the prefix; the listing returns them relative too.

use std::time::SystemTime;

use aws_sdk_s3::primitives::ByteStream;
use paralog_backend::BackendError;

use crate::errors::chain;
use crate::integrity::crc_b64;
use crate::S3Backend;

impl S3Backend {
    /// PUT `body` as `rel`, with its CRC32C checked by the server. With
    /// `create_only`, the PUT carries `If-None-Match: *`: it fails with
    /// 412 when the key exists, and then returns `Ok(false)` (nothing
    /// written); otherwise `Ok(true)`.
    pub fn put_object(
        &self,
        rel: &str,
        body: Vec<u8>,
        create_only: bool,
    ) -> Result<bool, BackendError> {
        let key = self.key(rel.as_bytes());
        let crc = crc_b64(paralog_checksum::crc32c(&body));
        self.rt.block_on(async {
            let mut req = self
                .client
                .put_object()
                .bucket(&self.bucket)
                .key(&key)
                .checksum_crc32_c(crc)
                .body(ByteStream::from(body));
            if create_only {
                req = req.if_none_match("*");
            }
            match req.send().await {
                Ok(_) => Ok(true),
                Err(e)
                    if create_only
                        && e.raw_response().is_some_and(|r| r.status().as_u16() == 412) =>
                {
                    Ok(false)
                }
                Err(e) => Err(self.err(&key, "put object", e)),
            }
        })
    }

    /// The whole object `rel`, or `None` if there is none.
    pub fn get_object(&self, rel: &str) -> Result<Option<Vec<u8>>, BackendError> {
        let key = self.key(rel.as_bytes());
        self.rt.block_on(async {
            let o = match self
                .client
                .get_object()
                .bucket(&self.bucket)
                .key(&key)
                .send()
                .await
            {
                Ok(o) => o,
                Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) => {
                    return Ok(None)
                }
                Err(e) => return Err(self.err(&key, "get object", e)),
            };
            let bytes = o
                .body
                .collect()
                .await
                .map_err(|e| self.err_msg(&key, "read object", chain(&e)))?;
            Ok(Some(bytes.into_bytes().to_vec()))
        })
    }

    /// The keys under `rel` (a prefix ending in '/', or empty for all),
    /// relative to the remote's prefix, in S3's (byte) order.
    pub fn list_objects(&self, rel: &str) -> Result<Vec<String>, BackendError> {
        Ok(self.list_keys(rel)?.into_iter().map(|(k, _)| k).collect())
    }

    /// [`S3Backend::list_objects`] with each key's Last-Modified, if the
    /// listing gave one: one paged ListObjectsV2 for every caller.
    pub(crate) fn list_keys(
        &self,
        rel: &str,
    ) -> Result<Vec<(String, Option<SystemTime>)>, BackendError> {
        let base = self.key(b"");
        let full = format!("{base}{rel}");
        self.rt.block_on(async {
            let mut out = Vec::new();
            let mut token = None;
            loop {
                let r = self
                    .client
                    .list_objects_v2()
                    .bucket(&self.bucket)
                    .prefix(&full)
                    .set_continuation_token(token)
                    .send()
                    .await
                    .map_err(|e| self.err(&full, "list objects", e))?;
                for o in r.contents() {
                    if let Some(k) = o.key().and_then(|k| k.strip_prefix(&base)) {
                        let t = o
                            .last_modified()
                            .and_then(|t| SystemTime::try_from(*t).ok());
                        out.push((k.to_owned(), t));
                    }
                }
                match r.next_continuation_token() {
                    Some(t) if r.is_truncated() == Some(true) => token = Some(t.to_owned()),
                    _ => break,
                }
            }
            Ok(out)
        })
    }

    /// When the store last wrote `rel` (its `Last-Modified`, by the
    /// server's clock, to the second), or `None` if there is none.
    pub fn object_modified(&self, rel: &str) -> Result<Option<SystemTime>, BackendError> {
        let key = self.key(rel.as_bytes());
        let Some(h) = self.head_object(&key)? else {
            return Ok(None);
        };
        let t = h.last_modified().ok_or_else(|| {
            self.err_msg(&key, "head object", "no Last-Modified in the answer".into())
        })?;
        SystemTime::try_from(*t)
            .map(Some)
            .map_err(|e| self.err_msg(&key, "head object", format!("Last-Modified: {e}")))
    }

    /// Delete `rel` (no error if it is already gone).
    pub fn delete_object(&self, rel: &str) -> Result<(), BackendError> {
        self.delete_key(&self.key(rel.as_bytes()))
    }

    /// Delete the object at `key` (no error if it is already gone).
    pub(crate) fn delete_key(&self, key: &str) -> Result<(), BackendError> {
        self.rt.block_on(async {
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(key)
                .send()
                .await
                .map(drop)
                .map_err(|e| self.err(key, "delete object", e))
        })
    }
}
