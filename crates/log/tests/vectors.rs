//! Golden test vectors: small binary records committed under tests/vectors/.
//! They pin format versions 1 and 2: the decoder must read them to exactly
//! the values below, the encoder must reproduce them byte for byte, and a
//! single flipped bit anywhere in them must be refused. Format 2 added a
//! version-2 data log header and manifest, the commit trailer, and a whole
//! small data log with its commit record; the format-1 vectors keep
//! decoding (and a real format-1 log is read by `tests/saved_v1.rs`).
//! Manifest version 3 (format 2's commit record with a rename in it) adds
//! the two `*_v3.bin` manifests.
//!
//! Regenerate (only when the format version changes, with a new name):
//! `cargo test -p paralog-log --test vectors -- --ignored regenerate`

use std::path::{Path, PathBuf};

use paralog_log::format::{
    decode_data_log, CommitMark, CommitTrailer, DataHeader, PathRecord, ProgressRecord,
    DATA_HEADER_LEN, TRAILER_LEN,
};
use paralog_log::format::{RenameRef, Times};
use paralog_log::{EpochId, Extent, FileIdent, LogicalFile, Manifest, Op};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

fn manifest() -> Manifest {
    Manifest {
        ident: FileIdent {
            job: "job-42".into(),
            path: b"/scratch/run/out.h5".to_vec(),
            rel: b"run/out.h5".to_vec(),
            gen: 2,
        },
        rank: 3,
        comm_size: 4,
        epoch: 7,
        data_len: DATA_HEADER_LEN + 300,
        ops: vec![
            Op::Extent(Extent {
                file_off: 0,
                len: 100,
                log_pos: 4096,
                crc: 0x1234_5678,
            }),
            Op::Extent(Extent {
                file_off: 200,
                len: 50,
                log_pos: 4196,
                crc: 0x9abc_def0,
            }),
            Op::SetSize(220),
            Op::Extent(Extent {
                file_off: 1 << 40,
                len: 150,
                log_pos: 4246,
                crc: 0x0bad_cafe,
            }),
            Op::Preallocate(1 << 41),
        ],
    }
}

/// A manifest whose phases come from synchronizing points, not only size
/// operations (issue 12): phase 2 after two barriers, a set size ending
/// phase 2, then phase 5.
fn manifest_phases() -> Manifest {
    let mut m = manifest();
    m.ops = vec![
        Op::Extent(Extent {
            file_off: 0,
            len: 100,
            log_pos: 4096,
            crc: 0x1234_5678,
        }),
        Op::Phase(2),
        Op::Extent(Extent {
            file_off: 0,
            len: 50,
            log_pos: 4196,
            crc: 0x9abc_def0,
        }),
        Op::SetSize(220),
        Op::Phase(5),
        Op::Extent(Extent {
            file_off: 10,
            len: 150,
            log_pos: 4246,
            crc: 0x0bad_cafe,
        }),
    ];
    m
}

fn data_header() -> DataHeader {
    DataHeader {
        rank: 3,
        comm_size: 4,
        gen: 2,
        epoch: 7,
    }
}

fn mark() -> CommitMark {
    CommitMark {
        rank: 3,
        comm_size: 4,
        gen: 2,
        epoch: 7,
    }
}

fn path_record() -> PathRecord {
    PathRecord {
        path: b"/scratch/run/out.h5".to_vec(),
        rel: b"run/out.h5".to_vec(),
    }
}

fn progress() -> ProgressRecord {
    ProgressRecord { gen: 2, epoch: 7 }
}

/// The data of the whole-log vector: 300 bytes.
fn log_data() -> Vec<u8> {
    (0..300u32).map(|i| (i * 7 + 3) as u8).collect()
}

/// The manifest of the whole-log vector: `manifest()`'s operations with the
/// real checksums of `log_data()`.
fn log_manifest() -> Manifest {
    let data = log_data();
    let mut m = manifest();
    for op in &mut m.ops {
        if let Op::Extent(e) = op {
            let at = (e.log_pos - DATA_HEADER_LEN) as usize;
            e.crc = paralog_checksum::crc32c(&data[at..at + e.len as usize]);
        }
    }
    m
}

/// A whole format-2 data log: header, 300 bytes of data, the commit record.
fn data_log_v2() -> Vec<u8> {
    let header = data_header().encode();
    let mut log = header.clone();
    log.extend_from_slice(&log_data());
    let at = log.len() as u64;
    log.extend_from_slice(&CommitTrailer::record(
        &header[..48],
        &log_manifest().encode(),
        at,
    ));
    log
}

