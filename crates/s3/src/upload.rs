//! A version's multipart upload: its plan (what survives of the previous
//! object, part size, integrity), creation, completion and abort, and the
//! same shared between the servers of a job (`PartedBackend`).

use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumType, CompletedMultipartUpload, CompletedPart};
use std::collections::VecDeque;

use paralog_backend::{
    Backend, BackendError, EpochId, EpochShape, ErrorKind, PartDone, PartUploader, PartedBackend,
    PartedVersion,
};

use crate::integrity::{crc_b64, whole_crc, Integrity};
use crate::sink::{Old, S3Sink};
use crate::{inflight_limit, part_size, S3Backend};

impl S3Backend {
    /// What an epoch makes of the object at `key`: the previous version as
    /// far as it survives, the new size, the part size, and how payloads
    /// are checked.
    pub(crate) fn plan_version(
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

    pub(crate) fn sink(
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
    pub(crate) fn create_upload(
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
    pub(crate) fn complete_upload(
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

    pub(crate) async fn abort(&self, key: &str, id: &str) -> Result<(), BackendError> {
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
    pub(crate) fn abort_upload(&self, key: &str, id: &str) {
        if let Err(e) = self.rt.block_on(self.abort(key, id)) {
            tracing::warn!(key = %key, error = %e, "could not abort a failed multipart upload; the next attempt or `paralog recover` will");
        }
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
