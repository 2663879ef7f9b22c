//! CRC-32C (Castagnoli, the iSCSI polynomial), the one checksum of every
//! paralog format: log records and extents, object-layout blocks, S3 parts.
//!
//! One place, so that the implementation is chosen once. It is `crc-fast`'s
//! folding implementation: on CPUs with VPCLMULQDQ and AVX-512 it checksums
//! cached data at about 4x the SSE4.2 `crc32` instruction's speed (about 100
//! against 25-30 GB/s on the project's machines, docs/benchmarks.md §1),
//! which matters because the log checksums every byte it captures. It picks
//! its path at run time, so one binary runs everywhere.

use crc_fast::{CrcAlgorithm, Digest};

/// `xorout` (and `init`) of CRC-32C: a finished CRC is the internal state
/// with every bit flipped.
const FLIP: u32 = 0xffff_ffff;

/// CRC-32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// CRC-32C of `a ‖ data`, given `prev` = CRC-32C of `a`: continue a
/// checksum over bytes that follow, without reading `a` again.
#[inline]
pub fn crc32c_append(prev: u32, data: &[u8]) -> u32 {
    if data.is_empty() {
        return prev;
    }
    let mut d = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(prev ^ FLIP));
    d.update(data);
    d.finalize() as u32
}

/// Append `src` to `dst` and return the CRC-32C of `a ‖ src`, given `prev`
/// = CRC-32C of `a`: the log's copy of a small write into its coalescing
/// buffer. The source is checksummed first and then copied, so the copy
/// reads it from the cache (the writer copies only writes below 256 KiB,
/// which fit a core's L2) and memory sees one pass. Measured in the writer
/// against copying in 4 KiB steps and checksumming each step in the
/// destination while it is in L1: this order cost about 5% less CPU time
/// for 4 KiB and 64 KiB writes (docs/benchmarks.md §1).
pub fn crc32c_extend(prev: u32, dst: &mut Vec<u8>, src: &[u8]) -> u32 {
    let crc = crc32c_append(prev, src);
    dst.extend_from_slice(src);
    crc
}

/// CRC-32C of `a ‖ b`, given the CRC-32C of `a` and of `b`, and `b`'s length.
#[inline]
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    crc_fast::checksum_combine(
        CrcAlgorithm::Crc32Iscsi,
        u64::from(crc_a),
        u64::from(crc_b),
        len_b,
    ) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn check_values() {
        // The catalogue's check value, and RFC 3720 B.4's test vectors.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        let up: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&up), 0x46dd_794e);
        let down: Vec<u8> = (0u8..32).rev().collect();
        assert_eq!(crc32c(&down), 0x113f_db5c);
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c_append(0, b""), 0);
    }

    proptest! {
        // Against an independent implementation (the SSE4.2 `crc32c`
        // crate), over lengths that cross every folding width.
        #[test]
        fn agrees_with_sse42(a in proptest::collection::vec(any::<u8>(), 0..5000),
                             b in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let whole: Vec<u8> = a.iter().chain(&b).copied().collect();
            prop_assert_eq!(crc32c(&whole), crc32c::crc32c(&whole));
            prop_assert_eq!(crc32c_append(crc32c(&a), &b), crc32c(&whole));
            prop_assert_eq!(crc32c_combine(crc32c(&a), crc32c(&b), b.len() as u64), crc32c(&whole));
            let mut dst = a.clone();
            prop_assert_eq!(crc32c_extend(crc32c(&a), &mut dst, &b), crc32c(&whole));
            prop_assert_eq!(&dst, &whole);
        }

        // Long sources, into a buffer that already holds bytes.
        #[test]
        fn extend_long(head in proptest::collection::vec(any::<u8>(), 0..100),
                       len in 0usize..100_000, seed in any::<u8>()) {
            let src: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
            let mut dst = head.clone();
            let crc = crc32c_extend(crc32c(&head), &mut dst, &src);
            prop_assert_eq!(&dst[..head.len()], &head[..]);
            prop_assert_eq!(&dst[head.len()..], &src[..]);
            prop_assert_eq!(crc, crc32c::crc32c(&dst));
        }
    }
}
