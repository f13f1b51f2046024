//! Hand-written LightGBM text models with known answers: how each decision type routes NaN, zero, values near
//! zero and missing features; single-leaf trees, unbalanced trees and the sigmoid; the feature-list check; and
//! the clear error for every kind of truncated, malformed or unsupported file. A property test feeds arbitrary
//! rows (NaN, infinities, short and long) to `score` and `score_batch`.

use proptest::prelude::*;
use tern_model::{Model, ModelError};

const LEFT: f64 = 1.0;
const RIGHT: f64 = 2.0;

/// A model on features `a b c` with the given objective and `Tree=N` blocks, as LightGBM lays it out.
fn model_text(objective: &str, trees: &[String]) -> String {
    let sizes = vec!["100"; trees.len()].join(" ");
    let mut text = format!(
        "tree\nversion=v4\nnum_class=1\nnum_tree_per_iteration=1\nlabel_index=0\nmax_feature_idx=2\n\
         objective={objective}\nfeature_names=a b c\nfeature_infos=[0:1] [0:1] [0:1]\ntree_sizes={sizes}\n\n"
    );
    for (index, tree) in trees.iter().enumerate() {
        text += &format!("Tree={index}\n{tree}\n\n");
    }
    text + "end of trees\n\nfeature_importances:\na=1\n\nparameters:\n[boosting: gbdt]\nend of parameters\n\npandas_categorical:null\n"
}

/// A tree block from its split arrays (space-separated) and leaf values.
fn tree(
    features: &str,
    thresholds: &str,
    decisions: &str,
    left: &str,
    right: &str,
    leaves: &str,
) -> String {
    let num_leaves = leaves.split_whitespace().count();
    format!(
        "num_leaves={num_leaves}\nnum_cat=0\nsplit_feature={features}\nsplit_gain=1\nthreshold={thresholds}\n\
         decision_type={decisions}\nleft_child={left}\nright_child={right}\nleaf_value={leaves}\n\
         leaf_weight=1\nleaf_count=1\ninternal_value=0\ninternal_weight=0\ninternal_count=2\nis_linear=0\n\
         shrinkage=1"
    )
}

/// One split on feature `a`: LEFT on the left, RIGHT on the right.
fn one_split(decision_type: u8, threshold: &str) -> Model {
    let split = tree(
        "0",
        threshold,
        &decision_type.to_string(),
        "-1",
        "-2",
        "1 2",
    );
    Model::parse(&model_text("regression", &[split])).unwrap()
}

/// a <= 0 ? 10 : (b <= 0 ? (c <= 0 ? 30 : 40) : 20): leaves at depths 1, 2 and 3.
fn unbalanced_tree() -> String {
    tree(
        "0 1 2",
        "0 0 0",
        "0 0 0",
        "-1 2 -3",
        "1 -2 -4",
        "10 20 30 40",
    )
}

fn error_message(text: &str) -> String {
    Model::parse(text).unwrap_err().to_string()
}

#[test]
fn without_a_missing_type_nan_is_zero_and_the_default_direction_is_ignored() {
    let model = one_split(0, "0.5");
    assert_eq!(
        model.score(&[0.5]),
        LEFT,
        "equal to the threshold goes left"
    );
    assert_eq!(model.score(&[0.7]), RIGHT);
    assert_eq!(model.score(&[f64::NEG_INFINITY]), LEFT);
    assert_eq!(model.score(&[f64::INFINITY]), RIGHT);
    assert_eq!(model.score(&[f64::NAN]), LEFT, "NaN is 0, and 0 <= 0.5");
    assert_eq!(model.score(&[]), LEFT, "a missing feature is NaN");
    for decision_type in [0, 2] {
        let model = one_split(decision_type, "-0.5");
        assert_eq!(model.score(&[f64::NAN]), RIGHT, "NaN is 0, and 0 > -0.5");
        assert_eq!(model.score(&[0.0]), RIGHT);
        assert_eq!(model.score(&[-0.6]), LEFT);
    }
}

