//! One publish of a checkpoint set by the servers of a job together
//! (docs/aggregate.md, "Many nodes"), every step agreed by all:
//!
//! 1. each server locks its member files and looks at them again; the
//!    record writer (the lowest node holding a member) collects what a
//!    crashed attempt left (`collect_orphans`) and shares the version and
//!    the attempt number; agreement;
//! 2. in each group, the non-leaders send their members to the leader,
//!    which writes them with its own into its container (transfer.rs) and
//!    makes it durable; the first group's leader also copies the previous
//!    version's members that no new epoch touched. With `--agg-mode own`
//!    the agreement of step 1 also gives every member's length, and each
//!    node writes its own members into its own region of its group's
//!    container and makes them durable (own.rs; on S3 uploads its region's
//!    parts of the container's upload, which the record writer created:
//!    own_s3.rs); the record writer keeps the previous version's untouched
//!    members;
//! 3. the leaders' placements go to the record writer; agreement (every
//!    container durable, nothing failed);
//! 4. the record writer commits the set record (temporary, fsync, rename:
//!    the commit point; S3's own-region mode first completes the uploads
//!    from every node's part reports), or, when the program deleted every member, removes
//!    the set (`paralog_aggregate::remove`) and the leaders their new
//!    containers; agreement;
//! 5. only then every server writes its members' progress records and
//!    deletes their local records.
//!
//! A crash before the rename leaves the previous version and every local
//! epoch (the next attempt collects the orphaned containers first); one
//! after it leaves the new version, and at most makes the same set again.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use paralog_aggregate::format::{self, Container, Member, SetRecord};
use paralog_aggregate::publish::new_attempt;
use paralog_aggregate::reader::{ExtentsReader, SetReader};
use paralog_backend::RemoteUrl;

use crate::cluster::mpi::{Comm, MpiError, Reduce};
use crate::drain::{lock_file_dir, DrainLock};
use crate::remote::Remote;
use crate::step;

use super::jobroot::{ContainerOut, JobRoot, Reused};
use super::nodes::SetPlan;
use super::publish::member_source;
use super::renamed;
use super::scan::{scan_member, MemberFile};
use super::transfer::{lead, send_members, Leader, Outgoing};
use super::{own, own_s3, AggMode, Sets};

/// What the servers need for a publish.
pub struct Ctx<'a> {
    pub comm: &'a Comm,
    pub sets: &'a Sets,
    pub remote: &'a Remote,
    /// Bytes of one transfer block.
    pub block: usize,
    /// Marks each wait for the other servers (`true`: begins), for the
    /// server job's watchdog.
    pub peers: &'a dyn Fn(bool),
}

impl Ctx<'_> {
    /// One MPI call under the watchdog.
    pub(crate) fn w<T>(&self, f: impl FnOnce(&Comm) -> T) -> T {
        (self.peers)(true);
        let r = f(self.comm);
        (self.peers)(false);
        r
    }
}

/// What one publish did, the same on every server.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The version published, if one was.
    pub version: Option<u64>,
    /// Why not (the first failure this server saw, or that another did).
    pub error: Option<String>,
    /// Member epochs drained and their local bytes, all nodes.
    pub epochs: u64,
    pub bytes: u64,
    /// Member bytes sent between nodes, all senders.
    pub between: u64,
    /// The most receive-buffer bytes a leader held at once.
    pub leader_peak: u64,
}

