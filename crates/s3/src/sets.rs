//! Checkpoint sets on S3 (docs/aggregate.md, "Sets on S3"): the store
//! operations `paralog-aggregate` needs (`SetStore`), over this crate's
//! client. Keys: `PREFIX/SET/set.plr` (the record, one object replaced
//! by each new version: S3 replaces an object atomically, so its PUT is
//! the commit) and `PREFIX/SET/c<k>-v<version>-<attempt>.plc` (the
//! containers, named per attempt and never rewritten).
//!
//! A container is written as a stream of bytes in increasing offsets and
//! cut into parts wherever the part size falls (parts are packed across
//! members): every part but the last is at least the URL's `part_size`
//! (8 MiB by default, never under S3's 5 MiB), and the part size doubles
//! after each sixteenth of `max_parts` parts, so no container needs more than
//! `max_parts` (10,000) parts up to S3's 5 TiB object limit. A container
//! no larger than one part is one PUT. Every part carries its CRC32C and
//! the completion the whole object's (checksum type FULL_OBJECT), checked
//! by the server; the set record's own CRC-32C per block is checked by
//! every reader.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumType, CompletedPart};
use paralog_aggregate::format::{self, SetRecord};
use paralog_aggregate::store::{ContainerSink, ContainerSource, SetStore};
use paralog_aggregate::{AggError, SetReader};
use paralog_backend::{BackendError, S3Url};
use tokio::task::JoinHandle;

use crate::errors::{chain, s3_error};
use crate::integrity::{crc_b64, whole_crc};
use crate::S3Backend;

/// The marker object `SET/.set.plr.upload-<container>`, written before a
/// container's multipart upload is created and deleted once it is complete
/// or aborted: what a crash left unfinished is found by listing objects
/// (MinIO lists multipart uploads only by an object's exact key, so a
/// prefix listing of the set does not find them there).
const MARK: &str = ".set.plr.upload-";
/// S3's largest part.
const MAX_PART: u64 = 5 << 30;
/// Part uploads of one container in flight at once.
const INFLIGHT: usize = 2;

/// The sets under an `s3://BUCKET/PREFIX` remote.
#[derive(Debug, Clone)]
pub struct S3Sets {
    be: Arc<S3Backend>,
}

/// A client error as the set's: the key in the path, S3's message.
fn agg(path: PathBuf, op: &'static str) -> impl FnOnce(BackendError) -> AggError {
    move |e| AggError::Io {
        path,
        op,
        error: std::io::Error::other(e.to_string()),
    }
}

impl S3Sets {
    pub fn open(url: &S3Url) -> Result<S3Sets, BackendError> {
        Ok(S3Sets {
            be: Arc::new(S3Backend::open(url)?),
        })
    }

    /// The key of `SET/NAME`, relative to the prefix.
    fn rel(set: &[u8], name: &[u8]) -> String {
        let mut r = String::from_utf8_lossy(set).into_owned();
        if !name.is_empty() {
            r.push('/');
            r.push_str(&String::from_utf8_lossy(name));
        }
        r
    }

    /// The set `set`, read through ranged GETs; `None` when it has no
    /// record.
    pub fn open_set(&self, set: &[u8]) -> paralog_aggregate::Result<Option<SetReader>> {
        let src: Arc<dyn ContainerSource> = Arc::new(self.clone());
        Ok(self
            .read_record(set)?
            .map(|r| SetReader::from_source(src, r)))
    }

    /// Every set under the prefix (a key ending in `/set.plr`), with its
    /// record or why it cannot be read.
    pub fn list_sets(
        &self,
    ) -> paralog_aggregate::Result<Vec<(PathBuf, paralog_aggregate::Result<SetRecord>)>> {
        let suffix = format!("/{}", format::RECORD_NAME);
        let keys = self
            .be
            .list_objects("")
            .map_err(agg(self.display(b"", b""), "list the sets"))?;
        let mut out = Vec::new();
        for k in keys {
            let Some(set) = k.strip_suffix(&suffix) else {
                continue;
            };
            let r = self.read_record(set.as_bytes()).and_then(|r| {
                r.ok_or_else(|| AggError::Io {
                    path: self.display(set.as_bytes(), format::RECORD_NAME.as_bytes()),
                    op: "read set record",
                    error: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "removed while listed",
                    ),
                })
            });
            out.push((PathBuf::from(set), r));
        }
        Ok(out)
    }
}

