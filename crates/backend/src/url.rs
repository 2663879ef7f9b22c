//! Remote URLs, parsed once: every command, the server and the capture
//! library turn `--remote`/`PARALOG_REMOTE` into a [`RemoteUrl`] here and
//! nowhere else, and open backends from the typed value.
//!
//! - `file:///abs/path` or `/abs/path`: a POSIX directory;
//! - `objstore:///abs/root[?dirs=N&keep=K&sync=0|1]`: the versioned object layout;
//! - `s3://bucket[/prefix][?upload=close|epoch&part_size=BYTES&max_parts=N&keep=K]`.
//!
//! No form may climb out of its root (`..`), and every query setting is
//! known and in range: a typo is an error that names it, not a default.

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

const MIB: u64 = 1 << 20;
/// S3's smallest part (but the last).
pub const S3_MIN_PART: u64 = 5 * MIB;
/// S3's largest number of parts of one upload.
pub const S3_MAX_PARTS: u64 = 10_000;
/// The part size when the URL names none.
pub const S3_DEFAULT_PART: u64 = 8 * MIB;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteUrl {
    /// A directory of a file system this node mounts.
    Posix(PathBuf),
    ObjStore(ObjStoreUrl),
    S3(S3Url),
}

/// `objstore:///root?dirs=N&keep=K&sync=0|1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjStoreUrl {
    pub root: PathBuf,
    /// Storage directories chunks are spread over (1 to 4096).
    pub dirs: u32,
    /// Versions kept per object (at least 1).
    pub keep: u64,
    /// Whether a published version is durable (fsyncs), the default; `sync=0`
    /// leaves it to the page cache: a version survives a crash of the program
    /// that put it, not of the machine (what HDF5 and zarr-python give). Only
    /// the object API's direct puts accept it: a drain, which deletes the
    /// node-local log once the remote holds the bytes, refuses it.
    pub sync: bool,
}

/// When the S3 remote uploads a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum S3Upload {
    /// Once per open of a file, when it ended.
    Close,
    /// At every committed epoch.
    Epoch,
}

/// `s3://bucket/prefix?upload=..&part_size=..&max_parts=..`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Url {
    pub bucket: String,
    /// Without leading or trailing '/'; may be empty.
    pub prefix: String,
    pub upload: S3Upload,
    /// The smallest part of a multipart upload.
    pub part_size: u64,
    /// At most this many parts per upload (lower than S3's limit only in
    /// tests, so that part sizes grow without writing 80 GB).
    pub max_parts: u64,
    /// An array store's versions kept per name (`u64::MAX`, the default:
    /// every one); files drained to S3 have one version and ignore it.
    pub keep: u64,
}

/// A URL that names no usable remote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{url}: {message}")]
pub struct UrlError {
    pub url: String,
    pub message: String,
}

fn bad(url: &str, message: impl Into<String>) -> UrlError {
    UrlError {
        url: url.to_owned(),
        message: message.into(),
    }
}

/// `K`, `M`, `G` suffixes (powers of two).
fn parse_size(s: &str) -> Option<u64> {
    let (n, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], MIB),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    n.parse::<u64>().ok()?.checked_mul(mult)
}

fn query_pairs(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query
        .split('&')
        .filter(|s| !s.is_empty())
        .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
}

/// An absolute path without `..`.
fn root_path(url: &str, path: &str) -> Result<PathBuf, UrlError> {
    let p = PathBuf::from(path);
    if !p.is_absolute() {
        return Err(bad(url, "the path must be absolute"));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(bad(
            url,
            "contains '..': a remote path may not escape its root",
        ));
    }
    Ok(p)
}

/// Whether `url` names an S3 remote (parse it for the rest), for a command
/// that treats its other arguments as paths.
pub fn is_s3(url: &str) -> bool {
    url.starts_with("s3://")
}

impl FromStr for RemoteUrl {
    type Err = UrlError;

    fn from_str(url: &str) -> Result<RemoteUrl, UrlError> {
        if let Some(path) = url.strip_prefix("file://") {
            return Ok(RemoteUrl::Posix(root_path(url, path)?));
        }
        if url.starts_with('/') {
            return Ok(RemoteUrl::Posix(root_path(url, url)?));
        }
        if let Some(spec) = url.strip_prefix("objstore://") {
            return ObjStoreUrl::parse(url, spec).map(RemoteUrl::ObjStore);
        }
        if let Some(spec) = url.strip_prefix("s3://") {
            return S3Url::parse(url, spec).map(RemoteUrl::S3);
        }
        Err(bad(
            url,
            "a remote is /absolute/path, file:///absolute/path, objstore:///absolute/root or s3://bucket/prefix",
        ))
    }
}

