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
//! Uploads run concurrently, a bounded number per file. Every part and PUT
//! carries a Content-MD5; the object's metadata records the epoch and its
//! size. Endpoint, region and credentials come from the standard AWS
//! environment and configuration files; credentials are never logged.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use aws_sdk_s3::Client;
use base64::Engine;
use md5::{Digest, Md5};
use paralog_backend::{Backend, BackendError, EpochShape, EpochSink, ErrorKind, RemoteOp};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

const MIB: u64 = 1 << 20;
/// S3's limits: parts of at least 5 MiB (but the last), at most 10,000.
pub const MIN_PART: u64 = 5 * MIB;
pub const MAX_PARTS: u64 = 10_000;
const DEFAULT_PART: u64 = 8 * MIB;
/// Part uploads in flight per file being drained.
const INFLIGHT: usize = 4;

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

fn parse_size(s: &str) -> Option<u64> {
    let (n, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], MIB),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    n.parse::<u64>().ok().map(|v| v * mult)
}

/// The part size for an object of `size` bytes: at least `min`, large enough
/// for 10,000 parts, a multiple of 1 MiB.
pub fn part_size(size: u64, min: u64, max_parts: u64) -> u64 {
    let need = size.div_ceil(max_parts).div_ceil(MIB) * MIB;
    need.max(min)
}

impl S3Backend {
    /// From `s3://bucket/prefix[?part_size=N]`. The AWS configuration is
    /// loaded once here (environment, `~/.aws/config` and `credentials`);
    /// an endpoint URL set there (an S3-compatible server) implies
    /// path-style addressing.
    pub fn open(url: &str) -> Result<S3Backend, BackendError> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| bad(url, "not an s3:// URL".into()))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
        if bucket.is_empty() {
            return Err(bad(url, "no bucket: s3://BUCKET/PREFIX".into()));
        }
        let prefix = prefix.trim_matches('/').to_owned();
        if prefix.split('/').any(|c| c == ".." || c == ".") {
            return Err(bad(
                url,
                "the prefix may not contain '.' or '..' components".into(),
            ));
        }
        let mut min_part = DEFAULT_PART;
        let mut max_parts = MAX_PARTS;
        let mut at_close = true;
        for kv in query.split('&').filter(|s| !s.is_empty()) {
            match kv.split_once('=') {
                Some(("part_size", v)) => {
                    min_part = parse_size(v)
                        .filter(|&n| n >= MIN_PART)
                        .ok_or_else(|| bad(url, format!("part_size={v}: at least 5M")))?;
                }
                Some(("upload", "close")) => at_close = true,
                Some(("upload", "epoch")) => at_close = false,
                Some(("upload", v)) => return Err(bad(url, format!("upload={v}: close or epoch"))),
                // A lower part limit than S3's, so that tests can make the
                // part size grow without writing 80 GB.
                Some(("max_parts", v)) => {
                    max_parts = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_PARTS).contains(n))
                        .ok_or_else(|| bad(url, format!("max_parts={v}: 1 to 10000")))?;
                }
                _ => {
                    return Err(bad(
                        url,
                        format!("unknown setting {kv} (known: upload, part_size, max_parts)"),
                    ))
                }
            }
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("s3")
            .enable_all()
            .build()
            .map_err(|e| bad(url, format!("starting the S3 runtime: {e}")))?;
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
                // Content-MD5 on every payload instead (universally
                // supported by S3-compatible servers).
                .request_checksum_calculation(
                    aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired,
                )
                .build();
            Client::from_conf(conf)
        });
        Ok(S3Backend {
            bucket: bucket.to_owned(),
            prefix,
            min_part,
            max_parts,
            at_close,
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

    fn err<E>(&self, key: &str, op: &'static str, e: E) -> BackendError
    where
        E: std::error::Error + ProvideErrorMetadata,
    {
        self.err_msg(key, op, describe(&e))
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
                    self.client
                        .abort_multipart_upload()
                        .bucket(&self.bucket)
                        .key(key)
                        .upload_id(id)
                        .send()
                        .await
                        .map_err(|e| self.err(key, "abort multipart upload", e))?;
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
            while let Some(chunk) =
                o.body.try_next().await.map_err(|e| {
                    self.err_msg(key, "read object", DisplayErrorContext(e).to_string())
                })?
            {
                out.write_all(&chunk)
                    .map_err(|e| self.err_msg(key, "write output", e.to_string()))?;
                n += chunk.len() as u64;
            }
            Ok(n)
        })
    }
}

/// One line: the service's error code and message when there is one (no
/// raw response dump), else the error chain.
fn describe<E: std::error::Error + ProvideErrorMetadata>(e: &E) -> String {
    match (e.code(), e.message()) {
        (Some(code), Some(msg)) => format!("{code}: {msg}"),
        (Some(code), None) => code.to_owned(),
        _ => DisplayErrorContext(e).to_string(),
    }
}

fn md5_b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(Md5::digest(data))
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
    shape: EpochShape,
    old: Option<Old>,
    size: u64,
    part: u64,
    /// Parts before this index are uploaded or under way.
    next: u64,
    cur: Option<Part>,
    upload_id: Option<String>,
    inflight: VecDeque<JoinHandle<Result<CompletedPart, BackendError>>>,
    done: Vec<CompletedPart>,
    deleted: bool,
}

