//! The job's timeline (docs/report.md, "Timeline records, version 1"):
//! what a run did and when, for `paralog report`. Each process that records
//! appends one text line per event to a file of its own in
//! `<root>/.paralog-timeline-<job>/`: capture at each consistency point and
//! at exit, the drain at the end of each epoch it moved, `paralog run`
//! when the program ended. Appends only (`O_APPEND`, one `write` per
//! line), never an fsync: the timeline is a report, not a promise, and
//! must cost the program nothing it would notice.
//!
//! A line is `T1 KIND PID FIELDS...`, single spaces, integers in decimal,
//! times in microseconds since the Unix epoch (`CLOCK_REALTIME`: the
//! processes of a node share it), paths percent-encoded. The reader refuses
//! a line it cannot parse with the file and line number.

use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::durable::{DIR_MODE, FILE_MODE};

/// The tag that starts every line of this version.
pub const TAG: &str = "T1";

/// The name of a job's timeline directory is this and the job's name (a
/// runtime entry: `RUNTIME_PREFIX`).
pub const DIR_PREFIX: &str = ".paralog-timeline-";

/// The directory of a job's timeline under the node-local root.
pub fn dir(root: &Path, job: &str) -> PathBuf {
    root.join(format!("{DIR_PREFIX}{job}"))
}

/// The jobs with a timeline under `root`, sorted.
pub fn jobs(root: &Path) -> Vec<String> {
    let mut jobs: Vec<String> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let job = name.strip_prefix(DIR_PREFIX)?;
            (!job.is_empty()).then(|| job.to_owned())
        })
        .collect();
    jobs.sort();
    jobs
}

/// Microseconds since the Unix epoch, now.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A consistency point of one process on one file: the local commit began
/// at `t0`, the epoch was globally committed at `t1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cp {
    pub pid: u32,
    pub t0: u64,
    pub t1: u64,
    /// The process's rank in the file's communicator, and its size.
    pub rank: u32,
    pub size: u32,
    pub gen: u64,
    pub epoch: u64,
    /// Bytes this process wrote into the epoch's data log.
    pub bytes: u64,
    /// The file, relative to the prefix.
    pub path: Vec<u8>,
}

/// Committed epochs of one file moved to the remote: `count` epochs ending
/// at (`gen`, `epoch`), from `t0` (verification began) to `t1` (the
/// progress record was durable), `bytes` written to the remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drain {
    pub pid: u32,
    pub t0: u64,
    pub t1: u64,
    pub gen: u64,
    pub epoch: u64,
    pub count: u64,
    pub bytes: u64,
    pub path: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A process with capture on; `t`: when it started.
    Start {
        pid: u32,
        t: u64,
    },
    Cp(Cp),
    /// A process with capture on exits: the bytes it captured (committed
    /// or not) and its consistency points.
    End {
        pid: u32,
        t: u64,
        bytes: u64,
        cps: u64,
    },
    Drain(Drain),
    /// `paralog run`: the program ran from `t0` to `t1` and exited with
    /// `status` (128 + signal when killed).
    Run {
        pid: u32,
        t0: u64,
        t1: u64,
        status: i32,
        command: Vec<u8>,
    },
}

impl Event {
    pub fn pid(&self) -> u32 {
        match self {
            Event::Start { pid, .. } | Event::End { pid, .. } | Event::Run { pid, .. } => *pid,
            Event::Cp(c) => c.pid,
            Event::Drain(d) => d.pid,
        }
    }

