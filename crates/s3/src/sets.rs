//! Checkpoint sets on S3 (docs/aggregate.md, "Sets on S3"): the store
//! operations `paralog-aggregate` needs (`SetStore`), over this crate's
//! client. Keys: `PREFIX/SET/set.plr` (the record, one object replaced
//! by each new version: S3 replaces an object atomically, so its PUT is
//! the commit) and `PREFIX/SET/c<k>-v<version>-<attempt>.plc` (the
//! containers, named per attempt and never rewritten; written by
//! `setcontainer`). Readers get the record, then ranged GETs of the
//! containers (a window of 8 MiB at a time); the set record's CRC-32C of
//! every block is checked by the reader before a byte is used.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use paralog_aggregate::format::{self, SetRecord};
use paralog_aggregate::store::{ContainerSink, ContainerSource, SetStore};
use paralog_aggregate::stored::{decode_for_set, StoredAs};
use paralog_aggregate::{AggError, SetReader};
use paralog_backend::{BackendError, S3Url};

use crate::errors::{chain, s3_error};
use crate::setcontainer::{S3Container, MARK};
pub use crate::setregion::RegionUpload;
use crate::S3Backend;

/// The sets under an `s3://BUCKET/PREFIX` remote.
#[derive(Debug, Clone)]
pub struct S3Sets {
    pub(crate) be: Arc<S3Backend>,
    /// The last range read: blocks are read one by one (each verified),
    /// a GET brings `WINDOW` bytes for the next ones.
    window: Arc<Mutex<Window>>,
}

/// Bytes `start..` of the object `key`.
#[derive(Debug, Default)]
struct Window {
    key: String,
    start: u64,
    bytes: Vec<u8>,
}

/// One ranged GET reads at least this much of a container.
const WINDOW: u64 = 8 << 20;

/// A client error as the set's: the key in the path, S3's message.
pub(crate) fn agg(path: PathBuf, op: &'static str) -> impl FnOnce(BackendError) -> AggError {
    move |e| AggError::Io {
        path,
        op,
        error: std::io::Error::other(e.to_string()),
    }
}

impl S3Sets {
    pub fn open(url: &S3Url) -> Result<S3Sets, BackendError> {
        Ok(S3Sets {
            be: Arc::new(S3Backend::open(url)?),
            window: Arc::default(),
        })
    }

    /// The key of `SET/NAME`, relative to the prefix.
    pub(crate) fn rel(set: &[u8], name: &[u8]) -> String {
        let mut r = String::from_utf8_lossy(set).into_owned();
        if !name.is_empty() {
            r.push('/');
            r.push_str(&String::from_utf8_lossy(name));
        }
        r
    }

    /// Container `name` of `set`: its key, its upload marker's key
    /// relative to the prefix (`MARK`), and how messages name it.
    pub(crate) fn container_keys(&self, set: &[u8], name: &[u8]) -> (String, String, PathBuf) {
        (
            self.be.key(Self::rel(set, name).as_bytes()),
            Self::rel(
                set,
                format!("{MARK}{}", String::from_utf8_lossy(name)).as_bytes(),
            ),
            self.display(set, name),
        )
    }

    /// The set `set`, read through ranged GETs; `None` when it has no
    /// record.
    pub fn open_set(&self, set: &[u8]) -> paralog_aggregate::Result<Option<SetReader>> {
        let src: Arc<dyn ContainerSource> = Arc::new(self.clone());
        Ok(self
            .read_record(set)?
            .map(|r| SetReader::from_source(src, r)))
    }

    /// Every set under the prefix (a key ending in `/set.plr`), with its
    /// record or why it cannot be read.
    pub fn list_sets(
        &self,
    ) -> paralog_aggregate::Result<Vec<(PathBuf, paralog_aggregate::Result<SetRecord>)>> {
        let suffix = format!("/{}", format::RECORD_NAME);
        let keys = self
            .be
            .list_objects("")
            .map_err(agg(self.display(b"", b""), "list the sets"))?;
        let mut out = Vec::new();
        for k in keys {
            let Some(set) = k.strip_suffix(&suffix) else {
                continue;
            };
            let r = self.read_record(set.as_bytes()).and_then(|r| {
                r.ok_or_else(|| AggError::Io {
                    path: self.display(set.as_bytes(), format::RECORD_NAME.as_bytes()),
                    op: "read set record",
                    error: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "removed while listed",
                    ),
                })
            });
            out.push((PathBuf::from(set), r));
        }
        Ok(out)
    }
}

impl ContainerSource for S3Sets {
    fn read_at(
        &self,
        set: &[u8],
        name: &[u8],
        at: u64,
        buf: &mut [u8],
    ) -> paralog_aggregate::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let key = self.be.key(Self::rel(set, name).as_bytes());
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let cached = w.key == key
            && at >= w.start
            && at + buf.len() as u64 <= w.start + w.bytes.len() as u64;
        if !cached {
            let want = (buf.len() as u64).max(WINDOW);
            w.bytes = self.get_range(set, name, &key, at, want)?;
            w.start = at;
            w.key = key;
        }
        let from = (at - w.start) as usize;
        let n = buf.len().min(w.bytes.len() - from);
        buf[..n].copy_from_slice(&w.bytes[from..from + n]);
        Ok(n)
    }

    fn display(&self, set: &[u8], name: &[u8]) -> PathBuf {
        let key = self.be.key(Self::rel(set, name).as_bytes());
        PathBuf::from(OsStr::from_bytes(
            format!("s3://{}/{key}", self.be.bucket).as_bytes(),
        ))
    }
}