fn rel(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Publish `plan` (its verdict is `Publish`) with this node's member files
/// `mine`. Only an MPI failure returns `Err` (the server job then ends).
pub(crate) fn publish(
    ctx: &Ctx<'_>,
    plan: &SetPlan,
    job: &str,
    mine: &[MemberFile],
) -> Result<Outcome, MpiError> {
    let comm = ctx.comm;
    let me = comm.rank();
    let set = &plan.key.2;
    let mut fail: Option<String> = None;

    // 1. Locks, and a fresh look under them.
    let mut locks: Vec<DrainLock> = Vec::new();
    let mut fresh: Vec<MemberFile> = Vec::new();
    for f in mine {
        if !plan
            .members
            .iter()
            .any(|(n, m)| *n == me && m.member == f.member)
        {
            continue;
        }
        let got = lock_file_dir(&f.inv.dir).and_then(|l| {
            locks.push(l);
            scan_member(ctx.sets, ctx.remote, &f.inv.dir)
        });
        match got {
            Ok(Some((_, m))) if m.finished || !plan.complete => fresh.push(m),
            Ok(Some((_, m))) => {
                fail.get_or_insert(format!("{} is being written again", m.inv.display_name()));
            }
            Ok(None) => {}
            Err(e) => {
                fail.get_or_insert(rel(e));
            }
        }
    }
    let writer = plan.members[0].0;
    let mut head = Vec::new();
    let mut previous = None;
    let attempt = new_attempt();
    if me == writer {
        let r = (|| -> Result<(PathBuf, Option<SetRecord>), String> {
            let f = fresh.first().ok_or("no member file of the set here")?;
            // A POSIX root is shared (the prefix is known from a member's
            // path); S3's and the object layout's are the job's URL.
            let root = JobRoot::shared_dir(ctx.remote, &f.app_path, &f.rel)?;
            let prev = JobRoot::of(ctx.remote, root.clone())?.prepare(set)?;
            Ok((root, prev))
        })();
        match r {
            Ok((root, prev)) => {
                let version = prev.as_ref().map_or(1, |p| p.version + 1);
                head.push(1u8);
                head.extend_from_slice(&version.to_le_bytes());
                head.extend_from_slice(&attempt.to_le_bytes());
                head.extend_from_slice(root.as_os_str().as_bytes());
                previous = prev;
            }
            Err(e) => {
                head.push(0);
                head.extend_from_slice(e.as_bytes());
            }
        }
    }
    let mut len = (head.len() as u32).to_le_bytes();
    ctx.w(|c| c.bcast(&mut len, writer))?;
    head.resize(u32::from_le_bytes(len) as usize, 0);
    ctx.w(|c| c.bcast(&mut head, writer))?;
    let started = head.first() == Some(&1) && head.len() >= 17;
    if !started {
        let why = String::from_utf8_lossy(head.get(1..).unwrap_or_default()).into_owned();
        fail.get_or_insert(format!("the set's record writer (node {writer}): {why}"));
    }
    let (version, attempt) = if started {
        (
            u64::from_le_bytes(head[1..9].try_into().expect("8")),
            u64::from_le_bytes(head[9..17].try_into().expect("8")),
        )
    } else {
        (0, 0)
    };
    let root = PathBuf::from(OsStr::from_bytes(if started { &head[17..] } else { b"" }));
    let jr = match JobRoot::of(ctx.remote, root) {
        Ok(jr) => Some(jr),
        Err(e) => {
            fail.get_or_insert(e);
            None
        }
    };
    let dir = jr.as_ref().map(|j| j.display(set)).unwrap_or_default();
    let old = match (&jr, fail.is_none()) {
        (Some(jr), true) => match jr.open_old(set) {
            Ok(o) => o,
            Err(e) => {
                fail.get_or_insert(e);
                None
            }
        },
        _ => None,
    };
    let k = (ctx.sets.containers as usize).clamp(1, comm.size());
    let reused = jr.as_ref().map_or_else(Reused::default, |jr| {
        Reused::of(jr, plan, old.as_ref().map(|o| o.record()), k)
    });
    // The members this node places, each verified first (before the
    // agreement: in the own-region mode their lengths are agreed on).
    let mut outgoing = Vec::new();
    let in_publish = renamed::Publishing::of(&fresh);
    if let (Some(jr), None) = (&jr, &fail) {
        for f in fresh.iter().filter(|f| !f.pending.is_empty()) {
            let index = plan
                .members
                .iter()
                .position(|(n, m)| *n == me && m.member == f.member)
                .expect("in the plan") as u32;
            let root = jr.sets_root();
            let at = renamed::Place {
                sets: ctx.sets,
                remote: ctx.remote,
                old: old.as_ref(),
                root: &root,
            };
            let source = renamed::may_leave(f, &in_publish).and_then(|()| member_source(&at, f));
            match source {
                Ok(Some(src)) => outgoing.push(Outgoing {
                    index,
                    member: src.member.clone(),
                    size: src.size,
                    mode: src.mode,
                    ranges: src.ranges.clone(),
                    src: Box::new(src),
                }),
                Ok(None) => {}
                Err(e) => {
                    fail.get_or_insert(rel(e));
                }
            }
        }
    }
    if ctx.sets.mode == AggMode::Own && matches!(ctx.remote, Remote::Url(RemoteUrl::ObjStore(_), _))
    {
        // Refused at start (`Sets::check_mode`); never write files there.
        fail.get_or_insert("--agg-mode own writes to a POSIX remote or S3 only".into());
    }
    // On S3 the own-region mode places whole parts of one upload.
    let s3 = match &jr {
        Some(JobRoot::S3(s3)) if ctx.sets.mode == AggMode::Own => Some(s3.clone()),
        _ => None,
    };
    let mut shared = None;
    let agreed = if ctx.sets.mode == AggMode::Own {
        // The record writer keeps the members no new epoch touched.
        if me == writer && fail.is_none() {
            outgoing.extend(keep_old(plan, old.as_ref(), &reused));
        }
        let rule = s3.as_ref().map(|s| s.part_rule());
        let a = match own::agree(ctx, plan, fail.is_some(), &outgoing, rule)? {
            Ok(a) => a,
            Err(e) => return Ok(failed(fail, &e)),
        };
        if let Some(s3) = &s3 {
            match own_s3::start(ctx, s3, set, &own::containers(&a, version, attempt), writer)? {
                Ok(sh) => shared = Some(sh),
                Err(e) => return Ok(failed(fail, &e)),
            }
        }
        Some(a)
    } else {
        if ctx.w(|c| agree_failed(c, fail.is_some()))? {
            return Ok(failed(fail, "another node could not start the set"));
        }
        None
    };
    let jr = jr.expect("every node opened the set's root");
    let base = |containers| SetRecord {
        set: set.clone(),
        version,
        complete: plan.complete,
        block_size: format::DEFAULT_BLOCK,
        align: ctx.sets.align,
        origin: [0; 16],
        job: job.as_bytes().to_vec(),
        containers,
        members: Vec::new(),
    };

    // 2. The transfer (or each node its own region).
    let mut sent = 0u64;
    let mut peak = 0u64;
    let mut mini = Vec::new();
    let mut container: Option<ContainerOut> = None;
    let mut opened = Vec::new();
    let mut reports = Vec::new();
    if let Some(a) = &agreed {
        let rec = base(own::containers(a, version, attempt));
        let w = match (&s3, &shared) {
            (Some(s3), Some(sh)) => own_s3::write(ctx, s3, set, a, sh, rec, outgoing)?,
            _ => own::write(ctx, a, &dir, rec, outgoing)?,
        };
        mini = w.placements;
        opened = w.opened;
        reports = w.reports;
        if let Some(e) = w.error {
            fail.get_or_insert(e);
        }
    } else if let Some(g) = plan.group_of(me) {
        if g.leader == me {
            if g.container == 0 {
                outgoing.extend(keep_old(plan, old.as_ref(), &reused));
            }
            let name = format::container_name(g.container, version, attempt);
            let out = match jr.create_container(set, &name) {
                Ok(out) => out,
                Err(e) => {
                    fail.get_or_insert(e);
                    // Still receive what the senders send, and drop it.
                    ContainerOut::null().unwrap_or_else(|e| {
                        tracing::error!(error = %e, "cannot open /dev/null; ending the server job");
                        comm.abort(70)
                    })
                }
            };
            let out = container.insert(out);
            let w = lead(Leader {
                comm,
                peers: ctx.peers,
                senders: g.end - g.first - 1,
                out,
                container: 0,
                align: ctx.sets.align,
                crc_block: format::DEFAULT_BLOCK,
                block: ctx.block,
                buffers: ctx.sets.buffers,
                locals: outgoing,
            })?;
            peak = (w.peak_buffers * (ctx.block + 16)) as u64;
            if let Some(e) = w.error {
                fail.get_or_insert(e);
            }
            if fail.is_none() {
                let mut members: Vec<_> = w.members.into_values().collect();
                members.sort_by(|a, b| a.path.cmp(&b.path));
                let rec = SetRecord {
                    members,
                    ..base(vec![Container { name, size: w.end }])
                };
                mini = rec.encode();
            }
        } else {
            let s = send_members(comm, ctx.peers, g.leader, outgoing, ctx.block)?;
            sent = s.bytes;
            if let Some(e) = s.error {
                fail.get_or_insert(e);
            }
        }
    }

    // 3. The placements to the record writer; every container durable.
    let (all, counts) = ctx.w(|c| c.gather_bytes(&mini, Some(writer)))?;
    // On S3 (own regions) the parts each node uploaded, for the completion.
    let parts = if shared.is_some() {
        Some(ctx.w(|c| c.gather_bytes(&reports, Some(writer)))?)
    } else {
        None
    };
    let mut sums = [fail.is_some() as i64, sent as i64];
    ctx.w(|c| c.allreduce(&mut sums, Reduce::Sum))?;
    let mut max = [peak as i64];
    ctx.w(|c| c.allreduce(&mut max, Reduce::Max))?;
    let mut out = Outcome {
        between: sums[1] as u64,
        leader_peak: max[0] as u64,
        ..Outcome::default()
    };
    let mut committed = false;
    let mut removed = false;
    // The containers the record lists (for the log line: what was written
    // or kept, never a container left out).
    let mut listed = 0usize;
    if sums[0] == 0 && me == writer {
        let origin = fresh.first().map(|f| f.inv.origin()).unwrap_or([0; 16]);
        let merged = match &agreed {
            Some(a) => own::merge(
                &dir,
                base(own::containers(a, version, attempt)),
                &all,
                &counts,
            )
            .and_then(|mut rec| {
                rec.origin = origin;
                // A group of empty members only wrote no file (on S3 its
                // upload is abandoned, `own_s3::complete`).
                super::jobroot::drop_empty_containers(&mut rec);
                unique(&rec.members).map(|()| rec)
            })
            .and_then(|rec| match (&s3, &mut shared, &parts) {
                // Every upload complete before the record names it.
                (Some(s3), Some(sh), Some((all, counts))) => {
                    own_s3::complete(s3, set, a, sh, all, counts).map(|()| rec)
                }
                _ => Ok(rec),
            }),
            None => merge(plan, &dir, &all, &counts, origin),
        };
        let r = merged.and_then(|mut rec| {
            reused.add_to(&mut rec);
            listed = rec.containers.len();
            crate::failpoint::hit("aggregate.before_record");
            if rec.members.is_empty() {
                // Its program deleted every member (`rm -r` of the set):
                // the set goes, as on one node, never an empty version
                // whose containers would keep its directory.
                removed = true;
                return match previous.as_ref() {
                    Some(prev) => jr.remove(prev),
                    None => Ok(()),
                }
                .map(|()| committed = true);
            }
            jr.commit(&rec, previous.as_ref(), attempt, &mut || committed = true)
        });
        if let Err(e) = r {
            fail.get_or_insert(e);
        }
    }
    // 4. Whether the record is in place, or the set removed (the writer
    // says).
    let mut c = [committed as u8 | (removed as u8) << 1];
    ctx.w(|m| m.bcast(&mut c, writer))?;
    if c[0] & 2 != 0 || c[0] & 1 == 0 {
        // This attempt's container holds nothing any record lists (the
        // set removed, or not committed).
        if let Some(out) = &container {
            out.discard();
        }
        own::discard(&opened);
        if let (Some(s3), Some(sh), true) = (&s3, &shared, me == writer) {
            own_s3::discard(s3, set, sh);
        }
    }
    if c[0] & 1 == 0 {
        let why = if sums[0] > 0 {
            "a node failed during the transfer"
        } else {
            "the set record was not written"
        };
        return Ok(failed(fail, why));
    }

    // 5. The set is durable: progress records, then the local records.
    let mut mine_epochs = 0u64;
    let mut mine_bytes = 0u64;
    for f in fresh.iter().filter(|f| !f.pending.is_empty()) {
        let last = *f.pending.last().expect("pending");
        let bytes: u64 = f.pending.iter().map(|&id| f.inv.local_bytes(id)).sum();
        let r = step::write_progress(&f.inv.dir, last).and_then(|()| {
            crate::failpoint::hit("aggregate.after_progress");
            f.pending
                .iter()
                .try_for_each(|&id| step::delete_epoch(&f.inv, id))
        });
        if let Err(e) = r {
            tracing::warn!(file = %f.inv.display_name(), error = %e, "recording a published set's member failed; the next round finishes it");
        }
        mine_epochs += f.pending.len() as u64;
        mine_bytes += bytes;
    }
    drop(locks);
    let mut t = [mine_epochs as i64, mine_bytes as i64];
    ctx.w(|c| c.allreduce(&mut t, Reduce::Sum))?;
    out.version = Some(version);
    out.epochs = t[0] as u64;
    out.bytes = t[1] as u64;
    if me == writer && c[0] & 2 != 0 {
        tracing::info!(set = %dir.display(), "checkpoint set removed by the server job: its program deleted every member");
    } else if me == writer {
        tracing::info!(set = %dir.display(), version, containers = listed, kept_containers = reused.len(), mode = %ctx.sets.mode, bytes_between_nodes = out.between, "checkpoint set published by the server job");
    }
    Ok(out)
}

fn failed(fail: Option<String>, other: &str) -> Outcome {
    Outcome {
        error: Some(fail.unwrap_or_else(|| other.to_owned())),
        ..Outcome::default()
    }
}

/// Whether any server failed (an allreduce of the flags).
fn agree_failed(comm: &Comm, mine: bool) -> Result<bool, MpiError> {
    let mut v = [mine as i64];
    comm.allreduce(&mut v, Reduce::Max)?;
    Ok(v[0] != 0)
}

/// The previous version's members that no new epoch touched (nor the
/// program deleted) and that are not in a container listed again
/// (`reused`): copied into the first container, every block verified.
fn keep_old(plan: &SetPlan, old: Option<&Arc<SetReader>>, reused: &Reused) -> Vec<Outgoing> {
    let Some(old) = old else {
        return Vec::new();
    };
    let touched: std::collections::BTreeSet<&[u8]> = plan
        .members
        .iter()
        .filter(|(_, m)| m.pending)
        .map(|(_, m)| &m.member[..])
        .collect();
    old.record()
        .members
        .iter()
        .filter(|m| !touched.contains(&m.path[..]) && !reused.holds(&m.path))
        .enumerate()
        .map(|(j, m)| {
            let ranges: Vec<(u64, u64)> = m.extents.iter().map(|e| (e.offset, e.len)).collect();
            Outgoing {
                index: (plan.members.len() + j) as u32,
                member: m.path.clone(),
                size: m.size,
                mode: m.mode,
                src: Box::new(ExtentsReader::new(old.clone(), &m.path, ranges.clone())),
                ranges,
            }
        })
        .collect()
}

/// The set record from every leader's placements (each a record of its one
/// container), the containers in group order.
fn merge(
    plan: &SetPlan,
    dir: &Path,
    all: &[u8],
    counts: &[usize],
    origin: [u8; 16],
) -> Result<SetRecord, String> {
    let leaders: BTreeMap<usize, u32> = plan
        .groups
        .iter()
        .map(|g| (g.leader, g.container))
        .collect();
    let mut containers: Vec<Option<Container>> = vec![None; plan.groups.len()];
    let mut members = Vec::new();
    let mut base: Option<SetRecord> = None;
    let mut at = 0;
    for (n, &c) in counts.iter().enumerate() {
        let bytes = &all[at..at + c];
        at += c;
        let Some(&k) = leaders.get(&n) else {
            continue;
        };
        let rec = SetRecord::decode(bytes, &dir.join(format!("(placements of node {n})")))
            .map_err(rel)?;
        containers[k as usize] = rec.containers.first().cloned();
        for mut m in rec.members.iter().cloned() {
            for e in &mut m.extents {
                e.container = k;
            }
            members.push(m);
        }
        base.get_or_insert(rec);
    }
    let mut rec = base.ok_or("no placements")?;
    rec.containers = containers
        .into_iter()
        .enumerate()
        .map(|(k, c)| c.ok_or(format!("container {k} has no placements")))
        .collect::<Result<_, _>>()?;
    members.sort_by(|a, b| a.path.cmp(&b.path));
    unique(&members)?;
    rec.members = members;
    rec.origin = origin;
    super::jobroot::drop_empty_containers(&mut rec);
    Ok(rec)
}

/// Members sorted by path are each once, and none is also the directory
/// of another.
fn unique(members: &[Member]) -> Result<(), String> {
    for w in members.windows(2) {
        if w[0].path == w[1].path
            || w[1].path.starts_with(&w[0].path) && w[1].path.get(w[0].path.len()) == Some(&b'/')
        {
            return Err(format!(
                "member {} is twice in the set, or a member and a directory",
                String::from_utf8_lossy(&w[0].path)
            ));
        }
    }
    Ok(())
}
