//! `paralog report`: what a run recorded in its timeline
//! (`paralog_log::timeline`: the program's start and end, each consistency
//! point of each process, each drained epoch), summarised and drawn: a
//! self-contained HTML page (the timeline as an inline SVG, the summary
//! tables, the numbers as JSON) and a PNG of the timeline. See
//! docs/report.md.
//!
//! `model` reads and aggregates, `plot` draws, `html` writes the page.

pub mod html;
pub mod model;
pub mod plot;

use std::path::{Path, PathBuf};

pub use model::Report;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Timeline(#[from] paralog_log::timeline::TimelineError),
    #[error("no timeline of job {job} in {root} (the job never reached a consistency point on this node, or its timeline was removed)")]
    NoTimeline { root: PathBuf, job: String },
    #[error(
        "the timeline of job {job} in {root} records no program, no consistency point and no drain"
    )]
    Empty { root: PathBuf, job: String },
    #[error("drawing the timeline: {0}")]
    Plot(String),
    #[error("{path}: {op}: {error}")]
    Io {
        path: PathBuf,
        op: &'static str,
        error: std::io::Error,
    },
}

/// The PNG written beside an HTML report: the same name, `.png`.
pub fn png_path(html: &Path) -> PathBuf {
    html.with_extension("png")
}

/// Write the HTML report to `html` and the timeline's PNG beside it
/// (`png_path`). Returns the PNG's path.
pub fn write(report: &Report, html: &Path) -> Result<PathBuf, ReportError> {
    let page = html::page(report)?;
    let io = |path: &Path, error| ReportError::Io {
        path: path.to_path_buf(),
        op: "write",
        error,
    };
    std::fs::write(html, page).map_err(|e| io(html, e))?;
    let png = png_path(html);
    plot::png(report, &png)?;
    Ok(png)
}

#[cfg(test)]
mod tests {
    use paralog_log::timeline::{self, Cp, Drain, Event};

    /// A page and a PNG from a written timeline: the plot is in the page,
    /// the numbers parse back, the PNG is one.
    #[test]
    fn page_and_png_from_a_timeline() {
        let root = tempfile::tempdir().unwrap();
        let dir = timeline::dir(root.path(), "j");
        let s = 1_700_000_000_000_000u64;
        let mut lines = String::new();
        for rank in 0..3u32 {
            lines.push_str(
                &Event::Start {
                    pid: 100 + rank,
                    t: s,
                }
                .encode(),
            );
            for e in 1..=4u64 {
                lines.push_str(
                    &Event::Cp(Cp {
                        pid: 100 + rank,
                        t0: s + e * 200_000,
                        t1: s + e * 200_000 + 5_000,
                        rank,
                        size: 3,
                        gen: 1,
                        epoch: e,
                        bytes: 1 << 20,
                        path: b"a <b>.dat".to_vec(),
                    })
                    .encode(),
                );
            }
        }
        for e in 1..=4u64 {
            lines.push_str(
                &Event::Drain(Drain {
                    pid: 9,
                    t0: s + e * 200_000 + 6_000,
                    t1: s + e * 200_000 + 50_000,
                    gen: 1,
                    epoch: e,
                    count: 1,
                    bytes: 3 << 20,
                    path: b"a <b>.dat".to_vec(),
                })
                .encode(),
            );
        }
        timeline::append(&dir, "all", &lines).unwrap();
        let report = crate::Report::load(root.path(), "j").unwrap();
        let html = root.path().join("r.html");
        let png = crate::write(&report, &html).unwrap();
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(page.contains("<svg"));
        assert!(page.matches("<rect").count() >= 12 + 3);
        assert!(page.contains("a &lt;b&gt;.dat"));
        assert!(!page.contains("<?xml"));
        let start = page.find("id=\"paralog-report\">").unwrap() + 20;
        let end = start + page[start..].find("</script>").unwrap();
        let v: serde_json::Value = serde_json::from_str(&page[start..end]).unwrap();
        assert_eq!(v["summary"]["bytes_drained"], 12 << 20);
        assert_eq!(v["summary"]["consistency_points"], 12);
        let bytes = std::fs::read(png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }

    #[test]
    fn a_missing_timeline_is_named() {
        let root = tempfile::tempdir().unwrap();
        let e = crate::Report::load(root.path(), "nope").unwrap_err();
        assert!(e.to_string().contains("no timeline of job nope"), "{e}");
    }
}
