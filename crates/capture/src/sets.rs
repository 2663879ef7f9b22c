//! Restart reads of checkpoint sets (docs/aggregate.md): a path under the
//! prefix whose drained bytes are a member of a set on a POSIX remote or
//! an object layout (a `set.plr` in one of its parent directories lists
//! it) is read from the
//! set's containers, every block verified; a listing of a set directory
//! shows its members instead of the set's own files. Plain file I/O in
//! the application's process, as for any drained file; the capture
//! library links the set reader only (no writer, no rule matching).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use paralog_aggregate::reader::{find_set, SetCache};
use paralog_aggregate::MemberReader;
use paralog_backend::objstore::ObjStore;

use crate::report;
use crate::settings::Config;
use crate::state::CResult;

/// Directory entries: name and `d_type`.
type Entries = Vec<(Vec<u8>, u8)>;

/// Sets decoded once per process, again when their record changes.
static SETS: SetCache = SetCache::new();

/// The set directory and member path of `rel` under the remote `root`,
/// when a set record lies in one of its parent directories.
pub fn member_of(root: &Path, rel: &[u8]) -> Option<(PathBuf, Vec<u8>)> {
    let (set, member) = find_set(root, rel)?;
    Some((root.join(OsStr::from_bytes(&set)), member))
}

/// The member, if the set lists it; a record that cannot be read is EIO
/// with one line naming it.
pub fn open_member(set_dir: &Path, member: &[u8], abs: &Path) -> CResult<Option<MemberReader>> {
    member_from(SETS.get(set_dir), member, abs)
}

/// The member from a set as the cache read it (`None`: no set there).
fn member_from(
    set: paralog_aggregate::Result<Option<std::sync::Arc<paralog_aggregate::reader::SetReader>>>,
    member: &[u8],
    abs: &Path,
) -> CResult<Option<MemberReader>> {
    match set {
        Ok(Some(set)) => Ok(MemberReader::new(set, member)),
        Ok(None) => Ok(None),
        Err(e) => {
            report::line(&format!(
                "reading the checkpoint set of {}: {e}",
                abs.display()
            ));
            Err(e.errno())
        }
    }
}

/// The member `rel` of a set on an object layout (its set record object
/// in a parent of `rel`), if the set lists it; a record that cannot be
/// read is EIO with one line naming it.
pub fn open_obj_member(store: &ObjStore, rel: &[u8], abs: &Path) -> CResult<Option<MemberReader>> {
    let Some((set, member)) = paralog_aggregate::objset::find_set(store, rel) else {
        return Ok(None);
    };
    member_from(SETS.get_obj(store, &set), &member, abs)
}

/// Bytes of a member at `at`: a container gone (a newer version of the
/// set replaced it) is NotFound, so that the view is rebuilt; damage is
/// an error naming the container and offset.
pub fn read_member(
    m: &Mutex<MemberReader>,
    abs: &Path,
    at: u64,
    dst: &mut [u8],
) -> paralog_log::Result<()> {
    let mut m = m.lock().unwrap_or_else(|p| p.into_inner());
    m.read_at(at, dst).map_err(|e| match e {
        paralog_aggregate::AggError::Io { path, op, error } => {
            paralog_log::LogError::Io { path, op, error }
        }
        paralog_aggregate::AggError::Corrupt { path, offset, what } => {
            paralog_log::LogError::Corrupt { path, offset, what }
        }
        paralog_aggregate::AggError::Invalid { path, what } => paralog_log::LogError::Corrupt {
            path,
            offset: 0,
            what: format!("{what} (member of the set read for {})", abs.display()),
        },
    })
}

/// The entries a set directory shows: the first component of each member
/// (a file, or a directory of members), in place of the set's own files.
/// `None` when `dir` holds no set.
pub fn listing(dir: &Path) -> Option<Vec<(Vec<u8>, u8)>> {
    let set = match SETS.get(dir) {
        Ok(Some(s)) => s,
        Ok(None) => return None,
        Err(e) => {
            report::line(&format!("listing {}: {e}", dir.display()));
            return None;
        }
    };
    Some(entries(&set))
}

/// The same for a directory `rel` of an object layout holding a set.
pub fn listing_obj(store: &ObjStore, rel: &[u8]) -> Option<Vec<(Vec<u8>, u8)>> {
    match SETS.get_obj(store, rel) {
        Ok(Some(s)) => Some(entries(&s)),
        Ok(None) => None,
        Err(e) => {
            report::line(&format!(
                "listing {}: {e}",
                paralog_aggregate::objset::display_path(store, rel).display()
            ));
            None
        }
    }
}

