//! The incremental plan is the full plan: over random sequences of rounds
//! on several simulated servers (files appear and go, epochs are committed
//! by some or all ranks, marked, drained, opens end, a manifest is
//! damaged, a server's scan fails, a server's change does not fit and it
//! resyncs with its whole summary, the job ends), the plan the planner
//! keeps from round to round equals a plan made from scratch of the same
//! copies, every round one is made.

use super::*;
use crate::cluster::delta::{Copies, Outbox};
use crate::cluster::summary::{key_of, EpochSummary, FileSummary, GenSummary};
use crate::cluster::summary_steps::{close_last, drain_upto, Rng};
use paralog_log::{Extent, FileIdent, Op};

/// Node `n` of `nodes` holds ranks 2n and 2n+1 of every open.
fn ranks_of(n: u32) -> [u32; 2] {
    [2 * n, 2 * n + 1]
}

fn manifest(file: u64, gen: u64, rank: u32, nodes: u32, epoch: u64) -> Vec<u8> {
    Manifest {
        ident: FileIdent {
            job: "j".into(),
            path: format!("/p/f{file}").into_bytes(),
            rel: format!("f{file}").into_bytes(),
            gen,
        },
        rank,
        comm_size: 2 * nodes,
        epoch,
        data_len: 8192,
        ops: vec![Op::Extent(Extent {
            file_off: 64 * rank as u64 + epoch,
            len: 16,
            log_pos: 4096,
            crc: 0,
        })],
    }
    .encode_version(1)
}

fn file_summary(n: u32, file: u64) -> FileSummary {
    FileSummary {
        job: "j".into(),
        dir: format!("/l/n{n}/j/f-{file:04}"),
        path: format!("/p/f{file}").into_bytes(),
        rel: format!("f{file}").into_bytes(),
        ..FileSummary::default()
    }
}

fn epoch(
    n: u32,
    nodes: u32,
    file: u64,
    gen: u64,
    e: u64,
    marked: bool,
    ranks: &[u32],
) -> EpochSummary {
    EpochSummary::of_ranks(e, marked, ranks, |r| {
        let path = format!("/l/n{n}/j/f-{file:04}/g{gen:06}/r{r:07}/e{e:010}.manifest");
        (path, 0, 1, manifest(file, gen, r, nodes, e))
    })
}

fn file_no(f: &FileSummary) -> u64 {
    String::from_utf8_lossy(&f.rel)[1..].parse().unwrap()
}

/// One step of node `n`'s life.
fn evolve(s: &mut NodeSummary, n: u32, nodes: u32, r: &mut Rng) {
    for _ in 0..1 + r.next(3) {
        let pick = |s: &NodeSummary, r: &mut Rng| r.next(s.files.len().max(1) as u64) as usize;
        match r.next(10) {
            0 => {
                let f = file_summary(n, r.next(6));
                if let Err(at) = s.files.binary_search_by(|x| key_of(x).cmp(&key_of(&f))) {
                    s.files.insert(at, f);
                }
            }
            1 if !s.files.is_empty() && r.next(3) == 0 => {
                let at = pick(s, r);
                s.files.remove(at);
            }
            2 if !s.files.is_empty() => {
                // A new open (same numbers on every node: opens are shared).
                let at = pick(s, r);
                let f = &mut s.files[at];
                let gen = f.gens.last().map_or(1, |g| g.gen + r.next(2));
                if f.gens.last().is_none_or(|g| g.gen < gen) {
                    f.gens.push(GenSummary {
                        gen,
                        ranks: ranks_of(n).to_vec(),
                        ..GenSummary::default()
                    });
                }
            }
            3..=5 if !s.files.is_empty() => {
                // A new epoch, or more of one (the other rank, a mark).
                let at = pick(s, r);
                let f = &mut s.files[at];
                let no = file_no(f);
                if let Some(g) = f.gens.last_mut() {
                    let e = g.epochs.last().map_or(1, |e| e.epoch + r.next(2));
                    let [a, b] = ranks_of(n);
                    let ranks: &[u32] = if r.next(3) == 0 { &[a] } else { &[a, b] };
                    let new = epoch(n, nodes, no, g.gen, e, r.next(3) == 0, ranks);
                    match g.epochs.last_mut() {
                        Some(last) if last.epoch == e => *last = new,
                        _ => g.epochs.push(new),
                    }
                }
            }
            6 if !s.files.is_empty() => {
                // Drained up to an epoch: progress moves, the epochs up to
                // it and the opens left empty go.
                let at = pick(s, r);
                let nth = r.next(3) as usize;
                drain_upto(&mut s.files[at], nth);
            }
            7 if !s.files.is_empty() => {
                let at = pick(s, r);
                close_last(&mut s.files[at]);
            }
            8 if !s.files.is_empty() && r.next(4) == 0 => {
                // A damaged manifest (or a repaired one: flipped back).
                let at = pick(s, r);
                let m = s.files[at]
                    .gens
                    .iter_mut()
                    .flat_map(|g| g.epochs.iter_mut())
                    .flat_map(|e| e.manifests.iter_mut())
                    .next();
                if let Some(m) = m {
                    let k = m.bytes.len() / 2;
                    m.bytes[k] ^= 0x40;
                }
            }
            _ => s.finishing = r.next(8) == 0,
        }
    }
}

