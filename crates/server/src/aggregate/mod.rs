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

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use paralog_aggregate::rule::{Match, Rules};
use paralog_aggregate::SetReader;
use paralog_backend::RemoteUrl;
use paralog_log::format::PathRecord;
use paralog_log::{layout, EpochId};

use crate::drain::{DrainError, Drained};
use crate::remote::Remote;
use crate::step;

pub mod across;
mod jobroot;
pub mod nodes;
mod own;
mod own_s3;
mod publish;
mod renamed;
mod s3index;
mod scan;
pub(crate) mod transfer;

pub use s3index::write_s3_index;

/// A set's leader receives into this many buffers by default.
pub const DEFAULT_BUFFERS: usize = 4;

use publish::{publish_set, Publish};
use scan::{scan_job, sets_root_of, SetsRoot};

/// How the servers of a job write a set's containers (`--agg-mode`,
/// docs/aggregate.md): through one leader per group, or each node its own
/// region. One node writes everything itself either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggMode {
    /// The seed's: non-leaders send their members to the group's leader
    /// over MPI, the leader writes the container (`transfer.rs`).
    Leader,
    /// Every node writes its own members into its own region of its
    /// group's container (`own.rs`): no member byte between nodes.
    Own,
}

impl AggMode {
    /// The mode when `--agg-mode` is not given: `own` on a POSIX remote,
    /// since it moves no member byte between nodes and was faster than the
    /// leader in every measured pair (docs/benchmarks.md section 9);
    /// `leader` on the object layout (a container is one chunk, one
    /// writer) and on S3 (own works there, but was measured only on
    /// loopback, where no link is the bottleneck).
    pub fn default_for(url: Option<&RemoteUrl>) -> AggMode {
        match url {
            Some(RemoteUrl::S3(_) | RemoteUrl::ObjStore(_)) => AggMode::Leader,
            _ => AggMode::Own,
        }
    }
}

impl std::str::FromStr for AggMode {
    type Err = String;
    fn from_str(s: &str) -> Result<AggMode, String> {
        match s.trim() {
            "leader" => Ok(AggMode::Leader),
            "own" => Ok(AggMode::Own),
            other => Err(format!(
                "aggregation mode {other:?} is not one of leader, own"
            )),
        }
    }
}

