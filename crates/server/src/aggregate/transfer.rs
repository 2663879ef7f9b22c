//! The seed's transfer (docs/aggregate.md, "Many nodes"): each non-leader
//! node of a group has ONE sender (the server's MPI thread) that sends its
//! members' bytes to the group's leader in fixed-size blocks, blocking; the
//! leader has ONE receiver (its MPI thread) that takes a buffer from a
//! bounded free list, receives into it and queues it, and a pool of writer
//! threads that take queued blocks first (remote-first: buffers go back to
//! the senders sooner) and otherwise the next block of the leader's own
//! members. Every block goes to the next aligned offset of one shared
//! counter (append-only, in arrival order) and becomes one extent of its
//! member; the placement is kept apart from the data, for the set record.
//!
//! Messages (private to one server job): `HEAD` names a member before its
//! blocks (index in the plan, mode, size, path); `DATA` is a 16-byte header
//! (member index, its offset in the member) and the bytes; `DONE` ends a
//! sender (1, or 0 and why it failed).

use std::collections::{BTreeMap, VecDeque};
use std::io::Read;
use std::sync::{Condvar, Mutex};

use paralog_aggregate::format::{Extent, Member};

use crate::cluster::mpi::{Comm, MpiError};

use super::jobroot::ContainerOut;

const TAG_HEAD: i32 = 1;
const TAG_DATA: i32 = 2;
const TAG_DONE: i32 = 3;
const DATA_HEADER: usize = 16;

/// Writer threads of a leader.
pub const WRITERS: usize = 4;

/// One member to place: its index in the set's plan, its metadata, where
/// it has bytes and a source of those bytes (one after the other).
pub struct Outgoing {
    pub index: u32,
    pub member: Vec<u8>,
    pub size: u64,
    pub mode: u32,
    pub ranges: Vec<(u64, u64)>,
    pub src: Box<dyn Read + Send>,
}

/// One message under the server job's watchdog.
fn watched<T>(peers: &dyn Fn(bool), f: impl FnOnce() -> T) -> T {
    peers(true);
    let r = f();
    peers(false);
    r
}

/// What a sender did.
#[derive(Debug, Default)]
pub struct Sent {
    /// Member bytes sent to the leader.
    pub bytes: u64,
    /// Why it stopped early (the leader is told too).
    pub error: Option<String>,
}

/// Send `members` to `leader` in blocks of at most `block` bytes, then
/// `DONE`. A local failure (a log that cannot be read) stops the sending
/// and is told to the leader; only an MPI failure returns `Err`.
pub fn send_members(
    comm: &Comm,
    peers: &dyn Fn(bool),
    leader: usize,
    members: Vec<Outgoing>,
    block: usize,
) -> Result<Sent, MpiError> {
    let mut sent = Sent::default();
    let mut buf = vec![0u8; DATA_HEADER + block];
    'members: for mut m in members {
        let mut head = Vec::with_capacity(20 + m.member.len());
        head.extend_from_slice(&m.index.to_le_bytes());
        head.extend_from_slice(&m.mode.to_le_bytes());
        head.extend_from_slice(&m.size.to_le_bytes());
        head.extend_from_slice(&(m.member.len() as u32).to_le_bytes());
        head.extend_from_slice(&m.member);
        watched(peers, || comm.send(&head, leader, TAG_HEAD))?;
        for &(off, len) in &m.ranges {
            let mut done = 0u64;
            while done < len {
                let n = (len - done).min(block as u64) as usize;
                if let Err(e) = m.src.read_exact(&mut buf[DATA_HEADER..DATA_HEADER + n]) {
                    sent.error = Some(format!(
                        "reading member {} at {}: {e}",
                        String::from_utf8_lossy(&m.member),
                        off + done
                    ));
                    break 'members;
                }
                buf[..4].copy_from_slice(&m.index.to_le_bytes());
                buf[4..8].fill(0);
                buf[8..16].copy_from_slice(&(off + done).to_le_bytes());
                watched(peers, || {
                    comm.send(&buf[..DATA_HEADER + n], leader, TAG_DATA)
                })?;
                crate::failpoint::hit("aggregate.mid_send");
                sent.bytes += n as u64;
                done += n as u64;
            }
        }
    }
    let mut end = vec![sent.error.is_none() as u8];
    end.extend_from_slice(sent.error.as_deref().unwrap_or("").as_bytes());
    watched(peers, || comm.send(&end, leader, TAG_DONE))?;
    Ok(sent)
}

