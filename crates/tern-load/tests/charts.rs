//! Charts as files a person opens: `tern load --plot`, as PNG
//! (decoded back, at the size drawn) and SVG, in one build where plotters draws text with the
//! compiled-in font.

use tern_load::cli::LoadArgs;
use tern_load::report::{CurvePoint, Percentiles};
use tern_load::{Config, Report};
use tern_testkit::files::{png_size_and_colours, temp_dir};

#[test]
fn compare_plots_a_png_of_two_reports() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }
    let dir = temp_dir("load-compare-png");
    let report = |scale: f64| Report {
        config: Config::default(),
        measured_s: 3.0,
        requests: 30,
        keys: 30,
        requests_per_s: 10.0,
        keys_per_s: 10.0,
        latency_us: Percentiles::default(),
        service_latency_us: Percentiles::default(),
        latency_curve: [0.0, 50.0, 99.0, 99.9, 100.0]
            .iter()
            .map(|&p| CurvePoint {
                percentile: p,
                latency_us: scale * (10.0 + p),
            })
            .collect(),
        outcomes: Default::default(),
        errors: 0,
        unsent: 0,
        client_cpu_s: 0.1,
        requests_per_client_cpu_s: None,
        server_cpu_s: None,
        server_user_s: None,
        server_system_s: None,
        requests_per_server_cpu_s: None,
        keys_per_server_cpu_s: None,
        timeline_per_s: vec![8, 10, 12, 10],
        connection_error: None,
    };
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    std::fs::write(&a, serde_json::to_string(&report(1.0)).unwrap()).unwrap();
    std::fs::write(&b, serde_json::to_string(&report(2.0)).unwrap()).unwrap();
    let png = dir.join("compare.png");
    let cli = Cli::try_parse_from([
        "tern-load",
        "--compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ])
    .unwrap();
    tern_load::run(&cli.load).unwrap();
    let (size, colours) = png_size_and_colours(&png);
    assert_eq!(size, (1200, 500));
    assert!(colours > 20, "{colours} colours");
    std::fs::remove_dir_all(&dir).unwrap();
}