impl ObjStoreUrl {
    fn parse(url: &str, spec: &str) -> Result<ObjStoreUrl, UrlError> {
        let (path, query) = spec.split_once('?').unwrap_or((spec, ""));
        let mut o = ObjStoreUrl {
            root: root_path(url, path)?,
            dirs: 4,
            keep: 3,
            sync: true,
        };
        for (k, v) in query_pairs(query) {
            let n: u64 = v
                .parse()
                .map_err(|_| bad(url, format!("{k}={v} is not a number")))?;
            match k {
                "dirs" if (1..=4096).contains(&n) => o.dirs = n as u32,
                "keep" if n >= 1 => o.keep = n,
                "sync" if n <= 1 => o.sync = n == 1,
                _ => {
                    return Err(bad(
                        url,
                        format!(
                        "unknown or out-of-range setting {k}={v} (dirs=1..4096, keep>=1, sync=0|1)"
                    ),
                    ))
                }
            }
        }
        Ok(o)
    }

    /// The same settings at another root (an object named under this one).
    pub fn at(&self, root: &Path) -> ObjStoreUrl {
        ObjStoreUrl {
            root: root.to_path_buf(),
            ..self.clone()
        }
    }
}

impl S3Url {
    fn parse(url: &str, spec: &str) -> Result<S3Url, UrlError> {
        let (path, query) = spec.split_once('?').unwrap_or((spec, ""));
        let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
        if bucket.is_empty() {
            return Err(bad(url, "no bucket: s3://BUCKET/PREFIX"));
        }
        let prefix = prefix.trim_matches('/');
        if prefix.split('/').any(|c| c == ".." || c == ".") {
            return Err(bad(
                url,
                "contains '.' or '..': a remote path may not escape its root",
            ));
        }
        let mut s = S3Url {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            upload: S3Upload::Close,
            part_size: S3_DEFAULT_PART,
            max_parts: S3_MAX_PARTS,
            keep: u64::MAX,
        };
        for (k, v) in query_pairs(query) {
            match k {
                "part_size" => {
                    s.part_size = parse_size(v)
                        .filter(|&n| n >= S3_MIN_PART)
                        .ok_or_else(|| bad(url, format!("part_size={v}: at least 5M")))?;
                }
                "upload" => {
                    s.upload = match v {
                        "close" => S3Upload::Close,
                        "epoch" => S3Upload::Epoch,
                        _ => return Err(bad(url, format!("upload={v}: close or epoch"))),
                    }
                }
                "max_parts" => {
                    s.max_parts = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=S3_MAX_PARTS).contains(n))
                        .ok_or_else(|| bad(url, format!("max_parts={v}: 1 to 10000")))?;
                }
                "keep" => {
                    s.keep = v
                        .parse()
                        .ok()
                        .filter(|&n| n >= 1)
                        .ok_or_else(|| bad(url, format!("keep={v}: 1 or more")))?;
                }
                _ => {
                    return Err(bad(
                        url,
                        format!(
                            "unknown setting {k}={v} (known: upload, part_size, max_parts, keep)"
                        ),
                    ))
                }
            }
        }
        Ok(s)
    }
}

impl RemoteUrl {
    /// The scheme, for messages and for options that only one kind takes.
    pub fn scheme(&self) -> &'static str {
        match self {
            RemoteUrl::Posix(_) => "file",
            RemoteUrl::ObjStore(_) => "objstore",
            RemoteUrl::S3(_) => "s3",
        }
    }
}

/// `?k=v&...` of the settings that differ from the defaults.
fn write_query(f: &mut fmt::Formatter<'_>, settings: &[(&str, Option<String>)]) -> fmt::Result {
    let mut sep = '?';
    for (k, v) in settings {
        if let Some(v) = v {
            write!(f, "{sep}{k}={v}")?;
            sep = '&';
        }
    }
    Ok(())
}

