//! The Zarr v3 view of each version: `ROOT/zarr/<name>/v<number>/` with a
//! `zarr.json` and one file per chunk (`c/<i>/<j>...`, the default chunk
//! key encoding), each a hard link to the version's own chunk file. The
//! chunk files already hold the Zarr `bytes` + `crc32c` encoding (the
//! chunk's bytes, then their CRC-32C), so the view copies nothing, and
//! zarr-python or tensorstore refuse a corrupted chunk as `paralog obj get`
//! does.
//!
//! A view is derived data: made after the publish (under a temporary name,
//! renamed into place), removed when retention drops its version; a crash
//! in between leaves a version without a view, which `paralog obj view`
//! makes again. A reader of a view would see a MISSING chunk file as the
//! fill value, so `paralog obj verify` checks that every chunk of the
//! version is in its view, and is the version's own file.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::error::{io_err, Error, Result};
use crate::read::ArrayVersion;
use crate::store::Store;

/// Check a view's `zarr.json` (its bytes, read from `path`): JSON, and
/// the version's own array metadata. Shared by the directory and S3 views.
pub(crate) fn check_metadata(bytes: &[u8], path: &Path, av: &ArrayVersion) -> Result<()> {
    let found: Value = serde_json::from_slice(bytes).map_err(|e| Error::Damaged {
        path: path.to_path_buf(),
        offset: 0,
        what: format!("not JSON: {e}"),
    })?;
    if found != metadata(av) {
        return Err(Error::Damaged {
            path: path.to_path_buf(),
            offset: 0,
            what: "not the version's array metadata".into(),
        });
    }
    Ok(())
}

/// The `zarr.json` of a version.
pub fn metadata(av: &ArrayVersion) -> Value {
    let m = &av.meta;
    let fill = if m.dtype.is_float() {
        json!(0.0)
    } else {
        json!(0)
    };
    json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": m.shape,
        "data_type": m.dtype.name(),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": m.chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill,
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "crc32c"}
        ],
        "attributes": m.attrs,
    })
}

/// The view's file for chunk `coords`.
fn chunk_key(view: &Path, coords: &[u64]) -> PathBuf {
    let mut p = view.join("c");
    for c in coords {
        p.push(c.to_string());
    }
    p
}

/// A unique temporary name beside the view `at` of version `number` (its
/// directory made), where the view is built before it is renamed into
/// place: both kinds of view.
pub(crate) fn temp_beside(at: &Path, number: u64) -> Result<PathBuf> {
    let parent = at.parent().expect("views live in a directory");
    std::fs::create_dir_all(parent).map_err(io_err(parent, "create view directory"))?;
    Ok(parent.join(format!(
        ".v{number:010}.tmp.{}",
        crate::id_hex(uuid::Uuid::new_v4().as_bytes())
    )))
}

/// Make the view of a version if it does not exist; returns its directory.
pub fn make_view(store: &Store, av: &ArrayVersion) -> Result<PathBuf> {
    let dir = store.view_dir(&av.name, av.number);
    if dir.join("zarr.json").is_file() {
        return Ok(dir);
    }
    let tmp = temp_beside(&dir, av.number)?;
    let made = (|| {
        std::fs::create_dir(&tmp).map_err(io_err(&tmp, "create view"))?;
        let meta = serde_json::to_vec_pretty(&metadata(av)).expect("JSON");
        let zj = tmp.join("zarr.json");
        std::fs::write(&zj, meta).map_err(io_err(&zj, "write"))?;
        for (i, p) in av.chunk_pieces().iter().enumerate() {
            let key = chunk_key(&tmp, &av.meta.coords(i as u64));
            let kd = key.parent().expect("keys live in a directory");
            std::fs::create_dir_all(kd).map_err(io_err(kd, "create view directory"))?;
            let src = store.os.chunk_path(p.dir, &p.chunk);
            std::fs::hard_link(&src, &key).map_err(io_err(&key, "link chunk into view"))?;
        }
        std::fs::rename(&tmp, &dir).map_err(io_err(&dir, "place view"))
    })();
    if made.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
        // Another process made the same view at the same moment.
        if dir.join("zarr.json").is_file() {
            return Ok(dir);
        }
    }
    made.map(|()| dir)
}

/// Remove the views of versions of `name` that are no longer kept (their
/// hard links would keep the chunks' bytes alive after retention).
pub fn prune_views(store: &Store, name: &str) -> Result<()> {
    prune(store, name, "zarr", "", |p| std::fs::remove_dir_all(p))
}

/// Remove the views `KIND/NAME/vNNNNNNNNNN{suffix}` (10 digits) of the
/// versions of `name` no longer kept, with `remove` (a Zarr view is a
/// directory, an HDF5 view a file): both kinds of view, one rule.
pub(crate) fn prune(
    store: &Store,
    name: &str,
    kind: &str,
    suffix: &str,
    remove: fn(&Path) -> std::io::Result<()>,
) -> Result<()> {
    let base = store.root().join(kind).join(name);
    let entries = match std::fs::read_dir(&base) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(&base, "list views")(e)),
    };
    let entries: Vec<_> = entries
        .collect::<std::io::Result<_>>()
        .map_err(io_err(&base, "list views"))?;
    // The versions only after the views: a view listed was made after its
    // version was published, so its version is in this list unless
    // retention dropped it. (The other order removed the view of a version
    // another process published in between.)
    // The numbers only (a directory listing): no record is read.
    let kept: Vec<u64> = store.os.versions(name.as_bytes())?;
    for e in entries {
        let f = e.file_name().to_string_lossy().into_owned();
        let n = f
            .strip_prefix('v')
            .and_then(|d| d.strip_suffix(suffix))
            .filter(|d| d.len() == 10)
            .and_then(|d| d.parse::<u64>().ok());
        if n.is_some_and(|n| !kept.contains(&n)) {
            let p = e.path();
            match remove(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&p, "remove view")(e)),
            }
        }
    }
    Ok(())
}

/// Check the view of a version: its `zarr.json` is the version's, and
/// every chunk of the version is in it as the version's own file.
pub fn check_view(store: &Store, av: &ArrayVersion) -> Result<PathBuf> {
    let dir = store.view_dir(&av.name, av.number);
    let zj = dir.join("zarr.json");
    let bytes = std::fs::read(&zj).map_err(io_err(&zj, "read the Zarr view"))?;
    check_metadata(&bytes, &zj, av)?;
    for (i, p) in av.chunk_pieces().iter().enumerate() {
        let coords = av.meta.coords(i as u64);
        let key = chunk_key(&dir, &coords);
        let src = store.os.chunk_path(p.dir, &p.chunk);
        let same = match (std::fs::metadata(&key), std::fs::metadata(&src)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            (Err(e), _) => {
                return Err(Error::Chunk {
                    name: av.name.clone(),
                    version: av.number,
                    chunk: coords,
                    why: format!(
                        "{}: missing from the Zarr view ({e}): its readers would see fill values",
                        key.display()
                    ),
                })
            }
            (_, Err(_)) => false,
        };
        if !same {
            return Err(Error::Chunk {
                name: av.name.clone(),
                version: av.number,
                chunk: coords,
                why: format!("{} is not the version's chunk file", key.display()),
            });
        }
    }
    Ok(dir)
}
