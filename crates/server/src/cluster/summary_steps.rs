//! Steps of a node's life on its summary, shared by the property tests of
//! the round's deltas (`delta_tests.rs`) and of the incremental plan
//! (`planner_tests.rs`), with the deterministic generator that picks them.

use paralog_log::EpochId;

use crate::cluster::summary::FileSummary;

/// A small deterministic generator (xorshift): the same cases every run.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Drained up to the `nth` epoch of `f` (if it has one): progress moves,
/// the epochs up to it go, and the opens before its open leave the summary.
pub(crate) fn drain_upto(f: &mut FileSummary, nth: usize) {
    let upto = f
        .gens
        .iter()
        .flat_map(|g| g.epochs.iter().map(move |e| (g.gen, e.epoch)))
        .nth(nth);
    if let Some((gen, e)) = upto {
        let p = EpochId::new(gen, e);
        f.progress = Some(p);
        for g in &mut f.gens {
            g.epochs.retain(|x| EpochId::new(g.gen, x.epoch) > p);
        }
        f.gens.retain(|g| g.gen >= gen);
    }
}

/// The last open of `f` ends.
pub(crate) fn close_last(f: &mut FileSummary) {
    if let Some(g) = f.gens.last_mut() {
        g.closed = true;
    }
}
