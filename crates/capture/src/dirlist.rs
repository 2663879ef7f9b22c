//! Directory listings under the prefix as the program sees its files:
//! what the real directory holds (the drained files, when the prefix is the
//! remote), what a POSIX remote other than the prefix holds, and the
//! captured files of this job that the log knows, less those it has
//! deleted. `opendir` of such a directory returns a listing built at once;
//! `readdir`, `readdir64`, `dirfd`, `rewinddir` and `closedir` serve it.

#![allow(clippy::missing_safety_doc)]

use std::collections::{BTreeMap, HashSet};
use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use libc::{c_char, c_int, dirent64, DIR};

use crate::guard::Guard;
use crate::pass;
use crate::posix::contain;
use crate::state::{lock, CResult, State};

/// A file of this job under a directory, as the log knows it.
pub struct Logged {
    /// Path below the directory.
    pub name: Vec<u8>,
    /// It exists in the program's view (not deleted).
    pub exists: bool,
    /// Some committed epoch of it is not drained yet.
    pub pending: bool,
}

/// The files the log knows under directory `dir` (directly in it, or at
/// any depth).
pub fn logged(st: &State, dir: &Path, recursive: bool) -> CResult<Vec<Logged>> {
    let rel: Vec<u8> = if dir == st.cfg.prefix {
        Vec::new()
    } else {
        st.rel_of(dir).ok_or(libc::EINVAL)?
    };
    let job_dir = st.cfg.local.join(&st.cfg.job);
    let Ok(entries) = std::fs::read_dir(&job_dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        if !paralog_log::layout::is_file_dir_name(&name.to_string_lossy()) {
            continue;
        }
        // The path record, or (format 2, after a crash left it missing or
        // empty) a committed manifest's paths.
        let Some(rec) = paralog_log::FileInventory::path_of(&e.path()) else {
            continue;
        };
        let below = if rel.is_empty() {
            &rec.rel[..]
        } else if rec.rel.starts_with(&rel) && rec.rel.get(rel.len()) == Some(&b'/') {
            &rec.rel[rel.len() + 1..]
        } else {
            continue;
        };
        if below.is_empty() || (!recursive && below.contains(&b'/')) {
            continue;
        }
        let abs = st.cfg.prefix.join(OsStr::from_bytes(&rec.rel));
        let c = st.committed(&abs)?;
        out.push(Logged {
            name: below.to_vec(),
            exists: c.exists,
            pending: !c.view.lf.epochs.is_empty(),
        });
    }
    Ok(out)
}

struct Listing {
    real: *mut DIR,
    /// name -> (d_type, d_ino)
    entries: Vec<(Vec<u8>, u8, u64)>,
    pos: usize,
    ent: dirent64,
}

static OURS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);
static N_OURS: AtomicUsize = AtomicUsize::new(0);

fn ours(d: *mut DIR) -> bool {
    N_OURS.load(Ordering::Relaxed) != 0
        && OURS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|s| s.contains(&(d as usize)))
}

unsafe fn read_all(d: *mut DIR, into: &mut BTreeMap<Vec<u8>, (u8, u64)>) {
    loop {
        let Some(e) = crate::real::readdir64().map(|f| f(d)) else {
            return;
        };
        if e.is_null() {
            return;
        }
        let name = CStr::from_ptr((*e).d_name.as_ptr()).to_bytes().to_vec();
        // The drain's version of a renamed file in the making (docs/format.md,
        // "Namespace operations"): not a file of the program's.
        if paralog_backend::posix::is_replace_temp(&name) {
            continue;
        }
        into.insert(name, ((*e).d_type, (*e).d_ino));
    }
}

/// The directory a path names, if it is under the prefix (or is it) and
/// capture is on.
pub(crate) fn listed_dir(abs: PathBuf) -> Option<PathBuf> {
    match crate::state::settings() {
        crate::settings::Settings::On(c)
            if abs.starts_with(&c.prefix) && !crate::posix::is_mpi_helper_file(&abs) =>
        {
            Some(abs)
        }
        _ => None,
    }
}

/// A set directory's members in place of the set's own files.
fn add_members(names: &mut BTreeMap<Vec<u8>, (u8, u64)>, members: Vec<(Vec<u8>, u8)>) {
    names.retain(|n, _| !crate::sets::is_set_file(n));
    for (name, t) in members {
        let ino = 1u64 << 62 | names.len() as u64;
        names.entry(name).or_insert((t, ino));
    }
}