impl ContainerSource for S3Sets {
    fn read_at(
        &self,
        set: &[u8],
        name: &[u8],
        at: u64,
        buf: &mut [u8],
    ) -> paralog_aggregate::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let key = self.be.key(Self::rel(set, name).as_bytes());
        let path = self.display(set, name);
        let be = &self.be;
        let got = be.rt.block_on(async {
            let o = match be
                .client
                .get_object()
                .bucket(&be.bucket)
                .key(&key)
                .range(format!("bytes={at}-{}", at + buf.len() as u64 - 1))
                .send()
                .await
            {
                Ok(o) => o,
                // Nothing at `at`: the object is shorter.
                Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 416) => {
                    return Ok(Vec::new())
                }
                Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) => {
                    return Err(AggError::Io {
                        path: path.clone(),
                        op: "read container",
                        error: std::io::Error::new(std::io::ErrorKind::NotFound, "no such object"),
                    })
                }
                Err(e) => {
                    return Err(agg(path.clone(), "read container")(s3_error(
                        &be.bucket,
                        &key,
                        "get object range",
                        &e,
                    )))
                }
            };
            o.body
                .collect()
                .await
                .map(|b| b.into_bytes().to_vec())
                .map_err(|e| AggError::Io {
                    path: path.clone(),
                    op: "read container",
                    error: std::io::Error::other(chain(&e)),
                })
        })?;
        let n = got.len().min(buf.len());
        buf[..n].copy_from_slice(&got[..n]);
        Ok(n)
    }

    fn display(&self, set: &[u8], name: &[u8]) -> PathBuf {
        let key = self.be.key(Self::rel(set, name).as_bytes());
        PathBuf::from(OsStr::from_bytes(
            format!("s3://{}/{key}", self.be.bucket).as_bytes(),
        ))
    }
}

impl SetStore for S3Sets {
    fn read_record(&self, set: &[u8]) -> paralog_aggregate::Result<Option<SetRecord>> {
        let name = format::RECORD_NAME.as_bytes();
        let path = self.display(set, name);
        let Some(bytes) = self
            .be
            .get_object(&Self::rel(set, name))
            .map_err(agg(path.clone(), "read set record"))?
        else {
            return Ok(None);
        };
        let r = SetRecord::decode(&bytes, &path)?;
        if r.set != set {
            return Err(AggError::corrupt(
                &path,
                format::HEADER_LEN as u64,
                format!(
                    "record of set {} stored as set {}",
                    String::from_utf8_lossy(&r.set),
                    String::from_utf8_lossy(set)
                ),
            ));
        }
        Ok(Some(r))
    }

    fn create_container(
        &self,
        set: &[u8],
        name: &[u8],
    ) -> paralog_aggregate::Result<Box<dyn ContainerSink>> {
        Ok(Box::new(S3Container {
            be: self.be.clone(),
            key: self.be.key(Self::rel(set, name).as_bytes()),
            mark: Self::rel(
                set,
                format!("{MARK}{}", String::from_utf8_lossy(name)).as_bytes(),
            ),
            path: self.display(set, name),
            buf: Vec::new(),
            end: 0,
            upload: None,
            inflight: VecDeque::new(),
            parts: Vec::new(),
            crcs: Vec::new(),
            completed: false,
        }))
    }

