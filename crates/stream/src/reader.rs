//! Reading a drained stream from a remote (a POSIX directory, or an
//! object store through `object_reader.rs`; the stream's records in
//! `remote_stream.rs`): a reader (alone, or as a reader group with committed
//! offsets) that merges the partitions in cut order or event-time order.
//! It never reads past the high watermark and checks every batch's CRC.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{corrupt, IoContext, Result, StreamError};
use crate::format::{Event, Header, Watermark, KIND_PART_SEGMENT, KIND_REMOTE_BATCH};
use crate::layout;
use crate::object_reader as objects;
use crate::objects::ObjectIndex;
use crate::remote::StreamPlace;
use crate::segment::{self, Next, Source};
use crate::time_gate::TimeGate;

pub use crate::remote_stream::{list_streams, list_streams_at, RemoteStream};

/// Where a reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    Earliest,
    /// The group's committed offsets (earliest if it has none).
    Committed,
    /// Per partition, the first event whose event time is at or after this
    /// (ns since the epoch), as Kafka's offsets-for-times: later events
    /// with earlier times are delivered too (a partition is in cut order,
    /// not in time order).
    Time(i64),
}

/// How partitions are merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// (drain round, partition, offset): the same for every reader, never
    /// waits for a partition.
    Cut,
    /// The smallest event time among the partitions' next events (ties:
    /// partition, then offset): strict only as far as each partition's
    /// events are in time order themselves.
    Time,
    /// Time order that waits: an event goes only once every partition
    /// has passed its time, or has had nothing new for `idle`
    /// (`time_gate.rs`); until then `next_event` returns `None` and
    /// [`Reader::waiting`] says so. Strict as far as each partition is in
    /// time order; an event below a time already handed out is handed
    /// out at once and counted ([`Reader::late`]).
    Watermark { idle: std::time::Duration },
}

/// An event handed to a reader, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub partition: u32,
    pub offset: u64,
    pub round: u64,
    pub event: Event,
}

/// A segment's bytes: a remote file, or an object fetched whole.
pub(crate) enum Seg {
    File(File),
    Bytes(Vec<u8>),
}

impl Source for Seg {
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<()> {
        match self {
            Seg::File(f) => Source::read_exact_at(f, buf, pos),
            Seg::Bytes(b) => b[..].read_exact_at(buf, pos),
        }
    }
}

/// The segment a cursor reads.
pub(crate) struct Open {
    pub path: PathBuf,
    pub src: Seg,
    /// The next batch's byte position, and where to stop.
    pub pos: u64,
    pub end: u64,
    /// The segment's first offset.
    pub first: u64,
    /// An object's end offset (its name's): it must hold exactly up to it.
    pub last: Option<u64>,
}

/// One partition's cursor: verified batches read ahead, one at a time.
struct Cursor {
    partition: u32,
    /// The next offset to read from the remote.
    next: u64,
    /// Offsets below this are published.
    limit: u64,
    seg_first: u64,
    seg_end: u64,
    open: Option<Open>,
    buf: VecDeque<Delivered>,
    /// A segment was read to its end: the next must start exactly at `next`.
    crossed: bool,
    /// `From::Time`: events before the first at or after this are skipped.
    skip_before: Option<i64>,
}

pub struct Reader {
    stream: RemoteStream,
    group: Option<String>,
    order: Order,
    cursors: Vec<Cursor>,
    /// Per partition, the offset after the last event handed out.
    delivered: Vec<u64>,
    /// On an object store: the index the cursors' limits come from.
    index: Option<ObjectIndex>,
    /// `Order::Watermark`'s gate.
    gate: Option<TimeGate>,
    /// The non-empty cursors by their next event's merge key: a pick costs
    /// log P, not P (reading 64 partitions was half as fast as one with a
    /// scan of every cursor per event).
    heads: BinaryHeap<Reverse<(MergeKey, usize)>>,
    /// Cursors emptied since the last pick: filled before the next one. An
    /// empty cursor that `fill` leaves empty is at its watermark and stays
    /// out of `heads` until a refresh raises its limit.
    to_fill: Vec<usize>,
}

