//! Directories of the program's view that only the remote holds. With a
//! remote other than the prefix, a new job on a fresh (or cleaned) prefix
//! has none of the directories an earlier job wrote, yet the program reads
//! its output back through them: a restart lists `ckpt/`, stats each
//! `ckpt/step-*` and opens the members of the newest (docs/aggregate.md,
//! "Restart reads"). The remote's own directory stands in for the missing
//! one: a POSIX remote's directory, or the object layout's metadata
//! directory of a directory of names. No network I/O: an S3 remote has no
//! stand-in, so its directories stay missing (capture cannot read S3).

use std::path::{Path, PathBuf};

use paralog_backend::objstore::ObjStore;

use crate::state::State;

/// The remote directory standing in for `abs` (under the prefix, missing
/// there), if the remote has a directory at its path.
/// A directory of members inside a checkpoint set (`set/node0`), which
/// no remote holds as a directory, has its set directory's.
pub fn stand_in(st: &State, abs: &Path) -> Option<PathBuf> {
    let rel = st.rel_of(abs)?;
    if let Some(url) = &st.cfg.remote_objstore {
        let store = ObjStore::new(url);
        if store.is_directory(&rel) {
            return Some(store.meta_dir(&rel));
        }
        let (set, _) = crate::sets::obj_member_dir(&store, &rel)?;
        return Some(store.meta_dir(&set));
    }
    if let Some(dir) = crate::namespace::remote_dir(st, abs).filter(|p| p.is_dir()) {
        return Some(dir);
    }
    let root = st.cfg.remote_root.as_ref()?;
    crate::sets::member_dir(root, &rel).map(|(set_dir, _)| set_dir)
}

/// The remote directory standing in for `abs` if the prefix has no such
/// name at all (the check is the prefix's first: a name the prefix holds
/// is the kernel's to answer).
pub fn for_missing(abs: &Path) -> Option<PathBuf> {
    if !std::fs::symlink_metadata(abs).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return None;
    }
    let mut slot = crate::state::lock();
    stand_in(State::get(&mut slot)?, abs)
}

/// Make the parent of `abs` in the prefix if it is a directory only the
/// remote has (a new directory or file goes in it: the program's
/// directories become the prefix's, each with its remote's mode where a
/// POSIX remote has it). Whether it did.
pub fn make_parent(abs: &Path) -> bool {
    let Some(parent) = abs.parent() else {
        return false;
    };
    let chain = {
        let mut slot = crate::state::lock();
        let Some(st) = State::get(&mut slot) else {
            return false;
        };
        if !crate::remotefd::remote_only(st, parent) {
            return false;
        }
        // The missing directories, outermost first, with their modes.
        let mut chain = Vec::new();
        let mut at = parent;
        while at != st.cfg.prefix && crate::remotefd::remote_only(st, at) {
            let mode = stand_in(st, at)
                .and_then(|d| std::fs::metadata(d).ok())
                .map_or(0o755, |m| {
                    std::os::unix::fs::PermissionsExt::mode(&m.permissions())
                });
            chain.push((at.to_path_buf(), mode & 0o7777));
            match at.parent() {
                Some(p) => at = p,
                None => break,
            }
        }
        chain
    };
    chain.iter().rev().all(|(dir, mode)| {
        use std::os::unix::fs::DirBuilderExt;
        let made = std::fs::DirBuilder::new().mode(*mode).create(dir);
        made.is_ok() || std::fs::metadata(dir).is_ok_and(|m| m.is_dir())
    })
}

/// `chmod` of a directory only the remote has (`Ok(None)`: `abs` is not
/// one): set on a POSIX remote's directory, which `stat` answers; where
/// none stands for it (a directory of members inside a set, an object
/// layout, which keeps no modes) it changes nothing, as a `chmod` of a
/// file there keeps nothing for other processes (`chmod -R` goes on).
pub fn chmod_dir(abs: &Path, mode: libc::mode_t) -> crate::state::CResult<Option<libc::c_int>> {
    let target = {
        let mut slot = crate::state::lock();
        let Some(st) = State::get(&mut slot) else {
            return Ok(None);
        };
        if !crate::remotefd::remote_only(st, abs) {
            return Ok(None);
        }
        crate::namespace::remote_dir(st, abs).filter(|p| p.is_dir())
    };
    if let Some(t) = target {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&t, std::fs::Permissions::from_mode(mode & 0o7777))
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    }
    Ok(Some(0))
}

/// Whether an object layout holds `abs` as a directory of names (`live`:
/// with some object below it that is not deleted; else also one whose
/// every object was deleted).
pub fn obj_directory(abs: &Path, live: bool) -> bool {
    let mut slot = crate::state::lock();
    let Some(st) = State::get(&mut slot) else {
        return false;
    };
    match (&st.cfg.remote_objstore, st.rel_of(abs)) {
        (Some(url), Some(rel)) if live => ObjStore::new(url).is_directory(&rel),
        (Some(url), Some(rel)) => ObjStore::new(url).names_directory(&rel),
        _ => false,
    }
}

/// The names an object layout holds directly below the directory of
/// `abs` (the prefix itself included), as listing entries: an object is a
/// file, a directory of names a directory.
pub fn obj_entries(st: &State, abs: &Path) -> Vec<(Vec<u8>, u8)> {
    let Some(url) = &st.cfg.remote_objstore else {
        return Vec::new();
    };
    let rel = st.rel_of(abs).unwrap_or_default();
    ObjStore::new(url)
        .list_dir(&rel)
        .into_iter()
        .map(|(name, object)| (name, if object { libc::DT_REG } else { libc::DT_DIR }))
        .collect()
}
