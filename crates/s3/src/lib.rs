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

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumType, CompletedMultipartUpload, CompletedPart};
use aws_sdk_s3::Client;
use base64::Engine;
use md5::{Digest, Md5};
use paralog_backend::{
    Backend, BackendError, EpochId, EpochShape, EpochSink, ErrorKind, PartDone, PartUploader,
    PartedBackend, PartedVersion, RemoteOp, S3Upload, S3Url,
};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

mod objects;

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
        self.rt.block_on(async {
            match self
                .client
                .head_object()
                .bucket(&self.bucket)
                .key(key)
                .send()
                .await
            {
                Ok(h) => Ok(Some((
                    h.content_length().unwrap_or(0).max(0) as u64,
                    h.e_tag().unwrap_or_default().to_owned(),
                ))),
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

/// Service error codes that the same request will get again however often
/// it is retried: a missing bucket, refused access, wrong credentials or
/// region, a request the server does not support. Everything else
/// (throttling, 5xx, timeouts, resets, a previous object that changed under
/// the upload, expired temporary credentials) is retryable.
const PERMANENT_CODES: &[&str] = &[
    "NoSuchBucket",
    "InvalidBucketName",
    "AccessDenied",
    "AllAccessDisabled",
    "AccountProblem",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AuthorizationHeaderMalformed",
    "InvalidRegion",
    "PermanentRedirect",
    "NotImplemented",
    "MethodNotAllowed",
    "KeyTooLongError",
    "MetadataTooLarge",
    "EntityTooLarge",
    "InvalidStorageClass",
    "InvalidObjectState",
];

/// Whether an S3 error can go away by retrying. A response without an
/// error code (HEAD has no body) is judged by its status: 403 is access
/// denied, 301 a bucket in another region.
fn classify(code: Option<&str>, status: Option<u16>) -> ErrorKind {
    match (code, status) {
        (Some(c), _) if PERMANENT_CODES.contains(&c) => ErrorKind::Permanent,
        (None, Some(301 | 403)) => ErrorKind::Permanent,
        _ => ErrorKind::Retryable,
    }
}

/// A failed SDK call as a backend error: retryable or permanent, with a
/// one-line message (the service's code and message, never a raw response
/// dump) and the bucket and key it concerned.
fn s3_error<E>(
    bucket: &str,
    key: &str,
    op: &'static str,
    e: &SdkError<E, HttpResponse>,
) -> BackendError
where
    E: std::error::Error + ProvideErrorMetadata + 'static,
{
    let status = e.raw_response().map(|r| r.status().as_u16());
    let kind = classify(e.code(), status);
    let mut message = match (e.code(), e.message(), status) {
        (Some(code), Some(msg), _) => format!("{code}: {msg}"),
        (Some(code), None, _) => code.to_owned(),
        (None, _, Some(403)) => "HTTP 403 Forbidden (access denied)".to_owned(),
        (None, _, Some(301)) => "HTTP 301 (the bucket is in another region)".to_owned(),
        (None, _, Some(s)) => format!("HTTP {s}"),
        _ => chain(e),
    };
    if kind == ErrorKind::Permanent {
        message.push_str(&format!(
            " (not retried: check the bucket {bucket}, the endpoint and the credentials)"
        ));
    }
    BackendError {
        kind,
        target: format!("s3://{bucket}/{key}"),
        op,
        message,
    }
}

/// An error and its sources on one line (`a: b: c`), without the debug
/// dump of `DisplayErrorContext`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn md5_b64(data: &[u8]) -> String {
    b64(&Md5::digest(data))
}

fn crc_b64(crc: u32) -> String {
    b64(&crc.to_be_bytes())
}

/// How the server checks an upload's payloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Integrity {
    /// `x-amz-checksum-crc32c` on every part and on the single PUT, and on
    /// completion the whole object's CRC32C (checksum type FULL_OBJECT),
    /// which the server checks against the parts and keeps with the object.
    Crc32c,
    /// `Content-MD5` on every uploaded part, no whole-object checksum: an
    /// upload that may copy parts server-side. An upload with a checksum
    /// algorithm needs a checksum for every part, and MinIO refuses
    /// UploadPartCopy into one (S3 computes it); MD5 works on every server.
    Md5,
}

/// The previous object, as far as this epoch keeps it.
#[derive(Clone)]
struct Old {
    etag: String,
    /// Leading bytes that survive where the epoch does not write.
    visible: u64,
}

struct Part {
    index: u64,
    start: u64,
    buf: Vec<u8>,
}

struct S3Sink<'a> {
    be: &'a S3Backend,
    key: String,
    /// Recorded in the object's metadata.
    epoch: EpochId,
    old: Option<Old>,
    size: u64,
    part: u64,
    /// Parts before this index are uploaded or under way.
    next: u64,
    cur: Option<Part>,
    upload_id: Option<String>,
    /// The upload is shared with other servers: the leader's to complete
    /// or abort, not this sink's.
    shared: bool,
    integrity: Integrity,
    /// Part uploads in flight at most (INFLIGHT, fewer for large parts).
    max_inflight: usize,
    inflight: VecDeque<JoinHandle<Result<CompletedPart, BackendError>>>,
    done: Vec<CompletedPart>,
    /// (part number, CRC32C, length) of every part, for the whole object's.
    crcs: Vec<(i32, u32, u64)>,
    deleted: bool,
}

