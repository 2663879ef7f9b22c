//! The set record's encoder and decoder against each other (proptest), and
//! the decoder against damage: random truncations, bit flips, byte
//! overwrites and splices of valid records are refused with the file and
//! an offset, never a panic and never a different record.
//! `PARALOG_FUZZ_CASES=N` runs more cases.

use std::path::Path;

use paralog_aggregate::format::{container_name, Container, Extent, Member, SetRecord};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("PARALOG_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// A valid record: members with extents placed in containers as a writer
/// would (each container holds what is put in it, one after the other).
fn arb_record() -> impl Strategy<Value = SetRecord> {
    let member = (
        1u64..200_000,
        prop::collection::vec((0u64..50_000, 1u64..60_000), 0..4),
        0u32..0o7777,
    );
    (
        prop::collection::vec(member, 0..12),
        1u32..5,
        prop::sample::select(vec![4096u32, 65536, 1 << 20]),
        1u64..1000,
        any::<bool>(),
        any::<[u8; 16]>(),
        "[a-z]{1,8}(/[a-z0-9][a-z0-9.-]{0,7}){0,2}",
        "[a-z0-9-]{0,12}",
    )
        .prop_map(|(ms, k, block, version, complete, origin, set, job)| {
            let mut ends = vec![0u64; k as usize];
            let mut members = Vec::new();
            for (i, (size, gaps, mode)) in ms.into_iter().enumerate() {
                let c = (i as u32) % k;
                let mut extents = Vec::new();
                let mut off = 0u64;
                for (gap, len) in gaps {
                    let start = off + gap;
                    if start >= size {
                        break;
                    }
                    let len = len.min(size - start);
                    extents.push(Extent {
                        offset: start,
                        len,
                        container: c,
                        container_offset: ends[c as usize],
                        crcs: (0..Extent::blocks(len, block))
                            .map(|b| (b as u32).wrapping_mul(0x9e37_79b9) ^ i as u32)
                            .collect(),
                    });
                    ends[c as usize] += len;
                    off = start + len;
                }
                members.push(Member {
                    path: format!("rank-{i:05}.dat").into_bytes(),
                    size,
                    mode,
                    extents,
                });
            }
            SetRecord {
                set: set.into_bytes(),
                version,
                complete,
                block_size: block,
                align: 4096,
                origin,
                job: job.into_bytes(),
                containers: (0..k)
                    .map(|i| Container {
                        name: container_name(i, version, 0xabc),
                        size: ends[i as usize] + 7,
                    })
                    .collect(),
                members,
            }
        })
}

#[derive(Debug, Clone)]
enum Damage {
    Truncate(usize),
    Flip(usize, u8),
    Overwrite(usize, Vec<u8>),
    Extend(Vec<u8>),
}

fn apply(bytes: &[u8], d: &Damage) -> Vec<u8> {
    let mut b = bytes.to_vec();
    match d {
        Damage::Truncate(n) => b.truncate(n % bytes.len()),
        Damage::Flip(i, bit) => b[i % bytes.len()] ^= 1 << (bit % 8),
        Damage::Overwrite(i, with) => {
            let at = i % bytes.len();
            for (j, x) in with.iter().enumerate() {
                if let Some(y) = b.get_mut(at + j) {
                    *y = *x;
                }
            }
        }
        Damage::Extend(more) => b.extend_from_slice(more),
    }
    b
}

fn arb_damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Damage::Flip(i, b)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, w)| Damage::Overwrite(i, w)),
        prop::collection::vec(any::<u8>(), 1..16).prop_map(Damage::Extend),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn records_round_trip(r in arb_record()) {
        let bytes = r.encode();
        let back = SetRecord::decode(&bytes, Path::new("/x/set.plr")).unwrap();
        prop_assert_eq!(back, r);
    }

    #[test]
    fn damaged_records_are_refused(r in arb_record(), d in arb_damage()) {
        let bytes = r.encode();
        let bad = apply(&bytes, &d);
        if bad == bytes {
            return Ok(());
        }
        match SetRecord::decode(&bad, Path::new("/x/set.plr")) {
            Ok(other) => prop_assert!(false, "{d:?} decoded to {other:?}"),
            Err(e) => {
                let s = e.to_string();
                prop_assert!(s.starts_with("/x/set.plr at offset "), "{}", s);
            }
        }
    }

    /// Garbage with a valid header and checksums: the body's checks (not
    /// the CRC) must refuse it, without a panic.
    #[test]
    fn resealed_garbage_never_panics(body in prop::collection::vec(any::<u8>(), 0..400), k in 0u32..4, n in 0u32..4) {
        let mut b = b"PLGSETRC".to_vec();
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&96u32.to_le_bytes());
        let total = 96 + body.len() + 4;
        b.extend_from_slice(&(total as u64).to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&4096u32.to_le_bytes());
        b.extend_from_slice(&4096u64.to_le_bytes());
        b.extend_from_slice(&[0; 16]);
        b.extend_from_slice(&k.to_le_bytes());
        b.extend_from_slice(&n.to_le_bytes());
        b.extend_from_slice(&(body.len().min(3) as u16).to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.resize(92, 0);
        let h = paralog_checksum::crc32c(&b);
        b.extend_from_slice(&h.to_le_bytes());
        b.extend_from_slice(&body);
        let c = paralog_checksum::crc32c(&b);
        b.extend_from_slice(&c.to_le_bytes());
        if let Ok(r) = SetRecord::decode(&b, Path::new("/x/set.plr")) {
            // Whatever decodes must be a valid record that encodes back.
            prop_assert_eq!(r.encode(), b);
        }
    }
}
