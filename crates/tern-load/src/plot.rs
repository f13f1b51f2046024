//! Charts of one or more runs: latency by percentile and throughput over time, as PNG or SVG.
//!
//! Text is drawn with a font compiled in (Ubuntu Light, `tern_chart::register_fonts`) through
//! plotters' `ab_glyph` renderer, so PNG charts need no system font.

use std::path::Path;

use anyhow::Context;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::Report;

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];
/// Percentiles past 99.9999 are drawn at this many nines.
const MAX_NINES: f64 = 6.0;

fn nines(percentile: f64) -> f64 {
    if percentile >= 100.0 {
        MAX_NINES
    } else {
        (-(1.0 - percentile / 100.0).log10()).min(MAX_NINES)
    }
}

const SIZE: (u32, u32) = (1200, 500);

/// The file format of a chart, by the name of its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartFormat {
    Png,
    Svg,
}

impl ChartFormat {
    /// PNG when the name ends in `.png` (any case), SVG otherwise.
    pub fn of(path: &Path) -> ChartFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("png") => ChartFormat::Png,
            _ => ChartFormat::Svg,
        }
    }
}

/// Writes both charts for the labelled runs (one run, or several overlaid) to `path`, as PNG
/// or SVG by its name ([`ChartFormat::of`]).
pub fn write_charts(path: &Path, runs: &[(&str, &Report)]) -> anyhow::Result<()> {
    tern_chart::register_fonts();
    let drawn = match ChartFormat::of(path) {
        ChartFormat::Png => draw(BitMapBackend::new(path, SIZE).into_drawing_area(), runs),
        ChartFormat::Svg => draw(SVGBackend::new(path, SIZE).into_drawing_area(), runs),
    };
    drawn.map_err(|e| anyhow::anyhow!("drawing {}: {e}", path.display()))?;
    std::fs::metadata(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    runs: &[(&str, &Report)],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);

    let max_latency = runs
        .iter()
        .flat_map(|(_, r)| r.latency_curve.iter().map(|p| p.latency_us))
        .fold(1.0f64, f64::max);
    let min_latency = runs
        .iter()
        .flat_map(|(_, r)| r.latency_curve.iter().map(|p| p.latency_us))
        .fold(max_latency, f64::min)
        .max(0.1);
    let mut chart = ChartBuilder::on(&left)
        .caption(
            "Latency by percentile (from scheduled send)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            0.0..MAX_NINES,
            (min_latency * 0.8..max_latency * 1.25).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (us)")
        .x_labels(7)
        .x_label_formatter(&|x| format!("{}%", 100.0 - 100.0 * 10f64.powf(-x)))
        .draw()?;
    for (i, (label, report)) in runs.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = report
            .latency_curve
            .iter()
            .map(|p| (nines(p.percentile), p.latency_us.max(min_latency)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;

    let seconds = runs
        .iter()
        .map(|(_, r)| r.timeline_per_s.len())
        .max()
        .unwrap_or(1)
        .max(1);
    let max_rate = runs
        .iter()
        .flat_map(|(_, r)| r.timeline_per_s.iter().copied())
        .max()
        .unwrap_or(1)
        .max(1);
    let mut chart = ChartBuilder::on(&right)
        .caption("Throughput over time", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0u64..seconds as u64, 0u64..max_rate + max_rate / 10)?;
    chart
        .configure_mesh()
        .x_desc("second (warm-up included)")
        .y_desc("replies / s")
        .draw()?;
    for (i, (label, report)) in runs.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points = report
            .timeline_per_s
            .iter()
            .enumerate()
            .map(|(s, &n)| (s as u64, n));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::report::{CurvePoint, Percentiles};

    fn report(scale: f64) -> Report {
        Report {
            config: Config::default(),
            measured_s: 1.0,
            requests: 10,
            keys: 10,
            requests_per_s: 10.0,
            keys_per_s: 10.0,
            latency_us: Percentiles::default(),
            service_latency_us: Percentiles::default(),
            latency_curve: [50.0, 99.0, 99.9, 100.0]
                .iter()
                .map(|&p| CurvePoint {
                    percentile: p,
                    latency_us: scale * (1.0 + p),
                })
                .collect(),
            outcomes: Default::default(),
            errors: 0,
            unsent: 0,
            client_cpu_s: 0.0,
            requests_per_client_cpu_s: None,
            server_cpu_s: None,
            server_user_s: None,
            server_system_s: None,
            requests_per_server_cpu_s: None,
            keys_per_server_cpu_s: None,
            timeline_per_s: vec![5, 10, 8],
            connection_error: None,
        }
    }

    #[test]
    fn writes_an_svg_with_both_charts_and_both_runs() {
        let dir = std::env::temp_dir().join(format!("tern-load-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("chart.svg");
        write_charts(
            &path,
            &[("first run", &report(1.0)), ("second run", &report(3.0))],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for text in [
            "Latency by percentile",
            "Throughput over time",
            "first run",
            "second run",
            "99.9%",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writes_a_png_that_decodes() {
        let dir = std::env::temp_dir().join(format!("tern-load-png-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("chart.PNG");
        write_charts(&path, &[("run", &report(1.0)), ("other", &report(2.0))]).unwrap();
        let image = image::open(&path).unwrap().to_rgb8();
        assert_eq!(image.dimensions(), SIZE);
        // Not a blank canvas: the curves and the text are drawn in colours other than white.
        let colours: std::collections::HashSet<[u8; 3]> = image.pixels().map(|p| p.0).collect();
        assert!(colours.len() > 10, "{} colours", colours.len());
        assert!(colours.contains(&[COLORS[1].0, COLORS[1].1, COLORS[1].2]));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(ChartFormat::of(Path::new("a.svg")), ChartFormat::Svg);
        assert_eq!(ChartFormat::of(Path::new("a.json")), ChartFormat::Svg);
    }

    #[test]
    fn percentiles_map_to_nines() {
        assert_eq!(nines(0.0), 0.0);
        assert!((nines(99.0) - 2.0).abs() < 1e-9);
        assert!((nines(99.9) - 3.0).abs() < 1e-9);
        assert_eq!(nines(100.0), MAX_NINES);
    }
}