/// A leader's part of one set.
pub struct Leader<'a> {
    pub comm: &'a Comm,
    /// Marks each wait for a sender (the server job's watchdog).
    pub peers: &'a dyn Fn(bool),
    /// Non-leader nodes of the group (each sends `DONE` once).
    pub senders: usize,
    /// The container, created new and empty (a file, or an upload).
    pub out: &'a ContainerOut,
    /// Its index in the set record.
    pub container: u32,
    pub align: u64,
    /// One CRC-32C per this many bytes of an extent.
    pub crc_block: u32,
    /// Bytes of one transfer block (a multiple of `crc_block`).
    pub block: usize,
    /// Receive buffers (the bounded pool).
    pub buffers: usize,
    /// The leader's own members (and the previous version's members to
    /// keep, for the first container).
    pub locals: Vec<Outgoing>,
}

/// What a leader wrote.
#[derive(Debug, Default)]
pub struct Written {
    /// Every member placed, by plan index.
    pub members: BTreeMap<u32, Member>,
    /// The container's length.
    pub end: u64,
    /// The most receive buffers in use at once (never above the pool).
    pub peak_buffers: usize,
    /// Why it failed (a sender's or a writer's error).
    pub error: Option<String>,
}

#[derive(Clone, Copy)]
struct Params<'a> {
    out: &'a ContainerOut,
    container: u32,
    align: u64,
    crc_block: u32,
    block: usize,
    senders: usize,
}

struct State {
    queue: VecDeque<(Vec<u8>, usize)>,
    free: Vec<Vec<u8>>,
    in_use: usize,
    peak: usize,
    done: bool,
}

struct Placed {
    next: u64,
    end: u64,
    extents: BTreeMap<u32, Vec<Extent>>,
}

