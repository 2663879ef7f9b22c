//! A reader group spread over the ranks of an MPI communicator
//! (`paralog/stream_mpi.h`): rank 0 is the read proxy, the only one that
//! reads the remote; each collective round it hands at most one event to
//! each rank, round-robin or by key. The MPI calls are the helper's
//! (`mpi/paralog_stream_mpi.c`, built by each MPI's mpicc); everything
//! else is here: which rank gets what, the bytes that carry an event to
//! its rank, and which offsets the group may commit.
//!
//! Commit: an event is committed only once the rank it was handed to
//! acknowledged it, and a partition's committed offset stops at its first
//! event not acknowledged (handed to a rank, or pulled by the proxy and
//! not handed yet): delivery stays at least once, with duplicates limited
//! to what was handed out and not acknowledged.

use paralog_stream::{Delivered, Event};
use std::collections::{BTreeSet, VecDeque};

use crate::read::{CEvent, Handle};
use crate::{guard, handle_arg, release, Fail, Res, EINVAL, OK, TIMEDOUT};

/// The group got events this round, none for this rank (call again).
pub const NONE: i32 = 12;

/// Events are handed to ranks in turn.
const ROUND_ROBIN: i32 = 0;
/// Events with a key go to one rank per key (its hash); without a key, in turn.
const BY_KEY: i32 = 1;

/// An event's header on the wire: offset, round, producer, seq, time,
/// partition, key flag, key length, payload length.
const HEAD: usize = 8 * 5 + 4 + 1 + 4 + 4;

/// `paralog_stream_member`: one rank's part of a group.
pub struct Member {
    /// Rank 0's: the reader and what it pulled.
    proxy: Option<Proxy>,
    /// The event handed to this rank last (its bytes stay valid until the
    /// next call).
    last: Option<Delivered>,
    /// Offsets handed to this rank and not acknowledged yet, per partition.
    held: Vec<BTreeSet<u64>>,
    /// Acknowledged since the last commit: (partition, offset).
    acked: Vec<(u32, u64)>,
    /// The bytes this rank sends: a round's events (proxy) or its acks.
    out: Vec<u8>,
}

struct Proxy {
    reader: Box<Handle>,
    ranks: usize,
    spread: i32,
    turn: usize,
    /// Pulled from the reader, waiting for their rank.
    queues: Vec<VecDeque<Delivered>>,
    /// Per partition, offsets pulled and not acknowledged by their rank.
    open: Vec<BTreeSet<u64>>,
}

impl Proxy {
    fn rank_of(&mut self, d: &Delivered) -> usize {
        match (&d.event.key, self.spread) {
            (Some(k), BY_KEY) => (fnv(k) % self.ranks as u64) as usize,
            _ => {
                self.turn = (self.turn + 1) % self.ranks;
                self.turn
            }
        }
    }

    /// Pull until every rank has an event waiting, or the reader has none
    /// now (waiting up to `timeout_ms` only when nothing waits at all). A
    /// rank many keys go to cannot make the proxy hold more than a few
    /// rounds' events.
    fn fill(&mut self, timeout_ms: i32) -> Res<()> {
        let cap = 4 * self.ranks;
        let mut held: usize = self.queues.iter().map(VecDeque::len).sum();
        while held < cap && self.queues.iter().any(VecDeque::is_empty) {
            let wait = if held == 0 { timeout_ms } else { 0 };
            let Some(d) = self.reader.next_within(wait)? else {
                break;
            };
            self.open[d.partition as usize].insert(d.offset);
            let r = self.rank_of(&d);
            self.queues[r].push_back(d);
            held += 1;
        }
        Ok(())
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

fn encode(d: &Delivered, out: &mut Vec<u8>) {
    let e = &d.event;
    let key = e.key.as_deref().unwrap_or(&[]);
    for v in [d.offset, d.round, e.producer, e.seq, e.time_ns as u64] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&d.partition.to_le_bytes());
    out.push(e.key.is_some() as u8);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&(e.payload.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&e.payload);
}

fn decode(b: &[u8]) -> Option<Delivered> {
    let u64_at = |i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
    let u32_at = |i: usize| Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?));
    let (klen, plen) = (u32_at(45)? as usize, u32_at(49)? as usize);
    if b.len() != HEAD + klen + plen {
        return None;
    }
    let key = (*b.get(44)? != 0).then(|| b[HEAD..HEAD + klen].to_vec());
    Some(Delivered {
        offset: u64_at(0)?,
        round: u64_at(8)?,
        partition: u32_at(40)?,
        event: Event {
            partition: u32_at(40)?,
            producer: u64_at(16)?,
            seq: u64_at(24)?,
            time_ns: u64_at(32)? as i64,
            key,
            payload: b[HEAD + klen..].to_vec(),
        },
    })
}