    /// The line, with its newline.
    pub fn encode(&self) -> String {
        match self {
            Event::Start { pid, t } => format!("{TAG} start {pid} {t}\n"),
            Event::Cp(c) => format!(
                "{TAG} cp {} {} {} {} {} {} {} {} {}\n",
                c.pid,
                c.t0,
                c.t1,
                c.rank,
                c.size,
                c.gen,
                c.epoch,
                c.bytes,
                encode_bytes(&c.path)
            ),
            Event::End { pid, t, bytes, cps } => format!("{TAG} end {pid} {t} {bytes} {cps}\n"),
            Event::Drain(d) => format!(
                "{TAG} drain {} {} {} {} {} {} {} {}\n",
                d.pid,
                d.t0,
                d.t1,
                d.gen,
                d.epoch,
                d.count,
                d.bytes,
                encode_bytes(&d.path)
            ),
            Event::Run {
                pid,
                t0,
                t1,
                status,
                command,
            } => format!(
                "{TAG} run {pid} {t0} {t1} {status} {}\n",
                encode_bytes(command)
            ),
        }
    }

    /// Parse one line (without its newline).
    pub fn parse(line: &str) -> Result<Event, String> {
        let f: Vec<&str> = line.split(' ').collect();
        if f[0] != TAG {
            return Err(if f[0].starts_with('T') && f.len() > 1 {
                format!(
                    "timeline version {:?} is not supported (this build reads {TAG})",
                    f[0]
                )
            } else {
                format!("not a timeline record (it should start with {TAG})")
            });
        }
        let kind = *f.get(1).ok_or("no record kind")?;
        let want = match kind {
            "start" => 4,
            "cp" => 11,
            "end" => 6,
            "drain" => 10,
            "run" => 7,
            _ => return Err(format!("unknown record kind {kind:?}")),
        };
        if f.len() != want {
            return Err(format!(
                "a {kind} record has {} fields, found {}",
                want,
                f.len()
            ));
        }
        let n = |i: usize| -> Result<u64, String> {
            let s = f[i];
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "field {} of a {kind} record is not a number: {s:?}",
                    i + 1
                ));
            }
            s.parse::<u64>()
                .map_err(|e| format!("field {} of a {kind} record: {e}", i + 1))
        };
        let n32 = |i: usize| -> Result<u32, String> {
            u32::try_from(n(i)?)
                .map_err(|_| format!("field {} of a {kind} record is too large", i + 1))
        };
        let span = |a: usize| -> Result<(u64, u64), String> {
            let (t0, t1) = (n(a)?, n(a + 1)?);
            if t1 < t0 {
                return Err(format!(
                    "a {kind} record ends ({t1}) before it starts ({t0})"
                ));
            }
            Ok((t0, t1))
        };
        let pid = n32(2)?;
        Ok(match kind {
            "start" => Event::Start { pid, t: n(3)? },
            "cp" => {
                let (t0, t1) = span(3)?;
                let c = Cp {
                    pid,
                    t0,
                    t1,
                    rank: n32(5)?,
                    size: n32(6)?,
                    gen: n(7)?,
                    epoch: n(8)?,
                    bytes: n(9)?,
                    path: decode_bytes(f[10])?,
                };
                if c.rank >= c.size {
                    return Err(format!("rank {} of a communicator of {}", c.rank, c.size));
                }
                Event::Cp(c)
            }
            "end" => Event::End {
                pid,
                t: n(3)?,
                bytes: n(4)?,
                cps: n(5)?,
            },
            "drain" => {
                let (t0, t1) = span(3)?;
                let d = Drain {
                    pid,
                    t0,
                    t1,
                    gen: n(5)?,
                    epoch: n(6)?,
                    count: n(7)?,
                    bytes: n(8)?,
                    path: decode_bytes(f[9])?,
                };
                if d.count == 0 {
                    return Err("a drain record of no epoch".into());
                }
                Event::Drain(d)
            }
            _ => {
                let (t0, t1) = span(3)?;
                let status = f[5]
                    .parse::<i32>()
                    .map_err(|_| format!("field 6 of a run record is not a status: {:?}", f[5]))?;
                Event::Run {
                    pid,
                    t0,
                    t1,
                    status,
                    command: decode_bytes(f[6])?,
                }
            }
        })
    }
}

