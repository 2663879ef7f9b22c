//! The timeline plot, as the benchmark draws it (docs/benchmarks.md §6):
//! the program above (one lane per process: running in light blue, its
//! consistency points in orange), the drain's traffic to the remote below
//! (MB/s, each drained epoch's bytes spread over its drain; dashed: the
//! remote's throughput while draining). The same drawing goes to an SVG
//! (inline in the page) and to a PNG. Text uses DejaVu Sans, compiled in:
//! no system font library.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::model::Report;
use crate::ReportError;

pub const WIDTH: u32 = 1200;
const TRAFFIC_PX: u32 = 290;

const BLUE: RGBColor = RGBColor(31, 119, 180);
const LIGHT_BLUE: RGBColor = RGBColor(174, 199, 232);
const ORANGE: RGBColor = RGBColor(255, 127, 14);
const GREEN: RGBColor = RGBColor(44, 160, 44);
const GREY: RGBColor = RGBColor(110, 110, 110);

fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            let bytes = match style {
                FontStyle::Bold => dejavu::sans::bold(),
                _ => dejavu::sans::regular(),
            };
            // The font is compiled in and known good.
            let _ = plotters::style::register_font("sans-serif", style, bytes);
        }
    });
}

/// Pixels per process lane.
fn lane_px(lanes: usize) -> u32 {
    (560 / lanes.max(1) as u32).clamp(2, 22)
}

/// The picture's size for a report.
pub fn size(r: &Report) -> (u32, u32) {
    let lanes = r.ranks.len().max(1);
    (WIDTH, 75 + lanes as u32 * lane_px(lanes) + 45 + TRAFFIC_PX)
}

fn err<E: std::fmt::Display>(e: E) -> ReportError {
    ReportError::Plot(e.to_string())
}

/// The timeline as an SVG document.
pub fn svg(r: &Report) -> Result<String, ReportError> {
    fonts();
    let mut out = String::new();
    {
        let area = SVGBackend::with_string(&mut out, size(r)).into_drawing_area();
        draw(&area, r)?;
        area.present().map_err(err)?;
    }
    Ok(out)
}

/// The timeline as a PNG file.
pub fn png(r: &Report, path: &Path) -> Result<(), ReportError> {
    fonts();
    let area = BitMapBackend::new(path, size(r)).into_drawing_area();
    draw(&area, r)?;
    area.present()
        .map_err(|e| ReportError::Plot(format!("{}: {e}", path.display())))
}

/// Enough decimals to tell ticks `step` apart.
fn decimals(step: f64) -> usize {
    if step >= 1.0 {
        0
    } else {
        ((-step.log10()).ceil() as usize).min(6)
    }
}

/// One of the picture's two charts: the same margins and left label area,
/// so that their time axes line up; the caption in `px`-pixel type, and
/// `x_labels` pixels under the chart for its x labels.
fn chart<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: String,
    px: u32,
    x_labels: u32,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(area);
    b.margin(10)
        .margin_right(30)
        .caption(caption, ("sans-serif", px).into_font())
        .set_label_area_size(LabelAreaPosition::Left, 95)
        .set_label_area_size(LabelAreaPosition::Bottom, x_labels);
    b
}

