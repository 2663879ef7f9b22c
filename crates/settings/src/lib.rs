//! The PARALOG_* settings: one table (name, meaning, default) that the
//! capture library reads from the environment, and that `paralog env` and
//! the docs print. A PARALOG_* name not in the table is an error, not ignored.
//!
//! A crate of its own, with the table of wrapped libc symbols (`symbols`),
//! so that the `paralog` command can use both without linking the capture
//! library: linked in, capture's `write`, `open`, ... would be the command's
//! own, and its I/O (MPI's too, inside `paralog server`) would go through
//! capture's wrappers, capturing the files it drains whenever PARALOG_PREFIX
//! is set in the shell. Nothing here is exported under a C name.

pub mod counters;
pub mod failpoint;
pub mod symbols;

pub use symbols::SYMBOLS;

use paralog_backend::{ObjStoreUrl, RemoteUrl};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

pub struct Setting {
    pub name: &'static str,
    pub help: &'static str,
    pub default: Option<&'static str>,
}

pub const SETTINGS: &[Setting] = &[
    Setting { name: "PARALOG_PREFIX", help: "directory whose files are captured (absolute); unset: capture nothing", default: None },
    Setting { name: "PARALOG_LOCAL", help: "node-local log directory (absolute, outside the prefix); `{node}` in it stands for the node name", default: None },
    Setting { name: "PARALOG_JOB", help: "job name shared by all ranks (letters, digits, '.', '_', '-')", default: Some("default") },
    Setting { name: "PARALOG_REMOTE", help: "where the server drains to (path, file://, s3://, objstore://); unset: the prefix itself", default: None },
    Setting { name: "PARALOG_NODE", help: "this process's node name (default: the host name); with `{node}` in PARALOG_LOCAL, simulated nodes on one machine get their own directories", default: None },
    Setting { name: "PARALOG_COALESCE_BYTES", help: "size of the per-file buffer that gathers small writes", default: Some("4194304") },
    Setting { name: "PARALOG_SMALL_WRITE", help: "writes shorter than this go through the buffer", default: Some("262144") },
    Setting { name: "PARALOG_VERBOSE", help: "1: report every captured open and consistency point on stderr", default: Some("0") },
    Setting { name: "PARALOG_STATS", help: "directory where each process writes its capture counters at exit (set by `paralog run` for its summary)", default: None },
    Setting { name: "PARALOG_LOG", help: "log level of `paralog server` and `run` (error, warn, info, debug, trace)", default: Some("info") },
    Setting { name: "PARALOG_FAILPOINT", help: "crash injection for the crash tests: the server (or the array objects' library) kills itself at NAME[:N] (docs/server.md)", default: None },
    Setting { name: "PARALOG_FAILPOINT_DELETE_DELAY_MS", help: "test hook: the server sleeps this long after deleting each rank's records of a drained epoch, widening the window the read tests probe (docs/server.md)", default: None },
    Setting { name: "PARALOG_FAILPOINT_REGION_DELAY_MS", help: "test hook: a server job's node sleeps this long after each block it writes into its own region of a checkpoint set (--agg-mode own; docs/aggregate.md)", default: None },
    Setting { name: "PARALOG_AGGREGATE", help: "rules that drain matching files into checkpoint sets (`ckpt/{set}/rank-*.dat`, several separated by commas; docs/aggregate.md); read by `paralog run`, `server` and `recover`", default: None },
    Setting { name: "PARALOG_AGG_MODE", help: "a server job with PARALOG_AGGREGATE: `leader` (members sent to each group's leader) or `own` (each node writes its own region of the container; POSIX remotes) (docs/aggregate.md)", default: Some("leader") },
    Setting { name: "PARALOG_CONTAINERS", help: "containers per checkpoint set with PARALOG_AGGREGATE (docs/aggregate.md)", default: Some("1") },
    Setting { name: "PARALOG_STREAM_RELEASE_BYTES", help: "local retention of the shared event streams: drained segments of ended producers are deleted from the node once they and the cut log amount to this many bytes (K, M, G; 0: never); read by `paralog run`, `server`, `recover` and `stream drain` (docs/streams.md)", default: Some("64M") },
    Setting { name: "PARALOG_MPI", help: "MPI flavour the shim was built for (set by `paralog env`/`run`)", default: None },
    Setting { name: "PARALOG_H5VIEW", help: "the array objects' HDF5 view writer to run (docs/objects.md); default: paralog-h5view next to paralog or libparalog_obj.so", default: None },
    Setting { name: "PARALOG_LIB_DIR", help: "where Python's paralog.objects finds libparalog_obj.so (docs/objects.md); default: the source tree's target/release", default: None },
];

