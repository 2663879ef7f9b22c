//! Publishing a checkpoint set on the object layout (docs/aggregate.md):
//! the record as the next version of the object `SET/set.plr` (the
//! layout's own publish: a hard link, the commit), the replaced version's
//! container objects removed after, and a crashed attempt's container
//! objects collected. The one-node `SetWriter::new_obj` commits here.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use paralog_backend::objstore::{ObjStore, Version};

use crate::container::remove_object;
use crate::error::{AggError, Result};
use crate::format::{self, SetRecord};
use crate::objcontainer::parse_marker;
use crate::objset;

/// `commit_record` on the object layout: the encoded record is one chunk,
/// published as the next version of the object `SET/set.plr` (a hard
/// link of a new number: the commit; a concurrent publisher's record
/// becomes another version, never replaced); then the container objects
/// only `previous` used are removed.
pub fn commit_record_obj(
    store: &ObjStore,
    record: &SetRecord,
    previous: Option<&SetRecord>,
    hook: &dyn Fn(&str),
    committed: &mut dyn FnMut(),
) -> Result<()> {
    let name = objset::object_name(&record.set, format::RECORD_NAME.as_bytes());
    let path = objset::display_path(store, &name);
    let bytes = record.encode();
    let mut w = store.writer().map_err(objset::obj_err(&path))?;
    let chunk = w.path().to_path_buf();
    let piece = w.add(0, &bytes).map_err(objset::obj_err(&path))?;
    let v = Version {
        number: 0,
        size: bytes.len() as u64,
        deleted: false,
        epoch: Default::default(),
        origin: record.origin,
        name: Vec::new(),
        pieces: vec![piece],
    };
    if let Err(e) = w.finish().and_then(|()| store.publish(&name, v)) {
        let _ = std::fs::remove_file(&chunk);
        return Err(objset::obj_err(&path)(e));
    }
    committed();
    hook("aggregate.after_record");
    if let Some(prev) = previous {
        let keep: BTreeSet<&[u8]> = record.containers.iter().map(|c| &c.name[..]).collect();
        for c in prev
            .containers
            .iter()
            .filter(|c| !keep.contains(&c.name[..]))
        {
            remove_object(store, &objset::object_name(&record.set, &c.name))?;
        }
    }
    Ok(())
}

/// The containers a collection leaves: those of the latest record and of
/// every kept record of the same set version or newer (another publisher
/// of the same version at once: both succeed, neither replaces the
/// other). A kept record of an older set version was replaced by the
/// latest, whose commit removes its containers; a crash right after that
/// commit (`aggregate.after_record`) leaves them, and they are orphans
/// like any other (before, the kept record kept them until retention
/// dropped it, and then nothing collected them). None when the latest
/// version deletes the set (`remove_set_obj` killed before its
/// containers went).
fn live_containers(store: &ObjStore, set: &[u8]) -> Result<BTreeSet<Vec<u8>>> {
    let Some((latest, _)) = objset::read_record(store, set)? else {
        return Ok(BTreeSet::new());
    };
    Ok(objset::kept_records(store, set)?
        .iter()
        .filter(|r| r.version >= latest.version)
        .flat_map(|r| r.containers.iter().map(|c| c.name.clone()))
        .collect())
}

/// `collect_orphans` on the object layout: the container objects of the
/// set that no live record lists (`live_containers`: a crashed publish's,
/// or a replaced version's left by a crash after the commit), then the
/// chunks of containers never published (a writer killed while writing:
/// their markers, `objcontainer`). Only where no writer of this set is
/// running; a record version that does not decode stops it before
/// anything is removed. Returns what was removed (as
/// `objstore://ROOT/NAME`, and `objstore://ROOT/SET/NAME (unpublished
/// chunk)`).
pub fn collect_orphans_obj(store: &ObjStore, set: &[u8]) -> Result<Vec<PathBuf>> {
    let live = live_containers(store, set)?;
    let meta = store.root().join("meta").join(OsStr::from_bytes(set));
    let mut removed = Vec::new();
    let entries = match std::fs::read_dir(&meta) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(AggError::io(&meta, "list set objects")(e)),
    };
    let mut markers = Vec::new();
    for e in entries {
        let e = e.map_err(AggError::io(&meta, "list set objects"))?;
        let n = e.file_name();
        let n = n.as_bytes();
        if format::is_container_name(n) && !live.contains(n) {
            let name = objset::object_name(set, n);
            remove_object(store, &name)?;
            removed.push(objset::display_path(store, &name));
        } else if let Some(m) = parse_marker(n) {
            markers.push((e.path(), m));
        }
    }
    for (marker, (dir, id, container)) in markers {
        // A listed container's chunk is the record's: only its marker goes
        // (a crash between the container's publish and the marker's
        // removal left it).
        if !live.contains(&container) {
            let chunk = store.chunk_path(dir, &id);
            match std::fs::remove_file(&chunk) {
                Ok(()) => {
                    let mut n = objset::object_name(set, &container);
                    n.extend_from_slice(b" (unpublished chunk)");
                    removed.push(objset::display_path(store, &n));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(AggError::io(&chunk, "remove an unpublished chunk")(e)),
            }
        }
        match std::fs::remove_file(&marker) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(AggError::io(&marker, "remove a container's marker")(e)),
        }
        if store.durable() {
            crate::publish::sync_dir(&meta)?;
        }
    }
    Ok(removed)
}
