//! Reading batches out of a segment file (a producer's, or a remote
//! partition's): the one place that tells a committed batch from a torn
//! tail (an unfinished flush, or one still being written) and from damage.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{corrupt, IoContext, Result};
use crate::format::{self, BatchHeader, Event, BATCH_HEADER_LEN, COMMIT_LEN};

/// A committed batch: its bytes `pos..end` in the file, header first.
#[derive(Debug)]
pub struct Batch {
    pub pos: u64,
    pub end: u64,
    pub header: BatchHeader,
    /// Header, body and commit record, as in the file.
    pub bytes: Vec<u8>,
    /// Each frame's range in `bytes`.
    pub frames: Vec<std::ops::Range<usize>>,
}

impl Batch {
    pub fn frame(&self, i: usize) -> &[u8] {
        &self.bytes[self.frames[i].clone()]
    }

    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        self.frames
            .iter()
            .map(|r| format::decode_frame(&self.bytes[r.clone()]))
    }
}

/// What is at a position of a segment.
#[derive(Debug)]
pub enum Next {
    Batch(Batch),
    /// The file ends here.
    End,
    /// A tail that is not a committed batch: a flush that did not finish
    /// (a crash), or one being written now. Never read; the reason says why.
    Torn(String),
}

/// Where a segment's bytes are: a file (a producer's segment, a POSIX
/// remote's), or an object read whole from an object store.
pub trait Source {
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<()>;
}

impl Source for File {
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<()> {
        FileExt::read_exact_at(self, buf, pos)
    }
}

impl Source for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<()> {
        let at = usize::try_from(pos).ok().filter(|&a| a <= self.len());
        match at.and_then(|a| self.get(a..a + buf.len())) {
            Some(b) => {
                buf.copy_from_slice(b);
                Ok(())
            }
            None => Err(std::io::ErrorKind::UnexpectedEof.into()),
        }
    }
}

fn read_at<S: Source + ?Sized>(f: &S, buf: &mut [u8], pos: u64, path: &Path) -> Result<()> {
    f.read_exact_at(buf, pos).ctx("read", path)
}

/// The batch at `pos` of `f` (`len` bytes long, as seen now). A tail that
/// cannot be a committed batch is `Torn`; bytes that are not a batch with
/// more bytes after them are corruption, named with the file and offset.
pub fn read_batch<S: Source + ?Sized>(
    f: &S,
    path: &Path,
    pos: u64,
    len: u64,
    kind: u16,
    partitions: u32,
) -> Result<Next> {
    if pos == len {
        return Ok(Next::End);
    }
    if pos > len {
        return Err(corrupt(
            path,
            len,
            format!("segment ends before offset {pos}, which a record names"),
        ));
    }
    let left = len - pos;
    if left < BATCH_HEADER_LEN as u64 {
        return Ok(Next::Torn(format!("{left} bytes after the last batch")));
    }
    let mut head = [0u8; BATCH_HEADER_LEN];
    read_at(f, &mut head, pos, path)?;
    let header = match BatchHeader::decode(&head, kind, path, pos) {
        Ok(h) => h,
        // A crash of the node can leave a grown file of zeros (the size
        // committed, the data not): only zeros to the end is a torn tail.
        Err(e) => {
            return if all_zero(f, path, pos, len)? {
                Ok(Next::Torn("zeros after the last batch".into()))
            } else {
                Err(e)
            };
        }
    };
    let total = BATCH_HEADER_LEN as u64 + header.body + COMMIT_LEN as u64;
    if left < total {
        return Ok(Next::Torn(format!(
            "a batch of {total} bytes with {left} written"
        )));
    }
    let mut bytes = vec![0u8; total as usize];
    read_at(f, &mut bytes, pos, path)?;
    let split = total as usize - COMMIT_LEN;
    if let Some(why) = format::commit_fails(&bytes[..split], &bytes[split..], pos, header.count) {
        // The last batch of the file may be a flush whose fdatasync never
        // finished; one with bytes after it was committed and is damaged.
        return if pos + total == len {
            Ok(Next::Torn(why))
        } else {
            Err(corrupt(path, pos, why))
        };
    }
    let frames = format::split_frames(
        &bytes[BATCH_HEADER_LEN..split],
        header.count,
        partitions,
        path,
        pos + BATCH_HEADER_LEN as u64,
    )?
    .into_iter()
    .map(|r| r.start + BATCH_HEADER_LEN..r.end + BATCH_HEADER_LEN)
    .collect();
    Ok(Next::Batch(Batch {
        pos,
        end: pos + total,
        header,
        bytes,
        frames,
    }))
}

/// Every committed batch of `from..to`, which a record says holds whole
/// batches: anything else there (torn included) is corruption.
pub fn read_committed<S: Source + ?Sized>(
    f: &S,
    path: &Path,
    from: u64,
    to: u64,
    kind: u16,
    partitions: u32,
) -> Result<Vec<Batch>> {
    let mut out = Vec::new();
    let mut pos = from;
    while pos < to {
        match read_batch(f, path, pos, to, kind, partitions)? {
            Next::Batch(b) => {
                pos = b.end;
                out.push(b);
            }
            Next::End => break,
            Next::Torn(why) => {
                return Err(corrupt(
                    path,
                    pos,
                    format!("a recorded batch is not whole ({why})"),
                ))
            }
        }
    }
    Ok(out)
}

fn all_zero<S: Source + ?Sized>(f: &S, path: &Path, mut pos: u64, len: u64) -> Result<bool> {
    let mut buf = vec![0u8; 64 << 10];
    while pos < len {
        let n = ((len - pos) as usize).min(buf.len());
        read_at(f, &mut buf[..n], pos, path)?;
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        pos += n as u64;
    }
    Ok(true)
}
