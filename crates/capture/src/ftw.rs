//! `ftw`, `nftw` and their `*64` twins over a tree that is under the prefix
//! or holds it: glibc's walk lists directories and stats entries with its
//! internal calls, past the wrappers, and would see the real prefix only
//! (not the files that exist in capture's view alone). So the walk is made
//! here, as glibc makes it, with capture's `opendir`/`readdir64` and `stat`/
//! `lstat`: the same type flags, `struct FTW` (base, level), flags
//! (`FTW_PHYS`, `FTW_MOUNT`, `FTW_CHDIR`, `FTW_DEPTH`, `FTW_ACTIONRETVAL`),
//! return values, and each directory visited once. A directory's names are
//! read whole before its entries are visited, so `nopenfd` bounds nothing
//! (one directory is open at a time). Any other tree goes to glibc.

#![allow(clippy::missing_safety_doc)]

use std::collections::HashSet;
use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use libc::{c_char, c_int, c_void};

use crate::guard::Guard;

// <ftw.h>: type flags, flags and (FTW_ACTIONRETVAL) callback answers.
const FTW_F: c_int = 0;
const FTW_D: c_int = 1;
const FTW_DNR: c_int = 2;
const FTW_NS: c_int = 3;
const FTW_SL: c_int = 4;
const FTW_DP: c_int = 5;
const FTW_SLN: c_int = 6;
const FTW_PHYS: c_int = 1;
const FTW_MOUNT: c_int = 2;
const FTW_CHDIR: c_int = 4;
const FTW_DEPTH: c_int = 8;
const FTW_ACTIONRETVAL: c_int = 16;
const FTW_STOP: c_int = 1;
const FTW_SKIP_SUBTREE: c_int = 2;
const FTW_SKIP_SIBLINGS: c_int = 3;

/// `struct FTW`.
#[repr(C)]
struct Ftw {
    base: c_int,
    level: c_int,
}

type NftwFn = unsafe extern "C" fn(*const c_char, *const libc::stat, c_int, *mut Ftw) -> c_int;
type FtwFn = unsafe extern "C" fn(*const c_char, *const libc::stat, c_int) -> c_int;

#[derive(Clone, Copy)]
enum Callback {
    Old(FtwFn),
    New(NftwFn),
}

struct Walk {
    cb: Callback,
    flags: c_int,
    dev: u64,
    /// Directories already visited (dev, ino): a walk that follows links
    /// enters each once.
    seen: HashSet<(u64, u64)>,
    /// The absolute form of the walk's paths, for `FTW_CHDIR`.
    cwd: PathBuf,
}

/// What the walk does after an entry.
enum Next {
    Go,
    /// Skip the rest of this directory's entries.
    SkipSiblings,
    /// End the walk with this value.
    Stop(c_int),
}

/// Whether capture walks the tree at `path`: capture is on and the tree is
/// under the prefix or holds it.
unsafe fn ours(path: *const c_char) -> bool {
    if path.is_null() {
        return false;
    }
    let Some(_g) = Guard::enter() else {
        return false;
    };
    let p = Path::new(OsStr::from_bytes(CStr::from_ptr(path).to_bytes()));
    match (
        crate::state::settings(),
        crate::state::resolve(libc::AT_FDCWD, p),
    ) {
        (crate::settings::Settings::On(c), Some(abs)) => {
            abs.starts_with(&c.prefix) || c.prefix.starts_with(&abs)
        }
        _ => false,
    }
}

fn errno() -> c_int {
    crate::state::errno()
}

impl Walk {
    /// stat or lstat (through capture's wrappers) as the flags say.
    unsafe fn stat(&self, path: &CStr, buf: &mut libc::stat, phys: bool) -> c_int {
        if phys {
            crate::stat::lstat(path.as_ptr(), buf)
        } else {
            crate::stat::stat(path.as_ptr(), buf)
        }
    }