impl S3Backend {
    /// What an epoch makes of the object at `key`: the previous version as
    /// far as it survives, the new size, the part size, and how payloads
    /// are checked.
    fn plan_version(
        &self,
        key: &str,
        shape: &EpochShape,
    ) -> Result<(Option<Old>, u64, u64, Integrity), BackendError> {
        // The program saw no previous object (capture cannot read S3): the
        // job's first upload of a file starts from nothing, like its view.
        let old = if shape.fresh { None } else { self.head(key)? };
        let base_len = old.as_ref().map_or(0, |(len, _)| *len);
        let size = shape.size.final_size(base_len);
        let visible = shape.size.base_visible(base_len);
        let part = part_size(size, self.min_part, self.max_parts);
        // A part can be copied server-side only if the previous object
        // keeps at least one whole part (and the object has several).
        let integrity = if size > part && visible >= part {
            Integrity::Md5
        } else {
            Integrity::Crc32c
        };
        let old = old
            .filter(|_| visible > 0)
            .map(|(_, etag)| Old { etag, visible });
        Ok((old, size, part, integrity))
    }

    fn sink(
        &self,
        key: String,
        epoch: EpochId,
        (old, size, part, integrity): (Option<Old>, u64, u64, Integrity),
        upload_id: Option<String>,
    ) -> S3Sink<'_> {
        S3Sink {
            be: self,
            part,
            key,
            epoch,
            old,
            size,
            next: 0,
            cur: None,
            shared: upload_id.is_some(),
            upload_id,
            integrity,
            max_inflight: inflight_limit(part),
            inflight: VecDeque::new(),
            done: Vec::new(),
            crcs: Vec::new(),
            deleted: false,
        }
    }

    /// Start a multipart upload of the next version of `key`; its id.
    fn create_upload(
        &self,
        key: &str,
        epoch: EpochId,
        size: u64,
        integrity: Integrity,
    ) -> Result<String, BackendError> {
        let mut req = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .metadata("paralog-epoch", epoch.to_string())
            .metadata("paralog-size", size.to_string());
        if integrity == Integrity::Crc32c {
            req = req
                .checksum_algorithm(ChecksumAlgorithm::Crc32C)
                .checksum_type(ChecksumType::FullObject);
        }
        let out = self.rt.block_on(async {
            req.send()
                .await
                .map_err(|err| self.err(key, "create multipart upload", err))
        })?;
        Ok(out.upload_id().unwrap_or_default().to_owned())
    }

    /// Make an upload's parts the object. `whole`: the object's CRC32C,
    /// which the server checks against the parts' (FULL_OBJECT).
    fn complete_upload(
        &self,
        key: &str,
        id: &str,
        size: u64,
        mut parts: Vec<CompletedPart>,
        whole: Option<u32>,
    ) -> Result<(), BackendError> {
        parts.sort_by_key(|p| p.part_number());
        let mut req = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(id)
            .mpu_object_size(size as i64)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            );
        if let Some(crc) = whole {
            req = req
                .checksum_type(ChecksumType::FullObject)
                .checksum_crc32_c(crc_b64(crc));
        }
        self.rt.block_on(async {
            req.send()
                .await
                .map(|_| ())
                .map_err(|e| self.err(key, "complete multipart upload", e))
        })
    }

    async fn abort(&self, key: &str, id: &str) -> Result<(), BackendError> {
        self.client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(id)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| self.err(key, "abort multipart upload", e))
    }

    /// Best effort: a failed epoch leaves no upload behind.
    fn abort_upload(&self, key: &str, id: &str) {
        if let Err(e) = self.rt.block_on(self.abort(key, id)) {
            tracing::warn!(key = %key, error = %e, "could not abort a failed multipart upload; the next attempt or `paralog recover` will");
        }
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

impl PartedBackend for S3Backend {
    fn start_parted(
        &self,
        rel: &[u8],
        shape: &EpochShape,
    ) -> Result<Option<PartedVersion>, BackendError> {
        if shape.deleted {
            return Ok(None);
        }
        let key = self.key(rel);
        let (old, size, part, integrity) = self.plan_version(&key, shape)?;
        if size <= part {
            return Ok(None);
        }
        let upload_id = self.create_upload(&key, shape.epoch, size, integrity)?;
        Ok(Some(PartedVersion {
            rel: rel.to_vec(),
            upload_id,
            size,
            part,
            base_visible: old.as_ref().map_or(0, |o| o.visible),
            base_tag: old.map(|o| o.etag),
            copies: integrity == Integrity::Md5,
        }))
    }

    fn part_uploader<'a>(&'a self, v: &PartedVersion) -> Box<dyn PartUploader + 'a> {
        let old = v.base_tag.clone().map(|etag| Old {
            etag,
            visible: v.base_visible,
        });
        let integrity = if v.copies {
            Integrity::Md5
        } else {
            Integrity::Crc32c
        };
        // The epoch is in the upload's metadata already (the leader's).
        Box::new(self.sink(
            self.key(&v.rel),
            EpochId::default(),
            (old, v.size, v.part, integrity),
            Some(v.upload_id.clone()),
        ))
    }

    fn complete_parted(
        &self,
        v: &PartedVersion,
        mut parts: Vec<PartDone>,
    ) -> Result<(), BackendError> {
        let key = self.key(&v.rel);
        parts.sort_by_key(|p| p.index);
        let indexes: Vec<u64> = parts.iter().map(|p| p.index).collect();
        if indexes != (0..v.parts()).collect::<Vec<_>>() {
            // The servers' plans differ: a bug, not something to retry.
            return Err(BackendError {
                kind: ErrorKind::Permanent,
                target: self.describe(&v.rel),
                op: "complete multipart upload",
                message: format!(
                    "the servers reported parts {indexes:?}, not each of 0..{} once",
                    v.parts()
                ),
            });
        }
        let whole = if v.copies {
            None
        } else {
            let mut crcs = Vec::with_capacity(parts.len());
            for p in &parts {
                let Some(c) = p.crc32c else {
                    return Err(self.err_msg(
                        &key,
                        "complete multipart upload",
                        format!("part {} has no CRC32C", p.index + 1),
                    ));
                };
                crcs.push((p.index as i32 + 1, c, p.len));
            }
            Some(whole_crc(&mut crcs))
        };
        let completed = parts
            .into_iter()
            .map(|p| {
                CompletedPart::builder()
                    .part_number(p.index as i32 + 1)
                    .e_tag(p.tag)
                    .set_checksum_crc32_c(p.crc32c.map(crc_b64))
                    .build()
            })
            .collect();
        self.complete_upload(&key, &v.upload_id, v.size, completed, whole)
    }

    fn abort_parted(&self, v: &PartedVersion) {
        self.abort_upload(&self.key(&v.rel), &v.upload_id);
    }
}

