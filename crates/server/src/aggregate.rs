//! The aggregation strategy of the one-node drain (docs/aggregate.md):
//! files an `--aggregate` rule matches are not drained one remote file
//! each; once their checkpoint set is complete, the committed epochs of
//! every member are applied into a `SetWriter` (K containers), the set
//! record is published, and only then are the members' progress records
//! written and their local records deleted (`step::write_progress`,
//! `step::delete_epoch`, as for any drained epoch).
//!
//! When a set is complete (one node): every member file's committed
//! epochs are all its epochs (nothing is being committed) and its last
//! open ended (a close marker, or a later open), and the writers moved
//! on: the job is ending (`flush`: the end of `paralog run`, `recover`) or
//! a newer set of the same rule appeared in the job (every file of it was
//! created here after every file of this one).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use paralog_aggregate::publish::{collect_orphans, copy_member, SetWriter};
use paralog_aggregate::reader::{MemberReader, SetReader};
use paralog_aggregate::rule::{Match, Rules};
use paralog_aggregate::AggError;
use paralog_backend::{BackendError, ErrorKind, RemoteUrl};
use paralog_log::format::PathRecord;
use paralog_log::reader::SourceReader;
use paralog_log::{layout, EpochId, FileInventory, LogError, LogicalFile};

use crate::drain::{lock_file_dir, DrainError, DrainLock, Drained};
use crate::remote::Remote;
use crate::step;

/// What `--aggregate`, `--containers` and `--agg-align` ask for.
#[derive(Debug)]
pub struct Sets {
    pub rules: Rules,
    pub containers: u32,
    pub align: u64,
    /// One set is built at a time on this server.
    busy: Mutex<()>,
    /// Published sets, decoded once (which files are members).
    published: paralog_aggregate::reader::SetCache,
    /// `recover --incomplete`: at the end, a set with members still being
    /// written is published too, flagged incomplete.
    incomplete: bool,
}

/// The "rule" of a member no rule matches, found in a published set (a
/// member rewritten in a later job): its set is rebuilt once it is
/// finished, without waiting for a newer set.
const REWRITE: usize = usize::MAX;

/// One set as the drain found it.
#[derive(Debug, Default)]
pub struct SetOutcome {
    /// The set directory, relative to the remote.
    pub set: String,
    /// The version published, if one was.
    pub version: Option<u64>,
    /// Why it was not published (yet).
    pub waiting: Option<String>,
    /// Per member file drained: its directory, its epochs, its bytes.
    pub members: Vec<(PathBuf, Vec<EpochId>, u64)>,
    /// Why publishing it failed (its members' files take the failure; the
    /// other sets go on).
    pub error: Option<DrainError>,
}

impl Sets {
    pub fn new(rules: Rules, containers: u32, align: u64) -> Sets {
        Sets {
            rules,
            containers: containers.max(1),
            align,
            busy: Mutex::new(()),
            published: paralog_aggregate::reader::SetCache::new(),
            incomplete: false,
        }
    }

    /// `recover --incomplete`: a set that can never be completed (a
    /// member's writer died in it) is published with what its members
    /// committed, flagged incomplete, rather than kept back.
    pub fn publishing_incomplete(mut self) -> Sets {
        self.incomplete = true;
        self
    }

    /// No rule: only members of sets already published are drained as
    /// such (what every one-node server does without `--aggregate`).
    pub fn rewrites_only() -> Sets {
        Sets::new(
            Rules::default(),
            1,
            paralog_aggregate::publish::DEFAULT_ALIGN,
        )
    }

    /// Whether the file of a file directory is a set member, and of which
    /// set (by its path record; `None` when it has none yet): a rule
    /// matches it, or (with no rule, or in a job without `--aggregate`) a
    /// published set on the remote lists it, so that a member rewritten
    /// later makes a new version of its set rather than a plain file the
    /// set would hide.
    pub fn claims(&self, file_dir: &Path, remote: &Remote) -> Option<Match> {
        let p = file_dir.join(layout::PATH_FILE);
        let bytes = std::fs::read(&p).ok()?;
        let rec = PathRecord::decode(&bytes, &p).ok()?;
        self.member_match(&rec.path, &rec.rel, remote)
    }