/// A directory of members inside a set on a POSIX remote `root` (`node0`
/// of the member `node0/rank-7.dat`; no directory holds it on the remote):
/// the set directory and the directory's entries.
pub fn member_dir(root: &Path, rel: &[u8]) -> Option<(PathBuf, Entries)> {
    let (set_dir, sub) = member_of(root, rel)?;
    let set = SETS.get(&set_dir).ok()??;
    let e = entries_below(&set, &sub);
    (!e.is_empty()).then_some((set_dir, e))
}

/// The same on an object layout: the set directory's name and the entries.
pub fn obj_member_dir(store: &ObjStore, rel: &[u8]) -> Option<(Vec<u8>, Entries)> {
    let (set_dir, sub) = paralog_aggregate::objset::find_set(store, rel)?;
    let set = SETS.get_obj(store, &set_dir).ok()??;
    let e = entries_below(&set, &sub);
    (!e.is_empty()).then_some((set_dir, e))
}

/// The first component of each member: a file, or a directory of members.
fn entries(set: &paralog_aggregate::SetReader) -> Vec<(Vec<u8>, u8)> {
    entries_below(set, b"")
}

/// The next component of each member below `sub` (a directory of members,
/// empty: the set directory itself). Members are sorted by path, so the
/// members below one directory are next to each other.
fn entries_below(set: &paralog_aggregate::SetReader, sub: &[u8]) -> Vec<(Vec<u8>, u8)> {
    let mut out: Vec<(Vec<u8>, u8)> = Vec::new();
    for m in &set.record().members {
        let rest = match m.path.strip_prefix(sub) {
            _ if sub.is_empty() => &m.path[..],
            Some([b'/', rest @ ..]) => rest,
            _ => continue,
        };
        let (name, t) = match rest.iter().position(|&b| b == b'/') {
            Some(i) => (rest[..i].to_vec(), libc::DT_DIR),
            None => (rest.to_vec(), libc::DT_REG),
        };
        if out.last().is_none_or(|l| l.0 != name) {
            out.push((name, t));
        }
    }
    out
}

/// Whether a name in a set directory is one of the set's own files.
pub fn is_set_file(name: &[u8]) -> bool {
    paralog_aggregate::format::is_reserved_name(name)
}

/// The checkpoint sets on an S3 remote as the node-local index lists them
/// (`paralog_aggregate::store::S3_INDEX`, written before the program
/// started): read once per process.
static S3_SETS: OnceLock<Option<(String, Vec<Vec<u8>>)>> = OnceLock::new();

/// Whether an open of `abs` (no file in the prefix, nothing in the log)
/// reads a checkpoint set on S3, which capture cannot read (no network
/// I/O): then one line names the set and `paralog extract`, and the open
/// fails with EIO (docs/aggregate.md, "Sets on S3"), rather than ENOENT
/// as if the checkpoint never existed.
pub fn refuse_s3_member(cfg: &Config, abs: &Path) -> bool {
    // S3 is the remote that is neither a POSIX root nor an object layout.
    if cfg.remote_root.is_some() || cfg.remote_objstore.is_some() {
        return false;
    }
    let Ok(rel) = abs.strip_prefix(&cfg.prefix) else {
        return false;
    };
    let rel = rel.as_os_str().as_bytes();
    let index = S3_SETS.get_or_init(|| {
        std::fs::read(cfg.local.join(paralog_aggregate::store::S3_INDEX))
            .ok()
            .and_then(|t| paralog_aggregate::store::decode_s3_index(&t))
    });
    let Some((url, sets)) = index else {
        return false;
    };
    let below = |d: &Vec<u8>| rel.len() > d.len() && rel.starts_with(d) && rel[d.len()] == b'/';
    let Some(set) = sets.iter().find(|d| below(d)) else {
        return false;
    };
    if std::fs::symlink_metadata(abs).is_ok() {
        // Extracted into the prefix: the real file answers.
        return false;
    }
    let set = String::from_utf8_lossy(set);
    report::line(&format!(
        "{}: in the checkpoint set {set} on S3, which capture cannot read (no network I/O in the program): run `paralog extract {url} {set} OUT` and read the member from OUT (docs/aggregate.md)",
        abs.display()
    ));
    true
}
