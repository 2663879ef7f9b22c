//! The log writer against raw `pwrite`, side by side in one process, on a
//! tmpfs directory and on a disk directory (docs/benchmarks.md).
//!
//! ```text
//! cargo bench -p paralog-log --bench log_vs_raw
//! ```
//!
//! Environment:
//! - `PARALOG_BENCH_TMPFS` (default `/dev/shm`), `PARALOG_BENCH_DISK`
//!   (default `/var/tmp`, else `/tmp`): where the files go; an empty value
//!   skips that file system.
//! - `PARALOG_BENCH_MB` (default 256, quick 32): bytes per throughput case.
//! - `PARALOG_BENCH_RUNS` (default 5, quick 3): timed runs per case; the
//!   median is reported, raw and log alternate which goes first.
//! - `PARALOG_BENCH_QUICK=1`: small sizes and few runs, a smoke test.
//! - `PARALOG_BENCH_SMALL_WRITE` (default: the writer's): writes from this
//!   many bytes up go straight to the log, smaller ones through the
//!   coalescing buffer.
//!
//! Targets are printed as PASS/MISS for information; timing never makes the
//! program fail (only an I/O error does).

use std::cell::RefCell;
use std::fs::{self, File, OpenOptions};
use std::hint::black_box;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use paralog_log::{FileIdent, RankLog, WriterConfig};

#[path = "../common/mod.rs"]
mod common;
mod runs;
mod stats;

use common::thread_cpu;
use runs::*;
use stats::*;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
/// Source of the written bytes: 16 MiB of pseudo-random data, sliced.
const SRC_LEN: usize = 16 * MIB;
const SIZES: [usize; 4] = [4 * KIB, 64 * KIB, MIB, 16 * MIB];

struct Cfg {
    fs: Vec<(&'static str, PathBuf)>,
    total: usize,
    runs: usize,
    quick: bool,
    verbose: bool,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn cfg() -> Cfg {
    let quick = env("PARALOG_BENCH_QUICK").is_some_and(|v| !v.is_empty() && v != "0");
    let mb: usize = env("PARALOG_BENCH_MB")
        .map(|v| v.parse().expect("PARALOG_BENCH_MB: a number of MiB"))
        .unwrap_or(if quick { 32 } else { 256 });
    // Every case must hold at least one 16 MiB write.
    let mb = mb.max(16).next_multiple_of(16);
    let runs: usize = env("PARALOG_BENCH_RUNS")
        .map(|v| v.parse().expect("PARALOG_BENCH_RUNS: a number"))
        .unwrap_or(if quick { 3 } else { 5 })
        .max(1);
    let tmpfs = env("PARALOG_BENCH_TMPFS").unwrap_or_else(|| "/dev/shm".into());
    let disk = env("PARALOG_BENCH_DISK").unwrap_or_else(|| {
        if Path::new("/var/tmp").is_dir() {
            "/var/tmp".into()
        } else {
            "/tmp".into()
        }
    });
    let mut fs = Vec::new();
    if !tmpfs.is_empty() {
        fs.push(("tmpfs", PathBuf::from(tmpfs)));
    }
    if !disk.is_empty() {
        fs.push(("disk", PathBuf::from(disk)));
    }
    Cfg {
        fs,
        total: mb * MIB,
        runs,
        quick,
        verbose: env("PARALOG_BENCH_VERBOSE").is_some_and(|v| !v.is_empty() && v != "0"),
    }
}

// ---------------------------------------------------------------- helpers

/// The writer's tuning: the default, or `PARALOG_BENCH_SMALL_WRITE` bytes
/// as the size from which writes skip the coalescing buffer (to choose
/// that threshold by measurement).
fn writer_config() -> WriterConfig {
    let mut cfg = WriterConfig::default();
    if let Some(v) = env("PARALOG_BENCH_SMALL_WRITE").filter(|v| !v.is_empty()) {
        cfg.small_write = v
            .parse()
            .expect("PARALOG_BENCH_SMALL_WRITE: a number of bytes");
    }
    cfg
}

fn source() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut v = Vec::with_capacity(SRC_LEN);
    while v.len() < SRC_LEN {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v
}

/// The bytes of write number `i` of `size` bytes.
fn chunk(src: &[u8], i: usize, size: usize) -> &[u8] {
    let at = (i * size) % SRC_LEN;
    &src[at..at + size]
}

/// File offsets of `n` writes of `size`: in order, or permuted so that no
/// write starts where the previous one ended (a seek before every write).
fn offsets(n: usize, size: usize, discontiguous: bool) -> Vec<u64> {
    if !discontiguous || n < 3 {
        return (0..n).map(|i| (i * size) as u64).collect();
    }
    // i -> i * p mod n with p odd (n is a power of two, so this is a
    // permutation) and far from 1 and n - 1 (never adjacent).
    assert!(n.is_power_of_two());
    let p = ((n as f64 * 0.618) as usize) | 1;
    (0..n).map(|i| ((i * p) % n * size) as u64).collect()
}

fn syncfs(dir: &Path) {
    // After deleting the previous run's files: their journal work must not be
    // charged to the next timed run.
    if let Ok(f) = File::open(dir) {
        unsafe {
            libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f));
        }
    }
}

