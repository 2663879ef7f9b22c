use super::*;
use crate::cluster::summary::GenSummary;
use crate::cluster::summary_steps::{close_last, drain_upto, Rng};
use paralog_log::EpochId;

fn epoch(e: u64, marked: bool, ranks: &[u32]) -> EpochSummary {
    EpochSummary::of_ranks(e, marked, ranks, |r| {
        (
            format!("/l/f/r{r}/e{e}.data"),
            4096 * e,
            2,
            vec![r as u8; 40],
        )
    })
}

fn file(i: u64) -> FileSummary {
    FileSummary {
        job: "j".into(),
        dir: format!("/l/j/f-{i:04}"),
        path: format!("/p/f{i}").into_bytes(),
        rel: format!("f{i}").into_bytes(),
        ..FileSummary::default()
    }
}

fn node(files: Vec<FileSummary>) -> NodeSummary {
    NodeSummary {
        node: "n0".into(),
        files,
        ..NodeSummary::default()
    }
}

/// One step of a node's life: files appear and go, opens begin and end,
/// epochs are committed by more ranks, marked, drained.
fn evolve(s: &mut NodeSummary, r: &mut Rng) {
    for _ in 0..1 + r.next(4) {
        match r.next(8) {
            0 => {
                let f = file(r.next(40));
                if let Err(at) = s.files.binary_search_by(|x| key_of(x).cmp(&key_of(&f))) {
                    s.files.insert(at, f);
                }
            }
            1 if !s.files.is_empty() => {
                let at = r.next(s.files.len() as u64) as usize;
                s.files.remove(at);
            }
            2 if !s.files.is_empty() => {
                // A new open.
                let at = r.next(s.files.len() as u64) as usize;
                let f = &mut s.files[at];
                let gen = f.gens.last().map_or(1, |g| g.gen + 1);
                f.gens.push(GenSummary {
                    gen,
                    ranks: vec![0, 1],
                    ..GenSummary::default()
                });
            }
            3 | 4 if !s.files.is_empty() => {
                // A new epoch, or more of one (another rank, a mark).
                let at = r.next(s.files.len() as u64) as usize;
                let f = &mut s.files[at];
                if let Some(g) = f.gens.last_mut() {
                    let e = g.epochs.last().map_or(1, |e| e.epoch + r.next(2));
                    let ranks: &[u32] = if r.next(2) == 0 { &[0] } else { &[0, 1] };
                    let new = epoch(e, r.next(3) == 0, ranks);
                    match g.epochs.last_mut() {
                        Some(last) if last.epoch == e => *last = new,
                        _ => g.epochs.push(new),
                    }
                }
            }
            5 if !s.files.is_empty() => {
                // Drained: progress moves, the epochs up to it go, and an
                // open whose epochs all went leaves the summary.
                let at = r.next(s.files.len() as u64) as usize;
                let nth = r.next(3) as usize;
                drain_upto(&mut s.files[at], nth);
            }
            6 if !s.files.is_empty() => {
                let at = r.next(s.files.len() as u64) as usize;
                close_last(&mut s.files[at]);
            }
            _ => s.finishing = r.next(5) == 0,
        }
    }
}

#[test]
fn the_copies_follow_every_change() {
    for seed in 1..=20u64 {
        let mut r = Rng(seed * 0x9e37_79b9_7f4a_7c15);
        let mut out = Outbox::default();
        let mut copies = Copies::new(1);
        let mut s = node(Vec::new());
        for round in 1..=200 {
            evolve(&mut s, &mut r);
            let m = out.message(&s, round);
            copies.apply(0, &m).unwrap().unwrap();
            assert_eq!(copies.summaries[0], s, "seed {seed} round {round}");
            assert!(copies.usable());
            out.sent(s.clone(), copies.round(0));
        }
    }
}

