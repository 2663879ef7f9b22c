//! The log against a reference model: random writes, appends that continue
//! the previous write (coalesced runs; with the small buffers also mixed
//! with writes that go straight to the log), overwrites, reads of own bytes
//! between them, set-size and preallocate by several ranks over several
//! epochs; the logical file at
//! every committed epoch must equal a plain byte vector that received the
//! same operations. Crashes are injected at random points of the last epoch
//! (ranks that never commit, a data log cut short, a commit record cut or
//! damaged as a crash during its write leaves it) and the recovered state
//! must equal the model at the last globally committed epoch. Both commit
//! policies (one fdatasync on a journaling file system, the explicit one).

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use paralog_log::gc::collect_garbage;
use paralog_log::layout::{epoch_file_name, EpochFileKind};
use paralog_log::writer::CommitSync;
use paralog_log::{EpochId, Inventory, ReadSource, WriterConfig};
use proptest::prelude::*;

const BLOCK: u64 = 32;
const BLOCKS: u64 = 48;

#[derive(Debug, Clone)]
enum Step {
    /// Rank writes `len` bytes at block `block` + `skip` (clipped to the run
    /// of blocks it owns this epoch).
    Write {
        rank: u32,
        block: u64,
        skip: u64,
        len: u64,
    },
    /// Rank writes `len` bytes where its previous write in the epoch ended
    /// (clipped as above): the appends a coalesced run gathers.
    Append { rank: u32, len: u64 },
    /// Rank reads its own bytes at `off` between writes: a read must see
    /// every byte written before it, in a run not yet recorded too.
    Read { rank: u32, off: u64, len: u64 },
    /// A synchronizing point of every rank (a collective call): a new
    /// phase, which ends a run.
    Sync,
    /// Collective set-size (all ranks).
    SetSize(u64),
    /// Collective preallocate (all ranks).
    Preallocate(u64),
    /// The file is deleted (recorded by all ranks, like a collective op).
    Delete,
}

#[derive(Debug, Clone)]
struct EpochPlan {
    /// Which rank may write each block this epoch (MPI: disjoint per epoch).
    owner: Vec<u32>,
    steps: Vec<Step>,
}

#[derive(Debug, Clone)]
enum Crash {
    None,
    /// In the last epoch only these ranks commit locally; the others crash
    /// before committing. Then damage one non-committed rank as chosen.
    Partial {
        committed: Vec<bool>,
        damage: Damage,
    },
}

#[derive(Debug, Clone)]
enum Damage {
    Nothing,
    /// Cut the crashed rank's data log at this fraction (per mille).
    CutData(u32),
    /// The crashed rank was writing its commit record: the log ends this
    /// many bytes (1 + n modulo the record's length) short of the record.
    TornRecord(u32),
    /// The crashed rank's commit record is whole in length but one byte of
    /// it (n modulo its length, counted from its start) never reached the
    /// disk (reads back flipped).
    FlippedRecord(u32),
}

fn plan_strategy() -> impl Strategy<Value = (u32, Vec<EpochPlan>, Crash, bool, bool)> {
    (1u32..=4, 1usize..=5, any::<bool>(), any::<bool>()).prop_flat_map(
        |(ranks, epochs, small_buffers, explicit)| {
            let step = prop_oneof![
                8 => (0..ranks, 0..BLOCKS, 0..BLOCK, 1..3 * BLOCK)
                    .prop_map(|(rank, block, skip, len)| Step::Write { rank, block, skip, len }),
                6 => (0..ranks, 1..BLOCK).prop_map(|(rank, len)| Step::Append { rank, len }),
                3 => (0..ranks, 0..BLOCK * BLOCKS, 1..4 * BLOCK)
                    .prop_map(|(rank, off, len)| Step::Read { rank, off, len }),
                1 => Just(Step::Sync),
                1 => (0..BLOCK * BLOCKS).prop_map(Step::SetSize),
                1 => (0..BLOCK * BLOCKS).prop_map(Step::Preallocate),
                1 => Just(Step::Delete),
            ];
            let epoch = (
                prop::collection::vec(0..ranks, BLOCKS as usize),
                prop::collection::vec(step, 0..25),
            )
                .prop_map(|(owner, steps)| EpochPlan { owner, steps });
            let damage = prop_oneof![
                Just(Damage::Nothing),
                (0u32..1000).prop_map(Damage::CutData),
                any::<u32>().prop_map(Damage::TornRecord),
                any::<u32>().prop_map(Damage::FlippedRecord),
            ];
            let crash = prop_oneof![
                Just(Crash::None),
                (prop::collection::vec(any::<bool>(), ranks as usize), damage)
                    .prop_map(|(committed, damage)| Crash::Partial { committed, damage }),
            ];
            (
                Just(ranks),
                prop::collection::vec(epoch, epochs),
                crash,
                Just(small_buffers),
                Just(explicit),
            )
        },
    )
}

