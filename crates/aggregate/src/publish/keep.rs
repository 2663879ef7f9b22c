//! A new version of a set on a store (S3) that lists a container of the
//! replaced version again, unchanged, when none of its members is
//! rewritten: its members move to the new version without a byte copied
//! (docs/aggregate.md, "Sets on S3").

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use super::SetWriter;
use crate::container::ContainerFile;
use crate::error::{AggError, Result};
use crate::format::Member;

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
        let in_k = |m: &&Member| m.extents.iter().any(|e| e.container == k);
        let members: Vec<Member> = old.members.iter().filter(in_k).cloned().collect();
        if self.containers.len() >= self.k as usize
            || members
                .iter()
                .any(|m| m.extents.iter().any(|e| e.container != k))
        {
            return Ok(None);
        }
        let c = &old.containers[k as usize];
        let idx = self.containers.len() as u32;
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
        for mut m in members {
            for e in &mut m.extents {
                e.container = idx;
            }
            kept.push(m.path.clone());
            self.members.push(m);
        }
        Ok(Some(kept))
    }
}
