//! The S3 remote (`s3://bucket/prefix`): each captured file becomes one
//! object `prefix/<path relative to the capture prefix>` whose bytes equal
//! the file direct MPI-IO would have produced (holes as zeros, exact size).
//! Every committed epoch becomes a complete new object. docs/s3.md.
//!
//! An epoch's object is assembled part by part, in offset order, from three
//! sources: the epoch's extents (streamed by the drain in offset order), the
//! previous object where the epoch did not write (copied server-side with
//! UploadPartCopy when a whole part is unchanged, read with a ranged GET
//! when a part is partly changed), and zeros for holes. Parts are at least
//! 8 MiB (so always above S3's 5 MiB minimum) and grow so that no object
//! needs more than 10,000; a file no larger than one part is one PUT.
//! Uploads run concurrently, a bounded number per file. Every payload is
//! checked by the server: a CRC32C per part and of the whole object
//! (S3's full-object checksum), or, for an upload that copies parts
//! server-side, a Content-MD5 per uploaded part; the hashes are computed on
//! the drain's thread, not on the runtime's. The object's metadata records
//! the epoch and its size. Errors that retrying cannot fix (no such bucket,
//! access denied, bad credentials) are permanent. Endpoint, region and
//! credentials come from the standard AWS environment and configuration
//! files; credentials are never logged.
//!
//! In a server job the servers of several nodes build one object together
//! ([`PartedBackend`]): the leader plans the version and creates the
//! upload, each server uploads the parts it owns through its own sink on
//! the shared upload id, and the leader completes the upload from every
//! server's part list (docs/s3.md, docs/cluster.md).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::head_object::HeadObjectOutput;
use aws_sdk_s3::Client;
use paralog_backend::{
    Backend, BackendError, EpochShape, EpochSink, ErrorKind, PartedBackend, S3Upload, S3Url,
};
use tokio::runtime::Runtime;

use crate::errors::{chain, s3_error};

mod errors;
mod integrity;
mod objcopy;
mod objects;
mod setcontainer;
mod setregion;
pub mod sets;
mod sink;
mod upload;

const MIB: u64 = 1 << 20;
/// S3's limits: parts of at least 5 MiB (but the last), at most 10,000.
pub use paralog_backend::url::{
    S3_DEFAULT_PART as DEFAULT_PART, S3_MAX_PARTS as MAX_PARTS, S3_MIN_PART as MIN_PART,
};
/// Part uploads in flight per file being drained, at most...
const INFLIGHT: usize = 8;
/// ...and at most this many bytes of them (at least 2 parts), so that the
/// larger parts of a huge file do not multiply the memory: a file being
/// drained holds at most max(2 parts, INFLIGHT_BYTES) in flight plus the
/// part being assembled.
const INFLIGHT_BYTES: u64 = 64 * MIB;

/// `s3://bucket/prefix[?upload=close|epoch&part_size=BYTES&max_parts=N]`.
pub struct S3Backend {
    bucket: String,
    prefix: String,
    min_part: u64,
    max_parts: u64,
    /// Upload once per open (at close), not at every committed epoch.
    at_close: bool,
    client: Client,
    rt: Arc<Runtime>,
}

impl std::fmt::Debug for S3Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No client, no credentials: only where the objects go.
        write!(f, "S3Backend(s3://{}/{})", self.bucket, self.prefix)
    }
}

fn bad(url: &str, message: String) -> BackendError {
    BackendError {
        kind: ErrorKind::Permanent,
        target: url.to_owned(),
        op: "open remote",
        message,
    }
}

/// Part uploads in flight per file for parts of `part` bytes.
fn inflight_limit(part: u64) -> usize {
    ((INFLIGHT_BYTES / part.max(1)) as usize).clamp(2, INFLIGHT)
}

/// The part size for an object of `size` bytes: at least `min`, large enough
/// for 10,000 parts, a multiple of 1 MiB.
pub fn part_size(size: u64, min: u64, max_parts: u64) -> u64 {
    let need = size.div_ceil(max_parts).div_ceil(MIB) * MIB;
    need.max(min)
}