impl PartUploader for S3Sink<'_> {
    fn base(&mut self, index: u64) -> Result<Vec<u8>, BackendError> {
        let (start, end) = self.range(index);
        let mut buf = vec![0u8; (end - start) as usize];
        self.fill_old(start, end, &mut buf)?;
        Ok(buf)
    }

    fn upload(&mut self, index: u64, bytes: Vec<u8>) -> Result<(), BackendError> {
        let (start, end) = self.range(index);
        assert_eq!(bytes.len() as u64, end - start, "part {index}'s length");
        self.send_part(index, Some(bytes))
    }

    fn upload_untouched(&mut self, index: u64) -> Result<(), BackendError> {
        self.send_untouched(index)
    }

    fn finish(mut self: Box<Self>) -> Result<Vec<PartDone>, BackendError> {
        while !self.inflight.is_empty() {
            self.wait_one()?;
        }
        let crcs: std::collections::HashMap<i32, u32> =
            self.crcs.iter().map(|&(n, c, _)| (n, c)).collect();
        let done = std::mem::take(&mut self.done);
        Ok(done
            .into_iter()
            .map(|p| {
                let n = p.part_number().unwrap_or(0);
                let index = (n - 1).max(0) as u64;
                let (start, end) = self.range(index);
                PartDone {
                    index,
                    tag: p.e_tag().unwrap_or_default().to_owned(),
                    crc32c: crcs.get(&n).copied(),
                    len: end - start,
                }
            })
            .collect())
    }
}