impl S3Sets {
    /// Bytes `at..at + len` of the object `key` (fewer where it ends).
    fn get_range(
        &self,
        set: &[u8],
        name: &[u8],
        key: &str,
        at: u64,
        len: u64,
    ) -> paralog_aggregate::Result<Vec<u8>> {
        let path = self.display(set, name);
        let be = &self.be;
        be.rt.block_on(async {
            let o = match be
                .client
                .get_object()
                .bucket(&be.bucket)
                .key(key)
                .range(format!("bytes={at}-{}", at + len - 1))
                .send()
                .await
            {
                Ok(o) => o,
                // Nothing at `at`: the object is shorter.
                Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 416) => {
                    return Ok(Vec::new())
                }
                Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) => {
                    return Err(AggError::Io {
                        path: path.clone(),
                        op: "read container",
                        error: std::io::Error::new(std::io::ErrorKind::NotFound, "no such object"),
                    })
                }
                Err(e) => {
                    return Err(agg(path.clone(), "read container")(s3_error(
                        &be.bucket,
                        key,
                        "get object range",
                        &e,
                    )))
                }
            };
            o.body
                .collect()
                .await
                .map(|b| b.into_bytes().to_vec())
                .map_err(|e| AggError::Io {
                    path: path.clone(),
                    op: "read container",
                    error: std::io::Error::other(chain(&e)),
                })
        })
    }
}

impl SetStore for S3Sets {
    fn read_record(&self, set: &[u8]) -> paralog_aggregate::Result<Option<SetRecord>> {
        let name = format::RECORD_NAME.as_bytes();
        let path = self.display(set, name);
        let Some(bytes) = self
            .be
            .get_object(&Self::rel(set, name))
            .map_err(agg(path.clone(), "read set record"))?
        else {
            return Ok(None);
        };
        decode_for_set(&bytes, &path, StoredAs::Set(set)).map(Some)
    }

    fn create_container(
        &self,
        set: &[u8],
        name: &[u8],
    ) -> paralog_aggregate::Result<Box<dyn ContainerSink>> {
        let (key, mark, path) = self.container_keys(set, name);
        Ok(Box::new(S3Container::new(self.be.clone(), key, mark, path)))
    }

    fn put_record(&self, record: &SetRecord) -> paralog_aggregate::Result<()> {
        let name = format::RECORD_NAME.as_bytes();
        self.be
            .put_object(&Self::rel(&record.set, name), record.encode(), false)
            .map(drop)
            .map_err(agg(self.display(&record.set, name), "write set record"))
    }

    fn delete(&self, set: &[u8], name: &[u8]) -> paralog_aggregate::Result<()> {
        self.be
            .delete_object(&Self::rel(set, name))
            .map_err(agg(self.display(set, name), "delete"))
    }

    fn list(&self, set: &[u8]) -> paralog_aggregate::Result<Vec<Vec<u8>>> {
        let dir = format!("{}/", Self::rel(set, b""));
        let keys = self
            .be
            .list_objects(&dir)
            .map_err(agg(self.display(set, b""), "list set objects"))?;
        Ok(keys
            .iter()
            .filter_map(|k| k.strip_prefix(&dir))
            .filter(|n| !n.contains('/'))
            .map(|n| n.as_bytes().to_vec())
            .collect())
    }

    fn abort_uploads(&self, set: &[u8]) -> paralog_aggregate::Result<usize> {
        let mut n = self.abort_listed(set)?;
        for name in self.list(set)? {
            let Some(c) = name.strip_prefix(MARK.as_bytes()) else {
                continue;
            };
            let key = self.be.key(Self::rel(set, c).as_bytes());
            n += self
                .be
                .abort_stale(&key)
                .map_err(agg(self.display(set, c), "abort an unfinished upload"))?;
            self.delete(set, &name)?;
        }
        Ok(n)
    }
}

impl S3Sets {
    /// Abort the uploads S3 lists under the set's prefix (all of them on
    /// AWS; MinIO lists only some: the markers find the rest).
    fn abort_listed(&self, set: &[u8]) -> paralog_aggregate::Result<usize> {
        let dir = self.be.key(format!("{}/", Self::rel(set, b"")).as_bytes());
        let path = self.display(set, b"");
        let be = &self.be;
        be.rt
            .block_on(async {
                let mut n = 0;
                let (mut key_marker, mut id_marker) = (None, None);
                loop {
                    let out = be
                        .client
                        .list_multipart_uploads()
                        .bucket(&be.bucket)
                        .prefix(&dir)
                        .set_key_marker(key_marker)
                        .set_upload_id_marker(id_marker)
                        .send()
                        .await
                        .map_err(|e| s3_error(&be.bucket, &dir, "list multipart uploads", &e))?;
                    for u in out.uploads() {
                        let (Some(key), Some(id)) = (u.key(), u.upload_id()) else {
                            continue;
                        };
                        // Only the set's own files (not a nested set's).
                        if key.strip_prefix(&dir).is_some_and(|n| !n.contains('/')) {
                            be.abort(key, id).await?;
                            n += 1;
                        }
                    }
                    if out.is_truncated() != Some(true) {
                        return Ok(n);
                    }
                    key_marker = out.next_key_marker().map(str::to_owned);
                    id_marker = out.next_upload_id_marker().map(str::to_owned);
                }
            })
            .map_err(agg(path, "abort unfinished uploads"))
    }
}

impl S3Sets {
    /// The set directories under the prefix (a key ending in
    /// `/set.plr`), records not read.
    pub fn set_dirs(&self) -> Result<Vec<String>, BackendError> {
        let suffix = format!("/{}", format::RECORD_NAME);
        Ok(self
            .be
            .list_objects("")?
            .into_iter()
            .filter_map(|k| k.strip_suffix(&suffix).map(str::to_owned))
            .collect())
    }
}