fn member<'a>(m: *mut Member) -> Res<&'a mut Member> {
    handle_arg(m, "group member")
}

fn proxy(p: &mut Option<Proxy>) -> Res<&mut Proxy> {
    p.as_mut()
        .ok_or_else(|| Fail::inval("only rank 0 of a group is its read proxy"))
}

/// A group member: rank 0 passes the reader it joined (the member owns it
/// from now on), the others NULL; every rank passes the group's size and
/// how events are spread (0 round-robin, 1 by key).
///
/// # Safety
/// `reader` is NULL or a joined reader not used again by the caller;
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_member_new(
    reader: *mut Handle,
    ranks: u32,
    partitions: u32,
    spread: i32,
    out: *mut *mut Member,
) -> i32 {
    // SAFETY: `out` is NULL or writable.
    unsafe {
        crate::give_out(out, || {
            if ranks == 0 || partitions == 0 || !(ROUND_ROBIN..=BY_KEY).contains(&spread) {
                return Err(Fail(
                    EINVAL,
                    format!("a group of {ranks} ranks over {partitions} partitions spread by {spread} (0 round-robin, 1 by key)"),
                ));
            }
            let proxy = (!reader.is_null()).then(|| {
                // SAFETY: a reader from paralog_stream_join, given to us.
                let reader = Box::from_raw(reader);
                Proxy {
                    open: vec![BTreeSet::new(); reader.positions().len()],
                    reader,
                    ranks: ranks as usize,
                    spread,
                    turn: ranks as usize - 1,
                    queues: (0..ranks).map(|_| VecDeque::new()).collect(),
                }
            });
            Ok(Member {
                proxy,
                last: None,
                held: vec![BTreeSet::new(); partitions as usize],
                acked: Vec::new(),
                out: Vec::new(),
            })
        })
    }
}

/// Rank 0: one round. `sizes` (one per rank) gets the length of each
/// rank's part of `*buf` (its event, or 0), the parts one after the other.
/// OK if some rank got an event, TIMEDOUT if none came within the timeout.
///
/// # Safety
/// `m` is rank 0's member; `sizes` holds `ranks` values; `buf` is writable.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_member_round(
    m: *mut Member,
    timeout_ms: i32,
    sizes: *mut u64,
    buf: *mut *const u8,
) -> i32 {
    guard(|| {
        let m = member(m)?;
        if sizes.is_null() || buf.is_null() {
            return Err(Fail::inval("sizes or buf is NULL"));
        }
        let p = proxy(&mut m.proxy)?;
        p.fill(timeout_ms)?;
        // SAFETY: the caller gives one size per rank.
        let sizes = unsafe { std::slice::from_raw_parts_mut(sizes, p.ranks) };
        m.out.clear();
        let mut any = false;
        for (q, size) in p.queues.iter_mut().zip(sizes.iter_mut()) {
            let before = m.out.len();
            if let Some(d) = q.pop_front() {
                encode(&d, &mut m.out);
                any = true;
            }
            *size = (m.out.len() - before) as u64;
        }
        // SAFETY: checked non-NULL; the bytes live in `m.out` until the next call.
        unsafe { *buf = m.out.as_ptr() };
        Ok(if any { OK } else { TIMEDOUT })
    })
}

/// Any rank: take this rank's part of a round: OK and the event in `ev`,
/// or NONE (len 0: the round had nothing for this rank).
///
/// # Safety
/// `bytes` holds `len` bytes; `ev` is writable.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_member_take(
    m: *mut Member,
    bytes: *const u8,
    len: usize,
    ev: *mut CEvent,
) -> i32 {
    guard(|| {
        let m = member(m)?;
        if ev.is_null() {
            return Err(Fail::inval("ev is NULL"));
        }
        m.last = None;
        if len == 0 {
            return Ok(NONE);
        }
        let b = crate::bytes(bytes, len, "a round's bytes")?;
        let d = decode(b).ok_or_else(|| {
            Fail::inval(format!(
                "a round's {len} bytes do not hold one event (a bug)"
            ))
        })?;
        let held = m
            .held
            .get_mut(d.partition as usize)
            .ok_or_else(|| Fail::inval(format!("an event of partition {} (a bug)", d.partition)))?;
        held.insert(d.offset);
        // SAFETY: checked non-NULL; the bytes live in `m.last` until the next call.
        unsafe { *ev = CEvent::of(&d) };
        m.last = Some(d);
        Ok(OK)
    })
}