fn log_v2_ok(b: &[u8], p: &Path) -> bool {
    decode_data_log(b, p).is_ok_and(|(h, m)| h == data_header() && m == log_manifest())
}

/// The trailer vector is the whole log's last 32 bytes: checked with the
/// header and manifest it was made for.
fn trailer_ok(b: &[u8], p: &Path) -> bool {
    let log = data_log_v2();
    let len = log.len() as u64;
    let Ok(t) = CommitTrailer::decode(b, len, p) else {
        return false;
    };
    let m = &log[t.manifest_off as usize..(t.manifest_off + u64::from(t.manifest_len)) as usize];
    t.check(&log, m, b, p).is_ok()
        && t.manifest_off == DATA_HEADER_LEN + 300
        && t.manifest_len as usize == log.len() - TRAILER_LEN - t.manifest_off as usize
}

/// A rename's two records (manifest version 3): the target's epoch that
/// takes the source's content, then a write on top; the source's epoch
/// that says where it went.
fn manifest_rename_from() -> Manifest {
    let mut m = manifest();
    m.rank = 0;
    m.comm_size = 1;
    m.epoch = 1;
    m.data_len = DATA_HEADER_LEN;
    m.ops = vec![Op::RenameFrom(RenameRef::new(
        b"run/out.h5.tmp",
        EpochId::new(5, 1),
    ))];
    m
}

fn manifest_renamed_to() -> Manifest {
    let mut m = manifest_rename_from();
    m.ident.rel = b"run/out.h5.tmp".to_vec();
    m.ident.path = b"/scratch/run/out.h5.tmp".to_vec();
    m.ident.gen = 6;
    m.ops = vec![Op::RenamedTo(RenameRef::new(
        b"run/out.h5",
        EpochId::new(2, 1),
    ))];
    m
}

/// A file created 0600 (the creation mode, manifest version 3) with one
/// extent.
fn manifest_mode() -> Manifest {
    let mut m = manifest();
    m.ops = vec![
        Op::Mode(0o600),
        Op::Extent(Extent {
            file_off: 0,
            len: 300,
            log_pos: DATA_HEADER_LEN,
            crc: 0x1234_5678,
        }),
    ];
    m
}

/// An epoch that wrote and then set the file's times (rsync, tar -x): the
/// modification time before 1970 as well, the access time left alone.
fn manifest_times() -> Manifest {
    let mut m = manifest_mode();
    m.ops.push(Op::Times(Times {
        atime: None,
        mtime: Some(-1_500_000_000_123_456_789),
    }));
    m
}

type Check = fn(&[u8], &Path) -> bool;

/// (file name, encoded bytes, decode-and-compare)
/// Each vector as the repository holds it: name, path, bytes, check.
fn stored() -> Vec<(&'static str, PathBuf, Vec<u8>, Check)> {
    vectors()
        .into_iter()
        .map(|(name, _, check)| {
            let path = dir().join(name);
            let bytes = std::fs::read(&path).unwrap();
            (name, path, bytes, check)
        })
        .collect()
}