impl S3Backend {
    /// The remote a parsed `s3://` URL names. The AWS configuration is
    /// loaded once here (environment, `~/.aws/config` and `credentials`);
    /// an endpoint URL set there (an S3-compatible server) implies
    /// path-style addressing.
    pub fn open(url: &S3Url) -> Result<S3Backend, BackendError> {
        let shown = url.to_string();
        let url_text = shown.as_str();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("s3")
            .enable_all()
            .build()
            .map_err(|e| bad(url_text, format!("starting the S3 runtime: {e}")))?;
        let client = rt.block_on(async {
            let shared = aws_config::load_from_env().await;
            let path_style = shared.endpoint_url().is_some();
            let conf = aws_sdk_s3::config::Builder::from(&shared)
                .force_path_style(path_style)
                .retry_config(
                    aws_sdk_s3::config::retry::RetryConfig::standard()
                        .with_max_attempts(8)
                        .with_initial_backoff(Duration::from_millis(100)),
                )
                .timeout_config(
                    aws_sdk_s3::config::timeout::TimeoutConfig::builder()
                        .connect_timeout(Duration::from_secs(10))
                        .operation_attempt_timeout(Duration::from_secs(120))
                        .build(),
                )
                // The checksums are computed by the drain (on its own
                // thread, before the request is queued) and set on each
                // request, so the SDK adds none of its own.
                .request_checksum_calculation(
                    aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired,
                )
                .build();
            Client::from_conf(conf)
        });
        Ok(S3Backend {
            bucket: url.bucket.clone(),
            prefix: url.prefix.clone(),
            min_part: url.part_size,
            max_parts: url.max_parts,
            at_close: url.upload == S3Upload::Close,
            client,
            rt: Arc::new(rt),
        })
    }

    pub fn key(&self, rel: &[u8]) -> String {
        let rel = String::from_utf8_lossy(rel);
        if self.prefix.is_empty() {
            rel.into_owned()
        } else {
            format!("{}/{rel}", self.prefix)
        }
    }

    fn err<E>(&self, key: &str, op: &'static str, e: SdkError<E, HttpResponse>) -> BackendError
    where
        E: std::error::Error + ProvideErrorMetadata + 'static,
    {
        s3_error(&self.bucket, key, op, &e)
    }

    fn err_msg(&self, key: &str, op: &'static str, message: String) -> BackendError {
        BackendError {
            kind: ErrorKind::Retryable,
            target: format!("s3://{}/{key}", self.bucket),
            op,
            message,
        }
    }

    /// The current object's size and ETag, if it exists.
    fn head(&self, key: &str) -> Result<Option<(u64, String)>, BackendError> {
        Ok(self.head_object(key)?.map(|h| {
            (
                h.content_length().unwrap_or(0).max(0) as u64,
                h.e_tag().unwrap_or_default().to_owned(),
            )
        }))
    }

    /// HEAD of `key`: `None` if there is no such object.
    fn head_object(&self, key: &str) -> Result<Option<HeadObjectOutput>, BackendError> {
        self.rt.block_on(async {
            match self
                .client
                .head_object()
                .bucket(&self.bucket)
                .key(key)
                .send()
                .await
            {
                Ok(h) => Ok(Some(h)),
                Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) => Ok(None),
                Err(e) => Err(self.err(key, "head object", e)),
            }
        })
    }

    /// Abort the multipart uploads of `key` that a crashed drain left.
    pub fn abort_stale(&self, key: &str) -> Result<usize, BackendError> {
        self.rt.block_on(async {
            let mut n = 0;
            let out = self
                .client
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .prefix(key)
                .send()
                .await
                .map_err(|e| self.err(key, "list multipart uploads", e))?;
            for u in out.uploads() {
                if u.key() != Some(key) {
                    continue;
                }
                if let Some(id) = u.upload_id() {
                    self.abort(key, id).await?;
                    n += 1;
                }
            }
            Ok(n)
        })
    }

    /// Download an object to a writer (`paralog get s3://...`).
    pub fn get(&self, key: &str, out: &mut dyn std::io::Write) -> Result<u64, BackendError> {
        self.rt.block_on(async {
            let mut o = self
                .client
                .get_object()
                .bucket(&self.bucket)
                .key(key)
                .send()
                .await
                .map_err(|e| self.err(key, "get object", e))?;
            let mut n = 0u64;
            while let Some(chunk) = o
                .body
                .try_next()
                .await
                .map_err(|e| self.err_msg(key, "read object", chain(&e)))?
            {
                out.write_all(&chunk)
                    .map_err(|e| self.err_msg(key, "write output", e.to_string()))?;
                n += chunk.len() as u64;
            }
            Ok(n)
        })
    }
}