/// The plain byte-vector model: what direct I/O would leave.
#[derive(Debug, Clone, Default, PartialEq)]
struct Model {
    bytes: Vec<u8>,
    deleted: bool,
}

impl Model {
    fn write(&mut self, off: u64, data: &[u8]) {
        self.deleted = false;
        let end = off as usize + data.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[off as usize..end].copy_from_slice(data);
    }
    fn set_size(&mut self, n: u64) {
        self.deleted = false;
        self.bytes.resize(n as usize, 0);
    }
    fn delete(&mut self) {
        self.bytes.clear();
        self.deleted = true;
    }
    fn preallocate(&mut self, n: u64) {
        self.deleted = false;
        if (self.bytes.len() as u64) < n {
            self.bytes.resize(n as usize, 0);
        }
    }
}

/// Distinct, deterministic content for every write.
fn payload(epoch: usize, rank: u32, step: usize, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (epoch as u64 * 131 + rank as u64 * 31 + step as u64 * 7 + i * 13 + 1) as u8)
        .collect()
}

/// Clip a write to the run of blocks its rank owns starting at `block`.
fn clip(plan: &EpochPlan, rank: u32, block: u64, skip: u64, len: u64) -> Option<(u64, u64)> {
    if plan.owner[block as usize] != rank {
        return None;
    }
    let mut run_end = block + 1;
    while run_end < BLOCKS && plan.owner[run_end as usize] == rank {
        run_end += 1;
    }
    let off = block * BLOCK + skip;
    let len = len.min(run_end * BLOCK - off);
    (len > 0).then_some((off, len))
}

/// The materialized bytes and whether the file was deleted.
type FileState = (Vec<u8>, bool);

fn materialize(root: &Path, rel: &[u8], upto: Option<EpochId>) -> (FileState, Vec<EpochId>) {
    let inv = Inventory::scan(root).unwrap();
    let found = inv.find_file(Some("job"), rel);
    assert_eq!(found.len(), 1);
    let file = found[0].1;
    let lf = file.logical_file(upto).unwrap();
    let out = root.join("materialized");
    lf.materialize(&out, None).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    ((bytes, lf.deleted), file.committed_epochs().unwrap())
}

/// Read `len` bytes of `log`'s own bytes at `off` and compare them with the
/// model. Own bytes of the current epoch are always the newest; with one
/// rank all own bytes are, and what it never wrote reads as a hole.
fn check_own(
    log: &mut paralog_log::RankLog,
    model: &Model,
    ranks: u32,
    epoch: u64,
    off: u64,
    len: u64,
) -> Result<(), TestCaseError> {
    let mut buf = vec![0xAAu8; len as usize];
    for r in log.read_own(off, &mut buf).unwrap() {
        let authoritative = match r.source {
            ReadSource::Own { epoch: e } => e == epoch || ranks == 1,
            _ => false,
        };
        if authoritative {
            for i in r.off..r.off + r.len {
                prop_assert_eq!(
                    buf[(i - off) as usize],
                    model.bytes[i as usize],
                    "read_own at {}",
                    i
                );
            }
        } else if ranks == 1 {
            for i in r.off..(r.off + r.len).min(model.bytes.len() as u64) {
                prop_assert_eq!(
                    model.bytes[i as usize],
                    0,
                    "rank never wrote {} but model has data",
                    i
                );
            }
        }
    }
    Ok(())
}

