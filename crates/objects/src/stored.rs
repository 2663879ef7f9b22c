//! A chunk as stored (its bytes, then their CRC-32C: the Zarr `bytes` +
//! `crc32c` encoding) and what a version records of it (docs/
//! objects-format.md "The version"): the one place that knows both forms
//! of a chunk's piece.
//!
//! A version written now records the CRC-32C of the
//! chunk's bytes (`block_len` = the chunk's length), which names the chunk:
//! another valid chunk in its place fails it. Older versions recorded the
//! CRC-32C of the whole stored object (`block_len` = length + 4); that is
//! the same constant for every intact chunk (CRC-32C's residue), so it
//! proves integrity only. Both still read.

use paralog_backend::objstore::Piece;

use crate::staging::Claim;

/// The CRC-32C of any bytes followed by their own CRC-32C (little-endian):
/// what every older version recorded for each of its chunks.
pub(crate) const RESIDUE: u32 = 0x4867_4bc7;

/// A chunk's bytes as stored, followed by their CRC-32C (little-endian),
/// which the Zarr view's readers check; and that CRC, which a claim and
/// the version record hold.
pub(crate) fn stored_block(data: &[u8]) -> (Vec<u8>, u32) {
    let crc = paralog_checksum::crc32c(data);
    let mut block = Vec::with_capacity(data.len() + 4);
    block.extend_from_slice(data);
    block.extend_from_slice(&crc.to_le_bytes());
    (block, crc)
}

/// Chunk `i`'s piece of the version, from its claim. A claim holding the
/// residue was written by an older writer (or, once in 2^32, holds a
/// chunk whose own CRC is the residue): its piece keeps the older form,
/// the whole stored object, which reads correctly either way.
pub(crate) fn chunk_piece(i: u64, cb: u64, c: &Claim, dir: u32) -> Piece {
    Piece {
        file_off: i * cb,
        len: cb,
        chunk: c.chunk,
        dir,
        block_off: 0,
        block_len: if c.block_crc == RESIDUE { cb + 4 } else { cb },
        block_crc: c.block_crc,
        skip: 0,
    }
}

/// Check a whole stored chunk object (`cb` bytes and their CRC-32C)
/// against the CRC its claim or piece records (either form): its length,
/// its trailer, and that it is this chunk. The error says why not.
pub(crate) fn check_stored(obj: &[u8], cb: u64, recorded: u32) -> Result<(), String> {
    if obj.len() as u64 != cb + 4 {
        return Err(format!(
            "truncated or not a chunk: {} bytes, a stored chunk has {}",
            obj.len(),
            cb + 4
        ));
    }
    let (data, trailer) = obj.split_at(cb as usize);
    let crc = paralog_checksum::crc32c(data);
    let trailer = u32::from_le_bytes(trailer.try_into().expect("4 bytes"));
    if crc != trailer {
        return Err(format!(
            "damaged (checksum mismatch: its bytes' CRC-32C is {crc:08x}, its trailer's {trailer:08x})"
        ));
    }
    if recorded != crc && recorded != RESIDUE {
        return Err(format!(
            "another chunk (checksum mismatch: an intact chunk whose CRC-32C is {crc:08x}, the version's is {recorded:08x})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_residue_is_every_stored_chunks_whole_crc() {
        for data in [&b""[..], b"a", b"0123456789abcdef", &[0u8; 4096][..]] {
            let (block, crc) = stored_block(data);
            assert_eq!(crc, paralog_checksum::crc32c(data));
            assert_eq!(paralog_checksum::crc32c(&block), RESIDUE);
        }
    }

    #[test]
    fn a_stored_chunk_is_checked_for_identity() {
        let (a, ca) = stored_block(&[1u8; 64]);
        let (b, _) = stored_block(&[2u8; 64]);
        assert_eq!(check_stored(&a, 64, ca), Ok(()));
        assert_eq!(check_stored(&b, 64, RESIDUE), Ok(()));
        assert!(check_stored(&b, 64, ca)
            .unwrap_err()
            .contains("another chunk"));
        let mut flipped = a.clone();
        flipped[3] ^= 1;
        assert!(check_stored(&flipped, 64, ca)
            .unwrap_err()
            .contains("damaged"));
        assert!(check_stored(&a[..60], 64, ca)
            .unwrap_err()
            .contains("truncated"));
    }

    #[test]
    fn a_claim_of_an_older_writer_keeps_the_older_piece() {
        let claim = |block_crc| Claim {
            chunk: [7; 16],
            dir: 2,
            block_crc,
            writer: [1; 16],
        };
        let new = chunk_piece(3, 64, &claim(0x1234_5678), 2);
        let got = (
            new.file_off,
            new.len,
            new.block_off,
            new.block_len,
            new.block_crc,
            new.dir,
        );
        assert_eq!(got, (192, 64, 0, 64, 0x1234_5678, 2));
        let old = chunk_piece(3, 64, &claim(RESIDUE), 0);
        assert_eq!((old.block_len, old.block_crc, old.dir), (68, RESIDUE, 0));
    }
}
