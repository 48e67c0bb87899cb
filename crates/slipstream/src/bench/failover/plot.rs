//! The failover bench's picture (seed 000, Figure 7): acknowledged
//! `w: "majority"` writes per second, counted per 100 ms, against seconds
//! since the fault, one line per trial, the fault instant as a vertical
//! line, each trial's window end and (kill) the old primary's restart as
//! marks.
//!
//! Drawn with `plotters` into a PNG from Rust, so that the bench needs no
//! Python stack; its text goes through `ab_glyph`, which needs a TrueType
//! font file: `--font`, else the first of `FONT_CANDIDATES` present.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::trial::{TrialReport, BUCKET};

/// Where common Linux distributions keep a sans-serif TrueType font
/// (Debian's fonts-dejavu-core first).
pub const FONT_CANDIDATES: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];
/// The largest font file the plot loads.
const FONT_BYTES_MAX: u64 = 32 * 1024 * 1024;
const WIDTH_PX: u32 = 1200;
const HEIGHT_PX: u32 = 640;
const FONT_FAMILY: &str = "sans-serif";

/// The font file's bytes: `font`, else the first candidate present.
fn font_bytes(font: Option<&Path>) -> Result<Vec<u8>, String> {
    let path = match font {
        Some(path) => path.to_owned(),
        None => FONT_CANDIDATES
            .iter()
            .map(PathBuf::from)
            .find(|path| path.is_file())
            .ok_or_else(|| format!("no TrueType font found in {FONT_CANDIDATES:?}; pass --font FILE.ttf"))?,
    };
    let size = std::fs::metadata(&path).map_err(|err| format!("font {}: {err}", path.display()))?.len();
    if size > FONT_BYTES_MAX {
        return Err(format!("font {} is {size} bytes; at most {FONT_BYTES_MAX}", path.display()));
    }
    std::fs::read(&path).map_err(|err| format!("font {}: {err}", path.display()))
}

/// Registers the font for the plot's text, once a process (plotters keeps
/// fonts for the life of the process, so the bytes are leaked on purpose).
fn load_font(font: Option<&Path>) -> Result<(), String> {
    static LOADED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    LOADED
        .get_or_init(|| {
            let bytes: &'static [u8] = Box::leak(font_bytes(font)?.into_boxed_slice());
            register_font(FONT_FAMILY, FontStyle::Normal, bytes)
                .map_err(|_| "the font is not a TrueType font plotters can read".to_owned())
        })
        .clone()
}

fn drawing_error(err: impl std::fmt::Display) -> String {
    format!("plot: {err}")
}

/// Writes the PNG of `reports` to `path`.
pub fn render(path: &Path, title: &str, reports: &[TrialReport], font: Option<&Path>) -> Result<(), String> {
    assert!(!reports.is_empty());
    load_font(font)?;
    let bucket_secs = BUCKET.as_secs_f64();
    // Each trial's timeline, as (seconds since the fault, writes per second).
    let series: Vec<Vec<(f64, f64)>> = reports
        .iter()
        .map(|report| {
            let fault_secs = report.fault_ms / 1000.0;
            let points = report.timeline.iter().enumerate();
            points
                .map(|(bucket, count)| (bucket as f64 * bucket_secs - fault_secs, *count as f64 / bucket_secs))
                .collect()
        })
        .collect();
    let x_min = series.iter().flat_map(|points| points.first()).map(|point| point.0).fold(0.0, f64::min);
    let x_max = series.iter().flat_map(|points| points.last()).map(|point| point.0).fold(1.0, f64::max) + bucket_secs;
    let y_max = series.iter().flatten().map(|point| point.1).fold(10.0, f64::max) * 1.1;

    let root = BitMapBackend::new(path, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE).map_err(drawing_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT_FAMILY, 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(x_min..x_max, 0.0..y_max)
        .map_err(drawing_error)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the fault")
        .y_desc("acknowledged w:majority writes/s (per 100 ms)")
        .label_style((FONT_FAMILY, 14))
        .y_label_formatter(&|writes| format!("{writes:.0}"))
        .draw()
        .map_err(drawing_error)?;
    chart
        .draw_series(LineSeries::new([(0.0, 0.0), (0.0, y_max)], BLACK.stroke_width(2)))
        .map_err(drawing_error)?
        .label("fault (window end: dot, old primary restarted: triangle)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    for (index, (report, points)) in reports.iter().zip(&series).enumerate() {
        let color = Palette99::pick(index).to_rgba();
        let label = match report.window_ms {
            Some(window) => format!("trial {}: window {:.0} ms", report.trial, window),
            None => format!("trial {}: no new primary", report.trial),
        };
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(1)))
            .map_err(drawing_error)?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        let marks = report.window_end_ms.map(|end| (end / 1000.0, y_max * 0.97));
        chart.draw_series(marks.map(|point| Circle::new(point, 4, color.filled()))).map_err(drawing_error)?;
        let restart = report.restart_ms.map(|at| ((at - report.fault_ms) / 1000.0, y_max * 0.93));
        chart.draw_series(restart.map(|point| TriangleMarker::new(point, 5, color.filled()))).map_err(drawing_error)?;
    }
    chart
        .configure_series_labels()
        .label_font((FONT_FAMILY, 12))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(drawing_error)?;
    root.present().map_err(drawing_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(trial: usize, window_ms: Option<f64>) -> TrialReport {
        let mut timeline = vec![40; 20];
        timeline.extend([0; 13]);
        timeline.extend([45; 30]);
        TrialReport {
            trial,
            kind: "kill",
            old_primary: "127.0.0.1:1".into(),
            new_primary: window_ms.map(|_| "127.0.0.1:2".into()),
            fault_ms: 2000.0,
            window_ms,
            window_start_ms: Some(-0.4),
            window_end_ms: window_ms,
            failed: 16,
            stalled: 0,
            errors_before_fault: 0,
            stall_threshold_ms: 100.0,
            steady_p99_us: 9000,
            steady_ops_per_sec: 400.0,
            restart_ms: Some(5200.0),
            fault_result: "ok".into(),
            timeline,
        }
    }

    /// Needs one of the candidate fonts (Debian: fonts-dejavu-core, on
    /// this project's machines).
    #[test]
    fn renders_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("failover.png");
        render(&path, "failover (kill): test", &[report(1, Some(1300.0)), report(2, None)], None).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(bytes.len() > 10_000, "a drawn chart, not an empty image: {} bytes", bytes.len());
    }

    #[test]
    fn a_missing_font_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = font_bytes(Some(&dir.path().join("none.ttf"))).unwrap_err();
        assert!(err.contains("none.ttf"), "{err}");
        assert!(!font_bytes(None).unwrap().is_empty(), "a candidate font is installed");
    }
}
