//! The producer: framed events appended to this process's own segment of
//! a stream under the node-local root. No network, no lock, no other
//! writer. `flush` is the durability point: the pending batch and its
//! commit record in one `pwrite`, then exactly one `fdatasync`; no file is
//! created, renamed or directory-synced per flush.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result, StreamError};
use crate::format::{
    self, BatchHeader, Header, ANY_PARTITION, BATCH_HEADER_LEN, KIND_LOCAL_BATCH, KIND_SEGMENT,
};
use crate::layout;
use crate::quota::{Quota, Tracker};

/// How a producer picks an event's partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioner {
    /// 0, 1, 2, ... in turn (per producer).
    RoundRobin,
    /// FNV-1a 64 of the key, modulo the partitions: the same key always
    /// goes to the same partition, in every process and version (events
    /// without a key go round-robin).
    Key,
    /// Always this partition.
    Fixed(u32),
}

/// A pending batch is written out (without fdatasync) when its body passes
/// this, so that memory stays bounded between flushes; only `flush` makes
/// anything durable.
const SPILL_BODY: usize = 8 << 20;

pub struct Producer {
    path: PathBuf,
    file: File,
    id: u64,
    partitions: u32,
    partitioner: Partitioner,
    rr: u64,
    /// The sequence number of the next event appended.
    next_seq: u64,
    /// Events with a sequence number below this are durable.
    durable: u64,
    /// The pending batch: a header placeholder, then frames.
    buf: Vec<u8>,
    pending: u32,
    /// Where the file ends (the next batch goes here).
    end: u64,
    /// Bytes written since the last fdatasync.
    unsynced: bool,
    /// An fdatasync failed: the kernel may have dropped the dirty pages,
    /// so nothing written since the last good one can be promised again.
    poisoned: bool,
    /// Backpressure, if a quota was set.
    quota: Option<Tracker>,
    /// Roll to a new segment past this size (local retention).
    roll_bytes: u64,
    /// The bytes of the segments it rolled away from.
    rolled: u64,
}

/// A producer's segment is rolled once it holds this many bytes: a
/// producer running for days keeps about this much on the node, plus what
/// the drain has not published yet.
pub const ROLL_BYTES: u64 = 64 << 20;

/// FNV-1a 64: a stable hash (the same in every process and release).
pub fn key_hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn random_id() -> u64 {
    let mut b = [0u8; 8];
    loop {
        // SAFETY: getrandom writes at most b.len() bytes into b.
        let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
        if n == 8 && b != [0; 8] {
            return u64::from_le_bytes(b);
        }
    }
}

pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

impl Producer {
    /// Open a new segment of `stream` (created if new) under the node-local
    /// `root`, with `partitions` partitions; refused if the node already
    /// holds the stream with another count.
    pub fn open(
        root: &Path,
        stream: &str,
        partitions: u32,
        partitioner: Partitioner,
    ) -> Result<Producer> {
        format::valid_name("stream name", stream)?;
        if partitions == 0 || partitions > format::MAX_PARTITIONS {
            return Err(StreamError::Invalid {
                what: format!("{partitions} partitions: 1 to {}", format::MAX_PARTITIONS),
            });
        }
        if let Partitioner::Fixed(p) = partitioner {
            if p >= partitions {
                return Err(StreamError::Invalid {
                    what: format!("partition {p} of a stream of {partitions}"),
                });
            }
        }
        let dir = layout::stream_dir(root, stream);
        if !root.is_dir() {
            // A private node-local root, as the server makes it.
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(root)
                .ctx("create the node-local directory", root)?;
        }
        layout::create_dirs(root, &dir, 0o700)?;
        if let Some(existing) = existing_partitions(&dir)? {
            if existing != partitions {
                return Err(StreamError::PartitionMismatch {
                    stream: stream.into(),
                    existing,
                    asked: partitions,
                });
            }
        }
        let (id, path, file, end) = create_segment(&dir, stream, partitions, None)?;
        Ok(Producer {
            path,
            file,
            id,
            partitions,
            partitioner,
            rr: 0,
            next_seq: 0,
            durable: 0,
            buf: Vec::with_capacity(1 << 16),
            pending: 0,
            end,
            unsynced: false,
            poisoned: false,
            quota: None,
            roll_bytes: ROLL_BYTES,
            rolled: 0,
        })
    }

    /// Roll to a new segment once this one holds `bytes` (0: never); the
    /// default is [`ROLL_BYTES`]. docs/streams.md "Local retention".
    pub fn set_roll_bytes(&mut self, bytes: u64) {
        self.roll_bytes = if bytes == 0 { u64::MAX } else { bytes };
    }