/// The order in which partitions' events are merged: unique per event
/// (partition and offset break every tie), so the heap's order is the
/// order of a scan for the minimum.
type MergeKey = (i128, u32, u64);

fn merge_key(order: Order, d: &Delivered) -> MergeKey {
    match order {
        Order::Cut => (d.round as i128, d.partition, d.offset),
        Order::Time | Order::Watermark { .. } => (d.event.time_ns as i128, d.partition, d.offset),
    }
}

impl Reader {
    pub fn open(
        stream: RemoteStream,
        group: Option<&str>,
        from: From,
        order: Order,
    ) -> Result<Reader> {
        let index = stream.index()?;
        let (wm, firsts) = match &index {
            Some(ix) => (
                Watermark {
                    round: ix.round,
                    parts: ix.marks(),
                },
                objects::first_offsets(ix),
            ),
            None => (stream.watermark()?, stream.first_offsets()?),
        };
        let committed = match (group, from) {
            (Some(g), From::Committed) => stream.group_offsets(g)?.map(|g| g.offsets),
            _ => None,
        };
        let start = match committed {
            Some(offsets) => {
                for (p, (&o, &f)) in offsets.iter().zip(&firsts).enumerate() {
                    if o < f && o < wm.parts[p].next {
                        return Err(stream.trimmed(p as u32, o, f));
                    }
                }
                offsets
            }
            None => firsts,
        };
        let cursors: Vec<Cursor> = wm
            .parts
            .iter()
            .zip(&start)
            .enumerate()
            .map(|(p, (m, &s))| Cursor {
                partition: p as u32,
                next: s,
                limit: m.next,
                seg_first: m.seg_first,
                seg_end: m.seg_end,
                open: None,
                buf: VecDeque::new(),
                crossed: false,
                skip_before: match from {
                    From::Time(t) => Some(t),
                    _ => None,
                },
            })
            .collect();
        let gate = match order {
            Order::Watermark { idle } => Some(TimeGate::new(wm.parts.len(), idle)),
            _ => None,
        };
        Ok(Reader {
            gate,
            group: group.map(str::to_owned),
            order,
            to_fill: (0..cursors.len()).collect(),
            heads: BinaryHeap::with_capacity(cursors.len()),
            cursors,
            delivered: start,
            stream,
            index,
        })
    }

    pub fn stream(&self) -> &RemoteStream {
        &self.stream
    }

    /// The next event, or `None` once every partition is at its watermark.
    pub fn next_event(&mut self) -> Result<Option<Delivered>> {
        let dir = self.stream.dir.clone();
        while let Some(i) = self.to_fill.pop() {
            let c = &mut self.cursors[i];
            if let Err(e) = c.fill(&self.stream, &dir, self.index.as_ref()) {
                // Tried again on the next call, as before the heap.
                self.to_fill.push(i);
                return Err(e);
            }
            if let Some(d) = c.buf.front() {
                self.heads.push(Reverse((merge_key(self.order, d), i)));
            }
        }
        let Some(mut top) = self.heads.peek_mut() else {
            return Ok(None);
        };
        let Reverse((_, i)) = *top;
        if let Some(g) = self.gate.as_mut() {
            let cursors = &self.cursors;
            for (q, c) in cursors.iter().enumerate() {
                if !c.buf.is_empty() {
                    g.touch(q);
                }
            }
            let t = cursors[i].buf[0].event.time_ns;
            if !g.allows(t, |q| !cursors[q].buf.is_empty()) {
                return Ok(None);
            }
            g.handed(i, t);
        }
        let c = &mut self.cursors[i];
        let d = c.buf.pop_front().expect("a cursor in heads is not empty");
        // The cursor's next event replaces it in place: one sift, and none
        // at all while one partition's batch runs (cut order).
        match c.buf.front() {
            Some(next) => *top = Reverse((merge_key(self.order, next), i)),
            None => {
                PeekMut::pop(top);
                self.to_fill.push(i);
            }
        }
        self.delivered[i] = d.offset + 1;
        Ok(Some(d))
    }

