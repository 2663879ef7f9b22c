//! `paralog sets` and `paralog extract` on sets written by the aggregate
//! crate: every member back byte for byte (holes too), K in {1, 2, 4};
//! a damaged container or record refused with the file and offset, and
//! nothing left half-written; paths never leave OUT.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use paralog_aggregate::publish::SetWriter;

fn paralog() -> Command {
    Command::new(env!("CARGO_BIN_EXE_paralog"))
}

/// Bytes that differ by seed and offset (a multiplicative hash).
fn bytes(seed: u64, n: usize) -> Vec<u8> {
    (0..n as u64)
        .map(|i| ((i + 1).wrapping_mul(0x9e37_79b9) ^ seed.wrapping_mul(40503) >> 3) as u8)
        .collect()
}

/// Members of about 200 KB ±20 % (and a sparse one) in set `set`.
fn make_set(remote: &Path, set: &str, k: u32) -> Vec<(String, Vec<u8>)> {
    let mut w = SetWriter::new(remote, set.as_bytes(), k, 4096).unwrap();
    let mut files = Vec::new();
    for r in 0..6u64 {
        let n = 200_000 - 40_000 + (r as usize * 16_000);
        let data = bytes(r, n);
        let name = format!("rank-{r:05}.dat");
        w.add_member(name.as_bytes(), n as u64, 0o640, &mut &data[..])
            .unwrap();
        files.push((name, data));
    }
    let part = bytes(77, 1000);
    w.add_member_sparse(
        b"sub/sparse.dat",
        50_000,
        0o600,
        &[(20_000, 1000)],
        &mut &part[..],
    )
    .unwrap();
    let mut sparse = vec![0u8; 50_000];
    sparse[20_000..21_000].copy_from_slice(&part);
    files.push(("sub/sparse.dat".into(), sparse));
    w.publish(true).unwrap();
    files
}

/// A remote directory under `dir` holding set "s" (K = 1).
fn remote_with_set(dir: &Path) -> PathBuf {
    let remote = dir.join("remote");
    std::fs::create_dir(&remote).unwrap();
    make_set(&remote, "s", 1);
    remote
}

/// `paralog extract REMOTE SET OUT` and what it said.
fn extract(remote: &Path, set: &str, out: &Path) -> std::process::Output {
    paralog()
        .arg("extract")
        .arg(remote)
        .arg(set)
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn sets_lists_and_extract_writes_every_member() {
    for k in [1u32, 2, 4] {
        let t = tempfile::tempdir().unwrap();
        let remote = t.path().join("remote");
        std::fs::create_dir(&remote).unwrap();
        let files = make_set(&remote, "ckpt/step-000100", k);
        make_set(&remote, "ckpt/step-000200", k);

        let out = paralog()
            .arg("sets")
            .arg(&remote)
            .arg("--json")
            .output()
            .unwrap();
        common::assert_ok(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let rows = v.as_array().unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["set"], "ckpt/step-000100");
        assert_eq!(rows[0]["members"], 7);
        assert_eq!(rows[0]["containers"], k);
        assert_eq!(rows[0]["complete"], true);
        let total: usize = files.iter().map(|f| f.1.len()).sum();
        assert_eq!(rows[0]["bytes"], total as u64);
        let text = paralog()
            .arg("sets")
            .arg(format!("file://{}", remote.display()))
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&text.stdout).contains("ckpt/step-000200"));

        let dest = t.path().join("out");
        let out = extract(&remote, "ckpt/step-000100", &dest);
        common::assert_ok(&out);
        for (name, data) in &files {
            let got = std::fs::read(dest.join(name)).unwrap();
            assert!(got == *data, "{name} differs (K={k})");
        }
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let md = std::fs::metadata(dest.join("rank-00001.dat")).unwrap();
        assert_eq!(md.permissions().mode() & 0o777, 0o640);
        // The sparse member stays sparse.
        let md = std::fs::metadata(dest.join("sub/sparse.dat")).unwrap();
        assert!(md.blocks() * 512 < 50_000, "{} blocks", md.blocks());

        // One member.
        let one = t.path().join("one");
        let out = paralog()
            .args(["extract", "--member", "rank-00003.dat"])
            .arg(&remote)
            .arg("ckpt/step-000100")
            .arg(&one)
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(std::fs::read_dir(&one).unwrap().count(), 1);
        assert_eq!(
            std::fs::read(one.join("rank-00003.dat")).unwrap(),
            files[3].1
        );
    }
}

