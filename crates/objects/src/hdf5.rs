//! The HDF5 view of each version (the seed's): `ROOT/hdf5/<name>/v<n>.h5`,
//! a metadata-only HDF5 file whose dataset `/data` is a virtual dataset
//! mapping each chunk's box of the array onto `/chunks/<i>`, an
//! external-storage dataset over the first `C` bytes of the version's own
//! chunk file (absolute path: relative ones resolve only with
//! `HDF5_EXTFILE_PREFIX` set before HDF5 starts). Nothing is copied.
//!
//! The file is written and listed by `paralog-h5view`
//! (crates/objects/h5view, built by the Makefile with Debian's HDF5), so
//! this crate links no HDF5. Without the helper no HDF5 view is made (and
//! `view_file` says so); the Zarr view does not depend on it. A view
//! maker that makes many (a store's views thread, a server's publisher)
//! keeps the program running between views (crate::h5serve).
//!
//! HDF5 checks no checksum, and reads a truncated external file's missing
//! tail as zeros: `paralog obj verify` reads every chunk (its CRC-32C) and
//! checks that every mapping of the view is the version's chunk, whole.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::error::{io_err, Error, Result};
use crate::h5serve::{Served, ViewServer};
use crate::read::ArrayVersion;
use crate::store::Store;

/// The helper's file name (next to the `paralog` executable).
pub const HELPER: &str = "paralog-h5view";

static HELPER_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Where to find the helper when the running executable is not `paralog`
/// (the C library sets its own directory; first call wins).
pub fn set_helper_dir(dir: &Path) {
    let _ = HELPER_DIR.set(dir.to_path_buf());
}

/// The helper: `$PARALOG_H5VIEW`, else in the directory set by
/// [`set_helper_dir`], else next to the running executable.
pub fn helper() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PARALOG_H5VIEW") {
        return Some(PathBuf::from(p));
    }
    let near_exe = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(HELPER)));
    HELPER_DIR
        .get()
        .map(|d| d.join(HELPER))
        .into_iter()
        .chain(near_exe)
        .find(|p| p.is_file())
}

impl Store {
    /// Where the HDF5 view of version `n` of `name` is.
    pub fn view_file(&self, name: &str, n: u64) -> PathBuf {
        self.root()
            .join("hdf5")
            .join(name)
            .join(format!("v{n:010}.h5"))
    }
}

/// What each mapping must be: the chunk's box in the array, its source
/// dataset and box, and the chunk file's first `C` bytes.
fn expected(store: &Store, av: &ArrayVersion) -> Result<Vec<String>> {
    let m = &av.meta;
    let join = |v: &[u64]| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut lines = Vec::new();
    for i in 0..av.chunk_pieces().len() {
        let c = m.coords(i as u64);
        let origin: Vec<u64> = (0..m.ndim()).map(|k| c[k] * m.chunks[k]).collect();
        let valid = m.inside(&c);
        let file = chunk_file(store, av, i)?;
        lines.push(format!(
            "{} {} /chunks/{i} {} {} 0 {} {}",
            join(&origin),
            join(&valid),
            join(&vec![0; m.ndim()]),
            join(&valid),
            m.chunk_len(),
            file.display()
        ));
    }
    Ok(lines)
}

/// Chunk `i`'s file as an absolute path with no newline (the helper reads
/// one path a line).
fn chunk_file(store: &Store, av: &ArrayVersion, i: usize) -> Result<PathBuf> {
    let p = &av.chunk_pieces()[i];
    let rel = store.os.chunk_path(p.dir, &p.chunk);
    let abs = std::path::absolute(&rel).map_err(io_err(&rel, "make absolute"))?;
    if abs.as_os_str().as_encoded_bytes().contains(&b'\n') {
        return Err(Error::Invalid {
            name: av.name.clone(),
            why: format!("{}: a newline in the store's path", abs.display()),
        });
    }
    Ok(abs)
}

fn helper_failed(av: &ArrayVersion, what: &str, how: &str, said: &str) -> Error {
    Error::Invalid {
        name: av.name.clone(),
        why: format!(
            "version {}: {HELPER} {what} failed ({how}): {}",
            av.number,
            said.trim()
        ),
    }
}

