//! The files of a chunked PUT in progress (`ROOT/staging/<id>/`, docs/
//! objects-format.md): chunk claims, their encoding, and the removal of a
//! put's chunk files; small durable writes.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::error::{io_err, Error, Result};
use crate::store::Store;
use crate::{id_hex, parse_id};

const CLAIM_MAGIC: &[u8; 8] = b"PLGCLAIM";
const CLAIM_LEN: usize = 60;

/// A chunk claimed by a writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    pub(crate) chunk: [u8; 16],
    pub(crate) dir: u32,
    /// The CRC-32C of the chunk's bytes, which its piece records (a claim
    /// of an older writer: the whole stored file's, crate::stored::RESIDUE).
    pub(crate) block_crc: u32,
    pub(crate) writer: [u8; 16],
}

pub(crate) fn encode_claim(index: u64, c: &Claim) -> Vec<u8> {
    let mut b = Vec::with_capacity(CLAIM_LEN);
    b.extend_from_slice(CLAIM_MAGIC);
    b.extend_from_slice(&index.to_le_bytes());
    b.extend_from_slice(&c.chunk);
    b.extend_from_slice(&c.dir.to_le_bytes());
    b.extend_from_slice(&c.block_crc.to_le_bytes());
    b.extend_from_slice(&c.writer);
    let crc = paralog_checksum::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

pub(crate) fn decode_claim(b: &[u8], path: &Path) -> Result<(u64, Claim)> {
    let ok = b.len() == CLAIM_LEN
        && &b[..8] == CLAIM_MAGIC
        && paralog_checksum::crc32c(&b[..56]) == u32::from_le_bytes(b[56..].try_into().expect("4"));
    if !ok {
        return Err(Error::Damaged {
            path: path.to_path_buf(),
            offset: 0,
            what: "not a whole chunk claim (bad length, magic or checksum)".into(),
        });
    }
    Ok((
        u64::from_le_bytes(b[8..16].try_into().expect("8")),
        Claim {
            chunk: b[16..32].try_into().expect("16"),
            dir: u32::from_le_bytes(b[32..36].try_into().expect("4")),
            block_crc: u32::from_le_bytes(b[36..40].try_into().expect("4")),
            writer: b[40..56].try_into().expect("16"),
        },
    ))
}

/// Every chunk of the put claimed by a writer that finished, in chunk
/// order; else why nothing can be published (for the put's own error).
pub(crate) fn complete_claims(
    claims: Vec<Option<Claim>>,
    finished: &std::collections::BTreeSet<[u8; 16]>,
    meta: &crate::record::ArrayMeta,
) -> std::result::Result<Vec<Claim>, String> {
    let n = claims.len() as u64;
    for (i, c) in claims.iter().enumerate() {
        if let Some(c) = c.as_ref().filter(|c| !finished.contains(&c.writer)) {
            return Err(format!(
                "chunk {:?} was written by writer {} that did not finish; nothing was published",
                meta.coords(i as u64),
                id_hex(&c.writer)
            ));
        }
    }
    let missing: Vec<u64> = (0..n).filter(|&i| claims[i as usize].is_none()).collect();
    if !missing.is_empty() {
        let first: Vec<Vec<u64>> = missing.iter().take(4).map(|&i| meta.coords(i)).collect();
        return Err(format!(
            "{} of {n} chunks were not written (first: {first:?}); nothing was published",
            missing.len()
        ));
    }
    Ok(claims.into_iter().flatten().collect())
}

/// Remove the chunk files of a put that is not published: those its
/// claims name (of whole chunks or of parts), placed or under their
/// temporary names (a writer that died before placing its claim), those
/// an older binary's intents name, and the array record a commit killed
/// before its publish wrote. Claims that do not decode name none.
pub(crate) fn remove_staged_chunks(store: &Store, dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    // A put's directory, or a retired one (crate::publish's tombstone).
    let put = dir
        .file_name()
        .and_then(|f| f.to_str())
        .and_then(|f| parse_id(f.strip_prefix(".published.").unwrap_or(f)));
    for e in entries.flatten() {
        let p = e.path();
        let Ok(b) = std::fs::read(&p) else { continue };
        let f = e.file_name().to_string_lossy().into_owned();
        if f.starts_with(".intent.") {
            if let Ok(id) = <[u8; 16]>::try_from(b.as_slice()) {
                remove_chunk_by_id(store, &id);
            }
        } else if crate::parts::claim_chunk(&f).is_some() || f.starts_with(".part.") {
            // A part's chunk file, shared with the put's other parts of
            // that chunk (removing it once is enough).
            if let (Some(put), Ok(c)) = (put, crate::parts::PartClaim::decode(&b, &p)) {
                let id = crate::parts::chunk_file_id(&put, c.chunk);
                let _ = std::fs::remove_file(store.os.chunk_path(c.dir, &id));
            }
        } else if let Ok((_, c)) = decode_claim(&b, &p) {
            let _ = std::fs::remove_file(store.os.chunk_path(c.dir, &c.chunk));
        }
    }
    if let Some(id) = put {
        for p in store.array_record_paths(&id) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Remove a chunk file known by its UUID only, in whichever storage
/// directory it is.
pub(crate) fn remove_chunk_by_id(store: &Store, id: &[u8; 16]) {
    let Ok(dirs) = std::fs::read_dir(store.root().join("data")) else {
        return;
    };
    for d in dirs.flatten() {
        let _ = std::fs::remove_file(d.path().join(id_hex(id)));
    }
}

/// Write a file, not synced (what a commit syncs, or never needs).
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(io_err(path, "write"))
}

/// Read a file; `sync`: and make it durable, on the descriptor it was read
/// from (one open per file).
pub(crate) fn read_file(path: &Path, sync: bool) -> std::io::Result<Vec<u8>> {
    let mut f = File::open(path)?;
    let mut b = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut b)?;
    if sync {
        f.sync_all()?;
    }
    Ok(b)
}

/// Write a file and make it durable.
pub(crate) fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(io_err(path, "create"))?;
    f.write_all(bytes).map_err(io_err(path, "write"))?;
    f.sync_all().map_err(io_err(path, "fsync"))
}

pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir, "fsync directory"))
}

pub(crate) fn new_id() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}
