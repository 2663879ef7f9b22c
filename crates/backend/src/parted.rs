//! A new version that several servers build together (S3 multipart): the
//! servers of a job agree on the part boundaries, a leader starts the
//! version and shares it, each part is uploaded by the one server that
//! gathered its bytes, and the leader completes the version once every
//! server reported its parts. Only the leader's start and completion touch
//! the whole object, so a node's link carries only the parts it owns.

use crate::{BackendError, EpochShape};

/// A started version, as the leader shares it with the other servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartedVersion {
    pub rel: Vec<u8>,
    /// The remote's name for the version under construction.
    pub upload_id: String,
    /// The new version's size, and the size of every part but the last.
    pub size: u64,
    pub part: u64,
    /// The previous version (its ETag), when some of its bytes survive...
    pub base_tag: Option<String>,
    /// ...namely its first `base_visible` bytes, where the epoch does not
    /// write.
    pub base_visible: u64,
    /// Unchanged parts may be copied server-side from the previous version
    /// (then the parts carry MD5s, not the whole object's CRC32C).
    pub copies: bool,
}

impl PartedVersion {
    pub fn parts(&self) -> u64 {
        self.size.div_ceil(self.part).max(1)
    }

    /// Part `index`'s bytes: `[start, end)`.
    pub fn range(&self, index: u64) -> (u64, u64) {
        let start = index * self.part;
        (start, (start + self.part).min(self.size))
    }

    /// The bytes sent from the leader to the other servers.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_bytes(&mut out, &self.rel);
        put_bytes(&mut out, self.upload_id.as_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.part.to_le_bytes());
        match &self.base_tag {
            Some(t) => {
                out.push(1);
                put_bytes(&mut out, t.as_bytes());
            }
            None => out.push(0),
        }
        out.extend_from_slice(&self.base_visible.to_le_bytes());
        out.push(self.copies as u8);
        out
    }

    pub fn decode(mut b: &[u8]) -> Option<PartedVersion> {
        let rel = take_bytes(&mut b)?.to_vec();
        let upload_id = String::from_utf8(take_bytes(&mut b)?.to_vec()).ok()?;
        let size = take_u64(&mut b)?;
        let part = take_u64(&mut b)?;
        let base_tag = match take(&mut b, 1)?[0] {
            0 => None,
            1 => Some(String::from_utf8(take_bytes(&mut b)?.to_vec()).ok()?),
            _ => return None,
        };
        let base_visible = take_u64(&mut b)?;
        let copies = match take(&mut b, 1)?[0] {
            0 => false,
            1 => true,
            _ => return None,
        };
        (b.is_empty() && part > 0).then_some(PartedVersion {
            rel,
            upload_id,
            size,
            part,
            base_tag,
            base_visible,
            copies,
        })
    }
}

/// One uploaded part, as its server reports it to the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartDone {
    /// 0-based.
    pub index: u64,
    pub tag: String,
    /// The part's CRC32C, where the version carries the whole object's.
    pub crc32c: Option<u32>,
    pub len: u64,
}

impl PartDone {
    pub fn encode_all(parts: &[PartDone]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in parts {
            out.extend_from_slice(&p.index.to_le_bytes());
            put_bytes(&mut out, p.tag.as_bytes());
            match p.crc32c {
                Some(c) => {
                    out.push(1);
                    out.extend_from_slice(&c.to_le_bytes());
                }
                None => out.push(0),
            }
            out.extend_from_slice(&p.len.to_le_bytes());
        }
        out
    }

    pub fn decode_all(mut b: &[u8]) -> Option<Vec<PartDone>> {
        let mut out = Vec::new();
        while !b.is_empty() {
            let index = take_u64(&mut b)?;
            let tag = String::from_utf8(take_bytes(&mut b)?.to_vec()).ok()?;
            let crc32c = match take(&mut b, 1)?[0] {
                0 => None,
                1 => Some(u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?)),
                _ => return None,
            };
            let len = take_u64(&mut b)?;
            out.push(PartDone {
                index,
                tag,
                crc32c,
                len,
            });
        }
        Some(out)
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    out.extend_from_slice(b);
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if b.len() < n {
        return None;
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Some(head)
}

fn take_u64(b: &mut &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(take(b, 8)?.try_into().ok()?))
}

fn take_bytes<'a>(b: &mut &'a [u8]) -> Option<&'a [u8]> {
    let n = usize::try_from(take_u64(b)?).ok()?;
    take(b, n)
}

/// A remote whose versions several servers can build together.
pub trait PartedBackend: Send + Sync {
    /// The leader: start the new version of `rel` that the epoch described
    /// by `shape` makes. `None` when it is one part (or a deletion): one
    /// server makes it through [`crate::Backend::begin`].
    fn start_parted(
        &self,
        rel: &[u8],
        shape: &EpochShape,
    ) -> Result<Option<PartedVersion>, BackendError>;
    /// Any server: upload some of the version's parts.
    fn part_uploader<'a>(&'a self, v: &PartedVersion) -> Box<dyn PartUploader + 'a>;
    /// The leader: make the version whole from every part, each reported
    /// once. Nothing is visible before this returns.
    fn complete_parted(&self, v: &PartedVersion, parts: Vec<PartDone>) -> Result<(), BackendError>;
    /// The leader: give the version up (best effort; `recover` removes what
    /// is left).
    fn abort_parted(&self, v: &PartedVersion);
}

/// One server's uploads of parts of a shared version. Uploads may run in
/// the background until [`PartUploader::finish`]; dropping it stops them
/// (the version itself is the leader's to abort).
pub trait PartUploader {
    /// Part `index` where the epoch does not write: the previous version's
    /// surviving bytes, zeros elsewhere. The epoch's bytes go over it.
    fn base(&mut self, index: u64) -> Result<Vec<u8>, BackendError>;
    /// Upload part `index`, all of its bytes.
    fn upload(&mut self, index: u64, bytes: Vec<u8>) -> Result<(), BackendError>;
    /// Upload part `index`, which the epoch does not write (a server-side
    /// copy where the previous version holds all of it).
    fn upload_untouched(&mut self, index: u64) -> Result<(), BackendError>;
    /// Wait for every upload; what to report to the leader.
    fn finish(self: Box<Self>) -> Result<Vec<PartDone>, BackendError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_parts_survive_the_wire() {
        let v = PartedVersion {
            rel: b"out/a b.dat".to_vec(),
            upload_id: "2~xyz".into(),
            size: 20 << 20,
            part: 8 << 20,
            base_tag: Some("\"abc\"".into()),
            base_visible: 123,
            copies: true,
        };
        assert_eq!(PartedVersion::decode(&v.encode()), Some(v.clone()));
        assert_eq!(v.parts(), 3);
        assert_eq!(v.range(2), (16 << 20, 20 << 20));
        let bytes = v.encode();
        assert_eq!(PartedVersion::decode(&bytes[..bytes.len() - 1]), None);
        let parts = vec![
            PartDone {
                index: 0,
                tag: "\"e0\"".into(),
                crc32c: Some(7),
                len: 8 << 20,
            },
            PartDone {
                index: 2,
                tag: String::new(),
                crc32c: None,
                len: 1,
            },
        ];
        assert_eq!(
            PartDone::decode_all(&PartDone::encode_all(&parts)),
            Some(parts)
        );
        assert_eq!(PartDone::decode_all(&[1, 2, 3]), None);
        assert_eq!(PartDone::decode_all(&[]), Some(vec![]));
    }
}
