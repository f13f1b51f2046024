//! tern-model scores as LightGBM does, row for row. A synthetic training set (missing values, features that
//! are mostly exact zeros, values within LightGBM's zero threshold, a label that depends on the features
//! nonlinearly) is trained by `scripts/train_model.py` for each objective, and every row the script wrote with
//! Python's prediction (`--parity`) is scored again in Rust. Skipped, with a message, where python3 cannot
//! import lightgbm, except in CI (`CI=true`), where that fails.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use tern_model::Model;

const FEATURES: [&str; 12] = [
    "follows_in_common",
    "days_since_active",
    "posts_per_week",
    "liked_before",
    "mutual_score",
    "reply_rate",
    "same_language",
    "follower_count",
    "distance_km",
    "faint_signal",
    "account_age_days",
    "noise",
];
const TRAINING_ROWS: usize = 20_000;
const PARITY_ROWS: usize = 5_000;
/// Candidates per viewer (lambdarank's query groups).
const GROUP_SIZE: usize = 30;

#[test]
fn binary_scores_match_lightgbm() {
    check_parity("binary", &[]);
}

#[test]
fn lambdarank_scores_match_lightgbm() {
    check_parity("lambdarank", &[]);
}

#[test]
fn binary_scores_with_zero_as_missing_match_lightgbm() {
    check_parity("binary", &["--zero-as-missing"]);
}

fn lightgbm_installed() -> bool {
    let installed = Command::new("python3")
        .args(["-c", "import lightgbm, numpy"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !installed {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "python3 cannot import lightgbm in CI (scripts/install-test-deps.sh installs it)"
        );
        eprintln!("SKIPPED: python3 cannot import lightgbm and numpy (scripts/install-test-deps.sh installs them)");
    }
    installed
}

fn check_parity(objective: &str, options: &[&str]) {
    if !lightgbm_installed() {
        return;
    }
    let dir = tern_testkit::files::temp_dir("model-parity");
    let name = format!("{objective}{}", options.concat());
    let train = dir.join(format!("{name}-train.csv"));
    let model_path = dir.join(format!("{name}.txt"));
    let parity = dir.join(format!("{name}-parity.csv"));
    std::fs::write(&train, training_csv()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/train_model.py");
    let status = Command::new("python3")
        .arg(&script)
        .args(["--objective", objective, "--trees", "150"])
        .arg("--train")
        .arg(&train)
        .arg("--out")
        .arg(&model_path)
        .arg("--parity")
        .arg(&parity)
        .args(["--parity-rows", &PARITY_ROWS.to_string()])
        .args(options)
        .status()
        .expect("python3 runs");
    assert!(status.success(), "train_model.py failed: {status}");

    let model = Model::load(&model_path).unwrap();
    model.check_features(&FEATURES).unwrap();
    assert_eq!(model.trees(), 150);
    let missing_types = missing_types(&model_path);
    let expected_missing_type = if options.is_empty() { 2 } else { 1 };
    assert!(
        missing_types.contains(&expected_missing_type),
        "the model has no split with missing type {expected_missing_type}: {missing_types:?}"
    );

    let (rows, expected) = read_parity(&parity);
    assert_eq!(rows.len(), PARITY_ROWS);
    let mut batch = Vec::new();
    model.score_batch(&rows.concat(), &mut batch);
    let mut largest_difference = 0.0_f64;
    for (index, ((row, lightgbm), batched)) in rows.iter().zip(&expected).zip(&batch).enumerate() {
        let score = model.score(row);
        assert_eq!(
            score.to_bits(),
            batched.to_bits(),
            "row {index}: score and score_batch differ"
        );
        let difference = (score - lightgbm).abs();
        assert!(
            difference <= 1e-5,
            "row {index} {row:?}: tern-model {score}, LightGBM {lightgbm}"
        );
        largest_difference = largest_difference.max(difference);
    }
    eprintln!(
        "{name}: {} rows, largest difference from LightGBM {largest_difference:e}",
        rows.len()
    );
    for file in [train, model_path, parity] {
        std::fs::remove_file(file).unwrap();
    }
}

/// The missing types (bits 2-3 of `decision_type`) of the model's splits.
fn missing_types(model_path: &Path) -> Vec<u8> {
    let text = std::fs::read_to_string(model_path).unwrap();
    let mut types: Vec<u8> = text
        .lines()
        .filter_map(|line| line.strip_prefix("decision_type="))
        .flat_map(str::split_whitespace)
        .map(|decision| decision.parse::<u8>().unwrap() >> 2)
        .collect();
    types.sort_unstable();
    types.dedup();
    types
}

/// The parity CSV: feature rows and LightGBM's score for each.
fn read_parity(path: &Path) -> (Vec<Vec<f64>>, Vec<f64>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header[..FEATURES.len()], FEATURES);
    assert_eq!(header[FEATURES.len()..], ["score"]);
    lines
        .map(|line| {
            let mut values: Vec<f64> = line.split(',').map(|v| v.parse().unwrap()).collect();
            let score = values.pop().unwrap();
            (values, score)
        })
        .unzip()
}

/// splitmix64: a deterministic stream, the same on every machine.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1_u64 << 53) as f64
    }

    fn chance(&mut self, probability: f64) -> bool {
        self.uniform() < probability
    }

    fn normal(&mut self) -> f64 {
        let radius = (-2.0 * (1.0 - self.uniform()).ln()).sqrt();
        radius * (std::f64::consts::TAU * self.uniform()).cos()
    }

    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }

    /// Missing with `probability`, else a value drawn by `value`.
    fn missing_or(&mut self, probability: f64, value: impl FnOnce(&mut Rng) -> f64) -> f64 {
        if self.chance(probability) {
            f64::NAN
        } else {
            value(self)
        }
    }
}

