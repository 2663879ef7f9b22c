//! Where each record lives under the node-local root (docs/format.md, "Layout"):
//!
//! ```text
//! <root>/<job>/f-<hash16>/path                     the file's remote-relative path
//! <root>/<job>/f-<hash16>/progress                 the server's drain progress
//! <root>/<job>/f-<hash16>/commit.lock, .stage-*/   one-process writers (single.rs)
//! <root>/<job>/f-<hash16>/g<gen>/r<rank>/e<epoch>.data
//!                                       e<epoch>.manifest(.tmp)
//!                                       e<epoch>.commit
//!                                       closed
//! ```
//!
//! Names are fixed-width decimal so that `ls` sorts them, but they are parsed
//! as numbers, never compared as strings.

use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};

/// Name of the file in a file directory that records its relative path.
pub const PATH_FILE: &str = "path";
/// Name of the server's progress record in a file directory.
pub const PROGRESS_FILE: &str = "progress";
/// In a rank's directory: the open ended (MPI_File_close, last POSIX
/// close). Empty; its presence is the information.
pub const CLOSED_FILE: &str = "closed";
/// Entries of the root whose names start so belong to the running server
/// (its status socket, its lock), not to the log.
pub const RUNTIME_PREFIX: &str = ".paralog-";

/// Where the capture libraries of job `job` keep the accounted ends of the
/// placeholders their processes share (a runtime entry of the root: the
/// drain does not read it; `paralog run` removes it at the end).
pub fn shared_ledgers(root: &Path, job: &str) -> PathBuf {
    root.join(format!("{RUNTIME_PREFIX}shared-{job}"))
}