impl std::fmt::Display for AggMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AggMode::Leader => "leader",
            AggMode::Own => "own",
        })
    }
}

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
    /// The server job: K was not given, so one container per node.
    pub per_node: bool,
    /// The server job: receive buffers of a set's leader (`--agg-buffers`).
    pub buffers: usize,
    /// The server job: who writes the containers (`--agg-mode`).
    pub mode: AggMode,
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
            per_node: false,
            buffers: DEFAULT_BUFFERS,
            mode: AggMode::Leader,
        }
    }

    /// The server job's settings: `per_node` when `--containers` was not
    /// given (K is then the number of nodes), and the leader's receive
    /// buffers.
    pub fn for_server_job(mut self, per_node: bool, buffers: usize) -> Sets {
        self.per_node = per_node;
        self.buffers = buffers.max(1);
        self
    }

    /// The server job's `--agg-mode` (one node writes everything itself:
    /// the mode changes nothing there).
    pub fn with_mode(mut self, mode: AggMode) -> Sets {
        self.mode = mode;
        self
    }

    /// `recover --incomplete`: a set that can never be completed (a
    /// member's writer died in it) is published with what its members
    /// committed, flagged incomplete, rather than kept back.
    pub fn publishing_incomplete(mut self) -> Sets {
        self.incomplete = true;
        self
    }

    /// `recover --incomplete` was asked for.
    pub fn incomplete(&self) -> bool {
        self.incomplete
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
        // On S3 the rules alone say what is a member: finding a published
        // set above every file would be a request per parent directory,
        // per file and round (docs/aggregate.md, "Sets on S3").
        if matches!(remote, Remote::Url(RemoteUrl::S3(_), _)) {
            return None;
        }
        let (set, member, reader) = match sets_root_of(remote, app_path, rel).ok()? {
            SetsRoot::Dir(root) => {
                let (set, member) = paralog_aggregate::reader::find_set(&root, rel)?;
                let r = self
                    .published
                    .get(&root.join(OsStr::from_bytes(&set)))
                    .ok()??;
                (set, member, r)
            }
            SetsRoot::Obj(store) => {
                let (set, member) = paralog_aggregate::objset::find_set(&store, rel)?;
                let r = SetReader::open_obj(&store, &set).ok()??;
                (set, member, std::sync::Arc::new(r))
            }
            SetsRoot::S3(_) => return None,
        };
        reader.member(&member)?;
        Some(Match {
            rule: REWRITE,
            set,
            member,
        })
    }

    /// Refuse, before anything runs, `--agg-mode own` where only one
    /// writer per container can write: an object layout's chunk in a
    /// server job (a POSIX file and an S3 upload take several).
    pub fn check_mode(
        url: Option<&RemoteUrl>,
        server_job: bool,
        mode: AggMode,
    ) -> Result<(), String> {
        match (url, server_job, mode) {
            (Some(u @ RemoteUrl::ObjStore(_)), true, AggMode::Own) => Err(format!(
                "--agg-mode own (PARALOG_AGG_MODE) writes checkpoint sets to a POSIX remote or S3 so far, not to {u}: use --agg-mode leader there (docs/aggregate.md)"
            )),
            _ => Ok(()),
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
                    if matches!(e, DrainError::Waiting(_)) {
                        // A member renamed away waits for its target: not a failure.
                        tracing::debug!(set = %name, why = %e, "checkpoint set waits");
                    } else {
                        tracing::warn!(set = %name, error = %e, "publishing a checkpoint set failed; its members' local data is kept");
                    }
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
        let outcome = outcomes.iter().find(|o| o.set == set_name);
        let error = if left.is_empty() {
            None
        } else {
            let why = outcome
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
            // A member renamed away waits for its target's drain, which
            // the same recovery may do next (`recover::recover_job`).
            waiting: error.is_some()
                && outcome.is_some_and(|o| matches!(o.error, Some(DrainError::Waiting(_)))),
            error,
            ..FileRecovery::default()
        });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_regions_are_posix_and_s3_only_in_a_server_job() {
        // Several nodes upload parts of one S3 upload.
        let s3: RemoteUrl = "s3://bucket/pre".parse().unwrap();
        assert_eq!(Sets::check_mode(Some(&s3), true, AggMode::Own), Ok(()));
        assert_eq!(Sets::check_mode(Some(&s3), true, AggMode::Leader), Ok(()));
        // One node writes everything itself: the mode changes nothing.
        assert_eq!(Sets::check_mode(Some(&s3), false, AggMode::Own), Ok(()));
        // An object layout's container is one chunk, written by one node.
        let obj: RemoteUrl = "objstore:///tmp/store".parse().unwrap();
        let e = Sets::check_mode(Some(&obj), true, AggMode::Own).unwrap_err();
        assert!(
            e.contains("--agg-mode own") && e.contains("objstore:///tmp/store"),
            "{e}"
        );
        let dir: RemoteUrl = "/tmp/remote".parse().unwrap();
        assert_eq!(Sets::check_mode(Some(&dir), true, AggMode::Own), Ok(()));
        assert_eq!(Sets::check_mode(None, true, AggMode::Own), Ok(()));
        assert_eq!("own".parse(), Ok(AggMode::Own));
        assert!("leaders"
            .parse::<AggMode>()
            .unwrap_err()
            .contains("leader, own"));
    }

    #[test]
    fn the_default_mode_is_own_on_posix_remotes() {
        let urls = ["/tmp/remote", "s3://bucket/pre", "objstore:///tmp/store"];
        let urls: Vec<RemoteUrl> = urls.iter().map(|u| u.parse().unwrap()).collect();
        assert_eq!(AggMode::default_for(Some(&urls[0])), AggMode::Own);
        assert_eq!(AggMode::default_for(None), AggMode::Own);
        assert_eq!(AggMode::default_for(Some(&urls[1])), AggMode::Leader);
        assert_eq!(AggMode::default_for(Some(&urls[2])), AggMode::Leader);
        // The default never trips the start-up check.
        for u in urls.iter().map(Some).chain([None]) {
            assert_eq!(Sets::check_mode(u, true, AggMode::default_for(u)), Ok(()));
        }
    }
}