#[test]
fn extract_refuses_damage_naming_file_and_offset() {
    let t = tempfile::tempdir().unwrap();
    let remote = remote_with_set(t.path());
    let dir = remote.join("s");
    let rec = paralog_aggregate::reader::read_record(&dir)
        .unwrap()
        .unwrap();
    let m = rec.member(b"rank-00002.dat").unwrap();
    let container = dir.join(String::from_utf8(rec.containers[0].name.clone()).unwrap());
    let at = m.extents[0].container_offset + 10;
    let mut c = std::fs::read(&container).unwrap();
    c[at as usize] ^= 1;
    std::fs::write(&container, &c).unwrap();
    let dest = t.path().join("out");
    let out = extract(&remote, "s", &dest);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&container.display().to_string()), "{err}");
    assert!(
        err.contains(&format!("at offset {}", m.extents[0].container_offset)),
        "{err}"
    );
    assert!(
        !dest.join("rank-00002.dat").exists(),
        "no half-written member"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    // A truncated record: `sets` lists it as damaged (exit 2), `extract` refuses.
    let recp = dir.join("set.plr");
    let b = std::fs::read(&recp).unwrap();
    std::fs::write(&recp, &b[..b.len() / 2]).unwrap();
    let out = paralog().arg("sets").arg(&remote).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("DAMAGED"));
    let out = extract(&remote, "s", &dest);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains(&recp.display().to_string()) && err.contains("at offset 16"),
        "{err}"
    );
}

#[test]
fn extract_never_leaves_out() {
    let t = tempfile::tempdir().unwrap();
    let remote = remote_with_set(t.path());
    // SET may not leave the remote.
    let out = paralog()
        .arg("extract")
        .arg(&remote)
        .arg("../x")
        .arg(t.path().join("o"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // A symbolic link planted under OUT is not followed.
    let dest = t.path().join("out");
    std::fs::create_dir(&dest).unwrap();
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dest.join("sub")).unwrap();
    let out = extract(&remote, "s", &dest);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic link"));
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // A URL that names no remote: said plainly (S3 is tested against
    // MinIO by tests/aggregate/s3.py).
    let out = paralog().args(["sets", "ftp://bucket/x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ftp://"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--agg-mode` / PARALOG_AGG_MODE: a misspelt mode, or a mode without a
/// rule, is refused with the option's name before anything runs (a knob
/// silently ignored is how ADIOS2's aggregation misled its users).
#[test]
fn agg_mode_is_checked() {
    let t = tempfile::tempdir().unwrap();
    let local = t.path().join("local");
    std::fs::create_dir(&local).unwrap();
    std::fs::create_dir(t.path().join("remote")).unwrap();
    let recover = |extra: &[&str], env: Option<&str>| {
        let mut c = paralog();
        c.arg("recover")
            .arg("--local")
            .arg(&local)
            .arg("--remote")
            .arg(t.path().join("remote"))
            .args(extra)
            .env_remove("PARALOG_AGG_MODE")
            .env_remove("PARALOG_AGGREGATE");
        if let Some(v) = env {
            c.env("PARALOG_AGG_MODE", v);
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let rule = ["--aggregate", "ckpt/{set}/rank-*.dat"];
    let (code, err) = recover(&[&rule[..], &["--agg-mode", "leaders"]].concat(), None);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("--agg-mode") && err.contains("leader, own"),
        "{err}"
    );
    let (code, err) = recover(&rule, Some("mine"));
    assert_ne!(code, Some(0));
    assert!(err.contains("PARALOG_AGG_MODE=mine"), "{err}");
    let (code, err) = recover(&["--agg-mode", "own"], None);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("--agg-mode (PARALOG_AGG_MODE) needs --aggregate"),
        "{err}"
    );
    // Well spelt, with a rule: one node writes everything itself, so the
    // mode is accepted and changes nothing (nothing to recover here).
    let (code, err) = recover(&[&rule[..], &["--agg-mode", "own"]].concat(), None);
    assert_eq!(code, Some(0), "{err}");
}