#[test]
fn an_unchanged_summary_sends_a_few_bytes() {
    let mut s = node((0..50).map(file).collect());
    for f in &mut s.files {
        f.gens.push(GenSummary {
            gen: 1,
            ranks: vec![0],
            epochs: (1..=20).map(|e| epoch(e, false, &[0])).collect(),
            ..GenSummary::default()
        });
    }
    let mut out = Outbox::default();
    let mut copies = Copies::new(1);
    let full = out.message(&s, 1);
    copies.apply(0, &full).unwrap().unwrap();
    out.sent(s.clone(), copies.round(0));
    let again = out.message(&s, 2);
    assert!(full.len() > 50 * 20 * 40, "{}", full.len());
    assert!(again.is_empty(), "{} bytes for no change", again.len());
    copies.apply(0, &again).unwrap().unwrap();
    out.sent(s.clone(), copies.round(0));
    assert_eq!(copies.summaries[0], s);
    // One new epoch: its bytes and its file's key, not the rest.
    s.files[7].gens[0].epochs.push(epoch(21, true, &[0]));
    let one = out.message(&s, 3);
    assert!(
        !one.is_empty() && one.len() < 250,
        "{} bytes for one epoch",
        one.len()
    );
    copies.apply(0, &one).unwrap().unwrap();
    out.sent(s.clone(), copies.round(0));
    assert_eq!(copies.summaries[0], s);
    // The job ending is a change too.
    s.finishing = true;
    let fin = out.message(&s, 4);
    assert!(!fin.is_empty() && fin.len() < 80, "{}", fin.len());
    copies.apply(0, &fin).unwrap().unwrap();
    assert_eq!(copies.summaries[0], s);
}

#[test]
fn a_change_that_does_not_fit_drops_the_copy_until_a_full_summary() {
    let s = node(vec![file(1)]);
    let mut out = Outbox::default();
    let mut copies = Copies::new(2);
    copies.apply(0, &out.message(&s, 1)).unwrap().unwrap();
    // Server 1 never sent: no plan yet.
    assert!(!copies.usable());
    copies
        .apply(1, &Outbox::default().message(&s, 1))
        .unwrap()
        .unwrap();
    assert!(copies.usable());
    // A change from round 5 to a copy of round 1.
    out.sent(s.clone(), copies.round(0));
    let mut changed = s.clone();
    changed.files[0].progress = Some(EpochId::new(1, 1));
    let mut wrong = Outbox::default();
    let _ = wrong.message(&s, 5);
    wrong.sent(s.clone(), Some(5));
    let why = copies
        .apply(0, &wrong.message(&changed, 6))
        .unwrap()
        .unwrap_err();
    assert!(why.0.contains("round 5"), "{why:?}");
    assert!(!copies.usable() && copies.round(0).is_none());
    // Every server saw it: the sender starts again from nothing.
    wrong.sent(changed.clone(), copies.round(0));
    copies
        .apply(0, &wrong.message(&changed, 7))
        .unwrap()
        .unwrap();
    assert!(copies.usable());
    assert_eq!(copies.summaries[0], changed);
    // An empty message to a dropped copy does not fit either.
    let mut c2 = Copies::new(1);
    assert!(c2.apply(0, &[]).unwrap().is_err());
}

#[test]
fn a_failed_scan_keeps_the_copy_and_stops_the_plan() {
    let s = node(vec![file(1)]);
    let mut out = Outbox::default();
    let mut copies = Copies::new(1);
    copies.apply(0, &out.message(&s, 1)).unwrap().unwrap();
    out.sent(s.clone(), copies.round(0));
    let failed = NodeSummary {
        scan_failed: true,
        ..node(Vec::new())
    };
    copies.apply(0, &out.message(&failed, 2)).unwrap().unwrap();
    assert!(!copies.usable());
    out.sent(failed, copies.round(0));
    // The scan works again and nothing changed: the flag is a change.
    let m = out.message(&s, 3);
    assert!(!m.is_empty());
    copies.apply(0, &m).unwrap().unwrap();
    assert!(copies.usable());
    assert_eq!(copies.summaries[0], s);
}

#[test]
fn a_truncated_message_is_refused() {
    let mut s = node(vec![file(1), file(2)]);
    s.files[0].gens.push(GenSummary {
        gen: 1,
        ranks: vec![0, 3],
        epochs: vec![epoch(1, true, &[0, 3])],
        ..GenSummary::default()
    });
    s.files[1].damaged = Some("bad".into());
    let b = Outbox::default().message(&s, 1);
    assert!(!b.is_empty());
    let mut copies = Copies::new(1);
    // Empty: "no change", which does not fit a copy not held.
    assert!(copies.apply(0, &[]).unwrap().is_err());
    for cut in 1..b.len() {
        assert!(copies.apply(0, &b[..cut]).is_err(), "cut at {cut}");
    }
    copies.apply(0, &b).unwrap().unwrap();
    assert_eq!(copies.summaries[0], s);
}