    fn put_record(&self, record: &SetRecord) -> paralog_aggregate::Result<()> {
        let name = format::RECORD_NAME.as_bytes();
        self.be
            .put_object(&Self::rel(&record.set, name), record.encode(), false)
            .map(drop)
            .map_err(agg(self.display(&record.set, name), "write set record"))
    }

    fn delete(&self, set: &[u8], name: &[u8]) -> paralog_aggregate::Result<()> {
        self.be
            .delete_object(&Self::rel(set, name))
            .map_err(agg(self.display(set, name), "delete"))
    }

    fn list(&self, set: &[u8]) -> paralog_aggregate::Result<Vec<Vec<u8>>> {
        let dir = format!("{}/", Self::rel(set, b""));
        let keys = self
            .be
            .list_objects(&dir)
            .map_err(agg(self.display(set, b""), "list set objects"))?;
        Ok(keys
            .iter()
            .filter_map(|k| k.strip_prefix(&dir))
            .filter(|n| !n.contains('/'))
            .map(|n| n.as_bytes().to_vec())
            .collect())
    }

    fn abort_uploads(&self, set: &[u8]) -> paralog_aggregate::Result<usize> {
        let mut n = self.abort_listed(set)?;
        for name in self.list(set)? {
            let Some(c) = name.strip_prefix(MARK.as_bytes()) else {
                continue;
            };
            let key = self.be.key(Self::rel(set, c).as_bytes());
            n += self
                .be
                .abort_stale(&key)
                .map_err(agg(self.display(set, c), "abort an unfinished upload"))?;
            self.delete(set, &name)?;
        }
        Ok(n)
    }
}

impl S3Sets {
    /// Abort the uploads S3 lists under the set's prefix (all of them on
    /// AWS; MinIO lists only some: the markers find the rest).
    fn abort_listed(&self, set: &[u8]) -> paralog_aggregate::Result<usize> {
        let dir = self.be.key(format!("{}/", Self::rel(set, b"")).as_bytes());
        let path = self.display(set, b"");
        let be = &self.be;
        be.rt
            .block_on(async {
                let mut n = 0;
                let (mut key_marker, mut id_marker) = (None, None);
                loop {
                    let out = be
                        .client
                        .list_multipart_uploads()
                        .bucket(&be.bucket)
                        .prefix(&dir)
                        .set_key_marker(key_marker)
                        .set_upload_id_marker(id_marker)
                        .send()
                        .await
                        .map_err(|e| s3_error(&be.bucket, &dir, "list multipart uploads", &e))?;
                    for u in out.uploads() {
                        let (Some(key), Some(id)) = (u.key(), u.upload_id()) else {
                            continue;
                        };
                        // Only the set's own files (not a nested set's).
                        if key.strip_prefix(&dir).is_some_and(|n| !n.contains('/')) {
                            be.abort(key, id).await?;
                            n += 1;
                        }
                    }
                    if out.is_truncated() != Some(true) {
                        return Ok(n);
                    }
                    key_marker = out.next_key_marker().map(str::to_owned);
                    id_marker = out.next_upload_id_marker().map(str::to_owned);
                }
            })
            .map_err(agg(path, "abort unfinished uploads"))
    }
}

/// The size of part `sent + 1` of a container: `min`, doubled after each
/// sixteenth of `max_parts` parts (at most S3's 5 GiB).
fn growing_part(min: u64, max_parts: u64, sent: u64) -> u64 {
    let tier = (sent * 16 / max_parts.max(16)).min(20);
    (min << tier).min(MAX_PART)
}

/// One container being uploaded (see the module's comment).
struct S3Container {
    be: Arc<S3Backend>,
    key: String,
    /// The marker's key relative to the prefix (see `MARK`).
    mark: String,
    path: PathBuf,
    /// The part being filled.
    buf: Vec<u8>,
    /// Bytes accepted so far (sent and buffered).
    end: u64,
    upload: Option<String>,
    inflight: VecDeque<JoinHandle<Result<CompletedPart, BackendError>>>,
    parts: Vec<CompletedPart>,
    /// (part number, CRC32C, length) of every part sent.
    crcs: Vec<(i32, u32, u64)>,
    completed: bool,
}

