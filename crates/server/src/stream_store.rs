//! Where streams go on each kind of remote (docs/streams.md "Object
//! remotes"): the one place a parsed URL becomes a `StreamPlace`, and the
//! two object stores behind `paralog_stream::ObjectStore`: S3 (whole
//! objects through the S3 remote's own client, `paralog_s3`) and the
//! object layout (each key an object of the layout, each PUT a new
//! version published atomically). `paralog-stream` links neither: it is
//! in the producers' library, kept lean.

use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::SystemTime;

use paralog_backend::objstore::{ObjStore, Version};
use paralog_backend::{Backend, BackendError, EpochId, RemoteUrl};
use paralog_s3::S3Backend;
use paralog_stream::object_remote::children_of;
use paralog_stream::{ObjectStore, StreamError, StreamPlace};

/// The place of the streams of the remote `url`: a directory, or a store
/// (an S3 client is opened here: its runtime, its configuration).
pub fn stream_place(url: &RemoteUrl) -> Result<StreamPlace, BackendError> {
    Ok(match url {
        RemoteUrl::Posix(p) => StreamPlace::Dir(p.clone()),
        RemoteUrl::S3(s) => StreamPlace::Store(Arc::new(S3Objects(S3Backend::open(s)?))),
        RemoteUrl::ObjStore(o) => StreamPlace::Store(Arc::new(LayoutObjects(ObjStore::new(o)))),
    })
}

fn store_err(object: String, op: &'static str, error: impl ToString) -> StreamError {
    StreamError::Store {
        object,
        op,
        error: error.to_string(),
    }
}

/// Streams on S3: keys below the URL's prefix.
pub struct S3Objects(pub S3Backend);

impl ObjectStore for S3Objects {
    fn describe(&self, key: &str) -> String {
        Backend::describe(&self.0, key.as_bytes())
    }

    fn get(&self, key: &str) -> paralog_stream::Result<Option<Vec<u8>>> {
        self.0
            .get_object(key)
            .map_err(|e| store_err(self.describe(key), "get", e.message))
    }

    /// One PUT (with its CRC-32C checked by the server): S3 replaces an
    /// object whole.
    fn put(&self, key: &str, bytes: &[u8]) -> paralog_stream::Result<()> {
        self.0
            .put_object(key, bytes.to_vec(), false)
            .map(drop)
            .map_err(|e| store_err(self.describe(key), "put", e.message))
    }

    fn delete(&self, key: &str) -> paralog_stream::Result<()> {
        self.0
            .delete_object(key)
            .map_err(|e| store_err(self.describe(key), "delete", e.message))
    }

    fn children(&self, prefix: &str) -> paralog_stream::Result<Vec<String>> {
        let keys = self
            .0
            .list_objects(&format!("{prefix}/"))
            .map_err(|e| store_err(self.describe(prefix), "list", e.message))?;
        Ok(children_of(prefix, keys.iter().map(String::as_str)))
    }

    /// The object's `Last-Modified` (a HEAD).
    fn modified(&self, key: &str) -> paralog_stream::Result<Option<SystemTime>> {
        self.0
            .object_modified(key)
            .map_err(|e| store_err(self.describe(key), "head", e.message))
    }
}

/// Streams on the object layout: each key is an object of the layout.
pub struct LayoutObjects(pub ObjStore);

impl ObjectStore for LayoutObjects {
    fn describe(&self, key: &str) -> String {
        Backend::describe(&self.0, key.as_bytes())
    }

