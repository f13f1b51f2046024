//! The pacer simulator's chart as a file a person opens: PNG (decoded back, at the size drawn) or SVG by
//! the file's name, text drawn with the compiled-in font (tern-chart).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use tern_pacer::sim::{simulate, write_chart, SimConfig};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tern-pacer-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Decodes a PNG; answers its size and how many colours it uses.
fn decode(path: &Path) -> ((u32, u32), usize) {
    let image = image::open(path).unwrap().to_rgb8();
    let colours: HashSet<[u8; 3]> = image.pixels().map(|p| p.0).collect();
    (image.dimensions(), colours.len())
}

#[test]
fn simulator_chart_is_png_or_svg_by_name() {
    let mut cfg = SimConfig::example(1);
    cfg.duration_ms = 2 * 3_600_000;
    for c in &mut cfg.campaigns {
        c.flight_end_ms = cfg.duration_ms;
    }
    let report = simulate(&cfg);
    let dir = temp_dir("sim-chart");
    let png = dir.join("spend.png");
    write_chart(&report, &png).unwrap();
    let (size, colours) = decode(&png);
    assert_eq!(size, (1100, 650));
    // Five campaigns in their own colours, anti-aliased text: far more than a blank canvas.
    assert!(colours > 20, "{colours} colours");
    let svg = dir.join("spend.svg");
    write_chart(&report, &svg).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("% of budget"));
    std::fs::remove_dir_all(&dir).unwrap();
}