fn fs_type(dir: &Path) -> String {
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).expect("path without NUL");
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return "?".into();
    }
    match s.f_type as u64 {
        0x0102_1994 => "tmpfs".into(),
        0xef53 => "ext2/3/4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683e => "btrfs".into(),
        0x794c_7630 => "overlayfs".into(),
        t => format!("0x{t:x}"),
    }
}

/// Other work on the machine skews every number: say how busy it was.
fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

struct Append {
    fs: &'static str,
    size: usize,
    raw: Vec<Duration>,
    log: Vec<Duration>,
    /// CPU time of the same runs (user + system, this thread): less
    /// disturbed than elapsed time by other work on the machine; on tmpfs
    /// it is nearly all of a run, on the disk it leaves out waiting for
    /// the device.
    raw_cpu: Vec<Duration>,
    log_cpu: Vec<Duration>,
}

/// `f`'s result (an elapsed time) and the CPU time it took.
fn with_cpu(f: impl FnOnce() -> Duration) -> (Duration, Duration) {
    let c = thread_cpu();
    let d = f();
    (d, thread_cpu() - c)
}

fn bench_append(c: &Cfg, fs_name: &'static str, s: &RefCell<Scratch>, src: &[u8]) -> Vec<Append> {
    let mut out = Vec::new();
    for &size in &SIZES {
        let offs = offsets(c.total / size, size, false);
        let mut t = alternate(
            c.runs,
            &mut [
                &mut || with_cpu(|| raw_run(&mut s.borrow_mut(), src, size, &offs)),
                &mut || with_cpu(|| log_run(&mut s.borrow_mut(), src, size, &offs)),
            ],
        );
        let (log, log_cpu): (Vec<_>, Vec<_>) = t.pop().expect("log").into_iter().unzip();
        let (raw, raw_cpu): (Vec<_>, Vec<_>) = t.pop().expect("raw").into_iter().unzip();
        if c.verbose {
            eprintln!(
                "# {fs_name} append {}: raw {} | log {}",
                size_name(size),
                show(&raw),
                show(&log)
            );
        }
        out.push(Append {
            fs: fs_name,
            size,
            raw,
            log,
            raw_cpu,
            log_cpu,
        });
    }
    out
}

struct Discontig {
    fs: &'static str,
    raw_app: Vec<Duration>,
    raw_dis: Vec<Duration>,
    log_app: Vec<Duration>,
    log_dis: Vec<Duration>,
}

fn bench_discontig(c: &Cfg, fs_name: &'static str, s: &RefCell<Scratch>, src: &[u8]) -> Discontig {
    let size = 64 * KIB;
    let n = c.total / size;
    let app = offsets(n, size, false);
    let dis = offsets(n, size, true);
    let mut t = alternate(
        c.runs,
        &mut [
            &mut || raw_run(&mut s.borrow_mut(), src, size, &app),
            &mut || raw_run(&mut s.borrow_mut(), src, size, &dis),
            &mut || log_run(&mut s.borrow_mut(), src, size, &app),
            &mut || log_run(&mut s.borrow_mut(), src, size, &dis),
        ],
    );
    let log_dis = t.pop().expect("4");
    let log_app = t.pop().expect("3");
    let raw_dis = t.pop().expect("2");
    let raw_app = t.pop().expect("1");
    if c.verbose {
        eprintln!(
            "# {fs_name} 64 KiB: raw app {} | raw dis {} | log app {} | log dis {}",
            show(&raw_app),
            show(&raw_dis),
            show(&log_app),
            show(&log_dis)
        );
    }
    Discontig {
        fs: fs_name,
        raw_app,
        raw_dis,
        log_app,
        log_dis,
    }
}

struct Epochs {
    fs: &'static str,
    /// 0: empty epochs (raw side: a 4 KiB pwrite + fdatasync, for scale).
    epoch: usize,
    count: usize,
    raw: Vec<EpochTimes>,
    log: Vec<EpochTimes>,
}