fn draw<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, r: &Report) -> Result<(), ReportError>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE).map_err(err)?;
    let (_, h) = area.dim_in_pixel();
    let (upper, lower) = area.split_vertically(h - TRAFFIC_PX);
    let x_end = r.end_s * 1.02;
    let font = |px: u32| ("sans-serif", px).into_font();
    let x_decimals = decimals(x_end / 12.0);
    let x_label = |x: &f64| format!("{x:.x_decimals$}");

    // The program: one lane per process, the first rank on top.
    let n = r.ranks.len();
    let lanes = n.max(1) as f64;
    // One line: control characters (a script's newlines) as spaces.
    let command: String = r
        .program
        .command
        .as_deref()
        .unwrap_or("")
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut title = format!(
        "job {}: program {:.2} s, {} process(es), {} consistency point(s)",
        r.job, r.summary.program_s, r.summary.processes, r.summary.consistency_points
    );
    if !command.is_empty() {
        let short: String = command.chars().take(60).collect();
        let more = if command.chars().count() > 60 {
            "..."
        } else {
            ""
        };
        title.push_str(&format!(" ({short}{more})"));
    }
    let mut top = chart(&upper, title, 16, 30)
        .build_cartesian_2d(0f64..x_end, -0.5f64..lanes - 0.5)
        .map_err(err)?;
    let labels: Vec<String> = r.ranks.iter().map(|k| k.label()).collect();
    let label_of = |y: &f64| {
        let k = y.round();
        if (y - k).abs() > 1e-6 || k < 0.0 || k >= lanes {
            return String::new();
        }
        labels
            .get(n.saturating_sub(1 + k as usize))
            .cloned()
            .unwrap_or_default()
    };
    top.configure_mesh()
        .disable_y_mesh()
        .y_labels(n.clamp(1, 24))
        .y_label_formatter(&label_of)
        .x_labels(12)
        .x_label_formatter(&x_label)
        .label_style(font(12))
        .light_line_style(WHITE)
        .draw()
        .map_err(err)?;
    // A consistency point is at least one pixel wide.
    let min_w = x_end / WIDTH as f64;
    for (i, k) in r.ranks.iter().enumerate() {
        let c = (n - 1 - i) as f64;
        let last_cp = k.cps.iter().map(|p| p.t1_s).fold(k.start_s, f64::max);
        let end = k.end_s.unwrap_or(last_cp).max(last_cp);
        top.draw_series(std::iter::once(Rectangle::new(
            [(k.start_s.max(0.0), c - 0.3), (end, c + 0.3)],
            LIGHT_BLUE.filled(),
        )))
        .map_err(err)?;
        top.draw_series(k.cps.iter().map(|p| {
            Rectangle::new(
                [(p.t0_s, c - 0.45), (p.t1_s.max(p.t0_s + min_w), c + 0.45)],
                ORANGE.filled(),
            )
        }))
        .map_err(err)?;
    }
    top.draw_series(DashedLineSeries::new(
        [(r.program.end_s, -0.5), (r.program.end_s, lanes - 0.5)],
        6,
        4,
        GREY.stroke_width(1),
    ))
    .map_err(err)?;

    // The drain's traffic to the remote.
    let rates = r.traffic.mb_per_s();
    let peak = rates.iter().copied().fold(0.0, f64::max);
    let mean = r.summary.throughput_bps / 1e6;
    let y_top = (peak.max(mean) * 1.15).max(0.1);
    let y_decimals = decimals(y_top / 5.0);
    let caption = format!(
        "drain to the remote: {} in {} epoch(s), {:.1} MB/s while draining (dashed), {:.2} s after the program ended",
        crate::html::human_bytes(r.summary.bytes_drained),
        r.summary.epochs_drained,
        mean,
        r.summary.wait_after_program_s
    );
    let mut bottom = chart(&lower, caption, 14, 45)
        .build_cartesian_2d(0f64..x_end, 0f64..y_top)
        .map_err(err)?;
    bottom
        .configure_mesh()
        .x_labels(12)
        .x_label_formatter(&x_label)
        .y_labels(5)
        .y_label_formatter(&|y| format!("{y:.y_decimals$}"))
        .x_desc("seconds since the program started (dashed grey: its end)")
        .y_desc("MB/s to the remote")
        .label_style(font(12))
        .axis_desc_style(font(13))
        .light_line_style(WHITE)
        .draw()
        .map_err(err)?;
    let bin = r.traffic.bin_s;
    let steps = rates
        .iter()
        .enumerate()
        .flat_map(|(i, &v)| [(i as f64 * bin, v), ((i + 1) as f64 * bin, v)]);
    bottom
        .draw_series(
            AreaSeries::new(steps, 0.0, GREEN.mix(0.35)).border_style(GREEN.stroke_width(1)),
        )
        .map_err(err)?;
    if mean > 0.0 {
        bottom
            .draw_series(DashedLineSeries::new(
                [(0.0, mean), (x_end, mean)],
                8,
                5,
                BLUE.stroke_width(1),
            ))
            .map_err(err)?;
    }
    bottom
        .draw_series(DashedLineSeries::new(
            [(r.program.end_s, 0.0), (r.program.end_s, y_top)],
            6,
            4,
            GREY.stroke_width(1),
        ))
        .map_err(err)?;
    Ok(())
}
