//! CPU time of the log's write path (`RankLog::write_at` of 128 MiB in
//! writes of one size, then `commit_local`) into a tmpfs directory, the
//! best of several runs: the kernel's copy into the page cache and the
//! log's own passes over the bytes (copy into the coalescing buffer,
//! checksum). Unlike elapsed time, a thread's CPU time is barely changed
//! by other work on the machine, so two builds can be compared on a
//! loaded machine (docs/benchmarks.md §1).
//!
//! ```text
//! cargo bench -p paralog-log --bench write_cpu
//! ```
//!
//! `PARALOG_BENCH_TMPFS` (default `/dev/shm`): where the logs go;
//! `PARALOG_BENCH_RUNS` (default 7): runs per size.

use std::path::Path;
use std::time::Duration;

use paralog_log::{FileIdent, RankLog, WriterConfig};

mod common;
use common::thread_cpu;

const MIB: usize = 1 << 20;
const TOTAL: usize = 128 * MIB;
const SIZES: [usize; 4] = [4 << 10, 64 << 10, MIB, 16 * MIB];

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the arguments.
    let dir = std::env::var("PARALOG_BENCH_TMPFS").unwrap_or_else(|_| "/dev/shm".into());
    let runs: usize = std::env::var("PARALOG_BENCH_RUNS")
        .ok()
        .map(|v| v.parse().expect("PARALOG_BENCH_RUNS: a number"))
        .unwrap_or(7)
        .max(1);
    let root = Path::new(&dir).join(format!("paralog-write-cpu-{}", std::process::id()));
    std::fs::create_dir(&root).unwrap_or_else(|e| panic!("create {}: {e}", root.display()));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let src: Vec<u8> = (0..16 * MIB)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    println!(
        "# write path CPU time, {} MiB per size into {dir}, best of {runs}",
        TOTAL / MIB
    );
    println!();
    println!("| write | CPU ms | GB/s of CPU |");
    println!("|---:|---:|---:|");
    let mut job = 0;
    for size in SIZES {
        let mut best = Duration::MAX;
        for _ in 0..runs {
            job += 1;
            let ident = FileIdent {
                job: format!("job{job}"),
                path: b"/bench/out.dat".to_vec(),
                rel: b"out.dat".to_vec(),
                gen: 1,
            };
            let mut log = RankLog::create(&root, ident, 0, 1, WriterConfig::default())
                .expect("create rank log");
            let t = thread_cpu();
            for i in 0..TOTAL / size {
                let at = (i * size) % src.len();
                log.write_at((i * size) as u64, &src[at..at + size])
                    .expect("write_at");
            }
            log.commit_local().expect("commit_local");
            best = best.min(thread_cpu() - t);
            drop(log);
            std::fs::remove_dir_all(root.join(format!("job{job}"))).expect("remove log");
        }
        let name = if size >= MIB {
            format!("{} MiB", size / MIB)
        } else {
            format!("{} KiB", size >> 10)
        };
        println!(
            "| {name} | {:.1} | {:.1} |",
            best.as_secs_f64() * 1e3,
            TOTAL as f64 / best.as_secs_f64() / 1e9
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