/// FNV-1a, 64 bit: a stable, dependency-free name for a file directory.
/// Collisions are detected (the `path` file and every manifest carry the full
/// path), not assumed away.
pub fn path_hash(rel: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in rel {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub fn file_dir_name(rel: &[u8]) -> String {
    format!("f-{:016x}", path_hash(rel))
}

pub fn gen_dir_name(gen: u64) -> String {
    format!("g{gen:06}")
}

pub fn rank_dir_name(rank: u32) -> String {
    format!("r{rank:07}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EpochFileKind {
    Data,
    Manifest,
    ManifestTmp,
    Mark,
}

impl EpochFileKind {
    fn suffix(self) -> &'static str {
        match self {
            EpochFileKind::Data => "data",
            EpochFileKind::Manifest => "manifest",
            EpochFileKind::ManifestTmp => "manifest.tmp",
            EpochFileKind::Mark => "commit",
        }
    }
}

pub fn epoch_file_name(epoch: u64, kind: EpochFileKind) -> String {
    format!("e{epoch:010}.{}", kind.suffix())
}

/// Parse `e<digits>.<suffix>`; anything else is not ours.
pub fn parse_epoch_file_name(name: &str) -> Option<(u64, EpochFileKind)> {
    let rest = name.strip_prefix('e')?;
    let dot = rest.find('.')?;
    let epoch = parse_number(&rest[..dot])?;
    let kind = match &rest[dot + 1..] {
        "data" => EpochFileKind::Data,
        "manifest" => EpochFileKind::Manifest,
        "manifest.tmp" => EpochFileKind::ManifestTmp,
        "commit" => EpochFileKind::Mark,
        _ => return None,
    };
    Some((epoch, kind))
}

pub fn parse_gen_dir_name(name: &str) -> Option<u64> {
    parse_number(name.strip_prefix('g')?)
}

pub fn parse_rank_dir_name(name: &str) -> Option<u32> {
    parse_number(name.strip_prefix('r')?).and_then(|n| u32::try_from(n).ok())
}

pub fn is_file_dir_name(name: &str) -> bool {
    name.len() == 18 && name.starts_with("f-") && name[2..].bytes().all(|b| b.is_ascii_hexdigit())
}

fn parse_number(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A single path component chosen by a user or a setting (a job name): it must
/// not be able to name anything outside its parent directory.
pub fn validate_component(what: &'static str, value: &str) -> Result<()> {
    let why = if value.is_empty() {
        Some("is empty")
    } else if value == "." || value == ".." {
        Some("is a relative directory name")
    } else if value.starts_with(RUNTIME_PREFIX) {
        Some("starts with \".paralog-\", which is reserved for the server's files")
    } else if value.len() > 200 {
        Some("is longer than 200 bytes")
    } else if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some("may only contain ASCII letters, digits, '.', '_' and '-'")
    } else {
        None
    };
    match why {
        Some(why) => Err(LogError::InvalidName {
            what,
            value: value.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// A remote-relative path must stay under the remote root: relative, no `.`
/// or `..` components, no empty components, no NUL.
pub fn validate_rel(rel: &[u8]) -> Result<()> {
    let bad = |why| {
        Err(LogError::InvalidName {
            what: "relative path",
            value: String::from_utf8_lossy(rel).into_owned(),
            why,
        })
    };
    if rel.is_empty() {
        return bad("is empty");
    }
    if rel.len() > crate::format::MAX_PATH_LEN {
        return bad("is longer than PATH_MAX");
    }
    if rel.starts_with(b"/") {
        return bad("is absolute");
    }
    if rel.contains(&0) {
        return bad("contains a NUL byte");
    }
    for comp in rel.split(|&b| b == b'/') {
        match comp {
            b"" => return bad("has an empty component"),
            b"." | b".." => return bad("has a '.' or '..' component"),
            _ => {}
        }
    }
    Ok(())
}

/// Paths of one file's open generation and rank under a root.
#[derive(Debug, Clone)]
pub struct RankPaths {
    pub job_dir: PathBuf,
    pub file_dir: PathBuf,
    pub gen_dir: PathBuf,
    pub rank_dir: PathBuf,
}

impl RankPaths {
    pub fn new(root: &Path, job: &str, rel: &[u8], gen: u64, rank: u32) -> RankPaths {
        let job_dir = root.join(job);
        let file_dir = job_dir.join(file_dir_name(rel));
        let gen_dir = file_dir.join(gen_dir_name(gen));
        let rank_dir = gen_dir.join(rank_dir_name(rank));
        RankPaths {
            job_dir,
            file_dir,
            gen_dir,
            rank_dir,
        }
    }

    pub fn epoch_file(&self, epoch: u64, kind: EpochFileKind) -> PathBuf {
        self.rank_dir.join(epoch_file_name(epoch, kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in [
            EpochFileKind::Data,
            EpochFileKind::Manifest,
            EpochFileKind::ManifestTmp,
            EpochFileKind::Mark,
        ] {
            let name = epoch_file_name(42, kind);
            assert_eq!(parse_epoch_file_name(&name), Some((42, kind)));
        }
        assert_eq!(parse_gen_dir_name(&gen_dir_name(7)), Some(7));
        assert_eq!(parse_rank_dir_name(&rank_dir_name(1234)), Some(1234));
        assert!(is_file_dir_name(&file_dir_name(b"out/a.h5")));
        assert_eq!(parse_epoch_file_name("e12.data~"), None);
        assert_eq!(parse_epoch_file_name("e.data"), None);
        assert_eq!(parse_rank_dir_name("r99999999999"), None);
    }

    #[test]
    fn fnv1a_reference_values() {
        // Published FNV-1a 64 test values.
        assert_eq!(path_hash(b""), 0xcbf29ce484222325);
        assert_eq!(path_hash(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(path_hash(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn rel_paths_cannot_escape() {
        for bad in [
            &b"/etc/passwd"[..],
            b"../x",
            b"a/../../x",
            b"a//b",
            b"./a",
            b"",
            b"a/\0",
        ] {
            assert!(
                validate_rel(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        for good in [&b"a"[..], b"dir/file.h5", b"..hidden", b"a/.b"] {
            validate_rel(good).unwrap();
        }
    }

    #[test]
    fn components_are_strict() {
        for bad in ["", ".", "..", "a/b", "a b", "ü"] {
            assert!(validate_component("job name", bad).is_err(), "{bad:?}");
        }
        validate_component("job name", "job-1.run_2").unwrap();
    }
}
