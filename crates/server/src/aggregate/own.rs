//! The "own region" mode of the server job (`--agg-mode own`,
//! docs/aggregate.md "Each node its own region"): no member byte crosses
//! between nodes. Every node writes its own members straight into its own
//! region of its group's container, at offsets every node computes alike
//! (`paralog_aggregate::regions`), makes its writes durable, and sends the
//! record writer only its members' placements (with their checksums), as a
//! leader does in the leader mode. The commit point is the leader mode's:
//! every node's region durable, agreement, the set record, progress, local
//! deletion (`across.rs`).
//!
//! The exact lengths ride on the publish's first agreement: the round's
//! summaries carry the log's pending bytes, which are not a member's bytes
//! in the set (overlapping writes count twice; a member rewritten in part
//! keeps bytes of its base), so that agreement is an allgather of each
//! node's (member, length) list instead of an allreduce of failure flags.
//!
//! Who creates a container: every node with a member in it opens it with
//! `O_CREAT` and neither `O_EXCL` nor `O_TRUNC`, so whoever comes first
//! creates it and the others write beside it, with no ordering message.
//! This is safe because the name is new: it carries the attempt, a random
//! number the record writer chose after collecting what older attempts
//! left, so no file of that name holds anything to keep or to mistake for
//! ours. Nobody truncates or sets the length: the last byte written is the
//! container's end (regions::place leaves no trailing hole).
//!
//! On S3 a container is one multipart upload several nodes upload parts
//! of (`own_s3.rs`); the agreement, the placements and the commit are the
//! same, the placement cut into parts (`regions::place_parts`).

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use paralog_aggregate::format::{self, Container, Extent, Member, SetRecord};
use paralog_aggregate::regions::{self, Entry, PartRegion, PartRule, Regions, Slot};

use crate::cluster::mpi::{MpiError, Reduce};

use super::across::Ctx;
use super::nodes::SetPlan;
use super::transfer::{Outgoing, WRITERS};

/// Every node's members and their lengths, and the placement from them.
pub(crate) struct Agreed {
    pub regions: Regions,
    /// Per entry of `regions` (same order): its node and plan index.
    pub owners: Vec<(usize, u32)>,
    /// On S3: every node's region as parts of its container's upload.
    pub parts: Vec<PartRegion>,
}