    /// After a flush: once the segment holds the roll size, continue in a
    /// new segment that names this one (kind 13) and leave this one
    /// (closing it frees its lock: the drain sees it ended, takes the rest
    /// of it before anything of the new one, and deletes it once its round
    /// is published). A failure leaves the producer on its segment; the
    /// next flush tries again.
    fn maybe_roll(&mut self) {
        if self.end < self.roll_bytes || self.pending > 0 {
            return;
        }
        let dir = self.path.parent().expect("a segment has a directory");
        let stream = self.stream_name();
        let Ok((id, path, file, end)) =
            create_segment(dir, &stream, self.partitions, Some(self.id))
        else {
            return;
        };
        // The old file closes here: its lock is free, its producer ended.
        self.file = file;
        self.rolled += self.end;
        (self.id, self.path, self.end) = (id, path, end);
    }

    /// Set (or clear) the stream's quota of undrained bytes on this node:
    /// past it, `append` waits up to `quota.wait` for the drain, then fails
    /// (`StreamError::QuotaFull`). docs/streams.md, "Backpressure".
    pub fn set_quota(&mut self, quota: Option<Quota>) {
        let dir = self.path.parent().expect("a segment has a directory");
        let name = self.stream_name();
        self.quota = quota.map(|q| Tracker::new(q, &name, dir.to_path_buf()));
    }

