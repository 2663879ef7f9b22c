//! A store of array objects: opened from a parsed remote URL, names
//! checked, listing, describing and deleting.

use std::path::{Path, PathBuf};

use paralog_backend::objstore::{ObjStore, Version};
use paralog_backend::{ObjStoreUrl, RemoteUrl};

use crate::error::{io_err, Error, Result};
use crate::read::ArrayVersion;
use crate::{id_hex, VersionId};

/// Where array objects live: the object layout (`objstore:///ROOT?dirs=N&keep=K`),
/// or a plain directory (`/ROOT`, `file:///ROOT`) holding the same layout
/// with one storage directory and every version kept.
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) os: ObjStore,
    root: PathBuf,
    url: RemoteUrl,
    /// Makes the views of this handle's commits in the background
    /// ([`Store::background_views`]); none: the commit's caller makes them.
    views: Option<std::sync::Arc<crate::views::Worker>>,
}

/// One version of an object, from its object-layout record alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionInfo {
    pub number: u64,
    /// The put's id (zero for versions that are not array puts).
    pub id: VersionId,
    /// A deletion (published by [`Store::delete`]).
    pub deleted: bool,
}

/// What `describe` tells: the latest version in full, and every version kept.
#[derive(Debug, Clone)]
pub struct ObjectInfo {
    pub name: String,
    pub latest: ArrayVersion,
    pub versions: Vec<VersionInfo>,
}

/// A name is a relative path in the store's flat namespace: components
/// that are not empty, `.`, `..`, hidden (`.x`: temporary names of the
/// layout) or a version record's name (`v` and ten digits).
pub fn check_name(name: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::BadName {
            name: name.to_owned(),
            why: why.to_owned(),
        })
    };
    if name.is_empty() || name.len() > 1024 {
        return bad("a name has 1 to 1024 bytes");
    }
    if name.starts_with('/') {
        return bad("a name is relative to the store (no leading '/')");
    }
    for c in name.split('/') {
        if c.is_empty() || c == "." || c == ".." {
            return bad(
                "empty, '.' and '..' components would escape the store or alias another name",
            );
        }
        if c.starts_with('.') {
            return bad("components starting with '.' are the store's temporary names");
        }
        if c.len() == 11 && c.starts_with('v') && c[1..].bytes().all(|b| b.is_ascii_digit()) {
            return bad("'v' and ten digits is the name of a version record");
        }
        if c.bytes().any(|b| b == 0 || b.is_ascii_control()) {
            return bad("control characters are refused");
        }
    }
    Ok(())
}

impl Store {
    /// Open the store a parsed URL names; its root must exist (a missing
    /// mount is an error, not a new empty store).
    pub fn open(url: &RemoteUrl) -> Result<Store> {
        let o =
            match url {
                RemoteUrl::Posix(root) => ObjStoreUrl {
                    root: root.clone(),
                    dirs: 1,
                    keep: u64::MAX,
                    sync: true,
                },
                RemoteUrl::ObjStore(o) => o.clone(),
                RemoteUrl::S3(_) => return Err(Error::Url {
                    url: url.to_string(),
                    why:
                        "Store opens objstore:// and plain directories; s3:// stores are S3Store's"
                            .into(),
                }),
            };
        if !o.root.is_dir() {
            return Err(Error::Url {
                url: url.to_string(),
                why: "the store's directory does not exist (not mounted? create it first)".into(),
            });
        }
        Ok(Store {
            os: ObjStore::new(&o),
            root: o.root,
            url: url.clone(),
            views: None,
        })
    }

    /// This store, its commits' views made by a thread of this process
    /// after each commit returns (in commit order), not by the commit
    /// itself. Dropping the last clone of the store, or [`Store::wait_views`],
    /// waits for the views queued; a process that exits before leaves the
    /// versions marked pending ([`Store::view_state`]), and `paralog obj
    /// view` makes them.
    pub fn background_views(mut self) -> Result<Store> {
        self.views = Some(crate::views::Worker::start()?);
        Ok(self)
    }

    /// Return once the views of every commit made through this store so
    /// far are made (or failed, which their marks say).
    pub fn wait_views(&self) {
        if let Some(w) = &self.views {
            w.flush();
        }
    }

    /// Make the views of a version just committed: queued to the
    /// background thread, or now. Never fails: a failure is in the
    /// version's mark ([`Store::view_state`]).
    pub(crate) fn views_after_commit(&self, av: crate::read::ArrayVersion) {
        match &self.views {
            Some(w) => {
                let mut plain = self.clone();
                plain.views = None;
                w.queue(&plain, av);
            }
            None => {
                let _ = crate::views::make(self, &av, None);
            }
        }
    }

    /// Open a store and lay out its directories (`meta/`, `data/`), so that
    /// URLs of objects below it find it ([`Store::locate`]) before any
    /// version is published. The root itself must exist.
    pub fn init(url: &RemoteUrl) -> Result<Store> {
        let s = Store::open(url)?;
        for d in ["meta", "data"] {
            let p = s.root.join(d);
            std::fs::create_dir_all(&p).map_err(io_err(&p, "create"))?;
        }
        Ok(s)
    }

