//! One file's epoch as an S3 object (`S3Sink`): parts assembled in offset
//! order from the epoch's extents, the previous object and zeros, uploaded
//! a bounded number at a time; a single PUT for a file within one part.

use std::collections::VecDeque;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::CompletedPart;
use paralog_backend::{
    Backend as _, BackendError, EpochId, EpochSink, ErrorKind, PartDone, PartUploader, RemoteOp,
};
use tokio::task::JoinHandle;

use crate::errors::{chain, s3_error};
use crate::integrity::{crc_b64, md5_b64, whole_crc, Integrity};
use crate::S3Backend;

/// The previous object, as far as this epoch keeps it.
#[derive(Clone)]
pub(crate) struct Old {
    pub(crate) etag: String,
    /// Leading bytes that survive where the epoch does not write.
    pub(crate) visible: u64,
}

pub(crate) struct Part {
    pub(crate) index: u64,
    pub(crate) start: u64,
    pub(crate) buf: Vec<u8>,
}

pub(crate) struct S3Sink<'a> {
    pub(crate) be: &'a S3Backend,
    pub(crate) key: String,
    /// Recorded in the object's metadata.
    pub(crate) epoch: EpochId,
    pub(crate) old: Option<Old>,
    pub(crate) size: u64,
    pub(crate) part: u64,
    /// Parts before this index are uploaded or under way.
    pub(crate) next: u64,
    pub(crate) cur: Option<Part>,
    pub(crate) upload_id: Option<String>,
    /// The upload is shared with other servers: the leader's to complete
    /// or abort, not this sink's.
    pub(crate) shared: bool,
    pub(crate) integrity: Integrity,
    /// Part uploads in flight at most (INFLIGHT, fewer for large parts).
    pub(crate) max_inflight: usize,
    pub(crate) inflight: VecDeque<JoinHandle<Result<CompletedPart, BackendError>>>,
    pub(crate) done: Vec<CompletedPart>,
    /// (part number, CRC32C, length) of every part, for the whole object's.
    pub(crate) crcs: Vec<(i32, u32, u64)>,
    pub(crate) deleted: bool,
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
    pub(crate) fn parts(&self) -> u64 {
        self.size.div_ceil(self.part).max(1)
    }

    pub(crate) fn single(&self) -> bool {
        self.parts() == 1
    }

    pub(crate) fn range(&self, index: u64) -> (u64, u64) {
        let start = index * self.part;
        (start, (start + self.part).min(self.size))
    }

    /// The bytes of the previous object in `[start, end)` that survive, into
    /// `buf` (which holds `[start, ...)`).
    pub(crate) fn fill_old(
        &self,
        start: u64,
        end: u64,
        buf: &mut [u8],
    ) -> Result<(), BackendError> {
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

    pub(crate) fn upload_id(&mut self) -> Result<String, BackendError> {
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
    pub(crate) fn send_part(
        &mut self,
        index: u64,
        buf: Option<Vec<u8>>,
    ) -> Result<(), BackendError> {
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

    pub(crate) fn wait_one(&mut self) -> Result<(), BackendError> {
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
    pub(crate) fn send_untouched(&mut self, index: u64) -> Result<(), BackendError> {
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
    pub(crate) fn enter(&mut self, index: u64) -> Result<(), BackendError> {
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

    pub(crate) fn finish_part(&mut self, p: Part) -> Result<(), BackendError> {
        if self.single() {
            // Kept for the one PUT at commit.
            self.cur = Some(p);
            return Ok(());
        }
        self.send_part(p.index, Some(p.buf))
    }

    pub(crate) fn put_single(&mut self, body: Vec<u8>) -> Result<(), BackendError> {
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

/// Percent-encode a key for `x-amz-copy-source` (keep `/` and the
/// unreserved characters).
pub(crate) fn encode_key(key: &str) -> String {
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
            return be.delete_key(&self.key);
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
