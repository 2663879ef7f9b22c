//! Fuzzing of the manifest decoder, driven by proptest: random bytes, and
//! mutations of valid manifests (byte flips, cuts, splices) with the trailing
//! CRC recomputed so that the mutations reach the field checks behind it.
//! The decoder must never panic; whatever it accepts must re-encode to the
//! same bytes (one encoding per manifest) and satisfy the format's rules.
//!
//! `make test` runs a fixed number of cases; run longer by hand with
//! `PARALOG_FUZZ_CASES=1000000 cargo test --release -p paralog-log --test fuzz_manifest`.

use std::path::Path;

use paralog_log::format::DATA_HEADER_LEN;
use paralog_log::{Extent, FileIdent, Manifest, Op};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("PARALOG_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u64..1 << 20, 1u64..4096, 0u64..8192, any::<u32>())
            .prop_map(|(file_off, len, pos, crc)| Op::Extent(Extent { file_off, len, log_pos: DATA_HEADER_LEN + pos, crc })),
        1 => (0u64..1 << 20).prop_map(Op::SetSize),
        1 => (0u64..1 << 20).prop_map(Op::Preallocate),
        1 => (1u64..4).prop_map(Op::Phase),
    ]
}

/// Valid manifests (ops made canonical: sorted and disjoint per phase).
fn manifest() -> impl Strategy<Value = Manifest> {
    (
        1u32..8,
        0u32..8,
        1u64..5,
        1u64..9,
        prop::collection::vec(op(), 0..12),
    )
        .prop_map(|(size, rank, gen, epoch, raw)| {
            let mut ops = Vec::new();
            let mut end = 0u64;
            // The phase the operations imply; a phase operation moves it on.
            let mut phase = 0u64;
            for op in raw {
                match op {
                    Op::Phase(step) => {
                        phase += step;
                        end = 0;
                        ops.push(Op::Phase(phase));
                    }
                    Op::Extent(mut e) => {
                        if e.file_off < end {
                            e.file_off = end;
                        }
                        end = e.file_end();
                        ops.push(Op::Extent(e));
                    }
                    other => {
                        end = 0;
                        phase += 1;
                        ops.push(other);
                    }
                }
            }
            Manifest {
                ident: FileIdent {
                    job: "j".into(),
                    path: b"/p/f".to_vec(),
                    rel: b"f".to_vec(),
                    gen,
                },
                rank: rank % size,
                comm_size: size,
                epoch,
                data_len: DATA_HEADER_LEN + 8192 + 4096,
                ops,
            }
        })
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Cut(usize),
    Splice(usize, Vec<u8>),
    Set(usize, u64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<usize>().prop_map(Mutation::Cut),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..40))
            .prop_map(|(i, v)| Mutation::Splice(i, v)),
        (any::<usize>(), any::<u64>()).prop_map(|(i, v)| Mutation::Set(i, v)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    match m {
        Mutation::Flip(i, x) => {
            let i = i % bytes.len();
            bytes[i] ^= x;
        }
        Mutation::Cut(i) => bytes.truncate(i % bytes.len()),
        Mutation::Splice(i, v) => {
            let i = i % bytes.len();
            bytes.splice(i..i, v.iter().copied());
        }
        Mutation::Set(i, v) => {
            let i = i % bytes.len();
            let b = v.to_le_bytes();
            let n = b.len().min(bytes.len() - i);
            bytes[i..i + n].copy_from_slice(&b[..n]);
        }
    }
}

fn fix_crc(bytes: &mut [u8]) {
    if bytes.len() >= 4 {
        let n = bytes.len() - 4;
        let crc = paralog_checksum::crc32c(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// What an accepted manifest must satisfy, whatever bytes it came from.
fn check_accepted(bytes: &[u8], m: &Manifest) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        m.encode(),
        bytes.to_vec(),
        "accepted bytes must be the canonical encoding"
    );
    prop_assert!(m.rank < m.comm_size && m.epoch > 0 && m.ident.gen > 0);
    let mut end = 0;
    let mut phase = 0;
    for op in &m.ops {
        match op {
            Op::Extent(e) => {
                prop_assert!(e.len > 0 && e.file_off >= end);
                prop_assert!(e.log_pos >= DATA_HEADER_LEN && e.log_pos + e.len <= m.data_len);
                end = e.file_end();
            }
            Op::Phase(p) => {
                prop_assert!(*p > phase, "phases must increase");
                phase = *p;
                end = 0;
            }
            _ => {
                phase += 1;
                end = 0
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400), fix in any::<bool>()) {
        let mut bytes = bytes;
        if fix { fix_crc(&mut bytes); }
        if let Ok(m) = Manifest::decode(&bytes, Path::new("fuzz")) {
            check_accepted(&bytes, &m)?;
        }
    }

    #[test]
    fn mutated_manifests_are_refused_or_canonical(m in manifest(), muts in prop::collection::vec(mutation(), 1..4), fix in any::<bool>()) {
        let mut bytes = m.encode();
        prop_assert_eq!(Manifest::decode(&bytes, Path::new("fuzz")).unwrap(), m.clone());
        for mu in &muts { apply(&mut bytes, mu); }
        if fix { fix_crc(&mut bytes); }
        match Manifest::decode(&bytes, Path::new("fuzz")) {
            Ok(decoded) => check_accepted(&bytes, &decoded)?,
            Err(e) => {
                let text = e.to_string();
                prop_assert!(text.starts_with("fuzz:"), "error must name the file: {}", text);
            }
        }
    }
}