    unsafe fn call(
        &self,
        path: &CStr,
        sb: &libc::stat,
        flag: c_int,
        base: usize,
        level: usize,
    ) -> c_int {
        match self.cb {
            // ftw's flags are fewer: a link is a file, a directory after
            // its entries a directory, a dangling link an unstat'able entry.
            Callback::Old(f) => {
                let flag = match flag {
                    FTW_SL => FTW_F,
                    FTW_DP => FTW_D,
                    FTW_SLN => FTW_NS,
                    other => other,
                };
                f(path.as_ptr(), sb, flag)
            }
            Callback::New(f) => {
                let mut ftw = Ftw {
                    base: base as c_int,
                    level: level as c_int,
                };
                f(path.as_ptr(), sb, flag, &mut ftw)
            }
        }
    }

    /// The walk's answer to the callback's return value `r`.
    fn next(&self, r: c_int, dir_pre: bool, descend: &mut bool) -> Next {
        if self.flags & FTW_ACTIONRETVAL == 0 {
            return if r == 0 { Next::Go } else { Next::Stop(r) };
        }
        match r {
            FTW_STOP => Next::Stop(FTW_STOP),
            FTW_SKIP_SUBTREE if dir_pre => {
                *descend = false;
                Next::Go
            }
            FTW_SKIP_SIBLINGS => {
                *descend = false;
                Next::SkipSiblings
            }
            _ => Next::Go,
        }
    }

    /// Visit `path` (whose name starts at `base`) at `level`.
    unsafe fn visit(&mut self, path: &[u8], base: usize, level: usize) -> Result<Next, ()> {
        let c = CString::new(path).map_err(|_| crate::state::set_errno(libc::EINVAL))?;
        let phys = self.flags & FTW_PHYS != 0;
        let mut sb: libc::stat = std::mem::zeroed();
        let mut flag = FTW_F;
        if self.stat(&c, &mut sb, phys) != 0 {
            let e = errno();
            if level == 0 || (e != libc::EACCES && e != libc::ENOENT) {
                let mut l: libc::stat = std::mem::zeroed();
                let dangling = !phys
                    && e == libc::ENOENT
                    && crate::stat::lstat(c.as_ptr(), &mut l) == 0
                    && l.st_mode & libc::S_IFMT == libc::S_IFLNK;
                if !dangling {
                    crate::state::set_errno(e);
                    return Err(());
                }
                sb = l;
                flag = FTW_SLN;
            } else {
                flag = FTW_NS;
                let mut l: libc::stat = std::mem::zeroed();
                if !phys
                    && e == libc::ENOENT
                    && crate::stat::lstat(c.as_ptr(), &mut l) == 0
                    && l.st_mode & libc::S_IFMT == libc::S_IFLNK
                {
                    sb = l;
                    flag = FTW_SLN;
                }
            }
        } else if sb.st_mode & libc::S_IFMT == libc::S_IFLNK {
            flag = FTW_SL;
        } else if sb.st_mode & libc::S_IFMT == libc::S_IFDIR {
            flag = FTW_D;
        }
        if level == 0 {
            self.dev = sb.st_dev;
        }
        if flag != FTW_D {
            let r = self.call(&c, &sb, flag, base, level);
            return Ok(self.next(r, false, &mut false));
        }
        if self.flags & FTW_MOUNT != 0 && sb.st_dev != self.dev {
            return Ok(Next::Go);
        }
        if !self.seen.insert((sb.st_dev, sb.st_ino)) {
            return Ok(Next::Go);
        }
        self.dir(&c, &sb, base, level)
    }

