//! A new version of a set on S3 or the object layout that lists a
//! container of the replaced version again, unchanged, when none of its
//! members is rewritten: its members move to the new version without a
//! byte copied (docs/aggregate.md, "Sets on S3"). The rule is here once, for the
//! one-node writer (`containers_to_reuse`, `SetWriter::keep_container`)
//! and the server job (`containers_to_reuse`, `kept_members`).

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

/// The containers of `old` that a new version of at most `k` containers
/// lists again, when `writing` containers take its new bytes (the one-node
/// writer: one if it has any; the server job: the groups with new
/// epochs): every reusable one (`reusable_containers`) when they fit
/// beside those and no member of `old` is left to copy; otherwise as many
/// as leave room for the copies, which go into a written container, or
/// into one of their own when `copies_need_one` (none of the `writing`
/// takes them). So a new version never needs more than `k` containers,
/// and a container of `old` whose members are all kept is copied only when
/// there is no room to list it again.
pub fn containers_to_reuse(
    old: &SetRecord,
    touched: &dyn Fn(&[u8]) -> bool,
    k: usize,
    writing: usize,
    copies_need_one: bool,
) -> Vec<u32> {
    let all = reusable_containers(old, touched, usize::MAX);
    // A member with bytes outside every reusable container is copied.
    let left = old.members.iter().any(|m| {
        !touched(&m.path)
            && m.extents
                .first()
                .is_some_and(|e| all.binary_search(&e.container).is_err())
    });
    let spare = usize::from(copies_need_one);
    if writing + all.len() + if left { spare } else { 0 } <= k {
        return all;
    }
    // Some reusable ones are copied after all: room for the copies.
    let room = k.saturating_sub(writing + spare);
    all.into_iter().take(room).collect()
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
    /// its members (none rewritten): nothing is copied (containers on S3
    /// and the object layout are immutable objects; `commit_record_store`
    /// and `commit_record_obj` delete only what the new record does not
    /// list). Returns the members kept, or
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{container_name, Container, Extent};

    fn member(path: &str, containers: &[u32]) -> Member {
        Member {
            path: path.as_bytes().to_vec(),
            size: 10 * containers.len() as u64,
            mode: 0o644,
            extents: containers
                .iter()
                .enumerate()
                .map(|(i, &c)| Extent {
                    offset: 10 * i as u64,
                    len: 10,
                    container: c,
                    container_offset: 0,
                    crcs: vec![0],
                })
                .collect(),
        }
    }

    /// Containers 0..5: 0 holds a (rewritten), 1 holds b, 2 and 3 share c,
    /// 4 holds nothing, 5 holds d and e.
    fn old() -> SetRecord {
        SetRecord {
            set: b"ckpt/s".to_vec(),
            version: 1,
            complete: true,
            block_size: 4096,
            align: 4096,
            origin: [0; 16],
            job: Vec::new(),
            containers: (0..6)
                .map(|k| Container {
                    name: container_name(k, 1, 7),
                    size: 10,
                })
                .collect(),
            members: vec![
                member("a", &[0]),
                member("b", &[1]),
                member("c", &[2, 3]),
                member("d", &[5]),
                member("e", &[5]),
            ],
        }
    }

    #[test]
    fn only_whole_untouched_containers_with_members_are_listed_again() {
        let touched = |p: &[u8]| p == b"a";
        assert_eq!(
            reusable_containers(&old(), &touched, usize::MAX),
            vec![1, 5]
        );
        assert_eq!(reusable_containers(&old(), &touched, 1), vec![1]);
        assert!(reusable_containers(&old(), &touched, 0).is_empty());
        let touched = |p: &[u8]| p == b"e";
        assert_eq!(
            reusable_containers(&old(), &touched, usize::MAX),
            vec![0, 1]
        );
    }

    #[test]
    fn every_untouched_container_is_listed_again_when_nothing_is_left_to_copy() {
        // a and c (in 2 and 3) rewritten: 1 and 5 hold every member
        // left, so both are listed again whenever they fit.
        let touched = |p: &[u8]| p == b"a" || p == b"c";
        assert_eq!(
            containers_to_reuse(&old(), &touched, 3, 1, false),
            vec![1, 5]
        );
        assert_eq!(
            containers_to_reuse(&old(), &touched, 4, 2, true),
            vec![1, 5]
        );
        assert_eq!(
            containers_to_reuse(&old(), &touched, 3, 0, true),
            vec![1, 5]
        );
        // Room for one: the other's members are copied into the written one.
        assert_eq!(containers_to_reuse(&old(), &touched, 2, 1, false), vec![1]);
        // ... or into one more, when no written container takes them:
        // with K = 2 beside one written container, none.
        assert!(containers_to_reuse(&old(), &touched, 2, 1, true).is_empty());
        assert!(containers_to_reuse(&old(), &touched, 1, 0, true).is_empty());
        assert_eq!(
            containers_to_reuse(&old(), &touched, 2, 0, true),
            vec![1, 5]
        );
    }

    #[test]
    fn room_is_left_for_the_members_that_must_be_copied() {
        // Only a is rewritten: c (in 2 and 3) must be copied whatever is
        // listed again, so one container is kept for it.
        let touched = |p: &[u8]| p == b"a";
        assert_eq!(containers_to_reuse(&old(), &touched, 2, 0, true), vec![1]);
        assert_eq!(
            containers_to_reuse(&old(), &touched, 3, 0, true),
            vec![1, 5]
        );
        assert_eq!(
            containers_to_reuse(&old(), &touched, 3, 1, false),
            vec![1, 5]
        );
        assert_eq!(
            containers_to_reuse(&old(), &touched, 1, 0, true),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn kept_members_move_to_their_new_container() {
        let kept = kept_members(&old(), 5, 1);
        let paths: Vec<&[u8]> = kept.iter().map(|m| &m.path[..]).collect();
        assert_eq!(paths, vec![&b"d"[..], b"e"]);
        assert!(kept
            .iter()
            .all(|m| m.extents.iter().all(|e| e.container == 1)));
    }
}