fn vectors() -> Vec<(&'static str, Vec<u8>, Check)> {
    vec![
        ("manifest_v1.bin", manifest().encode_version(1), |b, p| {
            Manifest::decode_version(b, p).is_ok_and(|m| m == (manifest(), 1))
        }),
        (
            "manifest_phases_v1.bin",
            manifest_phases().encode_version(1),
            |b, p| Manifest::decode_version(b, p).is_ok_and(|m| m == (manifest_phases(), 1)),
        ),
        (
            "data_header_v1.bin",
            data_header().encode_version(1),
            |b, p| DataHeader::decode_version(b, p).is_ok_and(|h| h == (data_header(), 1)),
        ),
        ("manifest_v2.bin", manifest().encode(), |b, p| {
            Manifest::decode_version(b, p).is_ok_and(|m| m == (manifest(), 2))
        }),
        ("data_header_v2.bin", data_header().encode(), |b, p| {
            DataHeader::decode_version(b, p).is_ok_and(|h| h == (data_header(), 2))
        }),
        ("data_log_v2.bin", data_log_v2(), log_v2_ok),
        (
            "commit_trailer_v2.bin",
            data_log_v2()[data_log_v2().len() - TRAILER_LEN..].to_vec(),
            trailer_ok,
        ),
        (
            "manifest_rename_from_v3.bin",
            manifest_rename_from().encode(),
            |b, p| Manifest::decode_version(b, p).is_ok_and(|m| m == (manifest_rename_from(), 3)),
        ),
        (
            "manifest_renamed_to_v3.bin",
            manifest_renamed_to().encode(),
            |b, p| Manifest::decode_version(b, p).is_ok_and(|m| m == (manifest_renamed_to(), 3)),
        ),
        ("manifest_mode_v3.bin", manifest_mode().encode(), |b, p| {
            Manifest::decode_version(b, p).is_ok_and(|m| m == (manifest_mode(), 3))
        }),
        (
            "manifest_times_v4.bin",
            manifest_times().encode(),
            |b, p| Manifest::decode_version(b, p).is_ok_and(|m| m == (manifest_times(), 4)),
        ),
        ("commit_mark_v1.bin", mark().encode(), |b, p| {
            CommitMark::decode(b, p).is_ok_and(|m| m == mark())
        }),
        ("progress_v1.bin", progress().encode(), |b, p| {
            ProgressRecord::decode(b, p).is_ok_and(|r| r == progress())
        }),
        ("path_record_v1.bin", path_record().encode(), |b, p| {
            PathRecord::decode(b, p).is_ok_and(|r| r == path_record())
        }),
    ]
}

#[test]
#[ignore = "writes the vectors; run by hand when the format changes"]
fn regenerate() {
    for (name, bytes, _) in vectors() {
        std::fs::write(dir().join(name), bytes).unwrap();
    }
}

#[test]
fn vectors_decode_to_expected_values_and_reencode_identically() {
    for (name, expected, check) in vectors() {
        let path = dir().join(name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            check(&bytes, &path),
            "{name} does not decode to the expected record"
        );
        assert_eq!(
            bytes, expected,
            "{name}: the encoder no longer produces the golden bytes"
        );
    }
}

#[test]
fn manifest_vector_fields() {
    // Spelled out once, independent of the encoder, so that an encoder and
    // decoder that drift together are still caught.
    let bytes = std::fs::read(dir().join("manifest_v1.bin")).unwrap();
    assert_eq!(&bytes[..8], b"PLGMNFST");
    assert_eq!(
        u16::from_le_bytes([bytes[8], bytes[9]]),
        1,
        "format version"
    );
    assert_eq!(
        u32::from_le_bytes(bytes[16..20].try_into().unwrap()),
        3,
        "rank"
    );
    assert_eq!(
        u64::from_le_bytes(bytes[32..40].try_into().unwrap()),
        7,
        "epoch"
    );
    assert_eq!(
        u32::from_le_bytes(bytes[48..52].try_into().unwrap()),
        5,
        "operations"
    );
    let strings = "job-42".len() + "/scratch/run/out.h5".len() + "run/out.h5".len();
    assert_eq!(bytes.len(), 64 + strings + 5 * 32 + 4);
    let op3 = 64 + strings + 3 * 32;
    assert_eq!(bytes[op3], 1, "fourth operation is an extent");
    assert_eq!(
        u64::from_le_bytes(bytes[op3 + 8..op3 + 16].try_into().unwrap()),
        1 << 40
    );
}

#[test]
fn phase_operations_must_move_forward() {
    let path = dir().join("manifest_phases_v1.bin");
    for bad in [
        vec![Op::Phase(0)],
        vec![Op::SetSize(1), Op::Phase(1)],
        vec![Op::Phase(3), Op::Phase(3)],
        vec![Op::Phase(1 << 33)],
    ] {
        let mut m = manifest_phases();
        m.ops = bad.clone();
        let e = Manifest::decode(&m.encode(), &path).expect_err("accepted");
        assert!(e.to_string().contains("phase"), "{bad:?}: {e}");
    }
}

#[test]
fn every_flipped_bit_is_detected() {
    for (name, path, bytes, check) in stored() {
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[i] ^= 1 << bit;
                assert!(
                    !check(&damaged, &path),
                    "{name}: flipping bit {bit} of byte {i} went unnoticed"
                );
            }
        }
    }
}

#[test]
fn truncations_are_refused() {
    for (name, path, bytes, check) in stored() {
        for len in 0..bytes.len() {
            // A data header shorter than its padding is fine as long as the
            // meaningful 48 bytes are whole (the data log is read through it).
            if name.starts_with("data_header") && len >= 48 {
                continue;
            }
            assert!(
                !check(&bytes[..len], &path),
                "{name} cut to {len} bytes was accepted"
            );
        }
    }
}