fn run_case(
    ranks: u32,
    plans: &[EpochPlan],
    crash: &Crash,
    small_buffers: bool,
    explicit: bool,
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let ident = common::ident("job", "/scratch/out.dat", "out.dat", 1);
    let mut cfg = if small_buffers {
        WriterConfig {
            coalesce_bytes: 64,
            small_write: 16,
            ..WriterConfig::default()
        }
    } else {
        WriterConfig::default()
    };
    if explicit {
        cfg.commit_sync = CommitSync::Explicit;
    }
    let mut logs = common::ranks(root, &ident, ranks, cfg);
    let mut model = Model::default();
    let mut snapshots: Vec<Model> = Vec::new();
    let last = plans.len() - 1;
    for (ei, plan) in plans.iter().enumerate() {
        let epoch = ei as u64 + 1;
        // Every epoch belongs to an open of the file: it exists again.
        model.deleted = false;
        // Where each rank's last write of the epoch ended.
        let mut ends: Vec<Option<u64>> = vec![None; ranks as usize];
        for (si, step) in plan.steps.iter().enumerate() {
            match *step {
                Step::Write {
                    rank,
                    block,
                    skip,
                    len,
                } => {
                    if let Some((off, len)) = clip(plan, rank, block, skip, len) {
                        let data = payload(ei, rank, si, len);
                        logs[rank as usize].write_at(off, &data).unwrap();
                        model.write(off, &data);
                        ends[rank as usize] = Some(off + len);
                    }
                }
                Step::Append { rank, len } => {
                    let Some(at) = ends[rank as usize].filter(|&e| e < BLOCK * BLOCKS) else {
                        continue;
                    };
                    if let Some((off, len)) = clip(plan, rank, at / BLOCK, at % BLOCK, len) {
                        let data = payload(ei, rank, si, len);
                        logs[rank as usize].write_at(off, &data).unwrap();
                        model.write(off, &data);
                        ends[rank as usize] = Some(off + len);
                    }
                }
                Step::Read { rank, off, len } => {
                    check_own(&mut logs[rank as usize], &model, ranks, epoch, off, len)?;
                }
                Step::Sync => logs.iter_mut().for_each(|l| l.sync_point()),
                Step::SetSize(n) => {
                    logs.iter_mut().for_each(|l| l.set_size(n));
                    model.set_size(n);
                }
                Step::Preallocate(n) => {
                    logs.iter_mut().for_each(|l| l.preallocate(n));
                    model.preallocate(n);
                }
                Step::Delete => {
                    logs.iter_mut().for_each(|l| l.delete());
                    model.delete();
                }
            }
        }
        for log in logs.iter_mut() {
            check_own(log, &model, ranks, epoch, 0, BLOCK * BLOCKS)?;
        }
        let crash_here = ei == last && matches!(crash, Crash::Partial { .. });
        if !crash_here {
            for log in logs.iter_mut() {
                log.commit_local().unwrap();
            }
            for log in logs.iter_mut() {
                log.complete_epoch().unwrap();
            }
            snapshots.push(model.clone());
            continue;
        }
        let Crash::Partial { committed, damage } = crash else {
            unreachable!()
        };
        for (r, log) in logs.iter_mut().enumerate() {
            if committed[r] {
                log.commit_local().unwrap();
            }
        }
        let all_committed = committed.iter().all(|&c| c);
        if all_committed {
            // Every manifest is durable but the marks were never written:
            // the epoch is committed all the same.
            snapshots.push(model.clone());
        }
        if let Some(victim) = committed.iter().position(|&c| !c) {
            let log = &mut logs[victim];
            let rank_dir = log.rank_dir().to_path_buf();
            match damage {
                Damage::Nothing => {}
                Damage::CutData(permille) => {
                    let p = rank_dir.join(epoch_file_name(epoch, EpochFileKind::Data));
                    if let Ok(meta) = std::fs::metadata(&p) {
                        let cut = meta.len() * *permille as u64 / 1000;
                        std::fs::OpenOptions::new()
                            .write(true)
                            .open(&p)
                            .unwrap()
                            .set_len(cut)
                            .unwrap();
                    }
                }
                Damage::TornRecord(n) | Damage::FlippedRecord(n) => {
                    log.commit_local().unwrap();
                    let p = rank_dir.join(epoch_file_name(epoch, EpochFileKind::Data));
                    let bytes = std::fs::read(&p).unwrap();
                    let len = bytes.len();
                    let manifest_len =
                        u32::from_le_bytes(bytes[len - 8..len - 4].try_into().unwrap()) as usize;
                    let record = manifest_len + 32;
                    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                    if matches!(damage, Damage::TornRecord(_)) {
                        let cut = 1 + *n as usize % record;
                        f.set_len((len - cut) as u64).unwrap();
                    } else {
                        let at = len - record + *n as usize % record;
                        let b = bytes[at] ^ (1 << (*n % 8));
                        f.write_all_at(&[b], at as u64).unwrap();
                    }
                }
            }
        }
    }
    drop(logs);

    // Every committed epoch reads back as the model at that epoch.
    let (_, committed) = materialize(root, b"out.dat", None);
    prop_assert_eq!(committed.len(), snapshots.len());
    for (i, snap) in snapshots.iter().enumerate() {
        let (got, _) = materialize(root, b"out.dat", Some(EpochId::new(1, i as u64 + 1)));
        prop_assert_eq!(&got, &(snap.bytes.clone(), snap.deleted), "epoch {}", i + 1);
    }
    let (latest, _) = materialize(root, b"out.dat", None);
    let last = snapshots.last().cloned().unwrap_or_default();
    prop_assert_eq!(&latest, &(last.bytes, last.deleted));

    // Garbage collection removes only what was never committed.
    let inv = Inventory::scan(root).unwrap();
    let file = inv.find_file(Some("job"), b"out.dat")[0].1.clone();
    collect_garbage(&file, false).unwrap();
    let (after_gc, committed_after) = materialize(root, b"out.dat", None);
    prop_assert_eq!(committed_after, committed);
    prop_assert_eq!(&after_gc, &latest);
    let inv = Inventory::scan(root).unwrap();
    let file = inv.find_file(Some("job"), b"out.dat")[0].1.clone();
    for id in file.epoch_ids() {
        prop_assert!(
            file.commit_status(id).unwrap().is_committed(),
            "epoch {:?} survived gc without being committed",
            id
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn logical_file_equals_model((ranks, plans, crash, small, explicit) in plan_strategy()) {
        run_case(ranks, &plans, &crash, small, explicit)?;
    }
}