impl Backend for S3Backend {
    fn begin(
        &self,
        rel: &[u8],
        shape: &EpochShape,
    ) -> Result<Box<dyn EpochSink + '_>, BackendError> {
        let key = self.key(rel);
        // The program saw no previous object (capture cannot read S3): the
        // job's first upload of a file starts from nothing, like its view.
        let old = if shape.fresh { None } else { self.head(&key)? };
        let base_len = old.as_ref().map_or(0, |(len, _)| *len);
        let size = shape.final_size(base_len);
        let visible = shape.base_visible(base_len);
        Ok(Box::new(S3Sink {
            be: self,
            part: part_size(size, self.min_part, self.max_parts),
            key,
            shape: *shape,
            old: old
                .filter(|_| visible > 0)
                .map(|(_, etag)| Old { etag, visible }),
            size,
            next: 0,
            cur: None,
            upload_id: None,
            inflight: VecDeque::new(),
            done: Vec::new(),
            deleted: shape.deleted,
        }))
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

    fn whole_opens(&self) -> bool {
        self.at_close
    }

    fn readable_by_capture(&self) -> bool {
        false
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
            o.body.collect().await.map(|b| b.into_bytes()).map_err(|e| {
                be.err_msg(
                    key,
                    "read previous object",
                    DisplayErrorContext(e).to_string(),
                )
            })
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
        let be = self.be;
        let key = &self.key;
        let (g, e) = self.shape.epoch;
        let id = be.rt.block_on(async {
            be.client
                .create_multipart_upload()
                .bucket(&be.bucket)
                .key(key)
                .metadata("paralog-epoch", format!("{g}:{e}"))
                .metadata("paralog-size", self.size.to_string())
                .send()
                .await
                .map_err(|err| be.err(key, "create multipart upload", err))
        })?;
        let id = id.upload_id().unwrap_or_default().to_owned();
        self.upload_id = Some(id.clone());
        Ok(id)
    }

    /// Queue a part's upload (bytes) or server-side copy (`buf` None).
    fn send_part(&mut self, index: u64, buf: Option<Vec<u8>>) -> Result<(), BackendError> {
        let id = self.upload_id()?;
        while self.inflight.len() >= INFLIGHT {
            self.wait_one()?;
        }
        let client = self.be.client.clone();
        let bucket = self.be.bucket.clone();
        let key = self.key.clone();
        let number = index as i32 + 1;
        let (start, end) = self.range(index);
        let target = format!("s3://{bucket}/{key}");
        let fail = move |op: &'static str, e: String| BackendError {
            kind: ErrorKind::Retryable,
            target: target.clone(),
            op,
            message: e,
        };
        tracing::debug!(
            key = %self.key,
            part = number,
            bytes = end - start,
            how = if buf.is_some() { "upload" } else { "server-side copy" },
            "part"
        );
        let h = match buf {
            Some(data) => self.be.rt.spawn(async move {
                let md5 = md5_b64(&data);
                let out = client
                    .upload_part()
                    .bucket(&bucket)
                    .key(&key)
                    .upload_id(&id)
                    .part_number(number)
                    .content_md5(md5)
                    .body(ByteStream::from(data))
                    .send()
                    .await
                    .map_err(|e| fail("upload part", describe(&e)))?;
                Ok(CompletedPart::builder()
                    .part_number(number)
                    .set_e_tag(out.e_tag().map(str::to_owned))
                    .build())
            }),
            None => {
                let old = self
                    .old
                    .clone()
                    .expect("copies come from the previous object");
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
                        .map_err(|e| fail("copy unchanged part", describe(&e)))?;
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
        let (g, e) = self.shape.epoch;
        be.rt.block_on(async {
            be.client
                .put_object()
                .bucket(&be.bucket)
                .key(key)
                .content_md5(md5_b64(&body))
                .metadata("paralog-epoch", format!("{g}:{e}"))
                .metadata("paralog-size", body.len().to_string())
                .body(ByteStream::from(body))
                .send()
                .await
                .map(|_| ())
                .map_err(|err| be.err(key, "put object", err))
        })
    }
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
        let mut parts = std::mem::take(&mut self.done);
        parts.sort_by_key(|p| p.part_number());
        let key = self.key.clone();
        be.rt.block_on(async {
            be.client
                .complete_multipart_upload()
                .bucket(&be.bucket)
                .key(&key)
                .upload_id(&id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map_err(|e| be.err(&key, "complete multipart upload", e))
        })?;
        self.upload_id = None;
        Ok(())
    }
}

impl Drop for S3Sink<'_> {
    /// A failed epoch leaves no half-built upload behind (best effort: the
    /// next `recover` aborts what a crash left).
    fn drop(&mut self) {
        let Some(id) = self.upload_id.take() else {
            return;
        };
        for h in self.inflight.drain(..) {
            h.abort();
        }
        let be = self.be;
        let key = self.key.clone();
        let r = be.rt.block_on(async {
            be.client
                .abort_multipart_upload()
                .bucket(&be.bucket)
                .key(&key)
                .upload_id(&id)
                .send()
                .await
        });
        if let Err(e) = r {
            tracing::warn!(key = %key, code = ?e.code(), "could not abort a failed multipart upload; `paralog recover` will");
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
    fn urls_are_checked() {
        assert!(S3Backend::open("s3://").is_err());
        assert!(S3Backend::open("s3://b/../x").is_err());
        assert!(S3Backend::open("s3://b/p?part_size=1M").is_err());
        assert!(S3Backend::open("s3://b/p?bogus=1").is_err());
        let b = S3Backend::open("s3://bucket/a/b/?part_size=16M").unwrap();
        assert_eq!(b.key(b"x/y.dat"), "a/b/x/y.dat");
        assert_eq!(b.min_part, 16 * MIB);
        assert_eq!(encode_key("a b/c+d"), "a%20b/c%2Bd");
    }
}