/// Any rank: the event at `offset` of `partition` handed to this rank, and
/// every earlier one of that partition handed to it, are processed.
///
/// # Safety
/// `m` is a member.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_member_ack(
    m: *mut Member,
    partition: u32,
    offset: u64,
) -> i32 {
    guard(|| {
        let m = member(m)?;
        let n = m.held.len();
        let held = m
            .held
            .get_mut(partition as usize)
            .ok_or_else(|| Fail::inval(format!("partition {partition} of a stream of {n}")))?;
        let done: Vec<u64> = held.range(..=offset).copied().collect();
        if done.is_empty() {
            return Err(Fail::inval(format!(
                "partition {partition} offset {offset}: no event at or below it was handed to this rank and not acknowledged"
            )));
        }
        for o in done {
            held.remove(&o);
            m.acked.push((partition, o));
        }
        Ok(OK)
    })
}

/// Any rank: this rank's acknowledgements since the last commit, as bytes
/// for rank 0 (valid until the next call).
///
/// # Safety
/// `buf` and `len` are writable.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_member_acks(
    m: *mut Member,
    buf: *mut *const u8,
    len: *mut usize,
) -> i32 {
    guard(|| {
        let m = member(m)?;
        if buf.is_null() || len.is_null() {
            return Err(Fail::inval("buf or len is NULL"));
        }
        m.out.clear();
        for (p, o) in m.acked.drain(..) {
            m.out.extend_from_slice(&p.to_le_bytes());
            m.out.extend_from_slice(&o.to_le_bytes());
        }
        // SAFETY: checked non-NULL.
        unsafe {
            *buf = m.out.as_ptr();
            *len = m.out.len();
        }
        Ok(OK)
    })
}

/// Rank 0: every rank's acknowledgements (`bytes`, gathered), then the
/// group's offsets stored: per partition, up to its first event not
/// acknowledged.
///
/// # Safety
/// `m` is rank 0's member; `bytes` holds `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_member_commit(
    m: *mut Member,
    bytes: *const u8,
    len: usize,
) -> i32 {
    guard(|| {
        let m = member(m)?;
        let b = crate::bytes(bytes, len, "the acknowledgements")?;
        let p = proxy(&mut m.proxy)?;
        if b.len() % 12 != 0 {
            return Err(Fail::inval(format!(
                "{len} bytes of acknowledgements (a bug)"
            )));
        }
        for a in b.chunks_exact(12) {
            let part = u32::from_le_bytes(a[..4].try_into().expect("4 bytes")) as usize;
            let off = u64::from_le_bytes(a[4..].try_into().expect("8 bytes"));
            if let Some(open) = p.open.get_mut(part) {
                open.remove(&off);
            }
        }
        let upto: Vec<u64> = p
            .open
            .iter()
            .zip(p.reader.positions())
            .map(|(open, &pulled)| open.first().copied().unwrap_or(pulled))
            .collect();
        p.reader.commit_below(&upto)?;
        Ok(OK)
    })
}

/// Free a member (rank 0: its reader too, without another commit).
///
/// # Safety
/// `m` is NULL or a member, not used again.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_member_free(m: *mut Member) -> i32 {
    // SAFETY: a member from paralog_stream_member_new (or NULL), given back once.
    unsafe { release(m, |_| Ok(())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivered(key: Option<&[u8]>, payload: &[u8]) -> Delivered {
        Delivered {
            partition: 3,
            offset: 41,
            round: 7,
            event: Event {
                partition: 3,
                producer: 0xfeed,
                seq: 9,
                time_ns: -5,
                key: key.map(<[u8]>::to_vec),
                payload: payload.to_vec(),
            },
        }
    }

    #[test]
    fn an_event_crosses_to_its_rank_unchanged() {
        for d in [
            delivered(Some(b"k1"), b"payload"),
            delivered(None, b""),
            delivered(Some(b""), b"x"),
        ] {
            let mut b = Vec::new();
            encode(&d, &mut b);
            let got = decode(&b).expect("decodes");
            assert_eq!(
                (got.partition, got.offset, got.round, &got.event),
                (d.partition, d.offset, d.round, &d.event)
            );
            assert!(
                decode(&b[..b.len() - 1]).is_none(),
                "a short part is refused"
            );
        }
    }
}