/// Bytes outside `!`..`~`, and `%`, as `%XX`: a field never holds a space
/// or a newline.
pub fn encode_bytes(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        if c > b' ' && c < 0x7f && c != b'%' {
            s.push(c as char);
        } else {
            s.push_str(&format!("%{c:02X}"));
        }
    }
    s
}

pub fn decode_bytes(s: &str) -> Result<Vec<u8>, String> {
    if s.is_empty() {
        return Err("an empty path".into());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("a bad %-escape in {s:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Append `text` (whole lines) to `dir/name`, creating the directory (mode
/// 0700, its parent must exist) and the file (0600). One `write` for the
/// whole text: lines of concurrent writers never interleave. No fsync.
pub fn append(dir: &Path, name: &str, text: &str) -> io::Result<()> {
    let path = dir.join(name);
    let open = || {
        OpenOptions::new()
            .append(true)
            .create(true)
            .mode(FILE_MODE)
            .open(&path)
    };
    let mut f = match open() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            match DirBuilder::new().mode(DIR_MODE).create(dir) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                _ => open()?,
            }
        }
        r => r?,
    };
    f.write_all(text.as_bytes())
}

#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    #[error("{path}: line {line}: {what}")]
    Damaged {
        path: PathBuf,
        line: usize,
        what: String,
    },
    #[error("{path}: {op}: {error}")]
    Io {
        path: PathBuf,
        op: &'static str,
        error: io::Error,
    },
}

/// One event, and where it was read.
#[derive(Debug, Clone)]
pub struct Located {
    pub file: PathBuf,
    pub line: usize,
    pub event: Event,
}

/// Every event of one timeline file, in file order.
pub fn read_file(path: &Path) -> Result<Vec<Located>, TimelineError> {
    let bytes = std::fs::read(path).map_err(|error| TimelineError::Io {
        path: path.to_path_buf(),
        op: "read",
        error,
    })?;
    let damaged = |line: usize, what: String| TimelineError::Damaged {
        path: path.to_path_buf(),
        line,
        what,
    };
    let mut out = Vec::new();
    let mut rest = &bytes[..];
    let mut no = 0;
    while !rest.is_empty() {
        no += 1;
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return Err(damaged(
                no,
                "cut short (no newline at its end: a write that did not finish)".into(),
            ));
        };
        let text = std::str::from_utf8(&rest[..end])
            .map_err(|_| damaged(no, "not text (bytes that are not UTF-8)".into()))?;
        let event = Event::parse(text).map_err(|what| damaged(no, what))?;
        out.push(Located {
            file: path.to_path_buf(),
            line: no,
            event,
        });
        rest = &rest[end + 1..];
    }
    Ok(out)
}