/// Make the HDF5 view of a version if it does not exist; `None` without
/// the helper. Written under a temporary directory, then renamed. By
/// `server`'s co-process if given (and it can serve), else by the
/// one-shot program.
pub fn make_view(
    store: &Store,
    av: &ArrayVersion,
    server: Option<&ViewServer>,
) -> Result<Option<PathBuf>> {
    let Some(helper) = helper() else {
        return Ok(None);
    };
    let file = store.view_file(&av.name, av.number);
    if file.is_file() {
        return Ok(Some(file));
    }
    let tmp = crate::zarr::temp_beside(&file, av.number)?;
    std::fs::create_dir(&tmp).map_err(io_err(&tmp, "create view"))?;
    let made = (|| {
        let m = &av.meta;
        let mut input = serde_json::to_vec(&m.attrs).expect("JSON");
        input.push(b'\n');
        for i in 0..av.chunk_pieces().len() {
            let f = chunk_file(store, av, i)?;
            input.extend_from_slice(f.as_os_str().as_encoded_bytes());
            input.push(b'\n');
        }
        let out_file = tmp.join("v.h5");
        let args: Vec<Vec<u8>> = [
            out_file.as_os_str().as_encoded_bytes().to_vec(),
            m.dtype.name().into(),
            m.ndim().to_string().into(),
        ]
        .into_iter()
        .chain(
            m.shape
                .iter()
                .chain(&m.chunks)
                .map(|x| x.to_string().into()),
        )
        .collect();
        let served = match server {
            Some(s) => s.make(&helper, &args, &input, &out_file),
            None => Served::Unavailable,
        };
        match served {
            Served::Made => {}
            Served::Failed(said) => return Err(helper_failed(av, "make", "serving", &said)),
            Served::Unavailable => make_once(av, &helper, &args, &input)?,
        }
        std::fs::rename(&out_file, &file).map_err(io_err(&file, "place view"))
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    made.map(|()| Some(file))
}

/// The one-shot `paralog-h5view make`: a process for this view alone.
fn make_once(av: &ArrayVersion, helper: &Path, args: &[Vec<u8>], input: &[u8]) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let mut cmd = Command::new(helper);
    cmd.arg("make")
        .args(args.iter().map(|a| std::ffi::OsStr::from_bytes(a)))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| Error::Invalid {
        name: av.name.clone(),
        why: format!(
            "version {}: the HDF5 view was not made: its program {} cannot be run ({e}){}",
            av.number,
            helper.display(),
            match std::env::var_os("PARALOG_H5VIEW") {
                Some(_) => " (named by PARALOG_H5VIEW: set it to paralog-h5view, or unset it)",
                None => "",
            }
        ),
    })?;
    let mut stdin = child.stdin.take().expect("piped");
    // The helper stops reading at a failure; its stderr says why.
    let _ = stdin.write_all(input);
    drop(stdin);
    let out = child.wait_with_output().map_err(io_err(helper, "run"))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(helper_failed(av, "make", &out.status.to_string(), &said));
    }
    Ok(())
}

/// Check the HDF5 view of a version, if it has one: every mapping is its
/// chunk's box over the version's own chunk file, whole. `None`: no view.
pub fn check_view(store: &Store, av: &ArrayVersion) -> Result<Option<PathBuf>> {
    let file = store.view_file(&av.name, av.number);
    if !file.exists() {
        return Ok(None);
    }
    let Some(helper) = helper() else {
        return Err(Error::Invalid {
            name: av.name.clone(),
            why: format!(
                "version {}: {} cannot be checked without {HELPER} (set PARALOG_H5VIEW)",
                av.number,
                file.display()
            ),
        });
    };
    let out = Command::new(&helper)
        .arg("list")
        .arg(&file)
        .output()
        .map_err(io_err(&helper, "run"))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(helper_failed(av, "list", &out.status.to_string(), &said));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let m = &av.meta;
    let head = format!(
        "{} {}",
        m.dtype.name(),
        m.shape
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    if lines.next() != Some(head.as_str()) {
        return Err(Error::Damaged {
            path: file,
            offset: 0,
            what: format!("/data is not the version's {head}"),
        });
    }
    let found: Vec<&str> = lines.collect();
    for (i, want) in expected(store, av)?.iter().enumerate() {
        if found.get(i) != Some(&want.as_str()) {
            return Err(Error::Chunk {
                name: av.name.clone(),
                version: av.number,
                chunk: m.coords(i as u64),
                why: format!(
                    "{}: mapping {i} is {:?}, not the chunk's {want:?}: its readers would not read the chunk",
                    file.display(),
                    found.get(i).copied().unwrap_or("missing")
                ),
            });
        }
    }
    if found.len() as u64 != m.n_chunks() {
        return Err(Error::Damaged {
            path: file,
            offset: 0,
            what: format!("{} mappings for {} chunks", found.len(), m.n_chunks()),
        });
    }
    Ok(Some(file))
}

/// Remove the HDF5 views of versions of `name` no longer kept (the
/// versions listed after the views, as for the Zarr views: a view listed
/// was made after its version was published).
pub fn prune_views(store: &Store, name: &str) -> Result<()> {
    crate::zarr::prune(store, name, "hdf5", ".h5", |p| std::fs::remove_file(p))
}