    /// Split a URL naming an object (`objstore:///ROOT/NAME`, `/ROOT/NAME`)
    /// into its store, the nearest directory holding the layout (`meta/`,
    /// `data/` or `staging/`), and the name below it; a URL of the store
    /// itself gives no name. Never a guess: a URL with no layout above it
    /// is a store of its own (which must exist), so a typo in the root
    /// cannot make a store of some parent directory.
    pub fn locate(url: &RemoteUrl) -> Result<(Store, Option<String>)> {
        let full = match url {
            RemoteUrl::Posix(p) => p.clone(),
            RemoteUrl::ObjStore(o) => o.root.clone(),
            RemoteUrl::S3(_) => return Store::open(url).map(|s| (s, None)),
        };
        let is_store = |p: &Path| {
            ["meta", "data", "staging"]
                .iter()
                .any(|d| p.join(d).is_dir())
        };
        for root in full.ancestors() {
            if !is_store(root) {
                continue;
            }
            let rest = full.strip_prefix(root).expect("an ancestor");
            let at = match url {
                RemoteUrl::ObjStore(o) => RemoteUrl::ObjStore(o.at(root)),
                _ => RemoteUrl::Posix(root.to_path_buf()),
            };
            let store = Store::open(&at)?;
            if rest.as_os_str().is_empty() {
                return Ok((store, None));
            }
            let name = rest.to_str().ok_or_else(|| Error::BadName {
                name: rest.display().to_string(),
                why: "not UTF-8".into(),
            })?;
            check_name(name)?;
            return Ok((store, Some(name.to_owned())));
        }
        // No layout above: the URL is a store of its own (an empty one).
        if !full.is_dir() {
            return Err(Error::Url {
                url: url.to_string(),
                why: "no object store at or above this path (`paralog obj init ROOT` makes one in an existing directory)".into(),
            });
        }
        Store::open(url).map(|s| (s, None))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The URL this store was opened from (the store's own, not an object's).
    pub fn url(&self) -> String {
        self.url.to_string()
    }

    /// The object layout underneath (crates/backend).
    pub fn object_layout(&self) -> &ObjStore {
        &self.os
    }

    /// The version numbers of `name` kept, ascending.
    pub fn versions(&self, name: &str) -> Result<Vec<VersionInfo>> {
        check_name(name)?;
        version_infos(self.os.versions(name.as_bytes())?, |n| self.record(name, n))
    }

    /// A version's object-layout record; `None` if retention removed it.
    pub(crate) fn record(&self, name: &str, n: u64) -> Result<Option<Version>> {
        match self.os.version(name.as_bytes(), Some(n)) {
            Ok(v) => Ok(v),
            Err(paralog_backend::objstore::ObjError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The latest version in full and every version kept.
    pub fn describe(&self, name: &str) -> Result<ObjectInfo> {
        Ok(ObjectInfo {
            name: name.to_owned(),
            latest: self.array(name, None)?,
            versions: self.versions(name)?,
        })
    }

    /// The names of the objects whose latest version is an array (not a
    /// deletion, not a file drained by the server), sorted.
    pub fn list(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let meta = self.root.join("meta");
        let mut stack = vec![meta.clone()];
        while let Some(dir) = stack.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&dir, "list objects")(e)),
            };
            let mut has_versions = false;
            for e in entries {
                let e = e.map_err(io_err(&dir, "list objects"))?;
                let ft = e.file_type().map_err(io_err(&dir, "list objects"))?;
                if ft.is_dir() {
                    stack.push(e.path());
                } else if e.file_name().to_string_lossy().starts_with('v') {
                    has_versions = true;
                }
            }
            let rel = dir.strip_prefix(&meta).expect("under meta");
            if let (true, Some(name)) = (has_versions, rel.to_str()) {
                if check_name(name).is_ok() && self.is_array(name)? {
                    names.push(name.to_owned());
                }
            }
        }
        names.sort();
        Ok(names)
    }

