//! Members renamed into place, and members renamed away (docs/aggregate.md,
//! "Renames"): `np.save(tmp)` then `os.replace(tmp, "rank-0.npy")`,
//! `torch.save` to a temporary name, `mv rank-0.tmp rank-0.dat`. A rename
//! is one record in each file's log (docs/format.md, "Namespace
//! operations"), so a member renamed into place holds no bytes of its
//! own: its content is its source's at the rename, with its later epochs
//! on top, as `crate::rename` builds it for a plain file's drain.
//!
//! The source's own content before its local epochs is what the remote
//! holds of it: its member in its set's published version when a rule
//! claims it, else its plain file. And the source's records must outlive
//! the target's publish: a member renamed away leaves its set only once
//! the rename is remote (the target's progress record covers it) or its
//! target is published in the same step.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use paralog_aggregate::reader::SetReader;
use paralog_log::format::{Op, RenameRef};
use paralog_log::reader::SourceReader;
use paralog_log::{EpochId, LogError, LogicalFile};

use crate::drain::DrainError;
use crate::remote::Remote;
use crate::rename::{other_file, source_content, source_error, SourceContent, MAX_CHAIN};

use super::publish::Base;
use super::scan::{corrupt, MemberFile, SetsRoot};
use super::Sets;

/// Where a member's base is looked for.
pub(super) struct Place<'a> {
    pub(super) sets: &'a Sets,
    pub(super) remote: &'a Remote,
    /// The published version of the member's set.
    pub(super) old: Option<&'a Arc<SetReader>>,
    pub(super) root: &'a SetsRoot,
}

/// The source of a rename onto a member, at the rename: its local epochs
/// up to it over its own base.
pub(super) struct Source {
    lf: LogicalFile,
    reader: SourceReader,
    base: Base,
    base_len: u64,
    pub(super) size: u64,
    dir: PathBuf,
    seen: Option<EpochId>,
}

impl Source {
    pub(super) fn mode(&self) -> u32 {
        self.lf.mode.unwrap_or_else(|| self.base.mode())
    }

    pub(super) fn read(&mut self, at: u64, dst: &mut [u8]) -> paralog_log::Result<()> {
        let Source {
            lf,
            reader,
            base,
            base_len,
            dir,
            seen,
            ..
        } = self;
        lf.read_at(reader, at, dst, *base_len, &mut |off, buf| {
            base.read(off, buf)
        })
        .map_err(|e| match source_error(dir, *seen, e) {
            DrainError::Local(e) | DrainError::Corrupt(e) => e,
            // Drained meanwhile: the publish fails and goes again.
            other => LogError::NotFound {
                what: other.to_string(),
            },
        })
    }
}

/// The content of the source `r` names, for the member file in `dir`.
pub(super) fn source(
    at: &Place<'_>,
    dir: &Path,
    r: RenameRef,
    depth: usize,
) -> Result<Base, DrainError> {
    // S3 cannot be read back: the server keeps a job's records there, so
    // the source's content comes from its first epoch (as for plain files).
    let whole = matches!(at.root, SetsRoot::S3(_));
    let SourceContent {
        inv,
        lf,
        reader,
        seen,
    } = source_content(dir, r, whole)?;
    let rec = inv.record.clone().expect("other_file checks its record");
    let base = match lf.from {
        Some((_, from)) if depth < MAX_CHAIN => source(at, &inv.dir, from, depth + 1)?,
        Some(_) => {
            return Err(DrainError::Corrupt(LogError::Inconsistent {
                path: inv.dir.clone(),
                what: format!("more than {MAX_CHAIN} renames in a chain"),
            }))
        }
        // Created (or cut to nothing) in its local epochs: nothing of the
        // remote shows.
        None if whole || (lf.size.base_cut == Some(0) && lf.mode.is_some()) => Base::None,
        None => match at.sets.member_match(&rec.path, &rec.rel, at.remote) {
            Some(m) => {
                let old = if at.old.is_some_and(|o| o.record().set == m.set) {
                    at.old.cloned()
                } else {
                    at.root
                        .open_set(&m.set)
                        .map_err(super::publish::set_error)?
                        .map(Arc::new)
                };
                Base::open(old.as_ref(), at.root, Some(&m.member), &rec.rel)?
            }
            None => Base::open(None, at.root, None, &rec.rel)?,
        },
    };
    let base_len = base.len();
    let size = if lf.epochs.is_empty() {
        base_len
    } else {
        lf.size.final_size(base_len)
    };
    Ok(Base::Renamed(Box::new(Source {
        lf,
        reader,
        base,
        base_len,
        size,
        dir: inv.dir.clone(),
        seen,
    })))
}

/// The member files of one publish, each with its newest pending epoch.
pub(super) struct Publishing(BTreeMap<PathBuf, EpochId>);

impl Publishing {
    pub(super) fn of(files: &[MemberFile]) -> Publishing {
        Publishing(
            files
                .iter()
                .filter_map(|f| Some((f.inv.dir.clone(), *f.pending.last()?)))
                .collect(),
        )
    }
}

/// Whether the member file `f` may give up its pending epochs in this
/// publish: a rename away among them must be remote already, or its
/// target published in this same step (which reads them first). Else the
/// set waits: deleting the records would lose the target's bytes.
pub(super) fn may_leave(f: &MemberFile, publishing: &Publishing) -> Result<(), DrainError> {
    for &id in &f.pending {
        let manifests = f.inv.manifests(id).map_err(corrupt)?;
        for (m, _) in &manifests {
            for op in &m.ops {
                let Op::RenamedTo(r) = op else { continue };
                let target = other_file(&f.inv.dir, *r)?;
                let remote = target.progress.is_some_and(|p| p.id() >= r.at);
                let here = publishing
                    .0
                    .get(&target.dir)
                    .is_some_and(|&last| last >= r.at);
                if !(remote || here) {
                    return Err(DrainError::Waiting(format!(
                        "{} was renamed to {}: waiting for that rename (epoch {}) to reach the remote",
                        f.inv.display_name(),
                        target.display_name(),
                        r.at
                    )));
                }
            }
        }
    }
    Ok(())
}