    /// [`Sets::claims`] of a file known by its path record.
    pub fn member_match(&self, app_path: &[u8], rel: &[u8], remote: &Remote) -> Option<Match> {
        if let Some(m) = self.rules.matches(rel) {
            return Some(m);
        }
        let root = remote_root_of(remote, app_path, rel).ok()?;
        let (set, member) = paralog_aggregate::reader::find_set(&root, rel)?;
        let reader = self
            .published
            .get(&root.join(OsStr::from_bytes(&set)))
            .ok()??;
        reader.member(&member)?;
        Some(Match {
            rule: REWRITE,
            set,
            member,
        })
    }

    /// Refuse, before anything runs, a remote sets cannot be written to yet.
    pub fn check_remote(url: Option<&RemoteUrl>) -> Result<(), String> {
        match url {
            None | Some(RemoteUrl::Posix(_)) => Ok(()),
            Some(other) => Err(format!(
                "--aggregate writes checkpoint sets to a POSIX remote (a directory, or the prefix) so far, not to {other}"
            )),
        }
    }
}

/// A member file of a set, as scanned.
struct MemberFile {
    inv: FileInventory,
    rel: Vec<u8>,
    app_path: Vec<u8>,
    member: Vec<u8>,
    pending: Vec<EpochId>,
    finished: bool,
    created: SystemTime,
}

fn corrupt(e: LogError) -> DrainError {
    match e {
        LogError::Io { ref error, .. } if error.kind() != std::io::ErrorKind::NotFound => {
            DrainError::Local(e)
        }
        _ => DrainError::Corrupt(e),
    }
}

/// An error of the set's remote side, for the retry bookkeeping: damage of
/// a published set stops it (`Permanent`), the rest is retried.
fn set_error(e: AggError) -> DrainError {
    let kind = match &e {
        AggError::Io { .. } => ErrorKind::Retryable,
        AggError::Corrupt { .. } | AggError::Invalid { .. } => ErrorKind::Permanent,
    };
    DrainError::Remote(BackendError {
        kind,
        target: match &e {
            AggError::Io { path, .. }
            | AggError::Corrupt { path, .. }
            | AggError::Invalid { path, .. } => path.display().to_string(),
        },
        op: "write checkpoint set",
        message: e.to_string(),
    })
}

/// A set of a job: (rule index, set directory).
type SetKey = (usize, Vec<u8>);

/// Scan the member files of the sets in `job_dir`, by set.
fn scan_job(
    sets: &Sets,
    remote: &Remote,
    job_dir: &Path,
) -> Result<BTreeMap<SetKey, Vec<MemberFile>>, DrainError> {
    let mut out: BTreeMap<SetKey, Vec<MemberFile>> = BTreeMap::new();
    let entries = match std::fs::read_dir(job_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(error) => {
            return Err(DrainError::Local(LogError::Io {
                path: job_dir.to_path_buf(),
                op: "list",
                error,
            }))
        }
    };
    for e in entries.flatten() {
        if !layout::is_file_dir_name(&e.file_name().to_string_lossy()) {
            continue;
        }
        let dir = e.path();
        if sets.claims(&dir, remote).is_none() {
            continue;
        }
        if let Some((key, f)) = scan_member(sets, remote, &dir)? {
            out.entry(key).or_default().push(f);
        }
    }
    Ok(out)
}