    /// Whether the latest version of `name` is an array (its last piece an
    /// array record); a damaged one is an error, not a silent omission.
    fn is_array(&self, name: &str) -> Result<bool> {
        match self.array(name, None) {
            Ok(_) => Ok(true),
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Delete `name`: publish a deletion as its next version (atomic, like
    /// every publish). Older versions stay readable by number until
    /// retention drops them. Returns the deletion's number.
    pub fn delete(&self, name: &str) -> Result<u64> {
        check_name(name)?;
        let v = deletion(name, self.os.versions(name.as_bytes())?.is_empty())?;
        let n = self.publish_version(name, v)?;
        crate::views::prune_all(self, name)?;
        Ok(n)
    }

    /// Where the Zarr view of version `n` of `name` is.
    pub fn view_dir(&self, name: &str, n: u64) -> PathBuf {
        self.root.join("zarr").join(name).join(format!("v{n:010}"))
    }

    /// The number of the version a put published, if it did (its id is
    /// the version record's origin): a commit retried after a crash
    /// between the publish and the removal of its staging directory.
    pub(crate) fn published(&self, name: &str, id: &VersionId) -> Result<Option<u64>> {
        Ok(self
            .versions(name)?
            .into_iter()
            .find(|v| &v.id == id && !v.deleted)
            .map(|v| v.number))
    }

    /// Whether a commit of the put `id` got as far as its publish: it wrote
    /// the array record named by the put's id (or, an older binary's, its
    /// `publishing` mark). The array record is part of the version, so it
    /// stays while the version does: without either, no version of this
    /// put exists, and the records need no search.
    pub(crate) fn commit_may_have_published(&self, id: &VersionId) -> bool {
        self.array_record_paths(id).iter().any(|p| p.exists())
            || self.staging_dir(id).join("publishing").exists()
    }

    /// [`Store::published`], searched only when a commit of the put may
    /// have published: one or two `stat`s instead of a read of every kept
    /// record (what the logged puts' publisher asks before every publish;
    /// over sshfs each read is a round trip, and a name keeping hundreds
    /// of versions made every publish read them all).
    pub(crate) fn published_by_commit(&self, name: &str, id: &VersionId) -> Result<Option<u64>> {
        if !self.commit_may_have_published(id) {
            return Ok(None);
        }
        self.published(name, id)
    }

    /// Publish `v` as the next version of `name`. Retention keeps, past
    /// the last K, a version whose put's staging directory is still there:
    /// its commit has not finished (killed after the publish, or a logged
    /// publisher that has not retired its node-local put yet), and a retry
    /// must find the version by its id. Dropped, its chunks removed, the
    /// retry published the put again: an old put as the latest, or a
    /// version whose chunks were gone (docs/objects.md "Crashes").
    pub(crate) fn publish_version(&self, name: &str, v: Version) -> Result<u64> {
        Ok(self
            .os
            .publish_pinned(name.as_bytes(), v, &|v| self.commit_unfinished(v))?)
    }

    /// Whether the put that published `v` has not finished its commit:
    /// its staging directory is still there (what retention keeps).
    fn commit_unfinished(&self, v: &Version) -> bool {
        self.staging_dir(&v.origin).is_dir()
    }

    /// The end of a published put's commit: its staging directory removed,
    /// then the retention its publish (or a later one) held back while
    /// it was there. Never an error: the version is published; what is
    /// left, `obj gc` removes (and the next publish's retention drops).
    pub(crate) fn finish_commit(&self, name: &str, id: &VersionId) {
        let _ = std::fs::remove_dir_all(self.staging_dir(id));
        let _ = self
            .os
            .retain_now(name.as_bytes(), &|v| self.commit_unfinished(v));
    }

    pub(crate) fn staging_dir(&self, id: &VersionId) -> PathBuf {
        self.root.join("staging").join(id_hex(id))
    }

    /// The storage directory of the array record's chunk file a commit
    /// of a put writes before its publish, named by the put's id (docs/
    /// objects-format.md "A chunked PUT in progress"): always the first,
    /// not the id's hash over the store's `dirs`, so that a commit retried
    /// (or an abort) through a handle opened with another `dirs` (the
    /// plain path of an `objstore://ROOT?dirs=4` store) finds it.
    pub(crate) const ARRAY_RECORD_DIR: u32 = 0;

    /// Where the array record of a commit of the put `id` may be: where
    /// this binary's commits put it, and where older ones did (the id's
    /// hash over this handle's `dirs`).
    pub(crate) fn array_record_paths(&self, id: &VersionId) -> Vec<PathBuf> {
        let mut paths = vec![self.os.chunk_path(Self::ARRAY_RECORD_DIR, id)];
        let hashed = self.os.dir_of(id);
        if hashed != Self::ARRAY_RECORD_DIR {
            paths.push(self.os.chunk_path(hashed, id));
        }
        paths
    }
}

/// The version that deletes `name` (a fresh origin, no bytes); refused
/// when the name has no version (`none`). The name is checked by the
/// caller before it looks the versions up.
pub(crate) fn deletion(name: &str, none: bool) -> Result<Version> {
    if none {
        return Err(Error::NotFound {
            name: name.to_owned(),
            why: "no such object".into(),
        });
    }
    Ok(Version {
        number: 0,
        size: 0,
        deleted: true,
        epoch: Default::default(),
        origin: crate::staging::new_id(),
        name: Vec::new(),
        pieces: Vec::new(),
    })
}

/// What the versions `numbers` of a name are, from their records (a
/// number whose record is gone, removed by retention since the listing, is
/// not kept any more).
pub(crate) fn version_infos(
    numbers: Vec<u64>,
    mut record: impl FnMut(u64) -> Result<Option<Version>>,
) -> Result<Vec<VersionInfo>> {
    let mut out = Vec::new();
    for n in numbers {
        if let Some(v) = record(n)? {
            out.push(VersionInfo {
                number: n,
                id: v.origin,
                deleted: v.deleted,
            });
        }
    }
    Ok(out)
}
