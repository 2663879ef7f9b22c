//! Removing a checkpoint set whose every member its program deleted
//! (`rm -r` of a set directory, docs/aggregate.md "Deleting sets"): the
//! set is removed rather than published with no member, so that its
//! directory is empty and can go too. The record's removal is the commit
//! (from it on the set does not exist); the containers go after it. A
//! crash between the two leaves containers no record lists: orphans, which
//! the next publish of the set or `recover` collects
//! (`collect_orphans`, `collect_orphans_obj`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use paralog_backend::objstore::{ObjStore, Version};

use crate::container::remove_object;
use crate::error::{AggError, Result};
use crate::format::{self, SetRecord};
use crate::objset;
use crate::publish::sync_dir;

fn remove_file(p: &Path, what: &'static str) -> Result<()> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(AggError::io(p, what)(e)),
    }
}

/// A POSIX remote's set directory `dir`, published as `previous`: its
/// record unlinked and the directory fsynced (the commit), then its
/// containers removed and the directory fsynced again.
pub fn remove_set(dir: &Path, previous: &SetRecord) -> Result<()> {
    remove_file(&dir.join(format::RECORD_NAME), "remove the set record")?;
    sync_dir(dir)?;
    for c in &previous.containers {
        remove_file(&dir.join(OsStr::from_bytes(&c.name)), "remove a container")?;
    }
    sync_dir(dir)
}

/// The same on an object layout: a version of `SET/set.plr` that deletes
/// it (the commit), then the container objects.
pub fn remove_set_obj(store: &ObjStore, previous: &SetRecord) -> Result<()> {
    let name = objset::object_name(&previous.set, format::RECORD_NAME.as_bytes());
    let deletion = Version {
        number: 0,
        size: 0,
        deleted: true,
        epoch: Default::default(),
        origin: previous.origin,
        name: Vec::new(),
        pieces: Vec::new(),
    };
    store
        .publish(&name, deletion)
        .map_err(objset::obj_err(&objset::display_path(store, &name)))?;
    for c in &previous.containers {
        remove_object(store, &objset::object_name(&previous.set, &c.name))?;
    }
    Ok(())
}
