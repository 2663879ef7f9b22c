//! The remote side of the drain (a POSIX directory): the stream's
//! description, a cut applied (each partition's batch at its recorded
//! position, fsynced) and the watermark published after it.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use crate::error::{IoContext, Result, StreamError};
use crate::format::{Header, PartCut, PartMark, Watermark, KIND_PART_SEGMENT, KIND_STREAM};
use crate::layout;
use crate::remote::RoundWrite;

/// A remote partition segment's header length (the name is in it).
pub fn header_len(stream: &str) -> u64 {
    52 + stream.len() as u64
}

pub fn read_watermark(rdir: &Path, n: u32) -> Result<Watermark> {
    let path = rdir.join(layout::WATERMARK);
    Ok(match layout::read_small(&path)? {
        Some(b) => Watermark::decode(&b, &path)?,
        None => Watermark {
            round: 0,
            parts: vec![PartMark::default(); n as usize],
        },
    })
}

/// Write each partition's batch at its recorded position (cutting
/// whatever an interrupted earlier attempt left past it), fsync, then
/// publish the watermark. Applying a cut twice writes the same bytes.
pub fn apply(rdir: &Path, stream: &str, n: u32, round: RoundWrite<'_>) -> Result<()> {
    let RoundWrite { cut, bytes, after } = round;
    for (p, (part, b)) in cut.parts.iter().zip(bytes).enumerate() {
        apply_part(rdir, stream, n, p as u32, part, b)?;
    }
    publish_watermark(rdir, cut.round, after)
}

/// One partition's batch of a round written at its recorded position
/// and fsynced (nothing if it has none): the step a partition's owner
/// takes in a server job (docs/streams.md "Many nodes").
pub fn apply_part(
    rdir: &Path,
    stream: &str,
    n: u32,
    p: u32,
    part: &PartCut,
    b: &[u8],
) -> Result<()> {
    if part.count == 0 {
        return Ok(());
    }
    let pdir = layout::part_dir(rdir, p);
    layout::create_dirs(rdir, &pdir, 0o755)?;
    let path = layout::part_segment(rdir, p, part.seg_first);
    let existed = path.exists();
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&path)
        .ctx("open", &path)?;
    if part.pos == header_len(stream) {
        let h = Header {
            kind: KIND_PART_SEGMENT,
            id: 0,
            first: part.seg_first,
            partition: p,
            partitions: n,
            name: stream.into(),
        };
        f.write_all_at(&h.encode(), 0).ctx("write", &path)?;
    }
    f.write_all_at(b, part.pos).ctx("write", &path)?;
    f.set_len(part.pos + part.len).ctx("truncate", &path)?;
    f.sync_all().ctx("fsync", &path)?;
    if !existed {
        layout::sync_dir(&pdir)?;
    }
    crate::failpoint::hit("stream.mid_apply");
    Ok(())
}

/// The high watermark of round `round` replaced atomically, once every
/// partition's batch of it is durable.
pub fn publish_watermark(rdir: &Path, round: u64, after: &[PartMark]) -> Result<()> {
    crate::failpoint::hit("stream.before_watermark");
    let wm = Watermark {
        round,
        parts: after.to_vec(),
    };
    layout::write_atomic(&rdir.join(layout::WATERMARK), &wm.encode(), 0o644)
}

/// The remote stream's directory and description (written once).
pub fn ensure_remote(remote: &Path, rdir: &Path, stream: &str, n: u32) -> Result<()> {
    if !remote.is_dir() {
        return Err(StreamError::Invalid {
            what: format!("remote {} is not a directory", remote.display()),
        });
    }
    layout::create_dirs(remote, rdir, 0o755)?;
    let path = rdir.join(layout::STREAM_RECORD);
    match layout::read_small(&path)? {
        Some(b) => {
            let h = Header::decode(&b, KIND_STREAM, &path)?;
            if h.name != stream || h.partitions != n {
                return Err(StreamError::PartitionMismatch {
                    stream: stream.into(),
                    existing: h.partitions,
                    asked: n,
                });
            }
            Ok(())
        }
        None => {
            let h = Header {
                kind: KIND_STREAM,
                id: 0,
                first: 0,
                partition: 0,
                partitions: n,
                name: stream.into(),
            };
            layout::write_atomic(&path, &h.encode(), 0o644)
        }
    }
}
