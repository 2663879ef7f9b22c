//! The report page: self-contained (no script, style or image from
//! elsewhere): the timeline as an inline SVG, the summary, per-process and
//! per-file tables, and every number as JSON in
//! `<script type="application/json" id="paralog-report">` for programs.

use std::fmt::Write;

use crate::model::Report;
use crate::ReportError;

pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A time as `YYYY-MM-DD hh:mm:ss UTC`.
pub fn utc(us: u64) -> String {
    let secs = us / 1_000_000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Days since 1970-01-01 to a civil date (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn rate(bps: f64) -> String {
    format!("{:.1} MB/s", bps / 1e6)
}

fn row(out: &mut String, key: &str, what: &str, value: String) {
    let _ = writeln!(
        out,
        "<tr data-key=\"{key}\"><th>{}</th><td>{}</td></tr>",
        escape(what),
        escape(&value)
    );
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.5em}\
figure{margin:0}figure svg{max-width:100%;height:auto;border:1px solid #ddd}\
figcaption{font-size:.9em;color:#555;margin:.3em 0}\
table{border-collapse:collapse;font-size:.92em}\
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}\
td.n{text-align:right}thead th{background:#f3f3f3}\
.sw{display:inline-block;width:.9em;height:.9em;vertical-align:middle;margin:0 .2em}";

/// The whole page.
pub fn page(r: &Report) -> Result<String, ReportError> {
    let svg = crate::plot::svg(r)?;
    // The document's XML declaration has no place inside HTML.
    let svg = match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => &svg[..],
    };
    let s = &r.summary;
    let mut out = String::new();
    let title = format!("paralog report: job {}", r.job);
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>",
        escape(&title),
        escape(&title)
    );
    let mut intro = format!("Started {}", utc(r.origin_us));
    if let Some(c) = &r.program.command {
        intro.push_str(&format!("; command: {c}"));
    }
    if let Some(st) = s.exit_status {
        intro.push_str(&format!("; exit status {st}"));
    }
    let _ = writeln!(out, "<p>{}.</p>", escape(&intro));
    let _ = writeln!(
        out,
        "<figure id=\"timeline\">\n{svg}\n<figcaption>Above, one lane per process: \
<span class=\"sw\" style=\"background:#aec7e8\"></span>running with capture on, \
<span class=\"sw\" style=\"background:#ff7f0e\"></span>its consistency points (local commit and agreement). \
Below, <span class=\"sw\" style=\"background:#2ca02c\"></span>bytes per second drained to the remote \
(each epoch's bytes spread over its drain), dashed blue: the remote's throughput while draining. \
Dashed grey: the program's end.</figcaption>\n</figure>"
    );

    out.push_str("<h2>Summary</h2>\n<table id=\"summary\">\n");
    let status = s
        .exit_status
        .map_or("not recorded".to_owned(), |c| c.to_string());
    row(
        &mut out,
        "program",
        "program",
        format!(
            "{:.2} s, exit status {status} (from {})",
            s.program_s, r.program.source
        ),
    );
    row(
        &mut out,
        "processes",
        "processes with consistency points",
        s.processes.to_string(),
    );
    row(
        &mut out,
        "consistency_points",
        "consistency points",
        format!(
            "{} in all, {}..{} per process",
            s.consistency_points,
            s.consistency_points_per_rank_min,
            s.consistency_points_per_rank_max
        ),
    );
    row(
        &mut out,
        "cp_time",
        "time in consistency points",
        format!(
            "{:.1} ms per process on average, {:.1} ms at most; longest single one {:.1} ms",
            s.cp_time_mean_s * 1e3,
            s.cp_time_max_s * 1e3,
            s.cp_longest_s * 1e3
        ),
    );
    row(
        &mut out,
        "bytes_captured",
        "captured (committed epochs)",
        format!(
            "{} ({} bytes)",
            human_bytes(s.bytes_captured),
            s.bytes_captured
        ),
    );
    row(&mut out, "files", "files", s.files.to_string());
    row(
        &mut out,
        "bytes_drained",
        "drained to the remote",
        format!(
            "{} ({} bytes) in {} epoch(s)",
            human_bytes(s.bytes_drained),
            s.bytes_drained,
            s.epochs_drained
        ),
    );
    row(
        &mut out,
        "throughput",
        "remote throughput",
        format!(
            "{} while draining ({:.2} s with at least one epoch in flight)",
            rate(s.throughput_bps),
            s.drain_active_s
        ),
    );
    row(
        &mut out,
        "drain_overlap",
        "drain during / after the program",
        format!(
            "{:.2} s while it ran, {:.2} s after it ended; the last epoch was on the remote {:.2} s after its end",
            s.drain_during_program_s, s.drain_after_program_s, s.wait_after_program_s
        ),
    );
    out.push_str("</table>\n");

    out.push_str("<h2>Processes</h2>\n<table id=\"ranks\">\n<thead><tr><th>process</th><th>pid</th><th>rank</th><th>consistency points</th><th>bytes</th><th>time in them</th><th>longest</th></tr></thead>\n<tbody>\n");
    for k in &r.ranks {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{} of {}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.1} ms</td><td class=\"n\">{:.1} ms</td></tr>",
            escape(&k.label()),
            k.pid,
            k.rank,
            k.size,
            k.consistency_points,
            escape(&human_bytes(k.bytes)),
            k.cp_s * 1e3,
            k.cp_max_s * 1e3
        );
    }
    out.push_str("</tbody>\n</table>\n");

    out.push_str("<h2>Files</h2>\n<table id=\"files\">\n<thead><tr><th>file (relative to the prefix)</th><th>epochs committed</th><th>consistency points</th><th>captured</th><th>epochs drained</th><th>drained</th><th>drain time</th><th>throughput</th></tr></thead>\n<tbody>\n");
    for f in &r.files {
        let tp = if f.drain_s > 0.0 {
            rate(f.bytes_drained as f64 / f.drain_s)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.2} s</td><td class=\"n\">{}</td></tr>",
            escape(&f.path),
            f.epochs_committed,
            f.consistency_points,
            escape(&human_bytes(f.bytes_captured)),
            f.epochs_drained,
            escape(&human_bytes(f.bytes_drained)),
            f.drain_s,
            escape(&tp)
        );
    }
    out.push_str("</tbody>\n</table>\n");

    // '<' only occurs inside JSON strings, where \u003c means the same.
    let json = r.json().to_string().replace('<', "\\u003c");
    let _ = writeln!(
        out,
        "<script type=\"application/json\" id=\"paralog-report\">{json}</script>\n</body>\n</html>"
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_escapes() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400_000_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000_123_456), "2023-11-14 22:13:20 UTC");
        assert_eq!(escape("<a&\"b'>"), "&lt;a&amp;&quot;b&#39;&gt;");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(5 << 20), "5.0 MiB");
    }
}
