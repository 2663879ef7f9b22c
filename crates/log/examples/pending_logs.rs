//! Node-local logs for `bench/rounds.py` (make bench-rounds): simulated
//! node NODE of NODES holds rank NODE of FILES shared files, each opened
//! OPENS times, each open with one epoch that this rank committed locally
//! (64 bytes, its own commit record) in a communicator of NODES + 1 ranks.
//! Rank NODES never commits, so no epoch is ever globally committed and
//! every one stays pending: the servers ship every manifest in every round,
//! which is what the benchmark measures, and drain nothing.
//!
//! Usage: pending_logs ROOT JOB NODE NODES FILES OPENS [FIRST]
//! (FIRST: the number of the first file, 0 by default: more files later)

use std::path::PathBuf;

use paralog_log::format::FileIdent;
use paralog_log::writer::{RankLog, WriterConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() != 6 && a.len() != 7 {
        return Err("usage: pending_logs ROOT JOB NODE NODES FILES OPENS [FIRST]".into());
    }
    let first: u64 = a.get(6).map_or(Ok(0), |s| s.parse())?;
    let root = PathBuf::from(&a[0]);
    let job = a[1].clone();
    let [node, nodes, files, opens] = [&a[2], &a[3], &a[4], &a[5]].map(|s| s.parse::<u64>());
    let (node, nodes, files, opens) = (node?, nodes?, files?, opens?);
    let data = [node as u8; 64];
    for f in first..first + files {
        for gen in 1..=opens {
            let ident = FileIdent {
                job: job.clone(),
                path: format!("/bench-rounds/prefix/f{f:06}").into_bytes(),
                rel: format!("f{f:06}").into_bytes(),
                gen,
            };
            let mut log = RankLog::create(
                &root,
                ident,
                node as u32,
                nodes as u32 + 1,
                WriterConfig::default(),
            )?;
            log.write_at(node * 64, &data)?;
            log.commit_local()?;
        }
    }
    Ok(())
}