    /// The stream's name (its directory's).
    fn stream_name(&self) -> String {
        self.path
            .parent()
            .and_then(|d| d.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one event (time: now, if `time_ns` is None); its partition
    /// and sequence number. Not durable until the next `flush`.
    pub fn append(
        &mut self,
        key: Option<&[u8]>,
        payload: &[u8],
        time_ns: Option<i64>,
    ) -> Result<(u32, u64)> {
        self.append_with(self.partitioner, key, payload, time_ns)
    }

    /// `append`, with this event's partition chosen by `how` instead of
    /// the producer's partitioner (the C API's per-call choice).
    pub fn append_with(
        &mut self,
        how: Partitioner,
        key: Option<&[u8]>,
        payload: &[u8],
        time_ns: Option<i64>,
    ) -> Result<(u32, u64)> {
        self.usable()?;
        if let Partitioner::Fixed(p) = how {
            if p >= self.partitions {
                return Err(StreamError::Invalid {
                    what: format!(
                        "{}: partition {p} of a stream of {}",
                        self.path.display(),
                        self.partitions
                    ),
                });
            }
        }
        let size = (key.map_or(0, <[u8]>::len) + payload.len()) as u64;
        if size > format::MAX_EVENT {
            return Err(StreamError::TooLarge {
                size,
                limit: format::MAX_EVENT,
            });
        }
        if let Some(q) = &mut self.quota {
            q.admit()?;
        }
        let partition = match (how, key) {
            (Partitioner::Fixed(p), _) => p,
            (Partitioner::Key, Some(k)) => (key_hash(k) % u64::from(self.partitions)) as u32,
            _ => {
                self.rr += 1;
                ((self.rr - 1) % u64::from(self.partitions)) as u32
            }
        };
        if self.pending == 0 {
            self.buf.clear();
            self.buf.resize(BATCH_HEADER_LEN, 0);
        }
        let seq = self.next_seq;
        format::encode_frame(
            &mut self.buf,
            partition,
            self.id,
            seq,
            time_ns.unwrap_or_else(now_ns),
            key,
            payload,
        );
        self.pending += 1;
        self.next_seq += 1;
        if self.buf.len() >= SPILL_BODY {
            self.write_pending()?;
        }
        Ok((partition, seq))
    }

    /// Make every appended event durable: one `pwrite` of the pending
    /// batch and its commit record, one `fdatasync`. Returns how many
    /// events of this producer are durable (sequence numbers below it).
    pub fn flush(&mut self) -> Result<u64> {
        self.usable()?;
        self.write_pending()?;
        if self.unsynced {
            if let Err(e) = self.file.sync_data() {
                self.poisoned = true;
                return Err(e).ctx("fdatasync", &self.path);
            }
            self.unsynced = false;
        }
        self.durable = self.next_seq;
        self.maybe_roll();
        Ok(self.durable)
    }

    /// Flush, then close (with no roll: nothing follows).
    pub fn close(mut self) -> Result<u64> {
        self.roll_bytes = u64::MAX;
        self.flush()
    }

    pub fn durable(&self) -> u64 {
        self.durable
    }

    /// The bytes this producer wrote to its segment files, headers
    /// included, over its rolls: what it took on the node's disk before
    /// local retention gave any of it back (`paralog status` counts the
    /// bytes released against this).
    pub fn bytes_written(&self) -> u64 {
        self.rolled + self.end
    }

    fn usable(&self) -> Result<()> {
        if self.poisoned {
            return Err(StreamError::Invalid {
                what: format!(
                    "{}: an fdatasync failed earlier: this producer can promise nothing more",
                    self.path.display()
                ),
            });
        }
        Ok(())
    }

    fn write_pending(&mut self) -> Result<()> {
        if self.pending == 0 {
            return Ok(());
        }
        let body = (self.buf.len() - BATCH_HEADER_LEN) as u64;
        let first = self.next_seq - u64::from(self.pending);
        let mut head = Vec::with_capacity(BATCH_HEADER_LEN);
        BatchHeader {
            kind: KIND_LOCAL_BATCH,
            body,
            count: self.pending,
            partition: ANY_PARTITION,
            first,
            round: 0,
        }
        .encode(&mut head);
        self.buf[..BATCH_HEADER_LEN].copy_from_slice(&head);
        format::encode_commit(&mut self.buf, 0, self.end, self.pending);
        if let Err(e) = self.file.write_all_at(&self.buf, self.end) {
            // A failed write (a full disk) is cut off again, so that the
            // file still ends with a committed batch; the events stay pending.
            let _ = self.file.set_len(self.end);
            self.buf.truncate(self.buf.len() - format::COMMIT_LEN);
            return Err(e).ctx("write", &self.path);
        }
        self.end += self.buf.len() as u64;
        self.pending = 0;
        self.unsynced = true;
        if let Some(q) = &mut self.quota {
            q.stale = true;
        }
        Ok(())
    }
}

/// Create a new segment of `stream` in `dir` (with `O_EXCL`, under a new
/// random id), write and fsync its header, take its lock and make its name
/// durable: (id, path, file, where its first batch goes).
fn create_segment(
    dir: &Path,
    stream: &str,
    partitions: u32,
    pred: Option<u64>,
) -> Result<(u64, PathBuf, File, u64)> {
    let id = random_id();
    let path = dir.join(layout::segment_name(id));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .ctx("create segment", &path)?;
    let made = (|| {
        // Held for the segment's life, released by the kernel when the
        // producer dies or leaves it: the drain cuts a torn tail off, or
        // deletes, only a segment whose lock it can take. Taken before the
        // header is written: a segment with a header and a free lock is
        // one whose producer has ended.
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(std::io::Error::last_os_error()).ctx("flock", &path);
        }
        let header = Header {
            kind: pred.map_or(KIND_SEGMENT, |_| format::KIND_ROLLED_SEGMENT),
            id,
            first: pred.unwrap_or(now_ns() as u64),
            partition: std::process::id(),
            partitions,
            name: stream.into(),
        };
        let h = header.encode();
        file.write_all_at(&h, 0).ctx("write", &path)?;
        // Once per segment, not per flush: the header and the segment's
        // name are durable before any flush can rely on them.
        file.sync_all().ctx("fsync", &path)?;
        layout::sync_dir(dir)?;
        Ok(h.len() as u64)
    })();
    match made {
        Ok(end) => Ok((id, path, file, end)),
        Err(e) => {
            // Never leave a segment without a whole header behind.
            let _ = std::fs::remove_file(&path);
            Err(e)
        }
    }
}

/// The partition count of a stream's existing segments on this node.
fn existing_partitions(dir: &Path) -> Result<Option<u32>> {
    for ent in std::fs::read_dir(dir).ctx("list", dir)? {
        let ent = ent.ctx("list", dir)?;
        if layout::parse_segment_name(&ent.file_name().to_string_lossy()).is_none() {
            continue;
        }
        let path = ent.path();
        let b = read_head(&path)?;
        if b.len() < 52 {
            continue; // being created
        }
        return Ok(Some(Header::decode(&b, KIND_SEGMENT, &path)?.partitions));
    }
    // Every segment may have been released (local retention): the cut log
    // still fixes the count.
    Ok(crate::local::read_log(&dir.join(layout::CUTS))?.partitions())
}

/// The first bytes of a segment: enough for its header.
pub(crate) fn read_head(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut b = Vec::with_capacity(52 + format::MAX_NAME);
    File::open(path)
        .ctx("open", path)?
        .take(52 + format::MAX_NAME as u64)
        .read_to_end(&mut b)
        .ctx("read", path)?;
    Ok(b)
}