impl S3Container {
    fn err(&self, op: &'static str) -> impl FnOnce(BackendError) -> AggError {
        agg(self.path.clone(), op)
    }

    /// The size of the part being filled: the URL's part size, doubled
    /// after each sixteenth of the part-count limit.
    fn part_size(&self) -> u64 {
        growing_part(self.be.min_part, self.be.max_parts, self.crcs.len() as u64)
    }

    fn push(&mut self, mut data: &[u8]) -> paralog_aggregate::Result<()> {
        while !data.is_empty() {
            let part = self.part_size() as usize;
            if self.buf.capacity() < part {
                self.buf.reserve_exact(part - self.buf.len());
            }
            let take = (part - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..take]);
            data = &data[take..];
            self.end += take as u64;
            if self.buf.len() == part {
                self.send_part()?;
            }
        }
        Ok(())
    }

    /// Upload the buffered bytes as the next part (the upload created
    /// first if this is its first part).
    fn send_part(&mut self) -> paralog_aggregate::Result<()> {
        let be = self.be.clone();
        let id = match &self.upload {
            Some(id) => id.clone(),
            None => {
                be.put_object(&self.mark, Vec::new(), false)
                    .map_err(self.err("write an upload marker"))?;
                let out = be
                    .rt
                    .block_on(
                        be.client
                            .create_multipart_upload()
                            .bucket(&be.bucket)
                            .key(&self.key)
                            .checksum_algorithm(ChecksumAlgorithm::Crc32C)
                            .checksum_type(ChecksumType::FullObject)
                            .send(),
                    )
                    .map_err(|e| s3_error(&be.bucket, &self.key, "create multipart upload", &e))
                    .map_err(self.err("write container"))?;
                let id = out.upload_id().unwrap_or_default().to_owned();
                self.upload = Some(id.clone());
                id
            }
        };
        while self.inflight.len() >= INFLIGHT {
            self.wait_one()?;
        }
        let data = std::mem::take(&mut self.buf);
        let number = self.crcs.len() as i32 + 1;
        let crc = paralog_checksum::crc32c(&data);
        self.crcs.push((number, crc, data.len() as u64));
        let req = be
            .client
            .upload_part()
            .bucket(&be.bucket)
            .key(&self.key)
            .upload_id(id)
            .part_number(number)
            .checksum_crc32_c(crc_b64(crc))
            .body(ByteStream::from(data));
        let (bucket, key) = (be.bucket.clone(), self.key.clone());
        self.inflight.push_back(be.rt.spawn(async move {
            let out = req
                .send()
                .await
                .map_err(|e| s3_error(&bucket, &key, "upload part", &e))?;
            Ok(CompletedPart::builder()
                .part_number(number)
                .set_e_tag(out.e_tag().map(str::to_owned))
                .checksum_crc32_c(crc_b64(crc))
                .build())
        }));
        Ok(())
    }

    /// The upload is complete or aborted: its marker goes (best effort: a
    /// marker left is collected with the orphans).
    fn unmark(&self) {
        if let Err(e) = self.be.delete_object(&self.mark) {
            tracing::warn!(key = %self.mark, error = %e, "could not delete an upload marker; the next publish or `paralog recover` collects it");
        }
    }

    fn wait_one(&mut self) -> paralog_aggregate::Result<()> {
        let Some(h) = self.inflight.pop_front() else {
            return Ok(());
        };
        let done = self
            .be
            .rt
            .block_on(h)
            .map_err(|e| std::io::Error::other(format!("part upload task: {e}")))
            .map_err(|error| AggError::Io {
                path: self.path.clone(),
                op: "upload part",
                error,
            })?
            .map_err(self.err("upload part"))?;
        self.parts.push(done);
        Ok(())
    }
}

