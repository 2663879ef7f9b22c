//! Removal of what can never be committed. Only run when no writer of the
//! job is alive (after a crash, by `paralog recover --gc`): a live writer's
//! current epoch looks exactly like an abandoned one.

use std::path::PathBuf;

use crate::error::{IoContext, Result};
use crate::layout::{self, EpochFileKind};
use crate::reader::{CommitStatus, EpochFiles, EpochId, FileInventory, GenInventory, ManifestAt};

/// The files of one rank's epoch that gc removes, with or without its mark.
fn epoch_files(files: &EpochFiles, with_mark: bool) -> Vec<EpochFileKind> {
    let mut out = Vec::new();
    if files.data.is_some() {
        out.push(EpochFileKind::Data);
    }
    // Format 2: the manifest is in the data log.
    if files.manifest == Some(ManifestAt::File) {
        out.push(EpochFileKind::Manifest);
    }
    if with_mark && files.mark {
        out.push(EpochFileKind::Mark);
    }
    out
}

/// Those files of `epoch` for every rank of a generation on this node.
fn epoch_paths(g: &GenInventory, epoch: u64, with_mark: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for r in g.ranks.values() {
        if let Some(files) = r.epochs.get(&epoch) {
            for kind in epoch_files(files, with_mark) {
                out.push(r.dir.join(layout::epoch_file_name(epoch, kind)));
            }
        }
    }
    out
}

/// What [`collect_garbage`] removed (or would remove, with `dry_run`).
#[derive(Debug, Default, Clone)]
pub struct GcReport {
    pub removed: Vec<PathBuf>,
}

/// Remove temporary manifests (format 1); what is left of drained epochs (a
/// crash between the progress record and the deletion); the records of
/// epochs that are provably not globally committed: no rank here has a
/// commit mark, and either some rank whose directory is on this node has no
/// manifest for the epoch (format 2: no valid commit record) although it
/// has a data log for it or a later epoch (it stopped before committing),
/// or every rank's directory is here and not all have a manifest; and the
/// staging directories of one-process writers, except one that holds a
/// committed epoch (its writer stopped before the rename: the inventory
/// reads it as its generation's). An epoch whose missing ranks live on
/// other nodes is left alone: only the servers together can decide it.
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
                report.removed.extend(epoch_paths(g, epoch, true));
                continue;
            }
            if file.commit_status(id)?.is_committed() {
                continue;
            }
            let abandoned = g.ranks.values().any(|r| {
                let has_manifest = r.epochs.get(&epoch).is_some_and(|e| e.manifest.is_some());
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
            report.removed.extend(epoch_paths(g, epoch, false));
        }
    }
    // A staging place holds only what a one-process writer never committed
    // (its commit moves the records out): with no writer alive, nothing.
    // Except one whose writer stopped after its commit and before the
    // rename: the inventory took it for its generation's rank 0.
    let rescued: Vec<&std::path::Path> = file
        .gens
        .values()
        .flat_map(|g| g.ranks.values())
        .filter(|r| r.staged)
        .filter_map(|r| r.dir.parent())
        .collect();
    let staging: Vec<PathBuf> = crate::single::staging_dirs(&file.dir)?
        .into_iter()
        .filter(|d| !rescued.contains(&d.as_path()))
        .collect();
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