#[test]
fn with_missing_type_zero_zero_and_nan_take_the_default_direction() {
    let default_right = one_split(1 << 2, "1");
    for missing in [0.0, -0.0, 1e-36, -1e-36, f64::NAN] {
        assert_eq!(default_right.score(&[missing]), RIGHT, "{missing}");
    }
    assert_eq!(
        default_right.score(&[1e-30]),
        LEFT,
        "not within LightGBM's zero threshold"
    );
    assert_eq!(default_right.score(&[0.5]), LEFT);
    assert_eq!(default_right.score(&[2.0]), RIGHT);

    let default_left = one_split(1 << 2 | 2, "-1");
    assert_eq!(default_left.score(&[0.0]), LEFT);
    assert_eq!(default_left.score(&[f64::NAN]), LEFT);
    assert_eq!(default_left.score(&[0.5]), RIGHT);
    assert_eq!(default_left.score(&[-2.0]), LEFT);
}

#[test]
fn with_missing_type_nan_only_nan_takes_the_default_direction() {
    let default_right = one_split(2 << 2, "1");
    assert_eq!(default_right.score(&[f64::NAN]), RIGHT);
    assert_eq!(default_right.score(&[]), RIGHT);
    assert_eq!(default_right.score(&[0.0]), LEFT);
    assert_eq!(default_right.score(&[2.0]), RIGHT);

    let default_left = one_split(2 << 2 | 2, "-1");
    assert_eq!(default_left.score(&[f64::NAN]), LEFT);
    assert_eq!(default_left.score(&[0.0]), RIGHT);
    assert_eq!(default_left.score(&[-2.0]), LEFT);
}

#[test]
fn infinite_thresholds_split_nan_from_every_number() {
    // What LightGBM writes to split NaN from all numbers (`inf`, NaN right), and the mirror image.
    let model = one_split(2 << 2, "inf");
    for number in [f64::MAX, f64::INFINITY, f64::NEG_INFINITY, 0.0] {
        assert_eq!(model.score(&[number]), LEFT, "{number}");
    }
    assert_eq!(model.score(&[f64::NAN]), RIGHT);
    let model = one_split(2 << 2 | 2, "-inf");
    assert_eq!(model.score(&[f64::NAN]), LEFT);
    assert_eq!(model.score(&[f64::NEG_INFINITY]), LEFT);
    assert_eq!(model.score(&[-f64::MAX]), RIGHT);
    let model = one_split(1 << 2, "inf");
    assert_eq!(
        model.score(&[0.0]),
        RIGHT,
        "zero is missing, missing goes right"
    );
    assert_eq!(model.score(&[f64::INFINITY]), LEFT);
}

#[test]
fn values_within_the_zero_threshold_are_zero() {
    // LightGBM's input layer stores them as 0, which is <= 0 (1e-36 itself is not).
    let model = one_split(2 << 2, "0");
    assert_eq!(model.score(&[1e-36]), LEFT);
    assert_eq!(model.score(&[1e-30]), RIGHT);
}

#[test]
fn trees_are_summed_and_a_binary_model_applies_its_sigmoid() {
    let single_leaf = "num_leaves=1\nnum_cat=0\nsplit_feature=\nsplit_gain=\nthreshold=\ndecision_type=\n\
                       left_child=\nright_child=\nleaf_value=0.25\nleaf_weight=\nleaf_count=\n\
                       internal_value=\ninternal_weight=\ninternal_count=\nis_linear=0\nshrinkage=1"
        .to_owned();
    let text = model_text("binary sigmoid:2", &[single_leaf, unbalanced_tree()]);
    let model = Model::parse(&text).unwrap();
    assert_eq!(model.trees(), 2);
    assert_eq!(model.num_features(), 3);
    assert_eq!(model.feature_names(), ["a", "b", "c"]);
    let sigmoid = |raw: f64| 1.0 / (1.0 + (-2.0 * raw).exp());
    assert_eq!(model.score(&[-1.0, 0.0, 0.0]), sigmoid(10.25));
    assert_eq!(model.score(&[1.0, 1.0, 0.0]), sigmoid(20.25));
    assert_eq!(model.score(&[1.0, -1.0, -1.0]), sigmoid(30.25));
    assert_eq!(model.score(&[1.0, -1.0, 1.0]), sigmoid(40.25));
}