fn scan_member(
    sets: &Sets,
    remote: &Remote,
    dir: &Path,
) -> Result<Option<(SetKey, MemberFile)>, DrainError> {
    let inv = FileInventory::scan_dir(dir).map_err(DrainError::Local)?;
    let Some(rec) = inv.record.clone() else {
        return Ok(None);
    };
    let Some(m) = sets.member_match(&rec.path, &rec.rel, remote) else {
        return Ok(None);
    };
    let committed = inv.committed_epochs().map_err(corrupt)?;
    let pending = inv.pending_epochs().map_err(corrupt)?;
    let all = inv.epoch_ids();
    let done = inv.progress.map(|p| p.id());
    // Nothing being committed, and the last open ended.
    let uncommitted = all
        .iter()
        .any(|id| Some(*id) > done && !committed.contains(id));
    let last_open_ended = inv
        .gens
        .keys()
        .next_back()
        .is_none_or(|&g| inv.open_ended(g));
    // A one-process writer in the middle of an epoch (or killed in it)
    // stages it beside the generations; a file with nothing committed yet
    // is being written too.
    let staging = std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| paralog_log::single::is_staging_name(&e.file_name().to_string_lossy()))
    });
    let nothing_committed = inv.gens.is_empty();
    let created = std::fs::metadata(dir.join(layout::PATH_FILE))
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Ok(Some((
        (m.rule, m.set.clone()),
        MemberFile {
            inv,
            rel: rec.rel.clone(),
            app_path: rec.path.clone(),
            member: m.member,
            pending,
            finished: !uncommitted && last_open_ended && !staging && !nothing_committed,
            created,
        },
    )))
}

/// The POSIX directory sets of `f` go to: the remote's root, or the
/// prefix the program wrote under (its path minus the relative path).
fn remote_root(remote: &Remote, f: &MemberFile) -> Result<PathBuf, DrainError> {
    remote_root_of(remote, &f.app_path, &f.rel)
}

fn remote_root_of(remote: &Remote, app_path: &[u8], rel: &[u8]) -> Result<PathBuf, DrainError> {
    match remote {
        Remote::Url(RemoteUrl::Posix(root), _) => Ok(root.clone()),
        Remote::Url(url, _) => Err(DrainError::Remote(BackendError {
            kind: ErrorKind::Permanent,
            target: url.to_string(),
            op: "write checkpoint set",
            message: Sets::check_remote(Some(url)).unwrap_err(),
        })),
        Remote::Prefix => {
            let path = Path::new(OsStr::from_bytes(app_path));
            let mut root = path.to_path_buf();
            for _ in Path::new(OsStr::from_bytes(rel)).components() {
                root.pop();
            }
            Ok(root)
        }
    }
}

