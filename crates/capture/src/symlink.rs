//! Symbolic links made under the prefix (`tar -x` of an archive that holds
//! some, `ln -s`). A link has no bytes to log: it is made in the prefix at
//! once, so the program resolves and reads it as without paralog, and, like
//! a directory (`namespace.rs`), on a POSIX remote other than the prefix
//! too, since nothing else would bring it there. The object layout and S3
//! hold no links: the link stays in the prefix and one line says so, never
//! silently.

#![allow(clippy::missing_safety_doc)]

use std::ffi::CStr;
use std::path::Path;

use libc::{c_char, c_int};

use crate::namespace::{at_path, c_path, remote_dir, wait_drained};
use crate::pass;
use crate::posix::{contain, prefix_path};
use crate::report;
use crate::state::{self, lock, CResult, State};

/// Where a link made in the prefix must be made again, if anywhere.
enum Mirror {
    /// The prefix is the remote (or capture is not set up): nothing more.
    None,
    /// A POSIX remote other than the prefix: the same link there.
    Posix(std::path::PathBuf),
    /// A remote that holds no links (object layout, S3).
    NoLinks,
}

unsafe fn symlink_captured(
    target: *const c_char,
    abs: &Path,
    real: impl FnOnce() -> c_int,
) -> CResult<c_int> {
    let (mirror, pending) = {
        let mut slot = lock();
        let Some(st) = State::get(&mut slot) else {
            return Ok(real());
        };
        let c = st.committed(abs)?;
        // A file of the program's view that is not (yet) in the prefix:
        // the name is taken, as the real call would say if it were.
        if c.exists {
            return Err(libc::EEXIST);
        }
        let mirror = if st.cfg.remote_root.as_ref() == Some(&st.cfg.prefix) {
            Mirror::None
        } else {
            match remote_dir(st, abs) {
                Some(r) => Mirror::Posix(r),
                None => Mirror::NoLinks,
            }
        };
        (mirror, !c.view.lf.epochs.is_empty())
    };
    // The name had a file that was deleted (GNU tar extracts a link over a
    // placeholder file it made and removed): its epochs must reach the
    // remote first, or their drain would land on the link.
    if pending {
        wait_drained(abs, "symlink")?;
    }
    if real() != 0 {
        return Err(state::errno());
    }
    let shown = || CStr::from_ptr(target).to_string_lossy().into_owned();
    match mirror {
        Mirror::None => {}
        Mirror::Posix(r) => {
            let c = c_path(&r)?;
            if let Some(f) = crate::real::symlink() {
                if f(target, c.as_ptr()) != 0 && state::errno() != libc::EEXIST {
                    report::line(&format!(
                        "symbolic link {} -> {} on the remote: {}",
                        r.display(),
                        shown(),
                        std::io::Error::last_os_error()
                    ));
                }
            }
        }
        Mirror::NoLinks => report::line(&format!(
            "symbolic link {} -> {} stays in the prefix: the remote (object layout or S3) holds no links",
            abs.display(),
            shown()
        )),
    }
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, linkpath: *const c_char) -> c_int {
    let Some((_g, abs, _)) = prefix_path(linkpath) else {
        return pass!(symlink(target, linkpath), -1);
    };
    contain("symlink", -1, || {
        symlink_captured(target, &abs, || pass!(symlink(target, linkpath), -1))
    })
}

#[no_mangle]
pub unsafe extern "C" fn symlinkat(
    target: *const c_char,
    dirfd: c_int,
    linkpath: *const c_char,
) -> c_int {
    let Some((_g, abs)) = at_path(dirfd, linkpath) else {
        return pass!(symlinkat(target, dirfd, linkpath), -1);
    };
    contain("symlinkat", -1, || {
        symlink_captured(target, &abs, || {
            pass!(symlinkat(target, dirfd, linkpath), -1)
        })
    })
}
