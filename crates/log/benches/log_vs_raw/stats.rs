//! Run times: medians, spreads and how they are shown.

use super::*;

pub(crate) fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

pub(crate) fn min(v: &[Duration]) -> Duration {
    *v.iter().min().expect("runs")
}

/// (max - min) / median, in percent: how noisy the runs were.
pub(crate) fn spread(v: &[Duration]) -> f64 {
    let min = v.iter().min().expect("runs").as_secs_f64();
    let max = v.iter().max().expect("runs").as_secs_f64();
    100.0 * (max - min) / median(v).as_secs_f64()
}

/// Run times in ms, in run order (verbose mode).
pub(crate) fn show(v: &[Duration]) -> String {
    v.iter()
        .map(|d| format!("{:.1}", ms(*d)))
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn mibs(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / MIB as f64 / d.as_secs_f64()
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

pub(crate) fn size_name(s: usize) -> String {
    if s >= MIB {
        format!("{} MiB", s / MIB)
    } else {
        format!("{} KiB", s / KIB)
    }
}
