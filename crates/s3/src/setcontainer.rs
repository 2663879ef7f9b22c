//! A checkpoint set's container written to S3 (docs/aggregate.md, "Sets
//! on S3"): a stream of bytes in increasing offsets, cut into parts
//! wherever the part size falls (parts packed across members), uploaded two
//! at a time with their CRC32C, completed with the whole object's; one PUT
//! when it is no larger than one part. An upload marker object is written
//! before the multipart upload is created and deleted once it is complete
//! or aborted, so that what a crash left is found (`MARK`).
//!
//! The same writer uploads one node's region of a container that several
//! nodes upload together (`--agg-mode own`, docs/aggregate.md): the upload
//! created by the set's record writer, the region's parts numbered and cut
//! as the placement says (`paralog_aggregate::regions::place_parts`),
//! reported to the record writer, which completes the upload (setregion.rs).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumType, CompletedPart};
use paralog_aggregate::store::ContainerSink;
use paralog_aggregate::AggError;
use paralog_backend::{BackendError, PartDone};
use tokio::task::JoinHandle;

use crate::errors::s3_error;
use crate::integrity::{crc_b64, whole_crc};
use crate::sets::agg;
use crate::S3Backend;

/// The marker object `SET/.set.plr.upload-<container>`, written before a
/// container's multipart upload is created and deleted once it is complete
/// or aborted: what a crash left unfinished is found by listing objects
/// (MinIO lists multipart uploads only by an object's exact key, so a
/// prefix listing of the set does not find them there).
pub(crate) const MARK: &str = ".set.plr.upload-";
/// S3's largest part.
pub(crate) const MAX_PART: u64 = 5 << 30;
/// Part uploads of one container in flight at once.
const INFLIGHT: usize = 2;

/// The size of part `sent + 1` of a container: `min`, doubled after each
/// sixteenth of `max_parts` parts (at most S3's 5 GiB).
fn growing_part(min: u64, max_parts: u64, sent: u64) -> u64 {
    let tier = (sent * 16 / max_parts.max(16)).min(20);
    (min << tier).min(MAX_PART)
}

/// One container being uploaded (see the module's comment).
pub(crate) struct S3Container {
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
    /// A node's region of a shared upload; `None`: the whole container.
    region: Option<Region>,
}

/// One node's region of a container whose upload several nodes share.
struct Region {
    /// The number of its first part.
    first: i32,
    /// Its parts' lengths, as placed.
    parts: Vec<u64>,
}

impl S3Container {
    /// A container to upload as `key`, with its marker at `mark` (relative
    /// to the prefix); `path` names it in messages.
    pub(crate) fn new(be: Arc<S3Backend>, key: String, mark: String, path: PathBuf) -> Self {
        S3Container {
            be,
            key,
            mark,
            path,
            buf: Vec::new(),
            end: 0,
            upload: None,
            inflight: VecDeque::new(),
            parts: Vec::new(),
            crcs: Vec::new(),
            completed: false,
            region: None,
        }
    }

    fn err(&self, op: &'static str) -> impl FnOnce(BackendError) -> AggError {
        agg(self.path.clone(), op)
    }

    /// The size of the part being filled: the URL's part size, doubled
    /// after each sixteenth of the part-count limit.
    /// A region's: the placed length (0: past the region).
    fn part_size(&self) -> u64 {
        match &self.region {
            Some(r) => r.parts.get(self.crcs.len()).copied().unwrap_or(0),
            None => growing_part(self.be.min_part, self.be.max_parts, self.crcs.len() as u64),
        }
    }