fn bench_epochs(c: &Cfg, fs_name: &'static str, s: &RefCell<Scratch>, src: &[u8]) -> Vec<Epochs> {
    let mut out = Vec::new();
    for epoch in [MIB, 16 * MIB, 0] {
        let count = match epoch {
            0 => 64,
            e => (c.total / e).clamp(4, 64),
        };
        let raw_epoch = if epoch == 0 { 4 * KIB } else { epoch };
        let mut t = alternate(
            c.runs,
            &mut [
                &mut || raw_epochs(&mut s.borrow_mut(), src, raw_epoch, count),
                &mut || log_epochs(&mut s.borrow_mut(), src, epoch, count),
            ],
        );
        let log = t.pop().expect("log");
        let raw = t.pop().expect("raw");
        out.push(Epochs {
            fs: fs_name,
            epoch,
            count,
            raw,
            log,
        });
    }
    out
}

/// CPU-only cost the log adds to each case: for writes below
/// `small_write`, the checksum and then the copy into the coalescing buffer
/// (`crc32c_extend`, continued over each run as the writer does); for
/// larger ones, which go straight to the log, the CRC-32C of every write
/// (continued from the previous one, as an append's is).
struct Components {
    size: usize,
    /// true: copy + checksum; false: checksum only.
    copied: bool,
    cost: Duration,
}

fn bench_components(c: &Cfg, src: &[u8]) -> Vec<Components> {
    let cfg = writer_config();
    let mut out = Vec::new();
    for &size in &SIZES {
        let n = c.total / size;
        let copied = size < cfg.small_write && size <= cfg.coalesce_bytes;
        let mut buf: Vec<u8> = Vec::with_capacity(cfg.coalesce_bytes);
        let mut one = || {
            let mut crc = 0u32;
            let t = Instant::now();
            for i in 0..n {
                let data = black_box(chunk(src, i, size));
                if !copied {
                    crc = paralog_checksum::crc32c_append(crc, data);
                    continue;
                }
                if buf.len() + size > cfg.coalesce_bytes {
                    black_box(&buf);
                    buf.clear();
                }
                crc = paralog_checksum::crc32c_extend(crc, &mut buf, data);
            }
            black_box(crc);
            buf.clear();
            t.elapsed()
        };
        let cost = median(&(0..c.runs).map(|_| one()).collect::<Vec<_>>());
        out.push(Components { size, copied, cost });
    }
    out
}