/// The publish's first agreement in this mode: whether any node failed,
/// and each node's (plan index, bytes) per member it will write (the
/// record writer's also the members a new version keeps), placed by
/// `rule`'s parts on S3. `Err`: some node failed, or the placement is
/// refused (every node returns it alike).
pub(crate) fn agree(
    ctx: &Ctx<'_>,
    plan: &SetPlan,
    failed: bool,
    mine: &[Outgoing],
    rule: Option<PartRule>,
) -> Result<Result<Agreed, String>, MpiError> {
    const OTHER: &str = "another node could not start the set";
    // In plan order (by member path), so that the placement is a function
    // of the set, not of the order this node scanned its files in.
    let mut list: Vec<(u32, u64)> = mine
        .iter()
        .map(|m| (m.index, m.ranges.iter().map(|r| r.1).sum()))
        .collect();
    list.sort_unstable();
    let mut out = vec![failed as u8];
    out.extend_from_slice(&(list.len() as u32).to_le_bytes());
    for (index, len) in list {
        out.extend_from_slice(&index.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
    }
    let (all, counts) = ctx.w(|c| c.gather_bytes(&out, None))?;
    let mut entries = Vec::new();
    let mut owners = Vec::new();
    let mut at = 0;
    for (node, &c) in counts.iter().enumerate() {
        let b = &all[at..at + c];
        at += c;
        // Every node decodes the same bytes: a malformed list (never sent
        // by this binary) fails the attempt everywhere alike.
        if b.len() < 5 || b[0] != 0 {
            return Ok(Err(OTHER.into()));
        }
        let n = u32::from_le_bytes(b[1..5].try_into().expect("4")) as usize;
        if b.len() != 5 + 12 * n {
            return Ok(Err(OTHER.into()));
        }
        let Some(group) = plan.group_of(node) else {
            if n == 0 {
                continue;
            }
            return Ok(Err(OTHER.into()));
        };
        for e in b[5..].chunks_exact(12) {
            entries.push(Entry {
                group: group.first as u64,
                node: node as u64,
                len: u64::from_le_bytes(e[4..12].try_into().expect("8")),
            });
            owners.push((node, u32::from_le_bytes(e[..4].try_into().expect("4"))));
        }
    }
    let (regions, parts) = match rule {
        None => (regions::place(&entries, ctx.sets.align), Vec::new()),
        Some(rule) => match regions::place_parts(&entries, ctx.sets.align, rule) {
            Ok(p) => (p.regions, p.parts),
            Err(e) => return Ok(Err(e)),
        },
    };
    Ok(Ok(Agreed {
        regions,
        owners,
        parts,
    }))
}

/// This node's members in `a`: (plan index → slot).
pub(crate) fn my_slots(ctx: &Ctx<'_>, a: &Agreed) -> BTreeMap<u32, Slot> {
    let me = ctx.comm.rank();
    a.owners
        .iter()
        .zip(&a.regions.slots)
        .filter(|((n, _), _)| *n == me)
        .map(|((_, i), s)| (*i, *s))
        .collect()
}

/// What this node wrote.
#[derive(Default)]
pub(crate) struct Wrote {
    /// Its placements: a set record of every container with its members
    /// only (empty when it wrote none).
    pub placements: Vec<u8>,
    /// The containers it opened (removed again when the set is not
    /// committed).
    pub opened: Vec<PathBuf>,
    /// On S3: its parts' reports (`PartDone::encode_all`).
    pub reports: Vec<u8>,
    pub error: Option<String>,
}

/// The containers of the placement: names and lengths.
pub(crate) fn containers(a: &Agreed, version: u64, attempt: u64) -> Vec<Container> {
    a.regions
        .sizes
        .iter()
        .enumerate()
        .map(|(k, &size)| Container {
            name: format::container_name(k as u32, version, attempt),
            size,
        })
        .collect()
}

/// Write this node's members `mine` into their regions of the containers
/// in `dir` (threads over the members, each reading its member in `block`
/// bytes), then fsync every container written and the directory. Only an
/// MPI failure (of the heartbeat) returns `Err`.
pub(crate) fn write(
    ctx: &Ctx<'_>,
    a: &Agreed,
    dir: &Path,
    base: SetRecord,
    mine: Vec<Outgoing>,
) -> Result<Wrote, MpiError> {
    let slots = my_slots(ctx, a);
    let block = ctx.block;
    let mut wrote = Wrote::default();
    let mut files: BTreeMap<u32, (File, PathBuf)> = BTreeMap::new();
    for s in slots.values() {
        // A group whose members are all empty has a container of no
        // byte: never created (the record leaves it out, as the leader
        // mode does: `jobroot::drop_empty_containers`).
        if files.contains_key(&s.container) || a.regions.sizes[s.container as usize] == 0 {
            continue;
        }
        let path = dir.join(OsStr::from_bytes(
            &base.containers[s.container as usize].name,
        ));
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            // Never: another node may have written its region already.
            .truncate(false)
            .mode(0o644)
            .open(&path);
        match f {
            Ok(f) => {
                wrote.opened.push(path.clone());
                files.insert(s.container, (f, path));
            }
            Err(e) => {
                // No return: this node still takes part in the heartbeat.
                wrote.error = Some(format!("opening {}: {e}", path.display()));
                break;
            }
        }
    }
    let work: Mutex<VecDeque<(Outgoing, Slot)>> = Mutex::new(
        mine.into_iter()
            .filter_map(|m| slots.get(&m.index).map(|s| (m, *s)))
            .collect(),
    );
    let placed: Mutex<Vec<Member>> = Mutex::new(Vec::new());
    let error: Mutex<Option<String>> = Mutex::new(wrote.error.take());
    let local = beside_beats(ctx, || {
        std::thread::scope(|w| {
            for _ in 0..WRITERS {
                w.spawn(|| {
                    let mut buf = vec![0u8; block];
                    loop {
                        if lock(&error).is_some() {
                            return;
                        }
                        let Some((m, slot)) = lock(&work).pop_front() else {
                            return;
                        };
                        let f = files.get(&slot.container).map(|(f, _)| f);
                        let mut put = |at: u64, data: &[u8]| match f {
                            Some(f) => f
                                .write_all_at(data, at)
                                .map_err(|e| format!("writing the container at {at}: {e}")),
                            // Not opened: its placement has no byte.
                            None => Err(format!("a member byte at {at} in a container of 0 bytes")),
                        };
                        match write_member(&mut put, m, slot, &mut buf) {
                            Ok(member) => lock(&placed).push(member),
                            Err(e) => {
                                lock(&error).get_or_insert(e);
                            }
                        }
                    }
                });
            }
        });
        let mut err = lock(&error).take();
        if err.is_none() {
            err = durable(&files, dir).err();
        }
        err
    })?;
    wrote.error = local.unwrap_or_else(|_| Some("a region writer thread panicked".into()));
    let mut members = placed.into_inner().unwrap_or_else(|p| p.into_inner());
    if wrote.error.is_none() && !members.is_empty() {
        members.sort_by(|a, b| a.path.cmp(&b.path));
        wrote.placements = SetRecord { members, ..base }.encode();
    }
    Ok(wrote)
}

/// Between two beats of [`heartbeat`].
const BEAT: Duration = Duration::from_millis(100);

/// Run `work` on a thread of its own while the MPI thread beats with the
/// others (`heartbeat`), so that no node waits for the slowest region in
/// one collective. The beats stop when `work` returns or panics (its
/// `Err`).
pub(crate) fn beside_beats<T: Send>(
    ctx: &Ctx<'_>,
    work: impl FnOnce() -> T + Send,
) -> Result<std::thread::Result<T>, MpiError> {
    let done = AtomicBool::new(false);
    /// Sets `done` however the work ends.
    struct Done<'a>(&'a AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let (beat, local) = std::thread::scope(|s| {
        let local = s.spawn(|| {
            let _done = Done(&done);
            work()
        });
        let beat = heartbeat(ctx, &done);
        (beat, local.join())
    });
    beat.map(|()| local)
}

/// Until every node's region is written and durable: one allreduce of
/// "still writing" per beat, each one watched. A node that finished waits
/// for the slowest in steps the watchdog can time (a region that takes
/// longer than `--peer-timeout` to write must not end the job), and a
/// dead node still ends it. Every node makes the same number of calls:
/// all stop at the first beat where nobody is writing.
fn heartbeat(ctx: &Ctx<'_>, done: &AtomicBool) -> Result<(), MpiError> {
    loop {
        let mut v = [!done.load(Ordering::SeqCst) as i64];
        ctx.w(|c| c.allreduce(&mut v, Reduce::Max))?;
        if v[0] == 0 {
            return Ok(());
        }
        std::thread::sleep(BEAT);
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes bytes at a container offset (see `write_member`).
pub(crate) type Put<'a> = dyn FnMut(u64, &[u8]) -> Result<(), String> + 'a;

/// One member's ranges one after the other from `slot.offset`, one extent
/// each, a CRC-32C per record block (`block` is a multiple of it); `put`
/// writes bytes at a container offset (a file's `pwrite`, or an upload
/// taking them in order).
pub(crate) fn write_member(
    put: &mut Put<'_>,
    mut m: Outgoing,
    slot: Slot,
    buf: &mut [u8],
) -> Result<Member, String> {
    let crc_block = format::DEFAULT_BLOCK as usize;
    let mut at = slot.offset;
    let mut extents = Vec::new();
    for &(off, len) in &m.ranges {
        let mut crcs = Vec::new();
        let mut done = 0u64;
        let start = at;
        while done < len {
            let n = (len - done).min(buf.len() as u64) as usize;
            let data = &mut buf[..n];
            m.src.read_exact(data).map_err(|e| {
                format!(
                    "reading member {} at {}: {e}",
                    String::from_utf8_lossy(&m.member),
                    off + done
                )
            })?;
            put(at, data)?;
            crcs.extend(data.chunks(crc_block).map(paralog_checksum::crc32c));
            crate::failpoint::hit("aggregate.mid_region");
            crate::failpoint::region_delay();
            done += n as u64;
            at += n as u64;
        }
        if len > 0 {
            extents.push(Extent {
                offset: off,
                len,
                container: slot.container,
                container_offset: start,
                crcs,
            });
        }
    }
    Ok(Member {
        path: m.member,
        size: m.size,
        mode: m.mode & 0o7777,
        extents,
    })
}

/// Every container this node wrote, then the directory (their names),
/// made durable: this node's part of "containers durable" before the
/// record.
fn durable(files: &BTreeMap<u32, (File, PathBuf)>, dir: &Path) -> Result<(), String> {
    for (f, p) in files.values() {
        f.sync_all()
            .map_err(|e| format!("making {} durable: {e}", p.display()))?;
    }
    if !files.is_empty() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("making {} durable: {e}", dir.display()))?;
    }
    Ok(())
}

/// The record writer's set record from every node's placements: the
/// containers as the placement names them, the members of all.
pub(crate) fn merge(
    dir: &Path,
    mut base: SetRecord,
    all: &[u8],
    counts: &[usize],
) -> Result<SetRecord, String> {
    let mut members = Vec::new();
    let mut at = 0;
    for (n, &c) in counts.iter().enumerate() {
        let bytes = &all[at..at + c];
        at += c;
        if bytes.is_empty() {
            continue;
        }
        let rec = SetRecord::decode(bytes, &dir.join(format!("(placements of node {n})")))
            .map_err(|e| e.to_string())?;
        if rec.containers != base.containers {
            return Err(format!(
                "node {n} placed its members in other containers than the record writer"
            ));
        }
        members.extend(rec.members);
    }
    members.sort_by(|a, b| a.path.cmp(&b.path));
    base.members = members;
    Ok(base)
}

/// The set not committed: the containers this node opened removed (every
/// node of a container tries; a failure leaves an orphan for the next
/// publish or `recover`).
pub(crate) fn discard(opened: &[PathBuf]) {
    for p in opened {
        let _ = std::fs::remove_file(p);
    }
}