    /// Read the watermark again: what was published since `open` (or the
    /// last refresh) becomes readable; `next_event` then goes on past the
    /// old watermark (a follower's poll: `tail`, the C API's `next`).
    pub fn refresh(&mut self) -> Result<()> {
        self.index = self.stream.index()?;
        let wm = match &self.index {
            Some(ix) => Watermark {
                round: ix.round,
                parts: ix.marks(),
            },
            None => self.stream.watermark()?,
        };
        for (c, m) in self.cursors.iter_mut().zip(&wm.parts) {
            if m.next < c.limit {
                return Err(corrupt(
                    &self.stream.dir.join(layout::WATERMARK),
                    32,
                    format!(
                        "partition {} went back from offset {} to {}",
                        c.partition, c.limit, m.next
                    ),
                ));
            }
            if m.next == c.limit {
                continue;
            }
            c.limit = m.next;
            if c.buf.is_empty() && !self.to_fill.contains(&(c.partition as usize)) {
                self.to_fill.push(c.partition as usize);
            }
            if let Some(g) = self.gate.as_mut() {
                g.touch(c.partition as usize);
            }
            c.seg_first = m.seg_first;
            c.seg_end = m.seg_end;
            // The open segment was read up to the old watermark's end: it
            // now ends at the new one's, or at its whole length if a round
            // has rolled past it.
            // (An object is whole: it keeps its end.)
            if let Some(Open {
                path,
                src: Seg::File(file),
                end,
                first,
                ..
            }) = c.open.as_mut()
            {
                *end = if *first == m.seg_first {
                    m.seg_end
                } else {
                    file.metadata().ctx("stat", path)?.len()
                };
            }
        }
        Ok(())
    }

    /// The watermark order's idle timeout (no effect in another order:
    /// `false` then).
    pub fn set_idle(&mut self, idle: std::time::Duration) -> bool {
        match (&mut self.order, self.gate.as_mut()) {
            (Order::Watermark { idle: i }, Some(g)) => {
                *i = idle;
                g.set_idle(idle);
                true
            }
            _ => false,
        }
    }

    /// After `next_event` gave `None`: whether events read ahead wait for
    /// a partition to pass their time (the watermark order), so that
    /// calling again later may give them.
    pub fn waiting(&self) -> bool {
        self.gate.is_some() && self.cursors.iter().any(|c| !c.buf.is_empty())
    }

    /// The watermark order's late events so far: handed out below a time
    /// already handed out.
    pub fn late(&self) -> u64 {
        self.gate.as_ref().map_or(0, |g| g.late)
    }

    /// Whether the last event handed out was late.
    pub fn last_was_late(&self) -> bool {
        self.gate.as_ref().is_some_and(|g| g.last_was_late)
    }

    pub fn has_group(&self) -> bool {
        self.group.is_some()
    }

    /// The offsets after the events handed out so far.
    pub fn positions(&self) -> &[u64] {
        &self.delivered
    }

    /// Store the group's offsets: everything handed out counts as
    /// processed. Commit after processing: delivery is at least once.
    pub fn commit(&self) -> Result<()> {
        self.commit_at(&self.delivered)
    }

    /// Store the group's offsets as given (per partition, the next offset
    /// to deliver): what a reader acknowledged, which may be less than what
    /// it was handed.
    pub fn commit_at(&self, offsets: &[u64]) -> Result<()> {
        if offsets.len() != self.cursors.len() {
            return Err(StreamError::Invalid {
                what: format!(
                    "{} offsets for a stream of {} partitions",
                    offsets.len(),
                    self.cursors.len()
                ),
            });
        }
        match &self.group {
            Some(g) => self.stream.commit_group(g, offsets),
            None => Err(StreamError::Invalid {
                what: "a reader without a group has no offsets to commit".into(),
            }),
        }
    }
}