impl Backend for S3Backend {
    fn begin(
        &self,
        rel: &[u8],
        shape: &EpochShape,
    ) -> Result<Box<dyn EpochSink + Send + '_>, BackendError> {
        let key = self.key(rel);
        let plan = self.plan_version(&key, shape)?;
        let mut sink = self.sink(key, shape.epoch, plan, None);
        sink.deleted = shape.deleted;
        Ok(Box::new(sink))
    }

    fn describe(&self, rel: &[u8]) -> String {
        format!("s3://{}/{}", self.bucket, self.key(rel))
    }

    fn local_path(&self, _rel: &[u8]) -> Option<PathBuf> {
        None
    }

    fn abort_stale(&self, rel: &[u8]) -> Result<usize, BackendError> {
        S3Backend::abort_stale(self, &self.key(rel))
    }

    /// The bucket exists and the credentials found by the standard chain
    /// may use it (a missing bucket or a refused key is permanent).
    fn probe(&self) -> Result<(), BackendError> {
        self.rt.block_on(async {
            self.client
                .head_bucket()
                .bucket(&self.bucket)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| self.err("", "head bucket", e))
        })
    }

    fn whole_opens(&self) -> bool {
        self.at_close
    }

    fn readable_by_capture(&self) -> bool {
        false
    }

    fn parted(&self) -> Option<&dyn PartedBackend> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::classify;
    use crate::integrity::{crc_b64, whole_crc};
    use crate::sink::encode_key;

    #[test]
    fn parts_stay_within_s3_limits() {
        assert_eq!(part_size(0, DEFAULT_PART, MAX_PARTS), DEFAULT_PART);
        assert_eq!(part_size(100 << 30, DEFAULT_PART, MAX_PARTS), 11 * MIB);
        assert_eq!(part_size(30 * MIB, MIN_PART, 4), 8 * MIB);
        for size in [1u64, 5 * MIB, 5 * MIB + 1, 80 << 30, 5 << 40] {
            let p = part_size(size, DEFAULT_PART, MAX_PARTS);
            assert!(p >= MIN_PART && p.is_multiple_of(MIB));
            assert!(size.div_ceil(p) <= MAX_PARTS, "{size}");
        }
    }

    #[test]
    fn settings_come_from_the_url() {
        let Ok(paralog_backend::RemoteUrl::S3(u)) = "s3://bucket/a/b/?part_size=16M".parse() else {
            panic!("an s3 URL")
        };
        let b = S3Backend::open(&u).unwrap();
        assert_eq!(b.key(b"x/y.dat"), "a/b/x/y.dat");
        assert_eq!(b.min_part, 16 * MIB);
        assert_eq!(encode_key("a b/c+d"), "a%20b/c%2Bd");
    }

    #[test]
    fn whole_object_crc_from_parts() {
        let data: Vec<u8> = (0..3_000_017u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut parts: Vec<(i32, u32, u64)> = data
            .chunks(1 << 20)
            .enumerate()
            .map(|(i, c)| (i as i32 + 1, paralog_checksum::crc32c(c), c.len() as u64))
            .rev()
            .collect();
        assert_eq!(whole_crc(&mut parts), paralog_checksum::crc32c(&data));
        assert_eq!(whole_crc(&mut []), paralog_checksum::crc32c(b""));
        // The header's encoding: big-endian, base64 (S3's documented
        // example: CRC32C of "Hello, World!" is 0x4d551068).
        assert_eq!(paralog_checksum::crc32c(b"Hello, World!"), 0x4d55_1068);
        assert_eq!(crc_b64(0x4d55_1068), "TVUQaA==");
    }

    #[test]
    fn errors_are_classified() {
        for code in [
            "NoSuchBucket",
            "AccessDenied",
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
        ] {
            assert_eq!(
                classify(Some(code), Some(403)),
                ErrorKind::Permanent,
                "{code}"
            );
        }
        for code in [
            "SlowDown",
            "InternalError",
            "ServiceUnavailable",
            "RequestTimeout",
            "ExpiredToken",
            "PreconditionFailed",
            "NoSuchUpload",
            "BadDigest",
        ] {
            assert_eq!(
                classify(Some(code), Some(500)),
                ErrorKind::Retryable,
                "{code}"
            );
        }
        assert_eq!(classify(None, Some(403)), ErrorKind::Permanent);
        assert_eq!(classify(None, Some(503)), ErrorKind::Retryable);
        assert_eq!(classify(None, None), ErrorKind::Retryable);
    }

    #[test]
    fn inflight_parts_fit_the_memory_bound() {
        assert_eq!(inflight_limit(8 * MIB), INFLIGHT);
        assert_eq!(inflight_limit(5 * MIB), INFLIGHT);
        assert_eq!(inflight_limit(11 * MIB), 5);
        assert_eq!(inflight_limit(525 * MIB), 2);
    }
}