#[derive(Debug, Clone)]
pub struct Config {
    pub prefix: PathBuf,
    /// Where drained bytes are, for reads: a POSIX remote's root (the prefix
    /// itself by default); `None` for object storage, which the capture
    /// library does not read (no network in the application's process).
    pub remote_root: Option<PathBuf>,
    /// The object layout, when the remote is one: capture reads drained
    /// versions from it (plain file I/O).
    pub remote_objstore: Option<ObjStoreUrl>,
    pub local: PathBuf,
    pub job: String,
    pub coalesce_bytes: usize,
    pub small_write: usize,
    pub verbose: bool,
    /// Where to leave this process's counters at exit (`paralog run`).
    pub stats: Option<PathBuf>,
}

/// What the environment says: capture off (no prefix), on, or misconfigured
/// (every open under the prefix then fails with this message).
#[derive(Debug, Clone)]
pub enum Settings {
    Off,
    On(Config),
    Invalid {
        prefix: Option<PathBuf>,
        message: String,
    },
}

/// The node this process runs on: PARALOG_NODE, else the host name. A
/// name that is not a plain file name component is refused (it becomes a
/// directory name through `{node}`).
pub fn node_name(override_: Option<&str>) -> Result<String, String> {
    let name = match override_.filter(|n| !n.is_empty()) {
        Some(n) => n.to_owned(),
        None => {
            let mut buf = [0u8; 256];
            // SAFETY: a buffer and its length; gethostname NUL-terminates
            // when the name fits.
            if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
                return Err(format!(
                    "the host name cannot be read ({}); set PARALOG_NODE",
                    std::io::Error::last_os_error()
                ));
            }
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            String::from_utf8_lossy(&buf[..end]).into_owned()
        }
    };
    paralog_log::layout::validate_component("node name (PARALOG_NODE)", &name)
        .map_err(|e| e.to_string())?;
    Ok(name)
}

/// `{node}` in a node-local directory replaced by the node's name.
pub fn expand_node(local: &Path, node: &str) -> PathBuf {
    let s = local.as_os_str().as_bytes();
    if !s.windows(6).any(|w| w == b"{node}") {
        return local.to_path_buf();
    }
    let text = String::from_utf8_lossy(s).replace("{node}", node);
    PathBuf::from(text)
}