impl ContainerSink for S3Container {
    fn write(&mut self, at: u64, data: &[u8]) -> paralog_aggregate::Result<()> {
        if at < self.end || self.completed {
            return Err(AggError::Invalid {
                path: self.path.clone(),
                what: format!(
                    "written at {at}, before its end {} or after it was finished",
                    self.end
                ),
            });
        }
        // The hole before `at` (under the alignment) is stored as zeros.
        let zeros = vec![0u8; (at - self.end).min(1 << 20) as usize];
        while self.end < at {
            let n = (at - self.end).min(zeros.len() as u64) as usize;
            self.push(&zeros[..n])?;
        }
        self.push(data)
    }

    fn finish(&mut self, end: u64) -> paralog_aggregate::Result<()> {
        if self.completed {
            return Ok(());
        }
        self.write(end, &[])?;
        if self.upload.is_none() {
            // Smaller than one part: one PUT with its CRC32C.
            let body = std::mem::take(&mut self.buf);
            let crc = crc_b64(paralog_checksum::crc32c(&body));
            let be = &self.be;
            be.rt
                .block_on(
                    be.client
                        .put_object()
                        .bucket(&be.bucket)
                        .key(&self.key)
                        .checksum_crc32_c(crc)
                        .body(ByteStream::from(body))
                        .send(),
                )
                .map_err(|e| s3_error(&be.bucket, &self.key, "put container", &e))
                .map_err(self.err("write container"))?;
            self.completed = true;
            return Ok(());
        }
        if !self.buf.is_empty() {
            self.send_part()?;
        }
        while !self.inflight.is_empty() {
            self.wait_one()?;
        }
        let whole = whole_crc(&mut self.crcs);
        let id = self.upload.clone().expect("an upload");
        self.be
            .complete_upload(
                &self.key,
                &id,
                end,
                std::mem::take(&mut self.parts),
                Some(whole),
            )
            .map_err(self.err("complete container upload"))?;
        self.completed = true;
        self.unmark();
        Ok(())
    }

    fn abandon(&mut self) {
        for h in self.inflight.drain(..) {
            let _ = self.be.rt.block_on(h);
        }
        if self.completed {
            if let Err(e) = self.be.delete_key(&self.key) {
                tracing::warn!(key = %self.key, error = %e, "could not delete an abandoned container; the next publish or `paralog recover` collects it");
            }
        } else if let Some(id) = self.upload.take() {
            self.be.abort_upload(&self.key, &id);
            self.unmark();
        }
    }
}

impl S3Sets {
    /// The set directories under the prefix (a key ending in
    /// `/set.plr`), records not read.
    pub fn set_dirs(&self) -> Result<Vec<String>, BackendError> {
        let suffix = format!("/{}", format::RECORD_NAME);
        Ok(self
            .be
            .list_objects("")?
            .into_iter()
            .filter_map(|k| k.strip_suffix(&suffix).map(str::to_owned))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parts of a container of `size` bytes, the last one partial.
    fn parts_for(size: u64, min: u64, max_parts: u64) -> (u64, u64) {
        let (mut n, mut done, mut largest) = (0, 0, 0);
        while done < size {
            let p = growing_part(min, max_parts, n);
            largest = largest.max(p);
            done += p;
            n += 1;
        }
        (n, largest)
    }

    #[test]
    fn containers_up_to_5_tib_fit_in_10000_parts() {
        let mib = 1 << 20;
        for min in [5 * mib, 8 * mib] {
            let (n, largest) = parts_for(5 << 40, min, 10_000);
            assert!(n <= 10_000, "{n} parts of at least {min}");
            assert!(largest <= MAX_PART);
        }
        // Small containers keep the URL's part size.
        assert_eq!(parts_for(100 * mib, 8 * mib, 10_000), (13, 8 * mib));
        // A lower limit (a test setting) grows the parts sooner.
        let (n, _) = parts_for(1 << 30, 5 * mib, 20);
        assert!(n <= 20, "{n}");
    }
}