/// A listing over `real`: an open directory stream of `abs` itself, or
/// (`stand_in`) of the remote directory standing in for it when the
/// prefix lacks it (`remotedir`), whose entries are not the program's
/// names as they are (an object layout's metadata) but are read below.
unsafe fn make_listing(real: *mut DIR, abs: &Path, stand_in: bool) -> CResult<*mut DIR> {
    let mut names = BTreeMap::new();
    if !stand_in {
        read_all(real, &mut names);
        if let Some(f) = crate::real::rewinddir() {
            f(real);
        }
    }
    let listing = Box::new(Listing {
        real,
        entries: view_names(names, abs)?,
        pos: 0,
        ent: std::mem::zeroed(),
    });
    let p = Box::into_raw(listing) as *mut DIR;
    OURS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(p as usize);
    N_OURS.fetch_add(1, Ordering::Relaxed);
    Ok(p)
}

/// The entries of directory `abs` in the program's view: `names` (the
/// real directory's) with the remote's, a set's members and this job's
/// files.
unsafe fn view_names(
    mut names: BTreeMap<Vec<u8>, (u8, u64)>,
    abs: &Path,
) -> CResult<Vec<(Vec<u8>, u8, u64)>> {
    let mut slot = lock();
    let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
    // The names an object layout holds here (a POSIX remote's are read
    // next, as its directory's entries).
    for (name, t) in crate::remotedir::obj_entries(st, abs) {
        let ino = 1u64 << 61 | names.len() as u64;
        names.entry(name).or_insert((t, ino));
    }
    if let Some(root) = st.cfg.remote_root.as_ref().filter(|r| **r != st.cfg.prefix) {
        let remote = match st.rel_of(abs) {
            Some(rel) => root.join(OsStr::from_bytes(&rel)),
            None => root.clone(),
        };
        let c = std::ffi::CString::new(remote.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)?;
        let rd = pass!(opendir(c.as_ptr()), std::ptr::null_mut());
        if !rd.is_null() {
            read_all(rd, &mut names);
            if let Some(f) = crate::real::closedir() {
                f(rd);
            }
        }
    }
    // A checkpoint set directory shows its members, not its own files.
    if let Some(root) = st.cfg.remote_root.as_ref() {
        let remote = match st.rel_of(abs) {
            Some(rel) => root.join(OsStr::from_bytes(&rel)),
            None => root.clone(),
        };
        if let Some(members) = crate::sets::listing(&remote) {
            add_members(&mut names, members);
        } else if let Some((_, members)) = st
            .rel_of(abs)
            .and_then(|r| crate::sets::member_dir(root, &r))
        {
            // A directory of members inside a set (`set/node0`).
            add_members(&mut names, members);
        }
    }
    if let (Some(url), Some(rel)) = (st.cfg.remote_objstore.as_ref(), st.rel_of(abs)) {
        let store = paralog_backend::objstore::ObjStore::new(url);
        if let Some(members) = crate::sets::listing_obj(&store, &rel) {
            add_members(&mut names, members);
        } else if let Some((_, members)) = crate::sets::obj_member_dir(&store, &rel) {
            add_members(&mut names, members);
        }
    }
    for f in logged(st, abs, false)? {
        if f.exists {
            let ino = 1u64 << 63 | names.len() as u64;
            names.entry(f.name).or_insert((libc::DT_REG, ino));
        } else {
            names.remove(&f.name);
        }
    }
    Ok(names.into_iter().map(|(n, (t, i))| (n, t, i)).collect())
}

unsafe fn open_listing(path: *const c_char) -> Option<*mut DIR> {
    let g = Guard::enter()?;
    // A name relative to a dead directory (remotefd.rs): by its path.
    let rewritten = crate::remotefd::absolute(libc::AT_FDCWD, path);
    let path = rewritten.as_ref().map_or(path, |c| c.as_ptr());
    let p = Path::new(OsStr::from_bytes(CStr::from_ptr(path).to_bytes()));
    let abs = listed_dir(crate::state::resolve(libc::AT_FDCWD, p)?)?;
    let r = contain("opendir", std::ptr::null_mut(), || {
        let real = pass!(opendir(path), std::ptr::null_mut());
        if !real.is_null() {
            return make_listing(real, &abs, false);
        }
        let err = crate::state::errno();
        // A directory only the remote holds (a new job on a fresh prefix):
        // its stream is a dead directory's, whose descriptor (`dirfd`)
        // capture knows as this directory.
        let fd = match err {
            libc::ENOENT => {
                let mut slot = lock();
                let st = State::get(&mut slot).ok_or(err)?;
                crate::remotefd::open(st, &abs, libc::O_CLOEXEC)?
            }
            _ => None,
        };
        let Some(fd) = fd else {
            return Err(err);
        };
        let real = pass!(fdopendir(fd), std::ptr::null_mut());
        if real.is_null() {
            crate::remotefd::forget(fd);
            libc::close(fd);
            return Err(err);
        }
        make_listing(real, &abs, true)
    });
    drop(g);
    Some(r)
}