    fn push(&mut self, mut data: &[u8]) -> paralog_aggregate::Result<()> {
        while !data.is_empty() {
            let part = self.part_size() as usize;
            if part == 0 {
                return Err(AggError::Invalid {
                    path: self.path.clone(),
                    what: format!("written at {} past the end of this node's region", self.end),
                });
            }
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
                let id = start_upload(&be, &self.key, &self.mark, &self.path)?;
                self.upload = Some(id.clone());
                id
            }
        };
        while self.inflight.len() >= INFLIGHT {
            self.wait_one()?;
        }
        let data = std::mem::take(&mut self.buf);
        let first = self.region.as_ref().map_or(1, |r| r.first);
        let number = self.crcs.len() as i32 + first;
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
        if self.region.is_some() {
            return self.finish_region();
        }
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
        if self.region.is_some() {
            // The shared upload is its creator's to abort.
        } else if self.completed {
            if let Err(e) = self.be.delete_key(&self.key) {
                tracing::warn!(key = %self.key, error = %e, "could not delete an abandoned container; the next publish or `paralog recover` collects it");
            }
        } else if let Some(id) = self.upload.take() {
            self.be.abort_upload(&self.key, &id);
            self.unmark();
        }
    }
}

/// Write `mark`, then create the multipart upload of `key` (CRC32C per
/// part, the whole object's checked at completion); its id. `path` names
/// the container in messages.
pub(crate) fn start_upload(
    be: &S3Backend,
    key: &str,
    mark: &str,
    path: &std::path::Path,
) -> paralog_aggregate::Result<String> {
    let err = |op| agg(path.to_path_buf(), op);
    be.put_object(mark, Vec::new(), false)
        .map_err(err("write an upload marker"))?;
    let out = be
        .rt
        .block_on(
            be.client
                .create_multipart_upload()
                .bucket(&be.bucket)
                .key(key)
                .checksum_algorithm(ChecksumAlgorithm::Crc32C)
                .checksum_type(ChecksumType::FullObject)
                .send(),
        )
        .map_err(|e| s3_error(&be.bucket, key, "create multipart upload", &e))
        .map_err(err("write container"))?;
    Ok(out.upload_id().unwrap_or_default().to_owned())
}

impl S3Container {
    /// One node's region of the shared upload `id`: from container offset
    /// `start`, parts numbered from `first`, of `parts` bytes each.
    pub(crate) fn region(
        be: Arc<S3Backend>,
        key: String,
        path: PathBuf,
        id: &str,
        (start, first, parts): (u64, u32, Vec<u64>),
    ) -> Self {
        let mut c = S3Container::new(be, key, String::new(), path);
        c.upload = Some(id.to_owned());
        c.end = start;
        c.region = Some(Region {
            first: first as i32,
            parts,
        });
        c
    }

    /// Every part sent, as the upload's completion needs it (after
    /// `finish`).
    pub(crate) fn reports(&self) -> Vec<PartDone> {
        let tags: std::collections::BTreeMap<i32, String> = self
            .parts
            .iter()
            .map(|p| {
                (
                    p.part_number().unwrap_or_default(),
                    p.e_tag().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        self.crcs
            .iter()
            .map(|&(number, crc, len)| PartDone {
                index: (number - 1) as u64,
                tag: tags.get(&number).cloned().unwrap_or_default(),
                crc32c: Some(crc),
                len,
            })
            .collect()
    }

    /// A region: every placed part sent (the padding is written by
    /// `finish`), none past it, and every upload answered.
    fn finish_region(&mut self) -> paralog_aggregate::Result<()> {
        if !self.buf.is_empty() {
            // Only a region of no placed part gets here with bytes.
            return Err(AggError::Invalid {
                path: self.path.clone(),
                what: format!("its region ends at {}, not at a part's end", self.end),
            });
        }
        while !self.inflight.is_empty() {
            self.wait_one()?;
        }
        let placed = self.region.as_ref().map_or(0, |r| r.parts.len());
        if self.crcs.len() != placed {
            return Err(AggError::Invalid {
                path: self.path.clone(),
                what: format!(
                    "{} of this node's {placed} parts written: its region ends at {}",
                    self.crcs.len(),
                    self.end
                ),
            });
        }
        self.completed = true;
        Ok(())
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