/// A header whose checksum is right but whose length field or reserved
/// bytes say something the format does not (a writer that is not ours):
/// refused, naming the offset.
#[test]
fn headers_that_break_the_format_under_a_good_checksum_are_refused() {
    let path = dir().join("crafted");
    let reseal = |mut b: Vec<u8>| {
        let crc = paralog_checksum::crc32c(&b[..44]);
        b[44..48].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let data_bytes = data_header().encode();
    let mark_bytes = mark().encode();
    // Each case: one byte of an encoded header set to a value the format
    // does not allow, resealed; refused naming that byte's offset.
    for (what, base, offset, value) in [
        ("data length", &data_bytes, 12, data_bytes[12] ^ 1),
        ("data reserved", &data_bytes, 41, 7),
        ("mark length", &mark_bytes, 12, 49),
        ("mark reserved", &mark_bytes, 43, 1),
    ] {
        let mut bytes = base.clone();
        bytes[offset] = value;
        let bytes = reseal(bytes);
        let err = if what.starts_with("data") {
            DataHeader::decode(&bytes, &path).map(|_| ()).unwrap_err()
        } else {
            CommitMark::decode(&bytes, &path).map(|_| ()).unwrap_err()
        };
        match err {
            paralog_log::LogError::Corrupt { offset: o, .. } => {
                assert_eq!(o, offset as u64, "{what}: {err}")
            }
            other => panic!("{what}: {other}"),
        }
    }
    // The untouched headers, resealed, still decode.
    assert_eq!(
        DataHeader::decode(&reseal(data_bytes), &path).unwrap(),
        data_header()
    );
    assert_eq!(
        CommitMark::decode(&reseal(mark_bytes), &path).unwrap(),
        mark()
    );
}

#[test]
fn format_2_vector_fields() {
    // Spelled out, independent of the encoder.
    let log = std::fs::read(dir().join("data_log_v2.bin")).unwrap();
    assert_eq!(&log[..8], b"PLGDATA\0");
    assert_eq!(u16::from_le_bytes([log[8], log[9]]), 2, "data log version");
    let n = log.len();
    let t = &log[n - 32..];
    assert_eq!(&t[..8], b"PLGCTAIL");
    assert_eq!(u16::from_le_bytes([t[8], t[9]]), 2, "trailer version");
    assert_eq!(u16::from_le_bytes([t[10], t[11]]), 6, "trailer kind");
    assert_eq!(u32::from_le_bytes(t[12..16].try_into().unwrap()), 32);
    let off = u64::from_le_bytes(t[16..24].try_into().unwrap());
    let len = u32::from_le_bytes(t[24..28].try_into().unwrap());
    assert_eq!(off, 4096 + 300, "the manifest starts where the data ends");
    assert_eq!(off as usize + len as usize + 32, n);
    let m = &log[off as usize..off as usize + len as usize];
    assert_eq!(&m[..8], b"PLGMNFST");
    assert_eq!(u16::from_le_bytes([m[8], m[9]]), 2, "manifest version");
    assert_eq!(
        u64::from_le_bytes(m[40..48].try_into().unwrap()),
        off,
        "data length = where the commit record begins"
    );
    let crc = paralog_checksum::crc32c_append(
        paralog_checksum::crc32c_append(paralog_checksum::crc32c(&log[..48]), m),
        &t[..28],
    );
    assert_eq!(u32::from_le_bytes(t[28..32].try_into().unwrap()), crc);
}

#[test]
fn each_format_keeps_its_manifest_in_its_place() {
    use paralog_log::reader::ManifestLoc;
    let file = |v| ManifestLoc {
        path: dir().join("x.manifest"),
        offset: 0,
        version: v,
    };
    // A format-2 manifest is not a manifest file, and a format-1 one is
    // not a commit record's.
    let v2 = manifest().encode();
    assert!(file(1).decode(&v2).is_err());
    let v1 = manifest().encode_version(1);
    let in_log = ManifestLoc {
        path: dir().join("x.data"),
        offset: DATA_HEADER_LEN + 300,
        version: 2,
    };
    assert!(in_log.decode(&v1).is_err());
    assert_eq!(in_log.decode(&v2).unwrap(), manifest());
    assert_eq!(file(1).decode(&v1).unwrap(), manifest());
    // A format-2 manifest's data never ends before the header.
    let mut empty = manifest();
    empty.ops.clear();
    empty.data_len = 0;
    assert!(Manifest::decode(&empty.encode(), Path::new("m")).is_err());
    assert!(Manifest::decode(&empty.encode_version(1), Path::new("m")).is_ok());
}

#[test]
fn rename_operations_spelled_out_and_only_in_version_3() {
    let bytes = std::fs::read(dir().join("manifest_rename_from_v3.bin")).unwrap();
    assert_eq!(
        u16::from_le_bytes([bytes[8], bytes[9]]),
        3,
        "format version"
    );
    let rel_len = u16::from_le_bytes([bytes[56], bytes[57]]) as usize;
    let job_len = u16::from_le_bytes([bytes[52], bytes[53]]) as usize;
    let path_len = u16::from_le_bytes([bytes[54], bytes[55]]) as usize;
    let op = &bytes[64 + job_len + path_len + rel_len..][..32];
    assert_eq!(op[0], 6, "tag: rename from");
    assert_eq!(&op[1..4], &[0, 0, 0]);
    let u64_at = |o: usize| u64::from_le_bytes(op[o..o + 8].try_into().unwrap());
    assert_eq!(
        u32::from_le_bytes(op[4..8].try_into().unwrap()),
        paralog_checksum::crc32c(b"run/out.h5.tmp"),
        "CRC-32C of the source's relative path"
    );
    assert_eq!(
        (u64_at(8), u64_at(16)),
        (5, 1),
        "the source's generation and epoch"
    );
    assert_eq!(
        format!("f-{:016x}", u64_at(24)),
        paralog_log::layout::file_dir_name(b"run/out.h5.tmp"),
        "the source's file directory hash"
    );
    // The same operations under version 2 are not a manifest any build
    // wrote: refused, naming the operation's offset.
    for m in [manifest_rename_from(), manifest_renamed_to()] {
        let v2 = m.encode_version(2);
        let err = Manifest::decode_version(&v2, Path::new("m")).unwrap_err();
        assert!(
            err.to_string().contains("unknown operation tag"),
            "version 2 with a rename: {err}"
        );
    }
    let mut m = manifest_mode();
    assert!(Manifest::decode_version(&m.encode_version(2), Path::new("m")).is_err());
    m.ops = vec![Op::Mode(0o10000)];
    assert!(
        Manifest::decode_version(&m.encode(), Path::new("m")).is_err(),
        "a mode wider than the permission bits"
    );
    // A rename naming epoch 0 of its target is refused (only a source may
    // be 0:0, its drained file).
    let mut m = manifest_renamed_to();
    m.ops = vec![Op::RenamedTo(RenameRef::new(b"x", EpochId::new(0, 0)))];
    assert!(Manifest::decode_version(&m.encode(), Path::new("m")).is_err());
    let mut m = manifest_rename_from();
    m.ops = vec![Op::RenameFrom(RenameRef::new(b"x", EpochId::new(0, 0)))];
    assert!(Manifest::decode_version(&m.encode(), Path::new("m")).is_ok());
}

#[test]
fn a_rename_in_the_logical_file() {
    let p = PathBuf::from("/x/e0000000001.manifest");
    let mut lf = LogicalFile::default();
    let mut write = manifest();
    write.ops = vec![Op::Extent(Extent {
        file_off: 0,
        len: 10,
        log_pos: DATA_HEADER_LEN,
        crc: 0,
    })];
    lf.apply_epoch(EpochId::new(1, 1), &[(write, p.clone())])
        .unwrap();
    let m = manifest_rename_from();
    lf.apply_epoch(EpochId::new(2, 1), &[(m.clone(), p.clone())])
        .unwrap();
    // What the file held before is gone; the source's content is the base.
    assert_eq!(lf.data_bytes(), 0);
    assert_eq!(
        lf.from,
        Some((
            EpochId::new(2, 1),
            match m.ops[0] {
                Op::RenameFrom(r) => r,
                _ => unreachable!(),
            }
        ))
    );
    assert_eq!(lf.size.base_cut, None);
    assert_eq!(lf.size.final_size(1234), 1234, "as long as the source");
    assert!(!lf.deleted);
    let gone = manifest_renamed_to();
    lf.apply_epoch(EpochId::new(3, 1), &[(gone, p)]).unwrap();
    assert!(lf.deleted && lf.from.is_none() && lf.moved_to.is_some());
}
