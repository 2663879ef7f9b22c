//! Files under the prefix that a run created or changed without capture
//! seeing them (a statically linked program, a child started with capture
//! turned off, an entry point capture does not handle): `paralog run` names
//! them at the end, with the entry points of the program that capture does
//! not handle, and exits non-zero. Nothing is lost silently.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A directory tree too large to walk twice per run is not checked.
const MAX_ENTRIES: usize = 20_000;

/// (modification time in ns, size, inode) of every regular file.
pub struct Snapshot(Option<HashMap<PathBuf, (i128, u64, u64)>>);

fn walk(root: &Path) -> Option<HashMap<PathBuf, (i128, u64, u64)>> {
    let mut out = HashMap::new();
    let mut stack = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                return None;
            }
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                let t = m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128;
                out.insert(e.path(), (t, m.len(), m.ino()));
            }
        }
    }
    Some(out)
}

impl Snapshot {
    pub fn take(prefix: &Path) -> Snapshot {
        Snapshot(walk(prefix))
    }

    /// Files new or changed since the snapshot whose path (relative to the
    /// prefix) capture did not log. `None`: the tree is too large to check.
    pub fn missed(&self, prefix: &Path, captured: &BTreeSet<Vec<u8>>) -> Option<Vec<PathBuf>> {
        use std::os::unix::ffi::OsStrExt;
        let before = self.0.as_ref()?;
        let now = walk(prefix)?;
        let mut out: Vec<PathBuf> = now
            .into_iter()
            .filter(|(p, meta)| before.get(p) != Some(meta))
            // Shared through the real file system by design (docs/capture.md).
            .filter(|(p, _)| !paralog_settings::is_mpi_helper_file(p))
            // A checkpoint set's own files (docs/aggregate.md): the server's.
            .filter(|(p, _)| {
                use std::os::unix::ffi::OsStrExt;
                !p.file_name()
                    .is_some_and(|n| paralog_aggregate::format::is_reserved_name(n.as_bytes()))
            })
            .filter(|(p, _)| {
                p.strip_prefix(prefix)
                    .is_ok_and(|rel| !captured.contains(rel.as_os_str().as_bytes()))
            })
            .map(|(p, _)| p)
            .collect();
        out.sort();
        Some(out)
    }
}

/// The relative paths of every file the job's log knows.
pub fn captured_paths(root: &Path, job: &str) -> BTreeSet<Vec<u8>> {
    paralog_log::Inventory::scan(root)
        .ok()
        .and_then(|inv| inv.job(job).cloned())
        .map(|j| {
            j.files
                .iter()
                .filter_map(|f| f.record.as_ref().map(|r| r.rel.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The program a command runs: the first word, or for a launcher (mpirun,
/// mpiexec, srun) the first later word that is an executable.
pub fn program_of(command: &[String]) -> Option<PathBuf> {
    let resolve = |w: &str| -> Option<PathBuf> {
        let p = Path::new(w);
        if w.contains('/') {
            return p.is_file().then(|| p.to_path_buf());
        }
        std::env::var_os("PATH")?
            .to_str()?
            .split(':')
            .map(|d| Path::new(d).join(w))
            .find(|c| c.is_file())
    };
    let first = command.first()?;
    let name = Path::new(first).file_name()?.to_string_lossy().into_owned();
    let launcher = ["mpirun", "mpiexec", "srun"]
        .iter()
        .any(|l| name.starts_with(l));
    if !launcher {
        return resolve(first);
    }
    command[1..]
        .iter()
        .filter(|w| !w.starts_with('-') && w.parse::<f64>().is_err())
        .find_map(|w| resolve(w))
}

/// The lines `paralog run` prints for missed files.
pub fn report(missed: &[PathBuf], command: &[String]) -> Vec<String> {
    let mut lines: Vec<String> = missed
        .iter()
        .map(|p| {
            format!(
                "MISSED: {} was created or changed past capture: it is not in the log and does not reach the remote through paralog",
                p.display()
            )
        })
        .collect();
    if let Some(prog) = program_of(command) {
        let hint = match crate::check_symbols::not_handled(&prog) {
            Ok(syms) if !syms.is_empty() => format!(
                "{} (or its libraries) uses entry points capture does not handle: {}; `paralog check-symbols {}` says more",
                prog.display(),
                syms.join(", "),
                prog.display()
            ),
            _ => format!(
                "{} uses no entry point capture does not handle: the file was written by a process without capture (a static binary, or LD_PRELOAD removed from its environment)",
                prog.display()
            ),
        };
        lines.push(format!("MISSED: {hint}"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_new_and_changed_files_not_captured() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("kept"), b"1").unwrap();
        std::fs::write(d.path().join("changed"), b"1").unwrap();
        let snap = Snapshot::take(d.path());
        std::fs::write(d.path().join("changed"), b"22").unwrap();
        std::fs::write(d.path().join("sub/new"), b"3").unwrap();
        std::fs::write(d.path().join("logged"), b"4").unwrap();
        let captured: BTreeSet<Vec<u8>> = [b"logged".to_vec()].into();
        let missed = snap.missed(d.path(), &captured).unwrap();
        assert_eq!(
            missed,
            vec![d.path().join("changed"), d.path().join("sub/new")]
        );
    }

    #[test]
    fn the_program_behind_a_launcher() {
        let cmd = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            program_of(&cmd(&["/bin/sh", "-c", "x"])),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(
            program_of(&cmd(&["mpirun", "-n", "4", "/bin/true"])),
            Some(PathBuf::from("/bin/true"))
        );
    }
}