/// Drain every set of the job in `job_dir` that is complete (with `flush`:
/// every set whose members are all finished). `on_epoch` is told of each
/// member epoch once the set holding it is durable and its progress
/// recorded. One outcome per set with pending epochs, with its own
/// failure; `Err` only when the job cannot be scanned.
pub fn drain_sets(
    sets: &Sets,
    remote: &Remote,
    job_dir: &Path,
    flush: bool,
    keep_drained: bool,
    on_epoch: &mut dyn FnMut(&Path, Drained),
) -> Result<Vec<SetOutcome>, DrainError> {
    let _one = sets.busy.lock().unwrap_or_else(|p| p.into_inner());
    let by_set = scan_job(sets, remote, job_dir)?;
    let job = job_dir
        .file_name()
        .map(|n| n.as_bytes().to_vec())
        .unwrap_or_default();
    let mut outcomes = Vec::new();
    for ((rule, set), files) in &by_set {
        if !keep_drained {
            // What a crash between a set's progress records and the
            // deletion left (the set holds it).
            for f in files {
                step::delete_drained_leftovers(&f.inv).map_err(DrainError::Local)?;
            }
        }
        if files.iter().all(|f| f.pending.is_empty()) {
            continue;
        }
        let name = String::from_utf8_lossy(set).into_owned();
        let mut outcome = SetOutcome {
            set: name.clone(),
            ..SetOutcome::default()
        };
        let unfinished: Vec<String> = files
            .iter()
            .filter(|f| !f.finished)
            .map(|f| String::from_utf8_lossy(&f.member).into_owned())
            .collect();
        let newest_here = files.iter().map(|f| f.created).max();
        let newer = *rule == REWRITE
            || by_set.iter().any(|((r, s), other)| {
                r == rule && s != set && other.iter().map(|f| f.created).min() > newest_here
            });
        let complete = unfinished.is_empty();
        if !(complete || flush && sets.incomplete) {
            outcome.waiting = Some(format!(
                "members still being written: {}",
                unfinished.join(", ")
            ));
        } else if !(flush || newer) {
            outcome.waiting = Some("waiting for a newer set or the end of the job".into());
        } else {
            let publish = Publish {
                job: &job,
                set,
                complete,
                keep_drained,
            };
            match publish_set(sets, remote, &publish, files, on_epoch) {
                Ok((version, members)) => {
                    outcome.version = Some(version);
                    outcome.members = members;
                }
                Err(e) => {
                    tracing::warn!(set = %name, error = %e, "publishing a checkpoint set failed; its members' local data is kept");
                    outcome.waiting = Some(e.to_string());
                    outcome.error = Some(e);
                }
            }
        }
        if let Some(w) = &outcome.waiting {
            tracing::debug!(set = %name, why = %w, "checkpoint set not published yet");
        }
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

type Published = (u64, Vec<(PathBuf, Vec<EpochId>, u64)>);

/// What one publish is asked for.
struct Publish<'a> {
    job: &'a [u8],
    set: &'a [u8],
    /// Every member finished (else `recover --incomplete`).
    complete: bool,
    keep_drained: bool,
}

fn publish_set(
    sets: &Sets,
    remote: &Remote,
    p: &Publish<'_>,
    scanned: &[MemberFile],
    on_epoch: &mut dyn FnMut(&Path, Drained),
) -> Result<Published, DrainError> {
    let (job, set, keep_drained) = (p.job, p.set, p.keep_drained);
    // The drain locks of every member (a `recover` may run), then a fresh
    // look at each under its lock.
    let mut locks: Vec<DrainLock> = Vec::new();
    let mut files = Vec::new();
    for f in scanned {
        locks.push(lock_file_dir(&f.inv.dir)?);
        if let Some((_, fresh)) = scan_member(sets, remote, &f.inv.dir)? {
            if !fresh.finished && p.complete {
                return Err(DrainError::Busy(fresh.inv.display_name()));
            }
            files.push(fresh);
        }
    }
    let Some(first) = files.first() else {
        return Ok((0, Vec::new()));
    };
    let root = remote_root(remote, first)?;
    let set_dir = root.join(OsStr::from_bytes(set));
    // What a crashed publish of this set left (this server is its only
    // writer: one set at a time, under the members' drain locks).
    match collect_orphans(&set_dir) {
        Ok(removed) if !removed.is_empty() => {
            tracing::info!(set = %set_dir.display(), removed = removed.len(), "removed orphaned containers")
        }
        Ok(_) => {}
        Err(e) => return Err(set_error(e)),
    }
    let old = SetReader::open(&set_dir).map_err(set_error)?.map(Arc::new);
    let hook = |p: &str| crate::failpoint::hit(p);
    let mut w = SetWriter::new(&root, set, sets.containers, sets.align)
        .map_err(set_error)?
        .with_origin(job, first.inv.origin())
        .with_hook(hook);

    // The members with new epochs, largest first (to even the containers).
    let mut items = Vec::new();
    let mut handled = BTreeSet::new();
    for f in files.iter().filter(|f| !f.pending.is_empty()) {
        handled.insert(f.member.clone());
        let lf = f.inv.logical_file(None).map_err(corrupt)?;
        // Every extent verified before anything reaches the remote.
        let mut reader = SourceReader::default();
        let used: BTreeSet<usize> = lf.pieces().map(|(_, _, p)| p.source).collect();
        for &s in &used {
            reader.verify(&lf.sources[s]).map_err(corrupt)?;
        }
        if lf.deleted {
            continue;
        }
        let base = Base::open(old.as_ref(), &root, f)?;
        let size = lf.size.final_size(base.len());
        let mode = base.mode();
        let ranges = data_ranges(&lf, &base);
        let bytes: u64 = ranges.iter().map(|r| r.1).sum();
        items.push((f, lf, reader, base, size, mode, ranges, bytes));
    }
    items.sort_by(|a, b| b.7.cmp(&a.7).then_with(|| a.0.member.cmp(&b.0.member)));
    for (f, lf, reader, base, size, mode, ranges, _) in items {
        let mut src = LogicalRead {
            lf: &lf,
            reader,
            base,
            ranges: ranges.iter().copied().collect(),
            local_error: None,
        };
        w.add_member_sparse(&f.member, size, mode, &ranges, &mut src)
            .map_err(|e| match src.local_error.take() {
                Some(l) => corrupt(l),
                None => set_error(e),
            })?;
    }
    // The members no new epoch touched stay as they were.
    if let Some(old) = &old {
        for m in old
            .record()
            .members
            .iter()
            .filter(|m| !handled.contains(&m.path))
        {
            copy_member(&mut w, old, m).map_err(set_error)?;
        }
    }
    crate::failpoint::hit("aggregate.before_publish");
    let record = w.publish(p.complete).map_err(set_error)?;
    tracing::info!(set = %set_dir.display(), version = record.version, members = record.members.len(), containers = record.containers.len(), complete = record.complete, "checkpoint set published");

    // The set is durable: the progress records, then the local records.
    let mut members = Vec::new();
    for f in files.iter().filter(|f| !f.pending.is_empty()) {
        let last = *f.pending.last().expect("pending");
        step::write_progress(&f.inv.dir, last).map_err(DrainError::Local)?;
        let bytes = f.pending.iter().map(|&id| f.inv.local_bytes(id)).sum();
        for (k, &id) in f.pending.iter().enumerate() {
            on_epoch(
                &f.inv.dir,
                Drained {
                    id,
                    bytes: if k + 1 == f.pending.len() { bytes } else { 0 },
                },
            );
        }
        members.push((f.inv.dir.clone(), f.pending.clone(), bytes));
    }
    crate::failpoint::hit("aggregate.after_progress");
    if !keep_drained {
        for f in files.iter().filter(|f| !f.pending.is_empty()) {
            for &id in &f.pending {
                step::delete_epoch(&f.inv, id).map_err(DrainError::Local)?;
            }
        }
    }
    drop(locks);
    Ok((record.version, members))
}

/// A member's content before its new epochs: its member in the set's
/// published version, else the plain file at its path on the remote (a
/// run without aggregation left it), else nothing.
enum Base {
    None,
    Member(MemberReader),
    File(std::fs::File, u64, u32),
}

impl Base {
    fn open(old: Option<&Arc<SetReader>>, root: &Path, f: &MemberFile) -> Result<Base, DrainError> {
        if let Some(m) = old.and_then(|o| MemberReader::new(o.clone(), &f.member)) {
            return Ok(Base::Member(m));
        }
        let p = root.join(OsStr::from_bytes(&f.rel));
        match std::fs::File::open(&p) {
            Ok(file) => {
                let md = file
                    .metadata()
                    .map_err(|e| set_error(AggError::io(&p, "stat")(e)))?;
                if !md.is_file() {
                    return Ok(Base::None);
                }
                Ok(Base::File(file, md.len(), md.mode() & 0o7777))
            }
            Err(_) => Ok(Base::None),
        }
    }

    fn len(&self) -> u64 {
        match self {
            Base::None => 0,
            Base::Member(m) => m.size(),
            Base::File(_, n, _) => *n,
        }
    }

    fn mode(&self) -> u32 {
        match self {
            Base::None => 0o644,
            Base::Member(m) => m.member().mode,
            Base::File(_, _, mode) => *mode,
        }
    }

    fn read(&mut self, at: u64, dst: &mut [u8]) -> paralog_log::Result<()> {
        use std::os::unix::fs::FileExt;
        match self {
            Base::None => {
                dst.fill(0);
                Ok(())
            }
            Base::Member(m) => m.read_at(at, dst).map_err(|e| LogError::Corrupt {
                path: m.set().dir().to_path_buf(),
                offset: 0,
                what: format!(
                    "the published member {}: {e}",
                    String::from_utf8_lossy(&m.member().path)
                ),
            }),
            Base::File(f, _, _) => f.read_exact_at(dst, at).map_err(|error| LogError::Io {
                path: PathBuf::from("(remote base file)"),
                op: "read",
                error,
            }),
        }
    }
}

/// Where the member has bytes: the base's data that stays visible and the
/// new epochs' pieces, merged; the rest are holes.
fn data_ranges(lf: &LogicalFile, base: &Base) -> Vec<(u64, u64)> {
    let visible = lf.size.base_visible(base.len());
    let mut r: Vec<(u64, u64)> = Vec::new();
    match base {
        Base::None => {}
        Base::Member(m) => {
            for e in &m.member().extents {
                let end = (e.offset + e.len).min(visible);
                if e.offset < end {
                    r.push((e.offset, end));
                }
            }
        }
        Base::File(..) => {
            if visible > 0 {
                r.push((0, visible));
            }
        }
    }
    r.extend(lf.pieces().map(|(off, len, _)| (off, off + len)));
    r.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, e) in r {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged.into_iter().map(|(s, e)| (s, e - s)).collect()
}

/// The member's bytes in `ranges`, one after the other: the logical file's
/// own read (pieces over the base, every source verified).
struct LogicalRead<'a> {
    lf: &'a LogicalFile,
    reader: SourceReader,
    base: Base,
    ranges: std::collections::VecDeque<(u64, u64)>,
    /// Why a read failed, when the node-local log (not the remote) did.
    local_error: Option<LogError>,
}