impl S3Sink<'_> {
    fn parts(&self) -> u64 {
        self.size.div_ceil(self.part).max(1)
    }

    fn single(&self) -> bool {
        self.parts() == 1
    }

    fn range(&self, index: u64) -> (u64, u64) {
        let start = index * self.part;
        (start, (start + self.part).min(self.size))
    }

    /// The bytes of the previous object in `[start, end)` that survive, into
    /// `buf` (which holds `[start, ...)`).
    fn fill_old(&self, start: u64, end: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        let Some(old) = &self.old else { return Ok(()) };
        let hi = end.min(old.visible);
        if start >= hi {
            return Ok(());
        }
        let be = self.be;
        let key = &self.key;
        let bytes = be.rt.block_on(async {
            let o = be
                .client
                .get_object()
                .bucket(&be.bucket)
                .key(key)
                .range(format!("bytes={start}-{}", hi - 1))
                .if_match(&old.etag)
                .send()
                .await
                .map_err(|e| be.err(key, "read previous object", e))?;
            o.body
                .collect()
                .await
                .map(|b| b.into_bytes())
                .map_err(|e| be.err_msg(key, "read previous object", chain(&e)))
        })?;
        if bytes.len() as u64 != hi - start {
            return Err(BackendError {
                kind: ErrorKind::Retryable,
                target: format!("s3://{}/{key}", be.bucket),
                op: "read previous object",
                message: format!("asked for {} bytes, got {}", hi - start, bytes.len()),
            });
        }
        buf[..bytes.len()].copy_from_slice(&bytes);
        Ok(())
    }

    fn upload_id(&mut self) -> Result<String, BackendError> {
        if let Some(id) = &self.upload_id {
            return Ok(id.clone());
        }
        let id = self
            .be
            .create_upload(&self.key, self.epoch, self.size, self.integrity)?;
        self.upload_id = Some(id.clone());
        Ok(id)
    }

    /// Queue a part's upload (bytes) or server-side copy (`buf` None).
    fn send_part(&mut self, index: u64, buf: Option<Vec<u8>>) -> Result<(), BackendError> {
        let id = self.upload_id()?;
        while self.inflight.len() >= self.max_inflight {
            self.wait_one()?;
        }
        let client = self.be.client.clone();
        let bucket = self.be.bucket.clone();
        let key = self.key.clone();
        let number = index as i32 + 1;
        let (start, end) = self.range(index);
        tracing::debug!(
            key = %self.key,
            part = number,
            bytes = end - start,
            how = if buf.is_some() { "upload" } else { "server-side copy" },
            "part"
        );
        let h = match buf {
            Some(data) => {
                let mut req = client
                    .upload_part()
                    .bucket(&bucket)
                    .key(&key)
                    .upload_id(&id)
                    .part_number(number);
                // Hashed here, on the drain's thread, while the runtime's
                // threads send the parts before this one.
                let mut crc = None;
                match self.integrity {
                    Integrity::Crc32c => {
                        let c = paralog_checksum::crc32c(&data);
                        self.crcs.push((number, c, data.len() as u64));
                        req = req.checksum_crc32_c(crc_b64(c));
                        crc = Some(crc_b64(c));
                    }
                    Integrity::Md5 => req = req.content_md5(md5_b64(&data)),
                }
                self.be.rt.spawn(async move {
                    let out = req
                        .body(ByteStream::from(data))
                        .send()
                        .await
                        .map_err(|e| s3_error(&bucket, &key, "upload part", &e))?;
                    Ok(CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(out.e_tag().map(str::to_owned))
                        .set_checksum_crc32_c(crc)
                        .build())
                })
            }
            None => {
                let old = self
                    .old
                    .clone()
                    .expect("copies come from the previous object");
                debug_assert_eq!(self.integrity, Integrity::Md5);
                let source = format!("{bucket}/{}", encode_key(&key));
                self.be.rt.spawn(async move {
                    let out = client
                        .upload_part_copy()
                        .bucket(&bucket)
                        .key(&key)
                        .upload_id(&id)
                        .part_number(number)
                        .copy_source(source)
                        .copy_source_range(format!("bytes={start}-{}", end - 1))
                        .copy_source_if_match(old.etag)
                        .send()
                        .await
                        .map_err(|e| s3_error(&bucket, &key, "copy unchanged part", &e))?;
                    Ok(CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(
                            out.copy_part_result()
                                .and_then(|r| r.e_tag())
                                .map(str::to_owned),
                        )
                        .build())
                })
            }
        };
        self.inflight.push_back(h);
        Ok(())
    }

    fn wait_one(&mut self) -> Result<(), BackendError> {
        let Some(h) = self.inflight.pop_front() else {
            return Ok(());
        };
        let part = self.be.rt.block_on(h).map_err(|e| BackendError {
            kind: ErrorKind::Retryable,
            target: self.be.describe(self.key.as_bytes()),
            op: "upload part",
            message: e.to_string(),
        })??;
        self.done.push(part);
        Ok(())
    }

    /// Upload part `index`, which the epoch does not write: a server-side
    /// copy when the previous object holds all of it, else its surviving
    /// bytes and zeros.
    fn send_untouched(&mut self, index: u64) -> Result<(), BackendError> {
        let (start, end) = self.range(index);
        if self.old.as_ref().is_some_and(|o| end <= o.visible) {
            return self.send_part(index, None);
        }
        let mut buf = vec![0u8; (end - start) as usize];
        self.fill_old(start, end, &mut buf)?;
        self.send_part(index, Some(buf))
    }

    /// Make part `index` the one being assembled, sending every part before
    /// it that is finished or untouched.
    fn enter(&mut self, index: u64) -> Result<(), BackendError> {
        if self.cur.as_ref().is_some_and(|p| p.index == index) {
            return Ok(());
        }
        if let Some(p) = self.cur.take() {
            self.finish_part(p)?;
        }
        if !self.single() {
            while self.next < index {
                let i = self.next;
                self.next += 1;
                self.send_untouched(i)?;
            }
        }
        let (start, end) = self.range(index);
        let mut buf = vec![0u8; (end - start) as usize];
        self.fill_old(start, end, &mut buf)?;
        self.cur = Some(Part { index, start, buf });
        self.next = index + 1;
        Ok(())
    }

    fn finish_part(&mut self, p: Part) -> Result<(), BackendError> {
        if self.single() {
            // Kept for the one PUT at commit.
            self.cur = Some(p);
            return Ok(());
        }
        self.send_part(p.index, Some(p.buf))
    }

    fn put_single(&mut self, body: Vec<u8>) -> Result<(), BackendError> {
        let be = self.be;
        let key = &self.key;
        let epoch = self.epoch;
        // The whole object's CRC32C: a PUT's checksum is of the full object.
        let crc = crc_b64(paralog_checksum::crc32c(&body));
        be.rt.block_on(async {
            be.client
                .put_object()
                .bucket(&be.bucket)
                .key(key)
                .checksum_crc32_c(crc)
                .metadata("paralog-epoch", epoch.to_string())
                .metadata("paralog-size", body.len().to_string())
                .body(ByteStream::from(body))
                .send()
                .await
                .map(|_| ())
                .map_err(|err| be.err(key, "put object", err))
        })
    }
}