#[test]
fn a_batch_scores_each_row_as_score_does() {
    let model = Model::parse(&model_text("lambdarank", &[unbalanced_tree()])).unwrap();
    let cases = [
        [-1.0, 0.0, 0.0],
        [1.0, 1.0, 0.0],
        [1.0, -1.0, -1.0],
        [1.0, -1.0, 1.0],
    ];
    // More rows than one block, and a short last row whose missing `c` is 0, so <= 0.
    let mut rows: Vec<f64> = cases.iter().cycle().take(41).flatten().copied().collect();
    rows.extend([1.0, -1.0]);
    let mut out = vec![99.0];
    model.score_batch(&rows, &mut out);
    let expected: Vec<f64> = [10.0, 20.0, 30.0, 40.0]
        .into_iter()
        .cycle()
        .take(41)
        .chain([30.0])
        .collect();
    assert_eq!(out, expected);
    model.score_batch(&[], &mut out);
    assert!(out.is_empty());
}

#[test]
fn the_version_is_a_hash_of_the_text() {
    let text = model_text("regression", &[unbalanced_tree()]);
    let version = Model::parse(&text).unwrap().version().to_owned();
    assert_eq!(version.len(), 16);
    assert!(version.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(Model::parse(&text).unwrap().version(), version);
    let retrained = text.replace("10 20 30 40", "10 20 30 41");
    assert_ne!(Model::parse(&retrained).unwrap().version(), version);
}

#[test]
fn load_reads_a_file_and_names_it_when_it_cannot() {
    let dir = tern_testkit::files::temp_dir("model-load");
    let path = dir.join("model.txt");
    let text = model_text("regression", &[unbalanced_tree()]);
    std::fs::write(&path, &text).unwrap();
    let model = Model::load(&path).unwrap();
    assert_eq!(model.version(), Model::parse(&text).unwrap().version());
    std::fs::remove_file(&path).unwrap();
    let error = Model::load(&path).unwrap_err();
    assert!(matches!(error, ModelError::Read { .. }));
    assert!(error.to_string().contains("model.txt"), "{error}");
}

#[test]
fn check_features_names_the_first_difference() {
    let model = one_split(0, "0");
    model.check_features(&["a", "b", "c"]).unwrap();
    let renamed = model
        .check_features(&["a", "x", "c"])
        .unwrap_err()
        .to_string();
    assert_eq!(
        renamed,
        "feature lists differ at position 1: the model has `b`, the caller computes `x`"
    );
    let short = model.check_features(&["a", "b"]).unwrap_err().to_string();
    assert!(
        short.contains("position 2") && short.contains("no feature (it has 2)"),
        "{short}"
    );
    let long = model
        .check_features(&["a", "b", "c", "d"])
        .unwrap_err()
        .to_string();
    assert!(
        long.contains("position 3") && long.contains("`d`"),
        "{long}"
    );
}

#[test]
fn every_truncation_of_a_model_is_an_error() {
    let text = model_text("binary sigmoid:1", &[unbalanced_tree(), unbalanced_tree()]);
    for cut in 0..text.len() {
        let prefix = &text[..cut];
        match Model::parse(prefix) {
            Ok(_) => assert!(prefix.contains("end of trees"), "{prefix:?} parsed"),
            Err(error) => {
                assert!(!prefix.contains("end of trees"), "{prefix:?}: {error}");
                assert!(error.to_string().contains("line "), "{error}");
            }
        }
    }
    let before_the_end = &text[..text.find("end of trees").unwrap()];
    assert!(error_message(before_the_end).contains("ends before `end of trees` (truncated file?)"));
}

#[test]
fn a_file_that_is_not_a_model_says_so() {
    for text in ["", "hello\n", "{\"trees\": []}"] {
        assert!(error_message(text)
            .starts_with("malformed LightGBM model, line 1: not a LightGBM text model"));
    }
}

#[test]
fn malformed_fields_are_named_with_their_line() {
    let valid = model_text("regression", &[unbalanced_tree()]);
    let line_of = |key: &str| {
        valid
            .lines()
            .position(|line| line.starts_with(key))
            .unwrap()
            + 1
    };
    let broken = |from: &str, to: &str| {
        assert!(valid.contains(from), "{from}");
        error_message(&valid.replacen(from, to, 1))
    };
    assert_eq!(
        broken("threshold=0 0 0", "threshold=0 abc 0"),
        format!(
            "malformed LightGBM model, line {}: tree 0: `threshold` value 1 (`abc`) is not a valid number",
            line_of("threshold=")
        )
    );
    assert!(
        broken("threshold=0 0 0", "threshold=0 0").contains("`threshold` has 2 values, expected 3")
    );
    assert!(broken("split_feature=0 1 2", "split_feature=0 1 7")
        .contains("node 2 splits on feature 7, but the model has 3"));
    assert!(broken("left_child=-1 2 -3", "left_child=-1 0 -3").contains("reached twice"));
    assert!(
        broken("right_child=1 -2 -4", "right_child=1 -2 -9").contains("child -9 is out of range")
    );
    assert!(broken("leaf_value=10 20 30 40", "leaf_value=10 20 nan 40")
        .contains("leaf 2's value is not finite"));
    assert!(broken("threshold=0 0 0", "threshold=0 nan 0").contains("node 1's threshold is NaN"));
    assert!(
        broken("decision_type=0 0 0", "decision_type=0 12 0").contains("unknown decision type 12")
    );
    assert!(broken("num_leaves=4\n", "").contains("tree 0 has no `num_leaves=` line"));
    assert!(broken("feature_names=a b c", "feature_names=a b")
        .contains("lists 2 names, but `max_feature_idx` means 3"));
    assert!(broken("max_feature_idx=2", "max_feature_idx=-1").contains("a model needs a feature"));
    assert!(broken("objective=regression\n", "").contains("the header has no `objective=` line"));
    assert!(broken("Tree=0", "Tree=1").contains("expected `Tree=0`, found `Tree=1`"));
    assert!(broken("tree_sizes=100", "tree_sizes=100 100")
        .contains("`tree_sizes` lists 2 trees but the file has 1"));
    assert!(
        broken("is_linear=0\n", "is_linear=0\nis_linear=0\n").contains("`is_linear` appears twice")
    );
    assert!(broken("shrinkage=1", "shrinkage")
        .contains("tree 0: expected `key=value`, found `shrinkage`"));
}

#[test]
fn unsupported_models_are_refused() {
    let valid = model_text("regression", &[unbalanced_tree()]);
    let refused = |from: &str, to: &str| {
        let error = Model::parse(&valid.replacen(from, to, 1)).unwrap_err();
        assert!(matches!(error, ModelError::Unsupported(_)), "{error}");
        error.to_string()
    };
    assert!(refused("decision_type=0 0 0", "decision_type=0 1 0")
        .contains("tree 0 node 1 is a categorical split"));
    assert!(refused("num_cat=0", "num_cat=1").contains("tree 0 has categorical splits"));
    assert!(refused("is_linear=0", "is_linear=1").contains("linear tree"));
    assert!(refused("num_class=1", "num_class=3").contains("multiclass"));
    assert!(refused("objective=regression", "objective=poisson").contains("`objective=poisson`"));
    assert!(refused("objective=regression", "objective=regression sqrt").contains("square root"));
    assert!(refused("feature_names=", "average_output\nfeature_names=").contains("random-forest"));
}

/// Any f64: NaN, infinities, subnormals, zeros of both signs.
fn feature_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(1e-36),
        -2.0..2.0,
    ]
}

proptest! {
    #[test]
    fn scoring_never_panics_and_batches_agree(rows in prop::collection::vec(feature_value(), 0..40)) {
        let trees = [unbalanced_tree(), tree("2 0", "1e-35 -1", "10 4", "1 -2", "-1 -3", "-1 0.5 3")];
        let model = Model::parse(&model_text("binary sigmoid:1", &trees)).unwrap();
        let mut out = Vec::new();
        model.score_batch(&rows, &mut out);
        prop_assert_eq!(out.len(), rows.len().div_ceil(3));
        for (row, score) in rows.chunks(3).zip(&out) {
            prop_assert!((0.0..=1.0).contains(score));
            prop_assert_eq!(score.to_bits(), model.score(row).to_bits());
        }
        // A row longer than the model's features: the extra values are ignored.
        prop_assert!(model.score(&rows).is_finite());
    }
}