/// Every event of a timeline directory (its files in name order).
pub fn read_dir(dir: &Path) -> Result<Vec<Located>, TimelineError> {
    let io = |op, error| TimelineError::Io {
        path: dir.to_path_buf(),
        op,
        error,
    };
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| io("list", e))? {
        let e = e.map_err(|e| io("list", e))?;
        if e.file_type().map_err(|e| io("list", e))?.is_file() {
            files.push(e.path());
        }
    }
    files.sort();
    let mut out = Vec::new();
    for f in files {
        out.extend(read_file(&f)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_kinds() -> Vec<Event> {
        vec![
            Event::Start { pid: 7, t: 100 },
            Event::Cp(Cp {
                pid: 7,
                t0: 110,
                t1: 150,
                rank: 1,
                size: 4,
                gen: 2,
                epoch: 3,
                bytes: 4096,
                path: b"out dir/f%1\n.dat".to_vec(),
            }),
            Event::End {
                pid: 7,
                t: 200,
                bytes: 5000,
                cps: 1,
            },
            Event::Drain(Drain {
                pid: 9,
                t0: 160,
                t1: 190,
                gen: 2,
                epoch: 3,
                count: 1,
                bytes: 4096,
                path: b"out dir/f%1\n.dat".to_vec(),
            }),
            Event::Run {
                pid: 5,
                t0: 90,
                t1: 210,
                status: 0,
                command: b"mpirun -n 4 ./sim".to_vec(),
            },
        ]
    }

    #[test]
    fn the_directory_is_a_runtime_entry() {
        assert!(DIR_PREFIX.starts_with(crate::layout::RUNTIME_PREFIX));
        let root = tempfile::tempdir().unwrap();
        append(&dir(root.path(), "b"), "x", "").unwrap();
        append(&dir(root.path(), "a"), "x", "").unwrap();
        assert_eq!(jobs(root.path()), ["a", "b"]);
    }

    #[test]
    fn every_kind_round_trips_as_one_line() {
        for ev in all_kinds() {
            let line = ev.encode();
            assert!(line.ends_with('\n'));
            assert_eq!(line.matches('\n').count(), 1, "{line:?}");
            assert_eq!(Event::parse(line.trim_end_matches('\n')).unwrap(), ev);
        }
    }

    #[test]
    fn appended_lines_read_back_with_their_place() {
        let root = tempfile::tempdir().unwrap();
        let d = dir(root.path(), "job");
        for ev in all_kinds() {
            append(&d, "capture-7", &ev.encode()).unwrap();
        }
        let read = read_dir(&d).unwrap();
        assert_eq!(
            read.iter().map(|l| l.event.clone()).collect::<Vec<_>>(),
            all_kinds()
        );
        assert_eq!(read[2].line, 3);
        assert_eq!(read[2].file, d.join("capture-7"));
    }

    /// A damaged line is refused with its file and line number, never
    /// skipped and never a panic.
    #[test]
    fn a_damaged_line_is_refused_with_file_and_line() {
        let root = tempfile::tempdir().unwrap();
        let d = dir(root.path(), "job");
        let good = all_kinds().iter().map(Event::encode).collect::<String>();
        let cases: &[(&str, &str)] = &[
            ("T1 cp 7 110 150 1 4 2 x 4096 f\n", "not a number"),
            ("T1 cp 7 110 150 1 4 2 3 4096\n", "has 11 fields, found 10"),
            (
                "T1 cp 7 150 110 1 4 2 3 4096 f\n",
                "ends (110) before it starts (150)",
            ),
            (
                "T1 cp 7 110 150 4 4 2 3 4096 f\n",
                "rank 4 of a communicator of 4",
            ),
            ("T1 drain 9 1 2 1 1 1 10 a%zz\n", "bad %-escape"),
            ("T1 drain 9 1 2 1 1 0 10 a\n", "no epoch"),
            ("T1 teleport 9 1\n", "unknown record kind"),
            ("T2 start 7 100\n", "version \"T2\" is not supported"),
            ("garbage\n", "not a timeline record"),
            ("T1 end 7 200 5000 1", "cut short"),
            ("T1 start 7 1\u{0}\n", "not a number"),
            ("T1 start 99999999999 1\n", "too large"),
        ];
        for (i, (bad, why)) in cases.iter().enumerate() {
            let name = format!("capture-{i}");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(&name), format!("{good}{bad}")).unwrap();
            let err = read_file(&d.join(&name)).unwrap_err();
            let msg = err.to_string();
            let want = format!(
                "{}: line {}: ",
                d.join(&name).display(),
                all_kinds().len() + 1
            );
            assert!(msg.starts_with(&want), "{bad:?}: {msg}");
            assert!(msg.contains(why), "{bad:?}: {msg}");
            // The directory reader refuses it too.
            assert!(read_dir(&d).is_err());
            std::fs::remove_file(d.join(&name)).unwrap();
        }
        let mut bytes = good.into_bytes();
        bytes.extend_from_slice(b"T1 start 7 \xff\n");
        std::fs::write(d.join("bin"), bytes).unwrap();
        let msg = read_file(&d.join("bin")).unwrap_err().to_string();
        assert!(msg.contains("line 6: not text"), "{msg}");
    }
}
