//! Removal of what can never be committed. Only run when no writer of the
//! job is alive (after a crash, by `paralog recover --gc`): a live writer's
//! current epoch looks exactly like an abandoned one.

use std::path::PathBuf;

use crate::error::{IoContext, Result};
use crate::layout::{self, EpochFileKind};
use crate::reader::{CommitStatus, EpochId, FileInventory};

/// What [`collect_garbage`] removed (or would remove, with `dry_run`).
#[derive(Debug, Default, Clone)]
pub struct GcReport {
    pub removed: Vec<PathBuf>,
}

/// Remove temporary manifests; what is left of drained epochs (a crash
/// between the progress record and the deletion); the records of epochs
/// that are provably not globally committed: no rank here has a commit mark,
/// and either some rank whose directory is on this node has no manifest for
/// the epoch although it has a data log for it or a later epoch (it stopped
/// before committing), or every rank's directory is here and not all have
/// a manifest; and the staging directories of one-process writers. An epoch
/// whose missing ranks live on other nodes is left alone: only the servers
/// together can decide it.
pub fn collect_garbage(file: &FileInventory, dry_run: bool) -> Result<GcReport> {
    let mut report = GcReport::default();
    for (&gen, g) in &file.gens {
        for r in g.ranks.values() {
            for (&epoch, files) in &r.epochs {
                if files.manifest_tmp {
                    report.removed.push(
                        r.dir
                            .join(layout::epoch_file_name(epoch, EpochFileKind::ManifestTmp)),
                    );
                }
            }
        }
        let epochs: std::collections::BTreeSet<u64> = g
            .ranks
            .values()
            .flat_map(|r| r.epochs.keys().copied())
            .collect();
        let drained = file.progress.map(|p| p.id());
        for epoch in epochs {
            let id = EpochId::new(gen, epoch);
            if drained.is_some_and(|d| id <= d) {
                // Drained: what is left here was to be deleted after the
                // progress record (a crash in between). Remove it now.
                for r in g.ranks.values() {
                    if let Some(files) = r.epochs.get(&epoch) {
                        for (present, kind) in [
                            (files.data.is_some(), EpochFileKind::Data),
                            (files.manifest, EpochFileKind::Manifest),
                            (files.mark, EpochFileKind::Mark),
                        ] {
                            if present {
                                report
                                    .removed
                                    .push(r.dir.join(layout::epoch_file_name(epoch, kind)));
                            }
                        }
                    }
                }
                continue;
            }
            if file.commit_status(id)?.is_committed() {
                continue;
            }
            let abandoned = g.ranks.values().any(|r| {
                let has_manifest = r.epochs.get(&epoch).is_some_and(|e| e.manifest);
                let wrote = r.epochs.get(&epoch).is_some_and(|e| e.data.is_some());
                let went_on = r.epochs.range(epoch + 1..).next().is_some();
                !has_manifest && (wrote || went_on)
            });
            let single_node_incomplete = matches!(
                file.commit_status(id)?,
                CommitStatus::Incomplete { comm_size, .. } if comm_size > 0 && (0..comm_size).all(|rk| g.ranks.contains_key(&rk))
            );
            if !(abandoned || single_node_incomplete) {
                continue;
            }
            for r in g.ranks.values() {
                if let Some(files) = r.epochs.get(&epoch) {
                    for (present, kind) in [
                        (files.data.is_some(), EpochFileKind::Data),
                        (files.manifest, EpochFileKind::Manifest),
                    ] {
                        if present {
                            report
                                .removed
                                .push(r.dir.join(layout::epoch_file_name(epoch, kind)));
                        }
                    }
                }
            }
        }
    }
    // A staging place holds only what a one-process writer never committed
    // (its commit moves the records out): with no writer alive, nothing.
    let staging = crate::single::staging_dirs(&file.dir)?;
    report.removed.extend(staging.iter().cloned());
    if !dry_run {
        for d in &staging {
            std::fs::remove_dir_all(d).ctx("remove", d)?;
        }
        let mut dirs = std::collections::BTreeSet::new();
        for p in report.removed.iter().filter(|p| !staging.contains(p)) {
            std::fs::remove_file(p).ctx("remove", p)?;
            dirs.insert(
                p.parent()
                    .expect("epoch files live in a rank directory")
                    .to_path_buf(),
            );
        }
        for d in dirs {
            crate::durable::sync_dir(&d)?;
        }
    }
    Ok(report)
}