    /// The latest version, every block checked against its CRC.
    fn get(&self, key: &str) -> paralog_stream::Result<Option<Vec<u8>>> {
        let err = |e: paralog_backend::objstore::ObjError| store_err(self.describe(key), "get", e);
        let Some(v) = self.0.version(key.as_bytes(), None).map_err(err)? else {
            return Ok(None);
        };
        if v.deleted {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(v.size as usize);
        self.0.read_version(&v, &mut out).map_err(err)?;
        Ok(Some(out))
    }

    /// A chunk holding the bytes (fsynced), then a version naming it,
    /// published by hard link: a reader sees the previous version or this
    /// one. The layout's retention (`keep=K`) removes older versions.
    fn put(&self, key: &str, bytes: &[u8]) -> paralog_stream::Result<()> {
        let err = |e: paralog_backend::objstore::ObjError| store_err(self.describe(key), "put", e);
        if bytes.is_empty() {
            // No chunk: the layout refuses a piece of no bytes.
            return self.publish(key, 0, Vec::new(), false).map_err(err);
        }
        let mut w = self.0.writer().map_err(err)?;
        let piece = w.add(0, bytes).map_err(err)?;
        w.finish().map_err(err)?;
        self.publish(key, bytes.len() as u64, vec![piece], false)
            .map_err(err)
    }

    /// A deleted version (what the layout's drain publishes for an
    /// unlinked file), unless there is none or the latest is one.
    fn delete(&self, key: &str) -> paralog_stream::Result<()> {
        let err =
            |e: paralog_backend::objstore::ObjError| store_err(self.describe(key), "delete", e);
        match self.0.version(key.as_bytes(), None).map_err(err)? {
            Some(v) if !v.deleted => self.publish(key, 0, Vec::new(), true).map_err(err),
            _ => Ok(()),
        }
    }

    /// The layout's object names are directories under `meta/`.
    fn children(&self, prefix: &str) -> paralog_stream::Result<Vec<String>> {
        let dir = self.0.root().join("meta").join(prefix);
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(store_err(self.describe(prefix), "list", e)),
        };
        let mut out = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| store_err(self.describe(prefix), "list", e))?;
            if ent.file_type().is_ok_and(|t| t.is_dir()) {
                let name = ent.file_name();
                out.push(String::from_utf8_lossy(name.as_bytes()).into_owned());
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// When the latest version was published (its record's mtime); a
    /// deleted object has none.
    fn modified(&self, key: &str) -> paralog_stream::Result<Option<SystemTime>> {
        let err = |e: paralog_backend::objstore::ObjError| store_err(self.describe(key), "stat", e);
        let Some(v) = self.0.version(key.as_bytes(), None).map_err(err)? else {
            return Ok(None);
        };
        if v.deleted {
            return Ok(None);
        }
        let path = self.0.version_path(key.as_bytes(), v.number);
        std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .map(Some)
            .map_err(|e| store_err(path.display().to_string(), "stat", e))
    }
}

impl LayoutObjects {
    fn publish(
        &self,
        key: &str,
        size: u64,
        pieces: Vec<paralog_backend::objstore::Piece>,
        deleted: bool,
    ) -> Result<(), paralog_backend::objstore::ObjError> {
        let v = Version {
            number: 0,
            size,
            deleted,
            epoch: EpochId::default(),
            origin: [0; 16],
            name: Vec::new(),
            pieces,
        };
        self.0.publish(key.as_bytes(), v).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The object layout as a store of whole objects: a PUT replaces, a
    /// GET sees the latest whole, a DELETE hides it (twice is no error),
    /// `children` lists one level of names.
    #[test]
    fn the_object_layout_keeps_whole_objects_by_key() {
        let t = tempfile::tempdir().unwrap();
        let url: RemoteUrl = format!("objstore://{}?keep=2", t.path().display())
            .parse()
            .unwrap();
        let StreamPlace::Store(s) = stream_place(&url).unwrap() else {
            panic!("objstore:// is a store");
        };
        assert_eq!(s.get("a/x").unwrap(), None);
        s.put("a/x", b"one").unwrap();
        s.put("a/b/y", b"").unwrap();
        s.put("a/x", b"two, longer").unwrap();
        assert_eq!(s.get("a/x").unwrap().as_deref(), Some(&b"two, longer"[..]));
        assert_eq!(s.get("a/b/y").unwrap().as_deref(), Some(&b""[..]));
        assert_eq!(s.children("a").unwrap(), vec!["b", "x"]);
        assert_eq!(s.children("nothing").unwrap(), Vec::<String>::new());
        s.delete("a/x").unwrap();
        s.delete("a/x").unwrap();
        s.delete("never").unwrap();
        assert_eq!(s.get("a/x").unwrap(), None);
        assert!(
            s.describe("a/x").starts_with("objstore://") && s.describe("a/x").ends_with("/a/x")
        );
        // A damaged chunk is refused, naming it.
        s.put("c", b"some bytes").unwrap();
        let RemoteUrl::ObjStore(o) = &url else {
            unreachable!("parsed as objstore:// above")
        };
        let layout = ObjStore::new(o);
        let v = layout.version(b"c", None).unwrap().unwrap();
        let chunk = layout.chunk_path(v.pieces[0].dir, &v.pieces[0].chunk);
        assert_eq!(std::fs::read(&chunk).unwrap(), b"some bytes");
        std::fs::write(&chunk, b"some bytez").unwrap();
        let err = s.get("c").unwrap_err().to_string();
        assert!(err.contains(&chunk.display().to_string()), "{err}");
    }
}
