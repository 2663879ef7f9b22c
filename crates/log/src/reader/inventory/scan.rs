//! Reading one file's directory: its opens, ranks, epochs and strays.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::format::{PathRecord, ProgressRecord};
use crate::reader::cache::ScanCache;
use crate::reader::record::{ManifestAt, ManifestLoc, Probe};

use crate::layout::{self, EpochFileKind};

use super::*;

pub(super) fn scan_file(
    dir: &Path,
    stray: &mut Vec<PathBuf>,
    cache: &mut ScanCache,
) -> Result<FileInventory> {
    let mut gens = BTreeMap::new();
    let mut staging = Vec::new();
    // A committed format-2 manifest, in case the path record is unreadable.
    let mut a_manifest: Option<(Vec<u8>, ManifestLoc)> = None;
    for (name, path, is_dir) in cache.list(dir)?.iter().cloned() {
        if crate::single::is_staging_name(&name) {
            if is_dir {
                staging.push(path);
            }
            continue;
        }
        if name == layout::PATH_FILE
            || name.starts_with("path.tmp.")
            || name == layout::PROGRESS_FILE
            || name.starts_with("progress.tmp")
            || name == crate::single::LOCK_FILE
        {
            continue;
        }
        let Some(gen) = is_dir.then(|| layout::parse_gen_dir_name(&name)).flatten() else {
            stray.push(path);
            continue;
        };
        let mut g = GenInventory {
            dir: path.clone(),
            ranks: BTreeMap::new(),
        };
        for (rname, rpath, rdir) in cache.list(&path)?.iter().cloned() {
            let Some(rank) = rdir.then(|| layout::parse_rank_dir_name(&rname)).flatten() else {
                stray.push(rpath);
                continue;
            };
            let r = scan_rank(&rpath, stray, &mut a_manifest, cache)?;
            g.ranks.insert(rank, r);
        }
        gens.insert(gen, g);
    }
    for stage in staging {
        rescue_staged(dir, &stage, &mut gens, &mut a_manifest, cache)?;
    }
    // The records are read after the listing, not before: a writer records
    // the path before any epoch exists, and the drain records progress
    // before it deletes an epoch, so whatever the listing saw is covered by
    // the records read now. Read first, a new file's path could be missing
    // yet its first committed epoch listed (the server then parked a
    // healthy file as damaged).
    let path_file = dir.join(layout::PATH_FILE);
    let (mut record, path_error) = match cache.read(&path_file) {
        Ok(bytes) => match PathRecord::decode(&bytes, &path_file) {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e.to_string())),
        },
        Err(e) => (None, Some(format!("{}: {e}", path_file.display()))),
    };
    // Format 2 does not make the path record durable (a crash may leave it
    // missing or empty): every commit record's manifest names the path.
    let mut record_rebuilt = false;
    if record.is_none() {
        if let Some(m) = a_manifest.and_then(|(bytes, loc)| loc.decode(&bytes).ok()) {
            record = Some(PathRecord {
                path: m.ident.path,
                rel: m.ident.rel,
            });
            record_rebuilt = true;
        }
    }
    let progress_file = dir.join(layout::PROGRESS_FILE);
    let (progress, progress_error) = match cache.read(&progress_file) {
        Ok(bytes) => match ProgressRecord::decode(&bytes, &progress_file) {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e.to_string())),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => (None, None),
        Err(e) => (None, Some(format!("{}: {e}", progress_file.display()))),
    };
    Ok(FileInventory {
        dir: dir.to_path_buf(),
        record,
        path_error,
        record_rebuilt,
        progress,
        progress_error,
        gens,
    })
}

