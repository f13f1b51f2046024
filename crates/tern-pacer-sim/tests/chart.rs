//! The pacer simulator's chart as a file a person opens: PNG (decoded back, at the size drawn) or SVG by
//! the file's name, text drawn with the compiled-in font (tern-chart).

use tern_pacer_sim::{simulate, write_chart, SimConfig};
use tern_testkit::files::{png_size_and_colours, temp_dir};

#[test]
fn simulator_chart_is_png_or_svg_by_name() {
    let mut cfg = SimConfig::example(1);
    cfg.duration_ms = 2 * 3_600_000;
    for c in &mut cfg.campaigns {
        c.flight_end_ms = cfg.duration_ms;
    }
    let report = simulate(&cfg);
    let dir = temp_dir("pacer-sim-chart");
    let png = dir.join("spend.png");
    write_chart(&report, &png).unwrap();
    let (size, colours) = png_size_and_colours(&png);
    assert_eq!(size, (1100, 650));
    // Five campaigns in their own colours, anti-aliased text: far more than a blank canvas.
    assert!(colours > 20, "{colours} colours");
    let svg = dir.join("spend.svg");
    write_chart(&report, &svg).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("% of budget"));
    std::fs::remove_dir_all(&dir).unwrap();
}