/// `fdopendir` (Python's `os.scandir(fd)`, `shutil.rmtree`, `rm -r`).
#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    let listed = Guard::enter().and_then(|g| {
        // A directory only the remote has (remotefd.rs), or a real one.
        if let Some(abs) = crate::remotefd::path_of(fd) {
            return Some((g, abs, true));
        }
        let abs = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
        Some((g, listed_dir(abs)?, false))
    });
    let real = pass!(fdopendir(fd), std::ptr::null_mut());
    match listed {
        Some((_g, abs, stand_in)) if !real.is_null() => {
            contain("fdopendir", std::ptr::null_mut(), || {
                make_listing(real, &abs, stand_in)
            })
        }
        _ => real,
    }
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    if path.is_null() {
        return pass!(opendir(path), std::ptr::null_mut());
    }
    open_listing(path).unwrap_or_else(|| pass!(opendir(path), std::ptr::null_mut()))
}

unsafe fn next(d: *mut DIR) -> *mut dirent64 {
    let l = &mut *(d as *mut Listing);
    let Some((name, t, ino)) = l.entries.get(l.pos) else {
        return std::ptr::null_mut();
    };
    l.pos += 1;
    let e = &mut l.ent;
    let n = name.len().min(e.d_name.len() - 1);
    for (i, &b) in name[..n].iter().enumerate() {
        e.d_name[i] = b as c_char;
    }
    e.d_name[n] = 0;
    e.d_ino = *ino;
    e.d_off = l.pos as i64;
    e.d_type = *t;
    e.d_reclen = std::mem::size_of::<dirent64>() as u16;
    e
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut libc::dirent {
    if ours(d) {
        // dirent and dirent64 have one layout on 64-bit Linux.
        return next(d) as *mut libc::dirent;
    }
    pass!(readdir(d), std::ptr::null_mut())
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut dirent64 {
    if ours(d) {
        return next(d);
    }
    pass!(readdir64(d), std::ptr::null_mut())
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    if ours(d) {
        (*(d as *mut Listing)).pos = 0;
        return;
    }
    if let Some(f) = crate::real::rewinddir() {
        f(d)
    }
}

#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut DIR) -> c_int {
    if ours(d) {
        return pass!(dirfd((*(d as *mut Listing)).real), -1);
    }
    pass!(dirfd(d), -1)
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    if ours(d) {
        if let Some(s) = OURS.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            s.remove(&(d as usize));
        }
        N_OURS.fetch_sub(1, Ordering::Relaxed);
        let l = Box::from_raw(d as *mut Listing);
        crate::remotefd::forget(pass!(dirfd(l.real), -1));
        return pass!(closedir(l.real), -1);
    }
    crate::remotefd::forget(pass!(dirfd(d), -1));
    pass!(closedir(d), -1)
}

/// `getdents64` of a descriptor of a directory only the remote has
/// (remotefd.rs): the entries of its listing, from where the last call
/// ended; other descriptors are the kernel's.
#[no_mangle]
pub unsafe extern "C" fn getdents64(fd: c_int, buf: *mut libc::c_void, n: usize) -> isize {
    let Some(abs) = crate::remotefd::path_of(fd) else {
        return pass!(getdents64(fd, buf, n), -1);
    };
    let Some(_g) = Guard::enter() else {
        return pass!(getdents64(fd, buf, n), -1);
    };
    contain("getdents64", -1, || {
        let entries = view_names(BTreeMap::new(), &abs)?;
        let mut at = crate::remotefd::cursor(fd);
        let mut used = 0usize;
        // struct linux_dirent64: ino, off, reclen, type, the name and its
        // NUL, padded to 8 bytes.
        while let Some((name, t, ino)) = entries.get(at) {
            let len = (19 + name.len() + 1).next_multiple_of(8);
            if used + len > n {
                if used == 0 {
                    return Err(libc::EINVAL);
                }
                break;
            }
            let rec = std::slice::from_raw_parts_mut((buf as *mut u8).add(used), len);
            rec.fill(0);
            rec[0..8].copy_from_slice(&ino.to_ne_bytes());
            rec[8..16].copy_from_slice(&(at as i64 + 1).to_ne_bytes());
            rec[16..18].copy_from_slice(&(len as u16).to_ne_bytes());
            rec[18] = *t;
            rec[19..19 + name.len()].copy_from_slice(name);
            used += len;
            at += 1;
        }
        crate::remotefd::set_cursor(fd, at);
        Ok(used as isize)
    })
}
