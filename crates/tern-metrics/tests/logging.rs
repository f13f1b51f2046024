//! Logging setup: lines reach the file through the non-blocking writer, in both formats.

use tern_metrics::logging::{self, LogConfig, LogFormat};

fn log_to_file(format: LogFormat, filter: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.log");
    let config = LogConfig {
        filter: filter.into(),
        format,
        file: Some(path.clone()),
        ..LogConfig::default()
    };
    let (subscriber, guard) = logging::build(&config).unwrap();
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!(answer = 42, "service started");
        tracing::debug!("debug detail");
        tracing::warn!(target: "tern_cache", "cache warning");
    });
    assert_eq!(guard.dropped_lines(), 0);
    drop(guard); // flushes the queue and joins the writer thread
    std::fs::read_to_string(&path).unwrap()
}

#[test]
fn json_lines_are_written_and_filtered() {
    let text = log_to_file(LogFormat::Json, "info");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["level"], "INFO");
    assert_eq!(lines[0]["fields"]["message"], "service started");
    assert_eq!(lines[0]["fields"]["answer"], 42);
    assert_eq!(lines[1]["level"], "WARN");
    assert_eq!(lines[1]["target"], "tern_cache");
}

#[test]
fn text_lines_honour_per_target_directives() {
    let text = log_to_file(LogFormat::Text, "warn,logging=debug");
    assert!(
        text.contains("service started") && text.contains("answer=42"),
        "{text}"
    );
    assert!(text.contains("debug detail"), "{text}");
    assert!(text.contains("cache warning"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "no ANSI colours in files: {text:?}"
    );
}

#[test]
fn bad_configuration_is_reported() {
    let bad_filter = LogConfig {
        filter: "info,[unclosed".into(),
        ..LogConfig::default()
    };
    let error = logging::build(&bad_filter).err().unwrap();
    assert!(error.to_string().contains("invalid log filter"), "{error}");
    let bad_path = LogConfig {
        file: Some("/nonexistent-dir/tern.log".into()),
        ..LogConfig::default()
    };
    let error = logging::build(&bad_path).err().unwrap();
    assert!(error.to_string().contains("opening log file"), "{error}");
    assert!("yaml".parse::<LogFormat>().is_err());
    assert_eq!("json".parse::<LogFormat>().unwrap(), LogFormat::Json);
}

#[test]
fn init_installs_the_global_subscriber_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("global.log");
    let config = LogConfig {
        file: Some(path.clone()),
        ..LogConfig::default()
    };
    let guard = logging::init(&config).unwrap();
    // A second setup (`tern run` starts several services) leaves the first in place, but still
    // refuses a filter that does not parse.
    let second = dir.path().join("second.log");
    let again = LogConfig {
        file: Some(second.clone()),
        ..LogConfig::default()
    };
    drop(logging::init(&again).unwrap());
    assert!(!second.exists(), "the second setup opened its file");
    let bad_filter = LogConfig {
        filter: "info,[unclosed".into(),
        ..LogConfig::default()
    };
    let error = logging::init(&bad_filter).err().unwrap();
    assert!(error.to_string().contains("invalid log filter"), "{error}");
    // Another thread without a scoped subscriber logs through the global one.
    std::thread::spawn(|| tracing::info!("from the global subscriber"))
        .join()
        .unwrap();
    drop(guard);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("from the global subscriber"), "{text}");
}
