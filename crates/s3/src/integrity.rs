//! The checksums an upload carries: base64 MD5 and CRC32C values, which
//! one an upload uses, and the whole object's CRC32C from its parts'.

use base64::Engine;
use md5::{Digest, Md5};

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(crate) fn md5_b64(data: &[u8]) -> String {
    b64(&Md5::digest(data))
}

pub(crate) fn crc_b64(crc: u32) -> String {
    b64(&crc.to_be_bytes())
}

/// How the server checks an upload's payloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Integrity {
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

/// The CRC32C of the object from its parts' (number, CRC32C, length).
pub(crate) fn whole_crc(parts: &mut [(i32, u32, u64)]) -> u32 {
    parts.sort_by_key(|p| p.0);
    parts.iter().fold(0, |acc, &(_, crc, len)| {
        paralog_checksum::crc32c_combine(acc, crc, len)
    })
}