/// One candidate's features, in the order of `FEATURES`, and whether the viewer engaged.
fn candidate(rng: &mut Rng) -> ([f64; 12], bool) {
    let follows_in_common = if rng.chance(0.7) {
        0.0
    } else {
        (rng.uniform() * 40.0).ceil()
    };
    let days_since_active = rng.missing_or(0.1, |rng| rng.exponential(20.0));
    let posts_per_week = if rng.chance(0.5) {
        0.0
    } else {
        rng.exponential(5.0)
    };
    let liked_before = rng.missing_or(0.2, |rng| f64::from(u8::from(rng.chance(0.3))));
    let mutual_score = rng.missing_or(0.15, Rng::normal);
    let reply_rate = if rng.chance(0.3) { 0.0 } else { rng.uniform() };
    let same_language = f64::from(u8::from(rng.chance(0.6)));
    let follower_count = (rng.normal() * 2.0 + 6.0).exp().round();
    let distance_km = rng.missing_or(0.25, |rng| rng.uniform() * 5000.0);
    // Zeros, values LightGBM reads as zero (within 1e-35 of it), and a real signal.
    let faint_signal = match rng.uniform() {
        u if u < 0.4 => 0.0,
        u if u < 0.45 => [1e-36, -1e-36, 1e-40, -5e-38][(u * 1000.0) as usize % 4],
        _ => rng.normal(),
    };
    let account_age_days = (rng.uniform() * 3000.0).floor();
    let noise = rng.normal();

    let logit = -1.0
        + 0.8 * follows_in_common.ln_1p()
        + if days_since_active.is_nan() {
            0.3
        } else {
            -0.03 * days_since_active
        }
        + 0.4 * posts_per_week.sin()
        + if liked_before.is_nan() {
            0.3
        } else {
            1.2 * liked_before - 0.2
        }
        + if mutual_score.is_nan() {
            -0.5
        } else {
            0.7 * mutual_score * (same_language - 0.3)
        }
        + 1.5 * (reply_rate - 0.5).powi(2)
        + 0.04 * follower_count.ln_1p()
        - if distance_km.is_nan() {
            0.0
        } else {
            distance_km / 5000.0
        }
        + faint_signal.signum() * 0.3 * f64::from(u8::from(faint_signal.abs() > 1e-30))
        + 0.5 * (account_age_days / 300.0).sin();
    let engaged = rng.chance(1.0 / (1.0 + (-logit).exp()));
    let features = [
        follows_in_common,
        days_since_active,
        posts_per_week,
        liked_before,
        mutual_score,
        reply_rate,
        same_language,
        follower_count,
        distance_km,
        faint_signal,
        account_age_days,
        noise,
    ];
    (features, engaged)
}

/// The training CSV: `group`, the features, `label`; missing values written both ways the script reads.
fn training_csv() -> String {
    let mut rng = Rng(20_240_601);
    let mut csv = format!("group,{},label\n", FEATURES.join(","));
    for row in 0..TRAINING_ROWS {
        let (features, engaged) = candidate(&mut rng);
        write!(csv, "v{}", row / GROUP_SIZE).unwrap();
        for value in features {
            let missing = if rng.chance(0.5) { "" } else { "nan" };
            if value.is_nan() {
                write!(csv, ",{missing}").unwrap();
            } else {
                write!(csv, ",{value:?}").unwrap();
            }
        }
        writeln!(csv, ",{}", u8::from(engaged)).unwrap();
    }
    csv
}