impl Cursor {
    /// Read the next batch that holds offsets at or past `next`, below the
    /// watermark; every byte checked.
    fn fill(&mut self, rs: &RemoteStream, dir: &Path, ix: Option<&ObjectIndex>) -> Result<()> {
        let n = rs.partitions;
        while self.buf.is_empty() && self.next < self.limit {
            if self.open.is_none() {
                self.open = Some(match (ix, &rs.place) {
                    (Some(ix), StreamPlace::Store(s)) => {
                        objects::open_object(s, rs, ix, self.partition, self.next)?
                    }
                    _ => self.open_segment(rs, dir)?,
                });
            }
            let open = self.open.as_mut().expect("opened");
            let (path, open_first, last, end) =
                (open.path.clone(), open.first, open.last, open.end);
            match segment::read_batch(&open.src, &path, open.pos, end, KIND_REMOTE_BATCH, n)? {
                Next::Batch(b) => {
                    open.pos = b.end;
                    let h = b.header;
                    if h.partition != self.partition {
                        return Err(corrupt(
                            &path,
                            b.pos,
                            format!(
                                "batch of partition {} in partition {}",
                                h.partition, self.partition
                            ),
                        ));
                    }
                    if h.first > self.next {
                        return Err(corrupt(
                            &path,
                            b.pos,
                            format!("offset {} where {} was expected", h.first, self.next),
                        ));
                    }
                    for (i, ev) in b.events().enumerate() {
                        let offset = h.first + i as u64;
                        if offset < self.next || offset >= self.limit {
                            continue;
                        }
                        match self.skip_before {
                            Some(t) if ev.time_ns < t => continue,
                            Some(_) => self.skip_before = None,
                            None => {}
                        }
                        self.buf.push_back(Delivered {
                            partition: self.partition,
                            offset,
                            round: h.round,
                            event: ev,
                        });
                    }
                    self.next = (h.first + u64::from(h.count)).max(self.next);
                }
                // Below the watermark everything is committed.
                Next::End => {
                    if let Some(last) = last.filter(|&l| l != self.next) {
                        return Err(corrupt(
                            &path,
                            end,
                            format!(
                                "object of partition {} ends at offset {}, its name says {last}",
                                self.partition, self.next
                            ),
                        ));
                    }
                    if last.is_none() && open_first == self.seg_first {
                        return Err(corrupt(
                            &path,
                            end,
                            format!(
                                "partition {} ends at offset {}, its watermark says {}",
                                self.partition, self.next, self.limit
                            ),
                        ));
                    }
                    self.open = None;
                    self.crossed = true;
                }
                Next::Torn(why) => {
                    return Err(corrupt(
                        &path,
                        open.pos,
                        format!("below the watermark: {why}"),
                    ))
                }
            }
        }
        Ok(())
    }

    /// Open the segment that holds offset `next`.
    fn open_segment(&mut self, rs: &RemoteStream, dir: &Path) -> Result<Open> {
        let (stream, n) = (rs.name.as_str(), rs.partitions);
        let firsts = layout::part_segments(dir, self.partition)?;
        if let Some(&f) = firsts.first().filter(|&&f| self.next < f) {
            return Err(rs.trimmed(self.partition, self.next, f));
        }
        let first = firsts
            .iter()
            .rev()
            .find(|&&f| f <= self.next && f <= self.seg_first)
            .copied()
            .ok_or_else(|| {
                corrupt(
                    &layout::part_dir(dir, self.partition),
                    0,
                    format!("no segment holds offset {}", self.next),
                )
            })?;
        if self.crossed && first != self.next {
            return Err(corrupt(
                &layout::part_dir(dir, self.partition),
                0,
                format!(
                    "no segment starts at offset {}, where the last one ended",
                    self.next
                ),
            ));
        }
        self.crossed = false;
        let path = layout::part_segment(dir, self.partition, first);
        let file = File::open(&path).ctx("open", &path)?;
        let head = crate::producer::read_head(&path)?;
        let h = Header::decode(&head, KIND_PART_SEGMENT, &path)?;
        if h.name != stream
            || h.partition != self.partition
            || h.first != first
            || h.partitions != n
        {
            return Err(corrupt(
                &path,
                0,
                "segment header names another stream, partition or offset",
            ));
        }
        // The last segment is read only up to the watermark's byte end:
        // bytes past it are a round not yet published.
        let end = if first == self.seg_first {
            self.seg_end
        } else {
            file.metadata().ctx("stat", &path)?.len()
        };
        Ok(Open {
            path,
            pos: h.len(),
            end,
            first,
            last: None,
            src: Seg::File(file),
        })
    }
}