/// The CRC32C of the object from its parts' (number, CRC32C, length).
fn whole_crc(parts: &mut [(i32, u32, u64)]) -> u32 {
    parts.sort_by_key(|p| p.0);
    parts.iter().fold(0, |acc, &(_, crc, len)| {
        paralog_checksum::crc32c_combine(acc, crc, len)
    })
}

/// Percent-encode a key for `x-amz-copy-source` (keep `/` and the
/// unreserved characters).
fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl EpochSink for S3Sink<'_> {
    fn apply(&mut self, op: RemoteOp<'_>) -> Result<(), BackendError> {
        match op {
            RemoteOp::Write { mut off, mut data } => {
                if self.deleted {
                    return Ok(());
                }
                while !data.is_empty() {
                    let index = off / self.part;
                    self.enter(index)?;
                    let p = self.cur.as_mut().expect("entered");
                    let at = (off - p.start) as usize;
                    let n = data.len().min(p.buf.len() - at);
                    p.buf[at..at + n].copy_from_slice(&data[..n]);
                    off += n as u64;
                    data = &data[n..];
                }
                Ok(())
            }
            // The shape gave the sizes up front.
            RemoteOp::SetSize(_) | RemoteOp::Preallocate(_) => Ok(()),
            RemoteOp::Delete => {
                self.deleted = true;
                Ok(())
            }
        }
    }

    fn commit(mut self: Box<Self>) -> Result<(), BackendError> {
        let be = self.be;
        if self.deleted {
            let key = self.key.clone();
            return be.rt.block_on(async {
                be.client
                    .delete_object()
                    .bucket(&be.bucket)
                    .key(&key)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| be.err(&key, "delete object", e))
            });
        }
        if self.single() {
            let body = match self.cur.take() {
                Some(p) => p.buf,
                None => {
                    let mut buf = vec![0u8; self.size as usize];
                    self.fill_old(0, self.size, &mut buf)?;
                    buf
                }
            };
            return self.put_single(body);
        }
        if let Some(p) = self.cur.take() {
            self.finish_part(p)?;
        }
        while self.next < self.parts() {
            let i = self.next;
            self.next += 1;
            self.send_untouched(i)?;
        }
        while !self.inflight.is_empty() {
            self.wait_one()?;
        }
        let id = self.upload_id()?;
        let parts = std::mem::take(&mut self.done);
        let whole = (self.integrity == Integrity::Crc32c).then(|| whole_crc(&mut self.crcs));
        be.complete_upload(&self.key, &id, self.size, parts, whole)?;
        self.upload_id = None;
        Ok(())
    }
}

impl Drop for S3Sink<'_> {
    /// A failed epoch leaves no half-built upload behind (best effort: the
    /// next `recover` aborts what a crash left).
    fn drop(&mut self) {
        for h in self.inflight.drain(..) {
            h.abort();
        }
        if self.shared {
            return;
        }
        if let Some(id) = self.upload_id.take() {
            self.be.abort_upload(&self.key, &id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