    /// A directory: its own visit (before or after its entries), then them.
    unsafe fn dir(
        &mut self,
        c: &CStr,
        sb: &libc::stat,
        base: usize,
        level: usize,
    ) -> Result<Next, ()> {
        let names = match self.names(c) {
            Ok(n) => n,
            Err(libc::EACCES) => {
                let r = self.call(c, sb, FTW_DNR, base, level);
                return Ok(self.next(r, false, &mut false));
            }
            Err(e) => {
                crate::state::set_errno(e);
                return Err(());
            }
        };
        let depth = self.flags & FTW_DEPTH != 0;
        let mut descend = true;
        if !depth {
            let r = self.call(c, sb, FTW_D, base, level);
            match self.next(r, true, &mut descend) {
                Next::Go => {}
                other => return Ok(other),
            }
        }
        if descend {
            let path = c.to_bytes();
            let mut child = path.to_vec();
            if child.last() != Some(&b'/') {
                child.push(b'/');
            }
            let child_base = child.len();
            let chdir = self.flags & FTW_CHDIR != 0;
            if chdir {
                self.chdir(path)?;
            }
            for name in names {
                child.truncate(child_base);
                child.extend_from_slice(&name);
                match self.visit(&child, child_base, level + 1)? {
                    Next::Go => {}
                    Next::SkipSiblings => break,
                    Next::Stop(r) => return Ok(Next::Stop(r)),
                }
            }
            if chdir {
                // Back where the directory's own entry was visited.
                self.chdir(&path[..base])?;
            }
        }
        if depth {
            let r = self.call(c, sb, FTW_DP, base, level);
            return Ok(self.next(r, false, &mut false));
        }
        Ok(Next::Go)
    }

    /// The names in directory `c` as capture lists them.
    unsafe fn names(&self, c: &CStr) -> Result<Vec<Vec<u8>>, c_int> {
        let d = crate::dirlist::opendir(c.as_ptr());
        if d.is_null() {
            return Err(errno());
        }
        let mut names = Vec::new();
        loop {
            let e = crate::dirlist::readdir64(d);
            if e.is_null() {
                break;
            }
            let n = CStr::from_ptr((*e).d_name.as_ptr()).to_bytes();
            if n != b"." && n != b".." {
                names.push(n.to_vec());
            }
        }
        crate::dirlist::closedir(d);
        Ok(names)
    }

    /// `chdir` to `dir` (a path of the walk; "" is the directory the walk
    /// started in).
    unsafe fn chdir(&self, dir: &[u8]) -> Result<(), ()> {
        let p = Path::new(OsStr::from_bytes(dir));
        let abs = if dir.is_empty() {
            self.cwd.clone()
        } else {
            self.cwd.join(p)
        };
        let c = CString::new(abs.as_os_str().as_bytes()).map_err(|_| ())?;
        if libc::chdir(c.as_ptr()) != 0 {
            return Err(());
        }
        Ok(())
    }
}

/// glibc's `ftw_startup` on capture's view.
unsafe fn walk(path: *const c_char, cb: Callback, flags: c_int) -> c_int {
    let mut root = CStr::from_ptr(path).to_bytes().to_vec();
    if root.is_empty() {
        crate::state::set_errno(libc::ENOENT);
        return -1;
    }
    while root.len() > 1 && root.last() == Some(&b'/') {
        root.pop();
    }
    let base = root.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let Ok(cwd) = std::env::current_dir() else {
        return -1;
    };
    let mut w = Walk {
        cb,
        flags,
        dev: 0,
        seen: HashSet::new(),
        cwd,
    };
    let chdir = flags & FTW_CHDIR != 0;
    if chdir && base > 0 && w.chdir(&root[..base]).is_err() {
        return -1;
    }
    let r = match w.visit(&root, base, 0) {
        Ok(Next::Stop(r)) => r,
        Ok(_) => 0,
        Err(()) => -1,
    };
    if chdir {
        let e = errno();
        let _ = w.chdir(b"");
        crate::state::set_errno(e);
    }
    r
}

crate::twins! {
    ftw, ftw64 => fn(path: *const c_char, f: *mut c_void, nopenfd: c_int) -> c_int, -1, |real| {
        if f.is_null() || !ours(path) {
            return real(path, f, nopenfd);
        }
        walk(path, Callback::Old(std::mem::transmute::<*mut c_void, FtwFn>(f)), 0)
    }
}

crate::twins! {
    nftw, nftw64 => fn(path: *const c_char, f: *mut c_void, nopenfd: c_int, flags: c_int) -> c_int, -1, |real| {
        if f.is_null() || !ours(path) {
            return real(path, f, nopenfd, flags);
        }
        walk(path, Callback::New(std::mem::transmute::<*mut c_void, NftwFn>(f)), flags)
    }
}