impl fmt::Display for ObjStoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "objstore://{}", self.root.display())?;
        write_query(
            f,
            &[
                ("dirs", (self.dirs != 4).then(|| self.dirs.to_string())),
                ("keep", (self.keep != 3).then(|| self.keep.to_string())),
                ("sync", (!self.sync).then(|| "0".to_string())),
            ],
        )
    }
}

impl fmt::Display for S3Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}", self.bucket)?;
        if !self.prefix.is_empty() {
            write!(f, "/{}", self.prefix)?;
        }
        write_query(
            f,
            &[
                (
                    "upload",
                    (self.upload == S3Upload::Epoch).then(|| "epoch".to_owned()),
                ),
                (
                    "part_size",
                    (self.part_size != S3_DEFAULT_PART).then(|| self.part_size.to_string()),
                ),
                (
                    "max_parts",
                    (self.max_parts != S3_MAX_PARTS).then(|| self.max_parts.to_string()),
                ),
                (
                    "keep",
                    (self.keep != u64::MAX).then(|| self.keep.to_string()),
                ),
            ],
        )
    }
}

/// The URL as a user would write it (settings at their defaults left
/// out); it parses back to the same value.
impl fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteUrl::Posix(p) => write!(f, "{}", p.display()),
            RemoteUrl::ObjStore(o) => o.fmt(f),
            RemoteUrl::S3(s) => s.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<RemoteUrl, UrlError> {
        s.parse()
    }

    #[test]
    fn posix_forms() {
        assert_eq!(parse("/a/b").unwrap(), RemoteUrl::Posix("/a/b".into()));
        assert_eq!(
            parse("file:///a/b").unwrap(),
            RemoteUrl::Posix("/a/b".into())
        );
        assert!(parse("file://a/b").is_err());
        assert!(parse("/a/../b").unwrap_err().message.contains(".."));
        assert!(parse("rel/path").is_err());
        assert!(parse("").is_err());
        assert!(parse("ftp://x").is_err());
    }

    #[test]
    fn objstore_settings() {
        let RemoteUrl::ObjStore(o) = parse("objstore:///a?dirs=8&keep=5").unwrap() else {
            panic!("not an object store")
        };
        assert_eq!((o.root.as_path(), o.dirs, o.keep), (Path::new("/a"), 8, 5));
        let RemoteUrl::ObjStore(o) = parse("objstore:///a?sync=0").unwrap() else {
            panic!()
        };
        assert!(!o.sync);
        let RemoteUrl::ObjStore(o) = parse("objstore:///a").unwrap() else {
            panic!()
        };
        assert_eq!((o.dirs, o.keep, o.sync), (4, 3, true));
        for bad in [
            "objstore://rel",
            "objstore:///a/../b",
            "objstore:///a?dirs=0",
            "objstore:///a?dirs=x",
            "objstore:///a?bogus=1",
            "objstore:///a?sync=2",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.url, bad);
        }
    }

    #[test]
    fn s3_settings() {
        let RemoteUrl::S3(s) = parse("s3://bucket/a/b/?part_size=16M&upload=epoch").unwrap() else {
            panic!()
        };
        assert_eq!(s.bucket, "bucket");
        assert_eq!(s.prefix, "a/b");
        assert_eq!(s.part_size, 16 * MIB);
        assert_eq!(s.upload, S3Upload::Epoch);
        for bad in [
            "s3://",
            "s3:///p",
            "s3://b/../x",
            "s3://b/./x",
            "s3://b/p?part_size=1M",
            "s3://b/p?part_size=99999999999999999G",
            "s3://b/p?upload=never",
            "s3://b/p?max_parts=0",
            "s3://b/p?bogus=1",
            "s3://b/p?keep=0",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn display_parses_back() {
        for u in [
            "/a/b",
            "objstore:///r?dirs=2",
            "objstore:///r?sync=0&keep=7",
            "s3://b",
            "s3://b/p/q?upload=epoch&max_parts=3",
            "s3://b/p?part_size=16M&upload=close",
            "s3://b/p?keep=4",
        ] {
            let v = parse(u).unwrap();
            assert_eq!(parse(&v.to_string()).unwrap(), v, "{u}");
        }
        assert_eq!(
            parse("objstore:///r?keep=3").unwrap().to_string(),
            "objstore:///r"
        );
        assert_eq!(parse("file:///a").unwrap().to_string(), "/a");
    }
}
