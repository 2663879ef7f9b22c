//! A new version of a set on a store (S3) that lists a container of the
//! replaced version again, unchanged, when none of its members is
//! rewritten: its members move to the new version without a byte copied
//! (docs/aggregate.md, "Sets on S3"). The rule is here once, for the
//! one-node writer (`SetWriter::keep_container`) and the server job's
//! record writer (`kept_members`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use super::SetWriter;
use crate::container::ContainerFile;
use crate::error::{AggError, Result};
use crate::format::{Member, SetRecord};

/// The containers of `old` that a new version lists again unchanged, at
/// most `room` of them, lowest index first: each holds a member, and every
/// member with bytes in it is neither `touched` (rewritten or deleted by
/// the new version) nor has bytes in another container.
pub fn reusable_containers(
    old: &SetRecord,
    touched: &dyn Fn(&[u8]) -> bool,
    room: usize,
) -> Vec<u32> {
    let mut out = Vec::new();
    for k in 0..old.containers.len() as u32 {
        if out.len() >= room {
            break;
        }
        let mut in_k = old
            .members
            .iter()
            .filter(|m| m.extents.iter().any(|e| e.container == k))
            .peekable();
        let held = in_k.peek().is_some();
        if held && in_k.all(|m| !touched(&m.path) && m.extents.iter().all(|e| e.container == k)) {
            out.push(k);
        }
    }
    out
}

/// The members of container `k` of `old` (none of them with bytes
/// elsewhere: `reusable_containers`), their extents moved to container
/// `to` of the new version.
pub fn kept_members(old: &SetRecord, k: u32, to: u32) -> Vec<Member> {
    old.members
        .iter()
        .filter(|m| m.extents.iter().any(|e| e.container == k))
        .cloned()
        .map(|mut m| {
            for e in &mut m.extents {
                e.container = to;
            }
            m
        })
        .collect()
}

impl SetWriter {
    /// List container `k` of the replaced version again, unchanged, with
    /// its members (none rewritten): nothing is copied (a store's
    /// containers are immutable objects; `commit_record_store` deletes only
    /// what the new record does not list). Returns the members kept, or
    /// `None` when it cannot be kept: K containers exist already, or a
    /// member in it has bytes in another container too.
    pub fn keep_container(&mut self, k: u32) -> Result<Option<Vec<Vec<u8>>>> {
        let Some(old) = &self.previous else {
            return Ok(None);
        };
        if self.containers.len() >= self.k as usize
            || reusable_containers(old, &|_| false, usize::MAX)
                .binary_search(&k)
                .is_err()
        {
            return Ok(None);
        }
        let idx = self.containers.len() as u32;
        let members = kept_members(old, k, idx);
        let c = &old.containers[k as usize];
        let path = self.dir.join(OsStr::from_bytes(&c.name));
        for m in &members {
            if !self.names.insert(m.path.clone()) {
                return Err(AggError::Invalid {
                    path: self.dir.join(OsStr::from_bytes(&m.path)),
                    what: "added twice to the set".into(),
                });
            }
        }
        self.containers
            .push(ContainerFile::kept(path, c.name.clone(), c.size));
        let mut kept = Vec::new();
        for m in members {
            kept.push(m.path.clone());
            self.members.push(m);
        }
        Ok(Some(kept))
    }
}