// ---------------------------------------------------------------- main

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let c = cfg();
    let src = source();
    let started = Instant::now();
    println!(
        "# paralog log_vs_raw: {} MiB per throughput case, {} runs (median){}",
        c.total / MIB,
        c.runs,
        if c.quick { ", QUICK" } else { "" }
    );
    for (name, dir) in &c.fs {
        println!("# {name}: {} ({})", dir.display(), fs_type(dir));
    }
    println!("# load average at start: {}", loadavg());

    let mut appends = Vec::new();
    let mut discontig = Vec::new();
    let mut epochs = Vec::new();
    for (name, dir) in &c.fs {
        let mut s = Scratch::new(dir);
        // Warm-up: one untimed pair.
        let offs = offsets(c.total / MIB, MIB, false);
        raw_run(&mut s, &src, MIB, &offs);
        log_run(&mut s, &src, MIB, &offs);
        let s = RefCell::new(s);
        let t = Instant::now();
        appends.extend(bench_append(&c, name, &s, &src));
        discontig.push(bench_discontig(&c, name, &s, &src));
        epochs.extend(bench_epochs(&c, name, &s, &src));
        eprintln!("# {name} done in {:.1} s", t.elapsed().as_secs_f64());
    }
    let comps = bench_components(&c, &src);

    println!();
    println!("## 1. Append throughput ({} MiB per case)", c.total / MIB);
    println!();
    println!("raw = open + pwrite loop + fdatasync + close; log = write_at loop + commit_local.");
    println!();
    println!(
        "CPU log/raw: the same ratio by CPU time (median), less disturbed by a loaded machine."
    );
    println!();
    println!("| fs | write | raw MiB/s | log MiB/s | log/raw | best-run log/raw | CPU log/raw | spread raw/log | target | |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|---|");
    for a in &appends {
        let raw = median(&a.raw);
        let log = median(&a.log);
        let ratio = raw.as_secs_f64() / log.as_secs_f64();
        let target = if a.size >= MIB {
            Some(0.95)
        } else if a.size == 4 * KIB {
            Some(1.0)
        } else {
            None
        };
        let best = min(&a.raw).as_secs_f64() / min(&a.log).as_secs_f64();
        let cpu = median(&a.raw_cpu).as_secs_f64() / median(&a.log_cpu).as_secs_f64();
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.3} | {:.3} | {:.3} | {:.0}% / {:.0}% | {} | {} |",
            a.fs,
            size_name(a.size),
            mibs(c.total, raw),
            mibs(c.total, log),
            ratio,
            best,
            cpu,
            spread(&a.raw),
            spread(&a.log),
            target.map_or("-".into(), |t| format!(">= {t:.2}")),
            target.map_or("", |t| verdict(ratio >= t)),
        );
    }

    println!();
    println!(
        "## 2. Discontiguous vs append, 64 KiB writes ({} MiB)",
        c.total / MIB
    );
    println!();
    println!("Discontiguous: write i goes to block (i * p) mod n, p odd ~ 0.618 n: a seek before every write.");
    println!();
    println!("| fs | path | append MiB/s | discontiguous MiB/s | disc/append time | best-run ratio | target | |");
    println!("|---|---|---:|---:|---:|---:|---|---|");
    for d in &discontig {
        for (path, app, dis, target) in [
            ("log", &d.log_app, &d.log_dis, true),
            ("raw", &d.raw_app, &d.raw_dis, false),
        ] {
            let (a, b) = (median(app), median(dis));
            let ratio = b.as_secs_f64() / a.as_secs_f64();
            let best = min(dis).as_secs_f64() / min(app).as_secs_f64();
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.3} | {:.3} | {} | {} |",
                d.fs,
                path,
                mibs(c.total, a),
                mibs(c.total, b),
                ratio,
                best,
                if target { "<= 1.10" } else { "(reference)" },
                if target { verdict(ratio <= 1.10) } else { "" },
            );
        }
    }

    println!();
    println!("## 3. Epoch commit cost (per epoch, 1 MiB writes)");
    println!();
    println!(
        "raw = pwrite + fdatasync of one file; log = write_at + commit_local + complete_epoch."
    );
    println!("Empty epoch: log commit_local + complete_epoch with no writes; raw column: a 4 KiB pwrite + fdatasync for scale.");
    println!();
    println!("| fs | epoch | epochs | raw ms | log ms | log/raw | raw fdatasync ms | log commit ms | commit - fdatasync ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for e in &epochs {
        let per = |v: &[EpochTimes], f: fn(&EpochTimes) -> Duration| {
            median(&v.iter().map(f).collect::<Vec<_>>()) / e.count as u32
        };
        let raw = per(&e.raw, |t| t.total);
        let log = per(&e.log, |t| t.total);
        let raw_sync = per(&e.raw, |t| t.sync);
        let log_sync = per(&e.log, |t| t.sync);
        println!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.2} | {:.3} | {:.3} | {:+.3} |",
            e.fs,
            if e.epoch == 0 {
                "empty (raw: 4 KiB)".into()
            } else {
                size_name(e.epoch)
            },
            e.count,
            ms(raw),
            ms(log),
            log.as_secs_f64() / raw.as_secs_f64(),
            ms(raw_sync),
            ms(log_sync),
            ms(log_sync) - ms(raw_sync),
        );
    }

    println!();
    println!(
        "## 4. CPU cost of the log per throughput case ({} MiB, no I/O)",
        c.total / MIB
    );
    println!();
    println!("copy+crc = the CRC of each write, then its copy into the coalescing buffer (writes < small_write);");
    println!("crc = CRC-32C of every write (larger writes go straight to the log). Share = of the log's median time.");
    println!();
    let fs_names: Vec<&str> = c.fs.iter().map(|(n, _)| *n).collect();
    print!("| write | writes | what | ms |");
    for n in &fs_names {
        print!(" {n} log ms | {n} raw ms | share of {n} log |");
    }
    println!();
    print!("|---:|---:|---|---:|");
    for _ in &fs_names {
        print!("---:|---:|---:|");
    }
    println!();
    for k in &comps {
        print!(
            "| {} | {} | {} | {:.1} |",
            size_name(k.size),
            c.total / k.size,
            if k.copied { "copy+crc" } else { "crc" },
            ms(k.cost),
        );
        for n in &fs_names {
            let a = appends
                .iter()
                .find(|a| a.fs == *n && a.size == k.size)
                .expect("case");
            let log = median(&a.log);
            print!(
                " {:.1} | {:.1} | {:.0}% |",
                ms(log),
                ms(median(&a.raw)),
                100.0 * k.cost.as_secs_f64() / log.as_secs_f64()
            );
        }
        println!();
    }
    println!();
    println!(
        "# total {:.1} s; load average at end: {}",
        started.elapsed().as_secs_f64(),
        loadavg()
    );
}