/// Everything the coordinator reads of a plan, to compare two plans.
fn shown(files: &[impl std::ops::Deref<Target = GlobalFile>]) -> String {
    files.iter().map(|f| format!("{:?}\n", &**f)).collect()
}

#[test]
fn the_incremental_plan_is_the_full_plan_every_round() {
    let (mut plans, mut reused) = (0, 0);
    for seed in 1..=24u64 {
        let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let nodes = 2 + (seed % 2) as u32;
        let whole_opens = seed % 3 == 0;
        let mut outs: Vec<Outbox> = (0..nodes).map(|_| Outbox::default()).collect();
        let mut sums: Vec<NodeSummary> = (0..nodes)
            .map(|n| NodeSummary {
                node: format!("n{n}"),
                ..NodeSummary::default()
            })
            .collect();
        let mut copies = Copies::new(nodes as usize);
        let mut planner = Planner::default();
        for round in 1..=150u64 {
            let mut msgs = Vec::new();
            for n in 0..nodes as usize {
                // Most rounds change little: a node changes one round in three.
                if r.next(3) == 0 {
                    evolve(&mut sums[n], n as u32, nodes, &mut r);
                }
                let mut cur = sums[n].clone();
                if r.next(40) == 0 {
                    cur = NodeSummary {
                        scan_failed: true,
                        files: Vec::new(),
                        ..cur
                    };
                }
                let mut m = outs[n].message(&cur, round);
                if r.next(50) == 0 && !m.is_empty() {
                    // A change that does not fit its copy: claimed from
                    // another base round, it is refused by every server.
                    let mut wrong = Outbox::default();
                    let _ = wrong.message(&NodeSummary::default(), round - 1);
                    wrong.sent(NodeSummary::default(), Some(round - 1));
                    m = wrong.message(&cur, round);
                }
                msgs.push((cur, m));
            }
            for (n, (_, m)) in msgs.iter().enumerate() {
                let _ = copies.apply(n, m).unwrap();
            }
            for (n, (cur, _)) in msgs.into_iter().enumerate() {
                let held = copies.round(n);
                outs[n].sent(cur, held);
            }
            if !copies.usable() {
                continue;
            }
            let dirty = copies.take_dirty();
            let finishing = copies.summaries.iter().any(|s| s.finishing);
            let incremental = planner.plan(&copies.summaries, dirty, whole_opens, finishing);
            let full = plan::plan(&copies.summaries, whole_opens, finishing);
            assert_eq!(
                shown(&incremental),
                shown(&full.iter().collect::<Vec<_>>()),
                "seed {seed} round {round}"
            );
            plans += 1;
        }
        reused += planner.reused;
    }
    // The plans were made, and mostly from what was kept.
    assert!(plans > 24 * 100, "{plans} plans");
    assert!(reused > 0);
}

#[test]
fn an_idle_round_decodes_nothing_and_a_new_epoch_decodes_its_manifests() {
    let mut s: Vec<NodeSummary> = (0..2)
        .map(|n| NodeSummary {
            node: format!("n{n}"),
            files: (0..5).map(|f| file_summary(n, f)).collect(),
            ..NodeSummary::default()
        })
        .collect();
    for (n, node) in s.iter_mut().enumerate() {
        for f in &mut node.files {
            let no = file_no(f);
            f.gens.push(GenSummary {
                gen: 1,
                ranks: ranks_of(n as u32).to_vec(),
                // Rank 0 alone: never complete, every epoch stays pending.
                epochs: (1..=20)
                    .map(|e| epoch(n as u32, 2, no, 1, e, false, &ranks_of(n as u32)[..1]))
                    .collect(),
                ..GenSummary::default()
            });
        }
    }
    let mut outs = [Outbox::default(), Outbox::default()];
    let mut copies = Copies::new(2);
    let mut planner = Planner::default();
    let mut number = 0;
    // The manifests one round decodes, its plan checked against a full one.
    let mut round = |s: &[NodeSummary]| {
        number += 1;
        let before = planner.decoded;
        for n in 0..2 {
            let m = outs[n].message(&s[n], number);
            copies.apply(n, &m).unwrap().unwrap();
            outs[n].sent(s[n].clone(), copies.round(n));
        }
        let dirty = copies.take_dirty();
        let p = planner.plan(&copies.summaries, dirty, false, false);
        let full = plan::plan(&copies.summaries, false, false);
        assert_eq!(shown(&p), shown(&full.iter().collect::<Vec<_>>()));
        assert!(p.iter().all(|f| f.blocked.is_none()));
        planner.decoded - before
    };
    assert_eq!(round(&s), 2 * 5 * 20);
    assert_eq!(round(&s), 0, "an idle round");
    // One more epoch of one file on node 1: its manifest alone.
    let no = file_no(&s[1].files[3]);
    s[1].files[3].gens[0]
        .epochs
        .push(epoch(1, 2, no, 1, 21, false, &[2]));
    assert_eq!(round(&s), 1);
    assert_eq!(round(&s), 0);
}