/// What the writer threads share (no MPI in it: only the receiver, on
/// the MPI thread, touches the communicator).
struct Shared<'a> {
    l: Params<'a>,
    st: Mutex<State>,
    cv: Condvar,
    placed: Mutex<Placed>,
    error: Mutex<Option<String>>,
    locals: Mutex<VecDeque<Outgoing>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared<'_> {
    fn failed(&self, why: String) {
        lock(&self.error).get_or_insert(why);
        self.cv.notify_all();
    }

    fn has_failed(&self) -> bool {
        lock(&self.error).is_some()
    }

    /// Append `data` (bytes of member `index` from `offset`) at the next
    /// aligned offset of the shared counter.
    fn place(&self, index: u32, offset: u64, data: &[u8]) -> Result<(), String> {
        let len = data.len() as u64;
        // An upload takes its bytes in order: its lock is held from the
        // offset to the write (a file's writers write in parallel).
        let mut in_order = self.l.out.in_order();
        let at = {
            let mut p = lock(&self.placed);
            let at = p.next;
            p.next = (at + len).next_multiple_of(self.l.align);
            p.end = p.end.max(at + len);
            at
        };
        self.l.out.write_at(&mut in_order, at, data)?;
        drop(in_order);
        let crcs = data
            .chunks(self.l.crc_block as usize)
            .map(paralog_checksum::crc32c)
            .collect();
        lock(&self.placed)
            .extents
            .entry(index)
            .or_default()
            .push(Extent {
                offset,
                len,
                container: self.l.container,
                container_offset: at,
                crcs,
            });
        Ok(())
    }

    fn give_back(&self, buf: Vec<u8>) {
        let mut st = lock(&self.st);
        st.free.push(buf);
        st.in_use -= 1;
        self.cv.notify_all();
    }

    /// One writer thread: remote blocks first, else the next block of a
    /// local member; ends when no local data is left, the queue is empty
    /// and the receiver finished (the seed's text, not its Alg. 5).
    fn writer(&self) {
        let mut buf = vec![0u8; self.l.block];
        let mut cur: Option<(Outgoing, usize, u64)> = None;
        loop {
            let remote = lock(&self.st).queue.pop_front();
            if let Some((b, n)) = remote {
                if !self.has_failed() {
                    let index = u32::from_le_bytes(b[..4].try_into().expect("4"));
                    let offset = u64::from_le_bytes(b[8..16].try_into().expect("8"));
                    if let Err(e) = self.place(index, offset, &b[DATA_HEADER..n]) {
                        self.failed(e);
                    }
                    crate::failpoint::hit("aggregate.mid_transfer");
                }
                self.give_back(b);
                continue;
            }
            if self.has_failed() {
                cur = None;
            } else if cur.is_none() {
                cur = lock(&self.locals).pop_front().map(|m| (m, 0, 0));
            }
            if let Some((m, r, pos)) = &mut cur {
                let Some(&(off, len)) = m.ranges.get(*r) else {
                    cur = None;
                    continue;
                };
                let n = (len - *pos).min(buf.len() as u64) as usize;
                let result = m
                    .src
                    .read_exact(&mut buf[..n])
                    .map_err(|e| {
                        format!(
                            "reading member {} at {}: {e}",
                            String::from_utf8_lossy(&m.member),
                            off + *pos
                        )
                    })
                    .and_then(|()| self.place(m.index, off + *pos, &buf[..n]));
                if let Err(e) = result {
                    self.failed(e);
                    cur = None;
                    continue;
                }
                *pos += n as u64;
                if *pos == len {
                    *r += 1;
                    *pos = 0;
                }
                continue;
            }
            let mut st = lock(&self.st);
            while st.queue.is_empty() && !st.done {
                st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.queue.is_empty() && st.done {
                return;
            }
        }
    }

    /// The receiver, on the MPI thread: until every sender said `DONE`.
    fn receive(
        &self,
        comm: &Comm,
        peers: &dyn Fn(bool),
        metas: &mut BTreeMap<u32, (Vec<u8>, u64, u32)>,
    ) -> Result<(), MpiError> {
        let mut left = self.l.senders;
        while left > 0 {
            let mut buf = {
                let mut st = lock(&self.st);
                while st.free.is_empty() {
                    st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                st.in_use += 1;
                st.peak = st.peak.max(st.in_use);
                st.free.pop().expect("a free buffer")
            };
            let (src, tag, n) = match watched(peers, || comm.recv(&mut buf, None)) {
                Ok(r) => r,
                Err(e) => {
                    self.give_back(buf);
                    return Err(e);
                }
            };
            match tag {
                TAG_DATA if n >= DATA_HEADER => {
                    lock(&self.st).queue.push_back((buf, n));
                    self.cv.notify_all();
                    continue;
                }
                TAG_HEAD if n >= 20 => {
                    let index = u32::from_le_bytes(buf[..4].try_into().expect("4"));
                    let mode = u32::from_le_bytes(buf[4..8].try_into().expect("4"));
                    let size = u64::from_le_bytes(buf[8..16].try_into().expect("8"));
                    let plen = u32::from_le_bytes(buf[16..20].try_into().expect("4")) as usize;
                    let path = buf[20..(20 + plen).min(n)].to_vec();
                    metas.insert(index, (path, size, mode));
                }
                TAG_DONE if n >= 1 => {
                    left -= 1;
                    if buf[0] != 1 {
                        self.failed(format!(
                            "node {src}: {}",
                            String::from_utf8_lossy(&buf[1..n])
                        ));
                    }
                }
                _ => self.failed(format!(
                    "node {src} sent a message the set transfer does not know (tag {tag}, {n} bytes)"
                )),
            }
            self.give_back(buf);
        }
        Ok(())
    }
}

/// Receive the group's members and write them with the leader's own into
/// the container, then make it durable. Only an MPI failure returns `Err`.
pub fn lead(mut l: Leader<'_>) -> Result<Written, MpiError> {
    let locals = std::mem::take(&mut l.locals);
    let mut metas: BTreeMap<u32, (Vec<u8>, u64, u32)> = locals
        .iter()
        .map(|m| (m.index, (m.member.clone(), m.size, m.mode)))
        .collect();
    let shared = Shared {
        l: Params {
            out: l.out,
            container: l.container,
            align: l.align,
            crc_block: l.crc_block,
            block: l.block,
            senders: l.senders,
        },
        st: Mutex::new(State {
            queue: VecDeque::new(),
            free: (0..l.buffers)
                .map(|_| vec![0u8; DATA_HEADER + l.block])
                .collect(),
            in_use: 0,
            peak: 0,
            done: false,
        }),
        cv: Condvar::new(),
        placed: Mutex::new(Placed {
            next: 0,
            end: 0,
            extents: BTreeMap::new(),
        }),
        error: Mutex::new(None),
        locals: Mutex::new(locals.into()),
    };
    let (comm, peers) = (l.comm, l.peers);
    std::thread::scope(|s| {
        for _ in 0..WRITERS {
            s.spawn(|| shared.writer());
        }
        let r = shared.receive(comm, peers, &mut metas);
        lock(&shared.st).done = true;
        shared.cv.notify_all();
        r
    })?;
    let st = lock(&shared.st);
    let placed = lock(&shared.placed);
    let mut w = Written {
        end: placed.end,
        peak_buffers: st.peak,
        error: lock(&shared.error).clone(),
        ..Written::default()
    };
    if w.error.is_none() {
        if let Err(e) = l.out.finish(placed.end) {
            w.error = Some(e);
        }
    }
    for (index, (path, size, mode)) in metas {
        let mut extents = placed.extents.get(&index).cloned().unwrap_or_default();
        extents.sort_by_key(|e| e.offset);
        w.members.insert(
            index,
            Member {
                path,
                size,
                mode: mode & 0o7777,
                extents,
            },
        );
    }
    Ok(w)
}