fn get(vars: &[(OsString, OsString)], name: &str) -> Option<OsString> {
    vars.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

impl Settings {
    pub fn from_env() -> Settings {
        Settings::from_vars(std::env::vars_os().collect())
    }

    pub fn from_vars(vars: Vec<(OsString, OsString)>) -> Settings {
        let prefix = get(&vars, "PARALOG_PREFIX")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        let Some(prefix_raw) = prefix.clone() else {
            return Settings::Off;
        };
        let invalid = |message: String| Settings::Invalid {
            prefix: Some(normalize(&prefix_raw)),
            message,
        };
        for (k, _) in &vars {
            let k = k.as_bytes();
            if k.starts_with(b"PARALOG_") && !SETTINGS.iter().any(|s| s.name.as_bytes() == k) {
                return invalid(format!(
                    "unknown setting {} (known: {})",
                    String::from_utf8_lossy(k),
                    SETTINGS
                        .iter()
                        .map(|s| s.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        if !prefix_raw.is_absolute() {
            return invalid(format!(
                "PARALOG_PREFIX={} is not an absolute path",
                prefix_raw.display()
            ));
        }
        let prefix = normalize(&prefix_raw);
        match std::fs::metadata(&prefix) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return invalid(format!(
                    "PARALOG_PREFIX={} is not a directory",
                    prefix.display()
                ))
            }
            Err(e) => return invalid(format!("PARALOG_PREFIX={}: {e}", prefix.display())),
        }
        let Some(local) = get(&vars, "PARALOG_LOCAL")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
        else {
            return invalid(
                "PARALOG_LOCAL is not set: the node-local log directory is required".into(),
            );
        };
        if !local.is_absolute() {
            return invalid(format!(
                "PARALOG_LOCAL={} is not an absolute path",
                local.display()
            ));
        }
        let node = get(&vars, "PARALOG_NODE").map(|n| n.to_string_lossy().into_owned());
        let local = if local
            .as_os_str()
            .as_bytes()
            .windows(6)
            .any(|w| w == b"{node}")
        {
            match node_name(node.as_deref()) {
                Ok(n) => expand_node(&local, &n),
                Err(m) => return invalid(m),
            }
        } else {
            local
        };
        let local = normalize(&local);
        if local.starts_with(&prefix) {
            return invalid(format!(
                "PARALOG_LOCAL={} lies inside PARALOG_PREFIX={}",
                local.display(),
                prefix.display()
            ));
        }
        let job = get(&vars, "PARALOG_JOB")
            .map(|j| j.to_string_lossy().into_owned())
            .unwrap_or_else(|| "default".into());
        if let Err(e) = paralog_log::layout::validate_component("job name", &job) {
            return invalid(format!("PARALOG_JOB: {e}"));
        }
        let num = |name: &str, default: usize| -> Result<usize, String> {
            match get(&vars, name) {
                None => Ok(default),
                Some(v) => v.to_str().and_then(|s| s.parse().ok()).ok_or_else(|| {
                    format!(
                        "{name}={} is not a whole number of bytes",
                        v.to_string_lossy()
                    )
                }),
            }
        };
        let coalesce_bytes = match num("PARALOG_COALESCE_BYTES", 4 << 20) {
            Ok(n) => n,
            Err(m) => return invalid(m),
        };
        let small_write = match num("PARALOG_SMALL_WRITE", 256 << 10) {
            Ok(n) => n,
            Err(m) => return invalid(m),
        };
        let remote = match get(&vars, "PARALOG_REMOTE").filter(|r| !r.is_empty()) {
            None => None,
            Some(r) => match r.to_string_lossy().parse::<RemoteUrl>() {
                Ok(u) => Some(u),
                Err(e) => return invalid(format!("PARALOG_REMOTE={e}")),
            },
        };
        let verbose = get(&vars, "PARALOG_VERBOSE").is_some_and(|v| v == "1");
        let (remote_root, remote_objstore) = match remote {
            None => (Some(prefix.clone()), None),
            Some(RemoteUrl::Posix(p)) => (Some(normalize(&p)), None),
            Some(RemoteUrl::ObjStore(o)) => (None, Some(o)),
            Some(RemoteUrl::S3(_)) => (None, None),
        };
        Settings::On(Config {
            prefix,
            remote_root,
            remote_objstore,
            local,
            job,
            coalesce_bytes,
            small_write,
            verbose,
            stats: get(&vars, "PARALOG_STATS")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        })
    }
}

/// Lexical normalization: absolute, no `.`, `..` resolved, no trailing '/'.
/// (Symbolic links are not resolved: the prefix is matched as written.)
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        v.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn off_without_prefix() {
        assert!(matches!(
            Settings::from_vars(vars(&[("PARALOG_LOCAL", "/x")])),
            Settings::Off
        ));
    }

    #[test]
    fn errors_name_the_setting() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().to_str().unwrap();
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[
                    ("PARALOG_PREFIX", p),
                    ("PARALOG_LOCAL", "/l"),
                    ("PARALOG_BOGUS", "1"),
                ],
                "unknown setting PARALOG_BOGUS",
            ),
            (
                &[("PARALOG_PREFIX", "rel")],
                "PARALOG_PREFIX=rel is not an absolute path",
            ),
            (
                &[("PARALOG_PREFIX", "/no/such/dir")],
                "PARALOG_PREFIX=/no/such/dir",
            ),
            (&[("PARALOG_PREFIX", p)], "PARALOG_LOCAL is not set"),
            (
                &[("PARALOG_PREFIX", p), ("PARALOG_LOCAL", &format!("{p}/l"))],
                "lies inside PARALOG_PREFIX",
            ),
            (
                &[
                    ("PARALOG_PREFIX", p),
                    ("PARALOG_LOCAL", "/l"),
                    ("PARALOG_JOB", "../x"),
                ],
                "PARALOG_JOB",
            ),
            (
                &[
                    ("PARALOG_PREFIX", p),
                    ("PARALOG_LOCAL", "/l"),
                    ("PARALOG_REMOTE", "/r/../../etc"),
                ],
                "may not escape",
            ),
            (
                &[
                    ("PARALOG_PREFIX", p),
                    ("PARALOG_LOCAL", "/l"),
                    ("PARALOG_SMALL_WRITE", "big"),
                ],
                "PARALOG_SMALL_WRITE=big",
            ),
        ];
        for (v, want) in cases {
            match Settings::from_vars(vars(v)) {
                Settings::Invalid { message, .. } => {
                    assert!(message.contains(want), "{message} !~ {want}")
                }
                other => panic!("{v:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn normalizes_paths() {
        assert_eq!(normalize(Path::new("/a/./b/../c/")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../a")), PathBuf::from("/a"));
    }
}

/// Files an MPI library makes next to the target file, shared between
/// processes through the real file system: ROMIO's shared file pointer
/// `.<name>.shfp.<n>`, OMPIO's `<name>.locktest.<rank>`, and the shared
/// file pointer of OMPIO's `lockedfile` component, `<name>-<jobid>-<pid>.lock`
/// (chosen when the ranks span nodes: captured, it existed only in the
/// opening node's log and the other nodes' opens failed). Never captured.
pub fn is_mpi_helper_file(abs: &Path) -> bool {
    let name = abs.file_name().map(|n| n.as_bytes()).unwrap_or_default();
    let has = |pat: &[u8]| name.windows(pat.len()).any(|w| w == pat);
    (name.starts_with(b".") && has(b".shfp.")) || has(b".locktest.") || is_lockedfile(name)
}

fn is_lockedfile(name: &[u8]) -> bool {
    let Some(stem) = name.strip_suffix(b".lock") else {
        return false;
    };
    let mut fields = stem.rsplitn(3, |&b| b == b'-');
    let digits =
        |f: Option<&[u8]>| f.is_some_and(|f| !f.is_empty() && f.iter().all(u8::is_ascii_digit));
    digits(fields.next())
        && digits(fields.next())
        && fields.next().is_some_and(|base| !base.is_empty())
}

#[cfg(test)]
mod helper_file_tests {
    use super::is_mpi_helper_file;
    use std::path::Path;

    #[test]
    fn mpi_helper_files_are_recognised() {
        for yes in [
            "/p/.out.dat.shfp.123",
            "/p/out.dat.locktest.0",
            "/p/out.dat-3214737409-18311.lock",
        ] {
            assert!(is_mpi_helper_file(Path::new(yes)), "{yes}");
        }
        for no in [
            "/p/out.dat",
            "/p/out.lock",
            "/p/out-1.lock",
            "/p/-1-2.lock",
            "/p/out-a-2.lock",
            "/p/out.dat-1-2.lockx",
        ] {
            assert!(!is_mpi_helper_file(Path::new(no)), "{no}");
        }
    }
}
