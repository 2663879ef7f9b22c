//! A job's timeline read back and aggregated: the program, one lane per
//! process with its consistency points, the drained epochs, per-file sums,
//! the summary, and the drain traffic binned over time. Times are seconds
//! since the program started (`paralog run`'s record, else the earliest
//! event).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use paralog_log::timeline::{self, Event, Located};
use paralog_log::EpochId;
use serde::Serialize;

use crate::ReportError;

/// Bins of the drain traffic series.
const TRAFFIC_BINS: usize = 300;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub job: String,
    /// Time zero, microseconds since the Unix epoch.
    pub origin_us: u64,
    pub program: Program,
    /// The end of the time axis: the program's end or the last drain,
    /// whichever is later.
    pub end_s: f64,
    pub ranks: Vec<Rank>,
    pub drains: Vec<DrainEv>,
    pub files: Vec<FileSum>,
    pub summary: Summary,
    pub traffic: Traffic,
}

#[derive(Debug, Clone, Serialize)]
pub struct Program {
    /// The command (`paralog run`'s record), or `None`.
    pub command: Option<String>,
    pub exit_status: Option<i32>,
    pub start_s: f64,
    pub end_s: f64,
    /// Where start and end come from: "paralog run", or "capture" (the
    /// first process start and the last exit or consistency point).
    pub source: &'static str,
}

/// One process that went through consistency points.
#[derive(Debug, Clone, Serialize)]
pub struct Rank {
    pub pid: u32,
    /// Its rank in the largest communicator it committed in, and that size.
    pub rank: u32,
    pub size: u32,
    pub start_s: f64,
    /// Its exit, if it was recorded (not for a killed process).
    pub end_s: Option<f64>,
    pub consistency_points: usize,
    /// Bytes it wrote into committed epochs.
    pub bytes: u64,
    /// Time inside consistency points: in all, and the longest one.
    pub cp_s: f64,
    pub cp_max_s: f64,
    #[serde(skip)]
    pub cps: Vec<CpEv>,
}