/// List one rank directory: its epochs' records, where each manifest is
/// (a format-2 data log's header and commit record are read), its close
/// marker.
fn scan_rank(
    rdir: &Path,
    stray: &mut Vec<PathBuf>,
    a_manifest: &mut Option<(Vec<u8>, ManifestLoc)>,
    cache: &mut ScanCache,
) -> Result<RankInventory> {
    let mut r = RankInventory {
        dir: rdir.to_path_buf(),
        ..RankInventory::default()
    };
    // Names sort "e<N>.commit" < "e<N>.data" < "e<N>.manifest": the data
    // log of an epoch is probed before its manifest file is listed.
    let mut v2_logs = std::collections::BTreeSet::new();
    for (ename, epath, edir) in cache.list(rdir)?.iter().cloned() {
        if ename == layout::CLOSED_FILE && !edir {
            r.closed = true;
            continue;
        }
        let Some((epoch, kind)) = (!edir)
            .then(|| layout::parse_epoch_file_name(&ename))
            .flatten()
        else {
            stray.push(epath);
            continue;
        };
        match kind {
            EpochFileKind::Data => {
                // A data log deleted between the listing and the probe (the
                // server removes drained epochs while others scan): as if it
                // had not been listed, like a directory that vanished.
                let Some((len, probe)) = cache.probe(&epath)? else {
                    continue;
                };
                let e = r.epochs.entry(epoch).or_default();
                e.data = Some(len);
                match probe {
                    Probe::V1 => {}
                    Probe::NoHeader(err) => e.torn = Some(err.to_string()),
                    Probe::Committed {
                        offset, manifest, ..
                    } => {
                        e.manifest = Some(ManifestAt::Log {
                            offset,
                            len: manifest.len() as u32,
                        });
                        v2_logs.insert(epoch);
                        if a_manifest.is_none() {
                            let at = e.manifest.expect("just set");
                            *a_manifest = Some((manifest, ManifestLoc::new(rdir, epoch, at)));
                        }
                    }
                    Probe::Torn(err) => {
                        e.torn = Some(err.to_string());
                        v2_logs.insert(epoch);
                    }
                }
            }
            // Beside a format-2 data log a manifest file is not part of
            // the layout.
            EpochFileKind::Manifest if v2_logs.contains(&epoch) => stray.push(epath),
            EpochFileKind::Manifest => {
                let e = r.epochs.entry(epoch).or_default();
                e.manifest = Some(ManifestAt::File);
                e.torn = None;
            }
            EpochFileKind::ManifestTmp => r.epochs.entry(epoch).or_default().manifest_tmp = true,
            EpochFileKind::Mark => r.epochs.entry(epoch).or_default().mark = true,
        }
    }
    Ok(r)
}

/// A one-process writer's staging directory whose data log has a valid
/// commit record naming generation G, while G holds no rank 0: the writer
/// stopped after its commit was durable and before it renamed the rank
/// directory into G (`single.rs`). Its epoch is G's rank 0, read in place.
/// Not while a commit is in progress (its commit lock is held): that
/// writer is about to rename it, and what a scan sees stays ordered.
fn rescue_staged(
    file_dir: &Path,
    stage: &Path,
    gens: &mut BTreeMap<u64, GenInventory>,
    a_manifest: &mut Option<(Vec<u8>, ManifestLoc)>,
    cache: &mut ScanCache,
) -> Result<()> {
    let rank_dir = stage.join(layout::rank_dir_name(0));
    let data = rank_dir.join(layout::epoch_file_name(1, EpochFileKind::Data));
    let Some((_, Probe::Committed { header, .. })) = cache.probe(&data)? else {
        return Ok(());
    };
    let gen = header.gen;
    if gen == crate::single::STAGED_GEN
        || gen == 0
        || (header.rank, header.comm_size, header.epoch) != (0, 1, 1)
        || gens.get(&gen).is_some_and(|g| g.ranks.contains_key(&0))
        || crate::single::commit_in_progress(file_dir)
    {
        return Ok(());
    }
    let mut stray = Vec::new();
    let mut r = scan_rank(&rank_dir, &mut stray, a_manifest, cache)?;
    if r.epochs.get(&1).is_none_or(|e| e.manifest.is_none()) {
        return Ok(());
    }
    r.staged = true;
    gens.entry(gen)
        .or_insert_with(|| GenInventory {
            dir: file_dir.join(layout::gen_dir_name(gen)),
            ranks: BTreeMap::new(),
        })
        .ranks
        .insert(0, r);
    Ok(())
}
