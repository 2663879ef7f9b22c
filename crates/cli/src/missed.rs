//! Files under the prefix that a run created or changed without capture
//! seeing them (a statically linked program, a child started with capture
//! turned off, an entry point capture does not handle): `paralog run` names
//! them at the end, with the entry points of the program that capture does
//! not handle, and exits non-zero; `paralog status` names those so far while
//! the run goes on. Nothing is lost silently.
//!
//! `run` lists the prefix before the program starts and keeps the list, the
//! prefix and the command in `<root>/.paralog-snapshot-<job>` (0600) until it
//! ends, where `status` finds them (docs/server.md). Both compare through
//! `RunSnapshot::missed`.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// A directory tree too large to walk twice per run is not checked.
const MAX_ENTRIES: usize = 20_000;

/// (modification time in ns, size, inode) of a regular file.
type Meta = (i128, u64, u64);

/// Every regular file under a prefix; `None`: too many entries to check.
struct Snapshot(Option<HashMap<PathBuf, Meta>>);

fn walk(root: &Path) -> Option<HashMap<PathBuf, Meta>> {
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
            // The prefix's shared event streams are the server's own
            // drain (docs/streams.md), not files written past capture.
            if m.is_dir() && dir == root && e.file_name() == paralog_stream::layout::STREAMS_DIR {
                continue;
            }
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
    fn take(prefix: &Path) -> Snapshot {
        Snapshot(walk(prefix))
    }

    /// Files new or changed since the snapshot whose path (relative to the
    /// prefix) capture did not log. `None`: the tree is too large to check.
    fn missed(&self, prefix: &Path, captured: &BTreeSet<Vec<u8>>) -> Option<Vec<PathBuf>> {
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

/// What `run` keeps for the comparison: the prefix, the command, and the
/// prefix's files before the program started.
pub struct RunSnapshot {
    pub prefix: PathBuf,
    pub command: Vec<String>,
    before: Snapshot,
}

/// The result of one comparison.
pub enum Missed {
    /// The prefix holds more than `MAX_ENTRIES` entries: not checked.
    TooLarge,
    /// The files created or changed past capture, and the lines naming them
    /// (with the program's entry points); both empty when there are none.
    Files {
        files: Vec<PathBuf>,
        lines: Vec<String>,
    },
}

const MAGIC: &str = "paralog prefix snapshot 1";

/// Where `run` keeps the snapshot of job `job` (a tools' entry of the root).
pub fn snapshot_path(root: &Path, job: &str) -> PathBuf {
    root.join(format!(
        "{}snapshot-{job}",
        paralog_log::layout::RUNTIME_PREFIX
    ))
}

/// A field of the snapshot file: bytes outside `!`..`~` and `%` as `%XX`.
fn esc(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        if c.is_ascii_graphic() && c != b'%' {
            s.push(c as char);
        } else {
            s.push_str(&format!("%{c:02X}"));
        }
    }
    s
}

fn unesc(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

impl RunSnapshot {
    pub fn take(prefix: &Path, command: &[String]) -> RunSnapshot {
        RunSnapshot {
            prefix: prefix.to_path_buf(),
            command: command.to_vec(),
            before: Snapshot::take(prefix),
        }
    }

    /// Write it where `status` finds it: 0600, whole or not at all (a
    /// temporary renamed into place).
    pub fn save(&self, root: &Path, job: &str) -> anyhow::Result<()> {
        let path = snapshot_path(root, job);
        let tmp = path.with_extension("tmp");
        let mut text = format!(
            "{MAGIC}\nprefix {}\ncommand",
            esc(self.prefix.as_os_str().as_bytes())
        );
        for w in &self.command {
            text.push(' ');
            text.push_str(&esc(w.as_bytes()));
        }
        text.push('\n');
        match &self.before.0 {
            None => text.push_str("unchecked\n"),
            Some(files) => {
                for (p, (t, len, ino)) in files {
                    let rel = p.strip_prefix(&self.prefix).unwrap_or(p);
                    text.push_str(&format!(
                        "{t} {len} {ino} {}\n",
                        esc(rel.as_os_str().as_bytes())
                    ));
                }
            }
        }
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(text.as_bytes())
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("renaming {}", tmp.display()))
    }

    /// The snapshot `run` keeps for job `job`; `None` if there is none (no
    /// `paralog run` of that job is going on).
    pub fn load(root: &Path, job: &str) -> anyhow::Result<Option<RunSnapshot>> {
        let path = snapshot_path(root, job);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Self::parse(&text)
            .map(Some)
            .with_context(|| format!("reading {}", path.display()))
    }

    fn parse(text: &str) -> anyhow::Result<RunSnapshot> {
        let bad = || anyhow::anyhow!("not a snapshot of {MAGIC:?}");
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            bail!(bad());
        }
        let prefix = lines
            .next()
            .and_then(|l| l.strip_prefix("prefix "))
            .and_then(unesc)
            .map(|b| PathBuf::from(std::ffi::OsString::from_vec(b)))
            .ok_or_else(bad)?;
        let command = lines
            .next()
            .and_then(|l| l.strip_prefix("command"))
            .ok_or_else(bad)?
            .split(' ')
            .filter(|w| !w.is_empty())
            .map(|w| unesc(w).map(|b| String::from_utf8_lossy(&b).into_owned()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?;
        let mut files = HashMap::new();
        let mut unchecked = false;
        for l in lines {
            if l == "unchecked" {
                unchecked = true;
                continue;
            }
            let mut w = l.splitn(4, ' ');
            let (Some(t), Some(len), Some(ino), Some(rel)) =
                (w.next(), w.next(), w.next(), w.next())
            else {
                bail!("a line that is no file: {l:?}");
            };
            let rel = unesc(rel).ok_or_else(bad)?;
            files.insert(
                prefix.join(std::ffi::OsString::from_vec(rel)),
                (t.parse()?, len.parse()?, ino.parse()?),
            );
        }
        Ok(RunSnapshot {
            prefix,
            command,
            before: Snapshot((!unchecked).then_some(files)),
        })
    }

    pub fn remove(root: &Path, job: &str) {
        let _ = std::fs::remove_file(snapshot_path(root, job));
    }

    /// The files under the prefix created or changed since the snapshot
    /// that the job's log (in `root`) does not know, named as `run` and
    /// `status` print them.
    pub fn missed(&self, root: &Path, job: &str) -> Missed {
        self.missed_of(&captured_paths(root, job))
    }

    /// As `missed`, with the job's captured paths already read.
    pub fn missed_of(&self, captured: &BTreeSet<Vec<u8>>) -> Missed {
        match self.before.missed(&self.prefix, captured) {
            None => Missed::TooLarge,
            Some(files) => {
                let lines = if files.is_empty() {
                    Vec::new()
                } else {
                    report(&files, &self.command)
                };
                Missed::Files { files, lines }
            }
        }
    }
}

/// What `paralog status` says of the files written past capture so far by
/// the run of `job` (`None`: a server of every job) whose log is in `root`,
/// as JSON: `checked`, and either `prefix`, `files` and `lines` (the MISSED
/// lines `run` prints), or `why` it was not checked.
pub fn status_json(root: &Path, job: Option<&str>) -> serde_json::Value {
    use serde_json::json;
    let Some(job) = job else {
        return json!({"checked": false,
            "why": "a server of every job: only `paralog run` lists the prefix before its program starts"});
    };
    let snap = match RunSnapshot::load(root, job) {
        Ok(Some(s)) => s,
        Ok(None) => {
            return json!({"checked": false, "why": format!(
                "no `paralog run` of job {job} is going on in {}: only run lists the prefix before its program starts",
                root.display())})
        }
        Err(e) => return json!({"checked": false, "why": format!("{e:#}")}),
    };
    let prefix = snap.prefix.to_string_lossy();
    match snap.missed(root, job) {
        Missed::TooLarge => json!({"checked": false, "prefix": prefix,
            "why": format!("the prefix holds more than {MAX_ENTRIES} entries: not checked")}),
        Missed::Files { files, lines } => json!({"checked": true, "prefix": prefix,
            "files": files.iter().map(|f| f.to_string_lossy()).collect::<Vec<_>>(),
            "lines": lines}),
    }
}

/// The relative paths of every file the job's log knows.
pub fn captured_paths(root: &Path, job: &str) -> BTreeSet<Vec<u8>> {
    let inv = paralog_log::Inventory::scan(root).ok();
    captured_in(inv.as_ref().and_then(|inv| inv.job(job)))
}

/// The relative paths of every file a job's inventory knows.
pub fn captured_in(job: Option<&paralog_log::reader::JobInventory>) -> BTreeSet<Vec<u8>> {
    job.map(|j| {
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

/// The lines `paralog run` and `paralog status` print for missed files.
fn report(missed: &[PathBuf], command: &[String]) -> Vec<String> {
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
    fn a_saved_snapshot_reads_back() {
        let d = tempfile::tempdir().unwrap();
        let prefix = d.path().join("pre fix");
        std::fs::create_dir_all(prefix.join("sub dir")).unwrap();
        std::fs::write(prefix.join("kept"), b"1").unwrap();
        std::fs::write(prefix.join("sub dir/100%\nodd"), b"1").unwrap();
        let root = d.path().join("local");
        std::fs::create_dir(&root).unwrap();
        let cmd = vec![
            "/bin/sh".to_string(),
            "-c".to_string(),
            "echo a b > x".to_string(),
        ];
        RunSnapshot::take(&prefix, &cmd).save(&root, "j").unwrap();
        let path = snapshot_path(&root, "j");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let back = RunSnapshot::load(&root, "j").unwrap().unwrap();
        assert_eq!(back.prefix, prefix);
        assert_eq!(back.command, cmd);
        std::fs::write(prefix.join("new"), b"2").unwrap();
        let Missed::Files { files, lines } = back.missed(&root, "j") else {
            panic!("not checked");
        };
        assert_eq!(files, vec![prefix.join("new")]);
        assert!(lines[0].starts_with(&format!("MISSED: {}", prefix.join("new").display())));
        RunSnapshot::remove(&root, "j");
        assert!(RunSnapshot::load(&root, "j").unwrap().is_none());
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
