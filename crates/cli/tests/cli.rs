//! `paralog inspect` and `paralog materialize` on a real log.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use paralog_log::{FileIdent, RankLog, WriterConfig};

fn paralog(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_paralog"))
        .args(args)
        .env_remove("PARALOG_LOCAL")
        .output()
        .unwrap()
}

/// Two ranks, two committed epochs (second overwrites the middle), one
/// epoch committed by rank 0 only.
fn build(root: &Path) {
    let ident = FileIdent {
        job: "demo".into(),
        path: b"/pfs/run/out.dat".to_vec(),
        rel: b"run/out.dat".to_vec(),
        gen: 1,
    };
    let mut logs: Vec<RankLog> = (0..2)
        .map(|r| RankLog::create(root, ident.clone(), r, 2, WriterConfig::default()).unwrap())
        .collect();
    logs[0].write_at(0, &[b'a'; 100]).unwrap();
    logs[1].write_at(100, &[b'b'; 100]).unwrap();
    for l in logs.iter_mut() {
        l.commit_local().unwrap();
    }
    for l in logs.iter_mut() {
        l.complete_epoch().unwrap();
    }
    logs[1].write_at(50, &[b'c'; 100]).unwrap();
    for l in logs.iter_mut() {
        l.commit_local().unwrap();
    }
    for l in logs.iter_mut() {
        l.complete_epoch().unwrap();
    }
    logs[0].write_at(0, &[b'z'; 10]).unwrap();
    logs[0].commit_local().unwrap();
}

/// The node-local root `dir/local` holding the log of `build`.
fn built_root(dir: &Path) -> PathBuf {
    let root = dir.join("local");
    std::fs::create_dir(&root).unwrap();
    build(&root);
    root
}

/// `paralog materialize --local LOCAL [--epoch E] FILE OUT`.
fn materialize(local: &str, epoch: Option<&str>, file: &str, out: &str) -> std::process::Output {
    let mut args = vec!["materialize", "--local", local];
    if let Some(e) = epoch {
        args.extend(["--epoch", e]);
    }
    args.extend([file, out]);
    paralog(&args)
}

#[test]
fn materialize_default_and_each_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let root = built_root(dir.path());
    let out = dir.path().join("out");
    let local = root.to_str().unwrap();
    let o = out.to_str().unwrap();

    let r = materialize(local, None, "/pfs/run/out.dat", o);
    common::assert_ok(&r);
    let mut expected = vec![b'a'; 50];
    expected.extend([b'c'; 100]);
    expected.extend([b'b'; 50]);
    assert_eq!(std::fs::read(&out).unwrap(), expected);

    // By relative path, at epoch 1.
    let r = materialize(local, Some("1"), "run/out.dat", o);
    common::assert_ok(&r);
    let mut expected = vec![b'a'; 100];
    expected.extend([b'b'; 100]);
    assert_eq!(std::fs::read(&out).unwrap(), expected);

    // Epoch 3 is not globally committed: refused, with the committed list.
    let r = materialize(local, Some("3"), "/pfs/run/out.dat", o);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("not globally committed") && err.contains("1:1, 1:2"),
        "{err}"
    );

    let r = materialize(local, None, "/pfs/other", o);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("no captured file /pfs/other"));
}

#[test]
fn inspect_human_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let root = built_root(dir.path());
    let local = root.to_str().unwrap();

    let r = paralog(&["inspect", "--local", local]);
    assert!(r.status.success());
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        text.contains("file /pfs/run/out.dat  -> remote run/out.dat  (last committed epoch: 1:2; drained up to: nothing)"),
        "{text}"
    );
    assert!(
        text.contains("open 1 epoch 3: not committed here (no manifest from rank 1)"),
        "{text}"
    );
    assert!(text.contains("[50, 150) len 100"), "{text}");

    let r = paralog(&["inspect", "--local", local, "--json"]);
    assert!(r.status.success());
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let epochs = v["jobs"][0]["files"][0]["epochs"].as_array().unwrap();
    assert_eq!(epochs.len(), 3);
    assert_eq!(epochs[0]["committed"], true);
    assert_eq!(epochs[2]["committed"], false);
    assert_eq!(epochs[1]["ranks"][1]["ops"][0]["extent"]["offset"], 50);

    let r = paralog(&["inspect", "--local", local, "--job", "nope"]);
    assert!(!r.status.success());
}

#[test]
fn missing_local_dir_is_a_clear_error() {
    let r = paralog(&["inspect"]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("give --local DIR or set PARALOG_LOCAL"));
}

#[test]
fn check_symbols_classifies_what_a_program_calls() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("p.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <sys/mman.h>\n#include <unistd.h>\n#include <sys/statfs.h>\n#include <sys/sendfile.h>\n#include <fcntl.h>\n\
         extern int io_uring_setup(unsigned, void *) __attribute__((weak));\n\
         int main(int c, char **v) { FILE *f = fopen(v[0], \"r\"); struct statfs s; statfs(v[0], &s); posix_fadvise(0, 0, 0, 0);\n\
         void *m = mmap(0, 1, PROT_READ, MAP_PRIVATE, 0, 0); sendfile(c, 0, 0, 1); if (io_uring_setup) io_uring_setup(1, 0);\n\
         return pwrite(c, m, 1, 0) + (f != 0); }\n",
    )
    .unwrap();
    let bin = dir.path().join("p");
    let cc = Command::new("cc")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    common::assert_ok(&cc);
    let r = paralog(&["check-symbols", "--json", bin.to_str().unwrap()]);
    common::assert_ok(&r);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let status = |sym: &str| {
        v["symbols"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["symbol"] == sym && s["called_by"].as_array().unwrap().iter().any(|b| b == "p")
            })
            .map(|s| s["status"].as_str().unwrap().to_owned())
    };
    assert_eq!(status("pwrite").as_deref(), Some("captured"));
    assert_eq!(status("mmap").as_deref(), Some("captured"));
    assert_eq!(status("fopen").as_deref(), Some("captured"));
    assert_eq!(status("sendfile").as_deref(), Some("captured"));
    assert_eq!(status("io_uring_setup").as_deref(), Some("NOT HANDLED"));
    assert_eq!(status("statfs").as_deref(), Some("captured"));
    assert_eq!(status("posix_fadvise").as_deref(), Some("passes through"));
    assert_eq!(status("printf"), None, "not an I/O entry point of a file");
}

/// `env` takes the same `--mpi` values as `run`: `none` preloads capture
/// alone (a plain POSIX program), an MPI adds its shim first.
#[test]
fn env_and_run_agree_on_mpi_none() {
    let d = tempfile::tempdir().unwrap();
    let prefix = d.path().join("out");
    std::fs::create_dir(&prefix).unwrap();
    let local = d.path().join("local");
    let env = |mpi: &str| {
        let out = paralog(&[
            "env",
            "--mpi",
            mpi,
            "--prefix",
            prefix.to_str().unwrap(),
            "--local",
            local.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "env --mpi {mpi}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        text.lines()
            .find(|l| l.starts_with("export LD_PRELOAD="))
            .unwrap_or_else(|| panic!("no LD_PRELOAD in {text}"))
            .to_owned()
    };
    let none = env("none");
    assert!(
        none.contains("libparalog_capture.so") && !none.contains("libparalog_mpi_"),
        "{none}"
    );
    let mpich = env("mpich");
    assert!(
        mpich.contains("libparalog_mpi_mpich.so") && mpich.contains("libparalog_capture.so"),
        "{mpich}"
    );
}