impl Rank {
    pub fn label(&self) -> String {
        if self.size > 1 {
            format!("rank {}", self.rank)
        } else {
            format!("pid {}", self.pid)
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CpEv {
    pub t0_s: f64,
    pub t1_s: f64,
    pub file: String,
    pub gen: u64,
    pub epoch: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DrainEv {
    pub t0_s: f64,
    pub t1_s: f64,
    pub file: String,
    pub gen: u64,
    pub epoch: u64,
    pub epochs: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileSum {
    pub path: String,
    /// Epochs committed (distinct generation and epoch), consistency points
    /// of all processes, bytes they wrote into those epochs.
    pub epochs_committed: usize,
    pub consistency_points: usize,
    pub bytes_captured: u64,
    pub epochs_drained: u64,
    pub bytes_drained: u64,
    pub drain_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub program_s: f64,
    pub exit_status: Option<i32>,
    /// Processes with a consistency point.
    pub processes: usize,
    pub consistency_points: usize,
    pub consistency_points_per_rank_min: usize,
    pub consistency_points_per_rank_max: usize,
    /// Time in consistency points per process: the mean and the largest
    /// total, and the longest single one.
    pub cp_time_mean_s: f64,
    pub cp_time_max_s: f64,
    pub cp_longest_s: f64,
    /// Bytes written into committed epochs.
    pub bytes_captured: u64,
    pub files: usize,
    pub bytes_drained: u64,
    pub epochs_drained: u64,
    /// Time during which at least one epoch was being drained.
    pub drain_active_s: f64,
    /// The remote's throughput: bytes drained per second of drain activity.
    pub throughput_bps: f64,
    pub drain_first_start_s: Option<f64>,
    pub drain_last_end_s: Option<f64>,
    /// Drain activity while the program ran, and after it ended.
    pub drain_during_program_s: f64,
    pub drain_after_program_s: f64,
    /// From the program's end to the last drain's end (0 if none after).
    pub wait_after_program_s: f64,
}

/// Bytes drained per time bin (each drain's bytes spread evenly over its
/// span): the lower plot. The bins add up to the bytes drained.
#[derive(Debug, Clone, Serialize)]
pub struct Traffic {
    pub bin_s: f64,
    pub bytes: Vec<f64>,
}

impl Traffic {
    /// Megabytes (10^6 bytes) per second in each bin.
    pub fn mb_per_s(&self) -> Vec<f64> {
        self.bytes.iter().map(|b| b / self.bin_s / 1e6).collect()
    }
}

impl Report {
    /// The report of job `job` from its timeline under the node-local root.
    pub fn load(root: &Path, job: &str) -> Result<Report, ReportError> {
        let dir = timeline::dir(root, job);
        if !dir.is_dir() {
            return Err(ReportError::NoTimeline {
                root: root.to_path_buf(),
                job: job.to_owned(),
            });
        }
        let events = timeline::read_dir(&dir)?;
        Report::from_events(job, &events).ok_or_else(|| ReportError::Empty {
            root: root.to_path_buf(),
            job: job.to_owned(),
        })
    }

    /// Aggregate events (in file order per file); `None` if there is no
    /// consistency point, no drain and no program's run.
    pub fn from_events(job: &str, events: &[Located]) -> Option<Report> {
        let run = events.iter().rev().find_map(|l| match &l.event {
            Event::Run {
                t0,
                t1,
                status,
                command,
                ..
            } => Some((*t0, *t1, *status, command.clone())),
            _ => None,
        });
        let first = events
            .iter()
            .map(|l| match &l.event {
                Event::Start { t, .. } | Event::End { t, .. } => *t,
                Event::Cp(c) => c.t0,
                Event::Drain(d) => d.t0,
                Event::Run { t0, .. } => *t0,
            })
            .min()?;
        let origin = run.as_ref().map_or(first, |r| r.0.min(first));
        let s = |t: u64| (t as f64 - origin as f64) / 1e6;

        // Processes: a start line begins one (a pid may be reused).
        let mut ranks: Vec<Rank> = Vec::new();
        let mut current: HashMap<(PathBuf, u32), usize> = HashMap::new();
        let mut lane = |ranks: &mut Vec<Rank>, file: &Path, pid: u32, t: u64, fresh: bool| {
            let key = (file.to_path_buf(), pid);
            match current.get(&key) {
                Some(&i) if !fresh => i,
                _ => {
                    ranks.push(Rank {
                        pid,
                        rank: 0,
                        size: 1,
                        start_s: s(t),
                        end_s: None,
                        consistency_points: 0,
                        bytes: 0,
                        cp_s: 0.0,
                        cp_max_s: 0.0,
                        cps: Vec::new(),
                    });
                    current.insert(key, ranks.len() - 1);
                    ranks.len() - 1
                }
            }
        };
        let mut drains = Vec::new();
        for l in events {
            match &l.event {
                Event::Start { pid, t } => {
                    lane(&mut ranks, &l.file, *pid, *t, true);
                }
                Event::Cp(c) => {
                    let i = lane(&mut ranks, &l.file, c.pid, c.t0, false);
                    let r = &mut ranks[i];
                    if c.size > r.size || r.cps.is_empty() {
                        r.rank = c.rank;
                        r.size = c.size;
                    }
                    r.cps.push(CpEv {
                        t0_s: s(c.t0),
                        t1_s: s(c.t1),
                        file: String::from_utf8_lossy(&c.path).into_owned(),
                        gen: c.gen,
                        epoch: c.epoch,
                        bytes: c.bytes,
                    });
                }
                Event::End { pid, t, .. } => {
                    let i = lane(&mut ranks, &l.file, *pid, *t, false);
                    ranks[i].end_s = Some(s(*t));
                }
                Event::Drain(d) => drains.push(DrainEv {
                    t0_s: s(d.t0),
                    t1_s: s(d.t1),
                    file: String::from_utf8_lossy(&d.path).into_owned(),
                    gen: d.gen,
                    epoch: d.epoch,
                    epochs: d.count,
                    bytes: d.bytes,
                }),
                Event::Run { .. } => {}
            }
        }
        ranks.retain(|r| !r.cps.is_empty());
        if ranks.is_empty() && drains.is_empty() && run.is_none() {
            return None;
        }
        for r in &mut ranks {
            r.consistency_points = r.cps.len();
            r.bytes = r.cps.iter().map(|c| c.bytes).sum();
            r.cp_s = r.cps.iter().map(|c| c.t1_s - c.t0_s).sum();
            r.cp_max_s = r.cps.iter().map(|c| c.t1_s - c.t0_s).fold(0.0, f64::max);
        }
        // The largest communicator first, then by rank.
        ranks.sort_by(|a, b| {
            b.size
                .cmp(&a.size)
                .then(a.rank.cmp(&b.rank))
                .then(a.start_s.total_cmp(&b.start_s))
                .then(a.pid.cmp(&b.pid))
        });
        drains.sort_by(|a, b| a.t0_s.total_cmp(&b.t0_s));

        let program = match &run {
            Some((t0, t1, status, command)) => Program {
                command: Some(String::from_utf8_lossy(command).into_owned()),
                exit_status: Some(*status),
                start_s: s(*t0),
                end_s: s(*t1),
                source: "paralog run",
            },
            None => Program {
                command: None,
                exit_status: None,
                start_s: ranks
                    .iter()
                    .map(|r| r.start_s)
                    .fold(f64::MAX, f64::min)
                    .min(0.0),
                end_s: ranks
                    .iter()
                    .map(|r| {
                        let last_cp = r.cps.iter().map(|c| c.t1_s).fold(0.0, f64::max);
                        r.end_s.unwrap_or(last_cp).max(last_cp)
                    })
                    .fold(0.0, f64::max),
                source: "capture",
            },
        };
        let last_drain = drains.iter().map(|d| d.t1_s).fold(0.0, f64::max);
        let last_cp = ranks
            .iter()
            .flat_map(|r| r.cps.iter().map(|c| c.t1_s))
            .fold(0.0, f64::max);
        let end_s = program.end_s.max(last_drain).max(last_cp).max(1e-3);

        let files = file_sums(&ranks, &drains);
        let summary = summarize(&program, &ranks, &drains, files.len());
        let traffic = bin_traffic(&drains, end_s);
        Some(Report {
            job: job.to_owned(),
            origin_us: origin,
            program,
            end_s,
            ranks,
            drains,
            files,
            summary,
            traffic,
        })
    }

    /// The numbers embedded in the page (`<script id="paralog-report">`).
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "version": 1,
            "job": self.job,
            "origin_us": self.origin_us,
            "program": self.program,
            "end_s": self.end_s,
            "summary": self.summary,
            "ranks": self.ranks,
            "files": self.files,
            "drains": self.drains,
            "traffic": self.traffic,
        })
    }
}

/// A file's committed epochs and its sums so far.
type FileAcc = (BTreeSet<EpochId>, FileSum);

fn file_sums(ranks: &[Rank], drains: &[DrainEv]) -> Vec<FileSum> {
    let mut by: BTreeMap<&str, FileAcc> = BTreeMap::new();
    let blank = |p: &str| FileSum {
        path: p.to_owned(),
        epochs_committed: 0,
        consistency_points: 0,
        bytes_captured: 0,
        epochs_drained: 0,
        bytes_drained: 0,
        drain_s: 0.0,
    };
    for c in ranks.iter().flat_map(|r| &r.cps) {
        let (epochs, f) = by
            .entry(&c.file)
            .or_insert_with(|| (BTreeSet::new(), blank(&c.file)));
        epochs.insert(EpochId::new(c.gen, c.epoch));
        f.consistency_points += 1;
        f.bytes_captured += c.bytes;
    }
    for d in drains {
        let (_, f) = by
            .entry(&d.file)
            .or_insert_with(|| (BTreeSet::new(), blank(&d.file)));
        f.epochs_drained += d.epochs;
        f.bytes_drained += d.bytes;
        f.drain_s += d.t1_s - d.t0_s;
    }
    by.into_values()
        .map(|(epochs, mut f)| {
            f.epochs_committed = epochs.len();
            f
        })
        .collect()
}

/// The total length of the union of intervals, and of its parts before and
/// after `cut`.
fn union_len(mut iv: Vec<(f64, f64)>, cut: f64) -> (f64, f64, f64) {
    iv.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut all, mut before, mut after) = (0.0, 0.0, 0.0);
    let mut cur: Option<(f64, f64)> = None;
    let mut close = |(a, b): (f64, f64)| {
        all += b - a;
        before += (b.min(cut) - a).max(0.0);
        after += (b - a.max(cut)).max(0.0);
    };
    for (a, b) in iv {
        cur = match cur {
            Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
            Some(c) => {
                close(c);
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some(c) = cur {
        close(c);
    }
    (all, before, after)
}

fn summarize(program: &Program, ranks: &[Rank], drains: &[DrainEv], files: usize) -> Summary {
    let cps: Vec<usize> = ranks.iter().map(|r| r.consistency_points).collect();
    let (active, during, after) = union_len(
        drains.iter().map(|d| (d.t0_s, d.t1_s)).collect(),
        program.end_s,
    );
    let bytes_drained: u64 = drains.iter().map(|d| d.bytes).sum();
    let last_end = drains.iter().map(|d| d.t1_s).reduce(f64::max);
    Summary {
        program_s: program.end_s - program.start_s,
        exit_status: program.exit_status,
        processes: ranks.len(),
        consistency_points: cps.iter().sum(),
        consistency_points_per_rank_min: cps.iter().copied().min().unwrap_or(0),
        consistency_points_per_rank_max: cps.iter().copied().max().unwrap_or(0),
        cp_time_mean_s: if ranks.is_empty() {
            0.0
        } else {
            ranks.iter().map(|r| r.cp_s).sum::<f64>() / ranks.len() as f64
        },
        cp_time_max_s: ranks.iter().map(|r| r.cp_s).fold(0.0, f64::max),
        cp_longest_s: ranks.iter().map(|r| r.cp_max_s).fold(0.0, f64::max),
        bytes_captured: ranks.iter().map(|r| r.bytes).sum(),
        files,
        bytes_drained,
        epochs_drained: drains.iter().map(|d| d.epochs).sum(),
        drain_active_s: active,
        throughput_bps: if active > 0.0 {
            bytes_drained as f64 / active
        } else {
            0.0
        },
        drain_first_start_s: drains.iter().map(|d| d.t0_s).reduce(f64::min),
        drain_last_end_s: last_end,
        drain_during_program_s: during,
        drain_after_program_s: after,
        wait_after_program_s: last_end.map_or(0.0, |e| (e - program.end_s).max(0.0)),
    }
}

fn bin_traffic(drains: &[DrainEv], end_s: f64) -> Traffic {
    let bin_s = end_s / TRAFFIC_BINS as f64;
    let mut bytes = vec![0.0; TRAFFIC_BINS];
    let bin_of = |t: f64| ((t / bin_s).floor().max(0.0) as usize).min(TRAFFIC_BINS - 1);
    for d in drains {
        let (a, b) = (d.t0_s.max(0.0), d.t1_s.max(0.0));
        let total = d.bytes as f64;
        if b - a <= 0.0 || bin_of(a) == bin_of(b) {
            bytes[bin_of(a)] += total;
            continue;
        }
        let rate = total / (b - a);
        let (first, last) = (bin_of(a), bin_of(b));
        for (i, slot) in bytes.iter_mut().enumerate().take(last + 1).skip(first) {
            let lo = a.max(i as f64 * bin_s);
            let hi = if i == last {
                b
            } else {
                b.min((i + 1) as f64 * bin_s)
            };
            *slot += rate * (hi - lo).max(0.0);
        }
    }
    Traffic { bin_s, bytes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paralog_log::timeline::{Cp, Drain};

    fn at(event: Event, file: &str) -> Located {
        Located {
            file: PathBuf::from(file),
            line: 0,
            event,
        }
    }

    fn cp(pid: u32, rank: u32, t0: u64, t1: u64, epoch: u64, bytes: u64) -> Event {
        Event::Cp(Cp {
            pid,
            t0,
            t1,
            rank,
            size: 2,
            gen: 1,
            epoch,
            bytes,
            path: b"out.dat".to_vec(),
        })
    }

    fn drain(t0: u64, t1: u64, epoch: u64, bytes: u64) -> Event {
        Event::Drain(Drain {
            pid: 9,
            t0,
            t1,
            gen: 1,
            epoch,
            count: 1,
            bytes,
            path: b"out.dat".to_vec(),
        })
    }

    #[test]
    fn sums_lanes_and_traffic() {
        let s = 1_000_000u64;
        let ev = vec![
            at(Event::Start { pid: 1, t: 10 * s }, "c-1"),
            at(cp(1, 0, 11 * s, 11 * s + 10_000, 1, 100), "c-1"),
            at(cp(1, 0, 12 * s, 12 * s + 20_000, 2, 100), "c-1"),
            at(
                Event::End {
                    pid: 1,
                    t: 13 * s,
                    bytes: 200,
                    cps: 2,
                },
                "c-1",
            ),
            at(Event::Start { pid: 2, t: 10 * s }, "c-2"),
            at(cp(2, 1, 11 * s, 11 * s + 10_000, 1, 300), "c-2"),
            at(cp(2, 1, 12 * s, 12 * s + 10_000, 2, 300), "c-2"),
            at(drain(11 * s, 11 * s + s / 2, 1, 400), "d-9"),
            at(drain(12 * s + s / 4, 14 * s, 2, 400), "d-9"),
            at(
                Event::Run {
                    pid: 5,
                    t0: 10 * s,
                    t1: 13 * s,
                    status: 0,
                    command: b"prog".to_vec(),
                },
                "r-5",
            ),
        ];
        let r = Report::from_events("j", &ev).unwrap();
        assert_eq!(r.ranks.len(), 2);
        assert_eq!(r.ranks[0].rank, 0);
        assert_eq!(r.ranks[1].label(), "rank 1");
        assert_eq!(r.summary.consistency_points, 4);
        assert_eq!(r.summary.bytes_captured, 800);
        assert_eq!(r.summary.bytes_drained, 800);
        assert_eq!(r.program.end_s, 3.0);
        assert!((r.summary.drain_active_s - 2.25).abs() < 1e-9);
        assert!((r.summary.drain_after_program_s - 1.0).abs() < 1e-9);
        assert!((r.summary.wait_after_program_s - 1.0).abs() < 1e-9);
        let binned: f64 = r.traffic.bytes.iter().sum();
        assert!((binned - 800.0).abs() < 1e-6, "{binned}");
        assert_eq!(r.files.len(), 1);
        assert_eq!(r.files[0].epochs_committed, 2);
    }

    #[test]
    fn a_reused_pid_is_a_new_process() {
        let ev = vec![
            at(Event::Start { pid: 1, t: 1 }, "c-1"),
            at(cp(1, 0, 2, 3, 1, 10), "c-1"),
            at(Event::Start { pid: 1, t: 5 }, "c-1"),
            at(cp(1, 0, 6, 7, 1, 10), "c-1"),
        ];
        let r = Report::from_events("j", &ev).unwrap();
        assert_eq!(r.ranks.len(), 2);
        assert_eq!(r.summary.consistency_points_per_rank_max, 1);
    }

    #[test]
    fn nothing_recorded_is_no_report() {
        let mut ev = vec![at(Event::Start { pid: 1, t: 1 }, "c-1")];
        assert!(Report::from_events("j", &ev).is_none());
        // A program that wrote nothing still has its run.
        ev.push(at(
            Event::Run {
                pid: 5,
                t0: 1,
                t1: 2_000_001,
                status: 3,
                command: b"true".to_vec(),
            },
            "r-5",
        ));
        let r = Report::from_events("j", &ev).unwrap();
        assert!(r.ranks.is_empty());
        assert_eq!(r.summary.exit_status, Some(3));
        assert_eq!(r.summary.program_s, 2.0);
    }
}