impl Read for LogicalRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some(&(off, len)) = self.ranges.front() {
            if len == 0 {
                self.ranges.pop_front();
                continue;
            }
            let n = (len as usize).min(buf.len());
            let base_len = self.base.len();
            let base = &mut self.base;
            if let Err(e) = self.lf.read_at(
                &mut self.reader,
                off,
                &mut buf[..n],
                base_len,
                &mut |at, dst| base.read(at, dst),
            ) {
                let msg = e.to_string();
                self.local_error = Some(e);
                return Err(std::io::Error::other(msg));
            }
            self.ranges[0] = (off + n as u64, len - n as u64);
            return Ok(n);
        }
        Ok(0)
    }
}

/// `paralog recover` of the sets of one job: every set whose members all
/// ended is published (nothing is held back for a newer set); one row per
/// member file with new epochs. A set with a member that was still being
/// written when the job stopped is not published (it never appears
/// complete); its rows say so and its local data is kept.
pub fn recover_sets(
    sets: &Sets,
    remote: &Remote,
    job: &paralog_log::reader::JobInventory,
) -> Vec<crate::recover::FileRecovery> {
    use crate::recover::FileRecovery;
    use paralog_log::reader::fmt_ids;
    let mut drained: BTreeMap<PathBuf, (Vec<EpochId>, u64)> = BTreeMap::new();
    let result = drain_sets(sets, remote, &job.dir, true, false, &mut |dir, d| {
        let e = drained.entry(dir.to_path_buf()).or_default();
        e.0.push(d.id);
        e.1 += d.bytes;
    });
    let by_set = scan_job(sets, remote, &job.dir).unwrap_or_default();
    let mut rows = Vec::new();
    let (outcomes, scan_error) = match result {
        Ok(o) => (o, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    for f in job.files.iter() {
        let Some(m) = sets.claims(&f.dir, remote) else {
            continue;
        };
        let (ids, bytes) = drained.remove(&f.dir).unwrap_or_default();
        let set = m.set;
        let set_name = String::from_utf8_lossy(&set).into_owned();
        let left = by_set
            .values()
            .flatten()
            .find(|m| m.inv.dir == f.dir)
            .map(|m| m.pending.clone())
            .unwrap_or_default();
        if ids.is_empty() && left.is_empty() {
            continue;
        }
        let error = if left.is_empty() {
            None
        } else {
            let why = outcomes
                .iter()
                .find(|o| o.set == set_name)
                .and_then(|o| o.waiting.clone())
                .or_else(|| scan_error.clone())
                .unwrap_or_else(|| "not published".into());
            Some(format!(
                "checkpoint set {set_name} not published ({why}); local data kept"
            ))
        };
        rows.push(FileRecovery {
            path: f.display_name(),
            remote: Some(format!("checkpoint set {set_name}")),
            drained: fmt_ids(&ids),
            drained_epochs: ids.len(),
            bytes,
            error,
            ..FileRecovery::default()
        });
    }
    rows
}
