//! A checkpoint set's container that several nodes upload together
//! (`--agg-mode own` on S3, docs/aggregate.md "Each node its own parts, on
//! S3"), the shape of the server job's shared uploads of one file: the
//! set's record writer writes the container's upload marker and creates
//! its multipart upload (`S3Sets::start_shared`), every node uploads its
//! own region's parts through the container writer (`RegionUpload`, over
//! setcontainer.rs's `S3Container`) and reports them, the record writer
//! completes the upload from every report (`S3Sets::complete_shared`) or
//! gives it up (`S3Sets::abandon_shared`).

use aws_sdk_s3::types::CompletedPart;
use paralog_aggregate::regions::PartRule;
use paralog_aggregate::store::ContainerSink;
use paralog_aggregate::AggError;
use paralog_backend::PartDone;

use crate::integrity::{crc_b64, whole_crc};
use crate::setcontainer::{start_upload, S3Container, MAX_PART};
use crate::sets::{agg, S3Sets};

/// One node's region of a container that several nodes upload: bytes in
/// increasing container offsets from the region's start (the gaps as
/// zeros), cut into the parts placed for it, two uploads in flight.
pub struct RegionUpload(S3Container);

impl RegionUpload {
    pub fn write(&mut self, at: u64, data: &[u8]) -> paralog_aggregate::Result<()> {
        self.0.write(at, data)
    }

    /// Pad to `end` (the region's end), wait for every part; the parts'
    /// reports for the upload's completion.
    pub fn finish(&mut self, end: u64) -> paralog_aggregate::Result<Vec<PartDone>> {
        self.0.finish(end)?;
        Ok(self.0.reports())
    }

    /// Stop: the uploads in flight answered (the upload is its creator's
    /// to abort).
    pub fn abandon(&mut self) {
        self.0.abandon()
    }
}

/// A container several nodes upload (`--agg-mode own`): the record writer
/// starts it, each node uploads its region's parts, the record writer
/// completes it from every node's reports, or aborts it.
impl S3Sets {
    /// How the URL's parts are placed: at least S3's minimum but the last,
    /// the URL's part size, at most its `max_parts` parts of S3's largest.
    pub fn part_rule(&self) -> PartRule {
        PartRule {
            min: paralog_backend::url::S3_MIN_PART,
            size: self.be.min_part,
            max_parts: self.be.max_parts,
            max_part: MAX_PART,
        }
    }

    /// The marker, then the upload of container `name` of `set`; its id.
    pub fn start_shared(&self, set: &[u8], name: &[u8]) -> paralog_aggregate::Result<String> {
        let (key, mark, path) = self.container_keys(set, name);
        start_upload(&self.be, &key, &mark, &path)
    }

    /// This node's region of the shared upload `id` of container `name`:
    /// from `start`, its parts numbered from `first_part`, of `parts`
    /// bytes each.
    pub fn region(
        &self,
        set: &[u8],
        name: &[u8],
        id: &str,
        start: u64,
        first_part: u32,
        parts: Vec<u64>,
    ) -> RegionUpload {
        let (key, _, path) = self.container_keys(set, name);
        RegionUpload(S3Container::region(
            self.be.clone(),
            key,
            path,
            id,
            (start, first_part, parts),
        ))
    }

    /// Complete the shared upload `id` of container `name` (`size` bytes,
    /// `count` parts) from every node's part reports: each part once, the
    /// lengths adding up to `size`, the whole object's CRC32C from the
    /// parts' (checked by S3); then its marker goes. A container of no
    /// part (its members hold no byte) is an empty object.
    pub fn complete_shared(
        &self,
        set: &[u8],
        name: &[u8],
        id: &str,
        size: u64,
        count: u32,
        mut parts: Vec<PartDone>,
    ) -> paralog_aggregate::Result<()> {
        let (key, mark, path) = self.container_keys(set, name);
        parts.sort_by_key(|p| p.index);
        let indexes: Vec<u64> = parts.iter().map(|p| p.index).collect();
        let bytes: u64 = parts.iter().map(|p| p.len).sum();
        if indexes != (0..u64::from(count)).collect::<Vec<_>>() || bytes != size {
            // The nodes' placements differ: a bug, never completed.
            return Err(AggError::Invalid {
                path,
                what: format!(
                    "the nodes reported parts {indexes:?} of {bytes} bytes, not each of 1..={count} once making {size}"
                ),
            });
        }
        if count == 0 {
            self.be.abort_upload(&key, id);
            self.be
                .put_object(&Self::rel(set, name), Vec::new(), false)
                .map_err(agg(path, "write container"))?;
        } else {
            let mut crcs = Vec::with_capacity(parts.len());
            let mut done = Vec::with_capacity(parts.len());
            for p in parts {
                let number = p.index as i32 + 1;
                let crc = p.crc32c.unwrap_or_default();
                crcs.push((number, crc, p.len));
                done.push(
                    CompletedPart::builder()
                        .part_number(number)
                        .e_tag(p.tag)
                        .checksum_crc32_c(crc_b64(crc))
                        .build(),
                );
            }
            let whole = whole_crc(&mut crcs);
            self.be
                .complete_upload(&key, id, size, done, Some(whole))
                .map_err(agg(path, "complete container upload"))?;
        }
        if let Err(e) = self.be.delete_object(&mark) {
            tracing::warn!(key = %mark, error = %e, "could not delete an upload marker; the next publish or `paralog recover` collects it");
        }
        Ok(())
    }

    /// Best effort, nothing of container `name` left: its upload aborted
    /// and its marker deleted, or (`completed`) the object deleted. What is
    /// left the next publish or `recover` collects.
    pub fn abandon_shared(&self, set: &[u8], name: &[u8], id: &str, completed: bool) {
        let (key, mark, _) = self.container_keys(set, name);
        if completed {
            if let Err(e) = self.be.delete_key(&key) {
                tracing::warn!(key = %key, error = %e, "could not delete an abandoned container; the next publish or `paralog recover` collects it");
            }
            return;
        }
        self.be.abort_upload(&key, id);
        if let Err(e) = self.be.delete_object(&mark) {
            tracing::warn!(key = %mark, error = %e, "could not delete an upload marker; the next publish or `paralog recover` collects it");
        }
    }
}
