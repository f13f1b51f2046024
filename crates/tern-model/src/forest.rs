//! The flattened forest: every tree's nodes in one array, and scoring rows against it.

use std::fmt;
use std::path::PathBuf;

/// Why a model could not be loaded, or does not fit the caller's features.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read model file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("malformed LightGBM model, line {line}: {message}")]
    Malformed { line: usize, message: String },
    #[error("unsupported LightGBM model: {0}")]
    Unsupported(String),
    #[error("feature lists differ at position {position}: the model has {model}, the caller computes {caller}")]
    FeatureMismatch {
        position: usize,
        model: String,
        caller: String,
    },
}

/// LightGBM's `kZeroThreshold` (`1e-35f`, widened to f64): a value this close to zero is zero to it.
pub(crate) const ZERO_THRESHOLD: f64 = 1e-35_f32 as f64;

/// Rows [`Model::score_batch`] walks through a tree together: enough independent walks to keep the CPU busy
/// while each waits on its loads, few enough that their positions stay in registers (16 was slower, 4 much
/// slower).
pub(crate) const BLOCK: usize = 8;

/// What a split compares with its threshold: a feature with LightGBM's missing-value rule for the split
/// (`Tree::NumericalDecision`) applied to it. A row is prepared once per input, so a split is one comparison
/// however it treats NaN and zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Input {
    pub(crate) feature: u32,
    pub(crate) missing: Missing,
}

/// The missing-value rule of a split: its `decision_type`'s missing type and default direction. A value sent
/// left becomes -inf and one sent right NaN, which `value <= threshold` sends that way whatever the threshold
/// (LightGBM writes `inf` for a split of NaN from all numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Missing {
    /// Missing type None: NaN is 0.
    NanIsZero,
    /// Missing type NaN: NaN goes the default direction.
    NanLeft,
    NanRight,
    /// Missing type Zero: zero and NaN (which is 0 to it) go the default direction.
    ZeroAndNanLeft,
    ZeroAndNanRight,
}

impl Input {
    /// The value the split compares: LightGBM's input layer reads a value within `ZERO_THRESHOLD` of zero as
    /// 0, then the split's rule sends NaN (and zero) to its side.
    fn prepare(self, row: &[f64]) -> f64 {
        let value = row.get(self.feature as usize).copied().unwrap_or(f64::NAN);
        let value = if value.abs() <= ZERO_THRESHOLD {
            0.0
        } else {
            value
        };
        let missing = value.is_nan()
            || (value == 0.0
                && matches!(
                    self.missing,
                    Missing::ZeroAndNanLeft | Missing::ZeroAndNanRight
                ));
        match self.missing {
            _ if !missing => value,
            Missing::NanIsZero => 0.0,
            Missing::NanLeft | Missing::ZeroAndNanLeft => f64::NEG_INFINITY,
            Missing::NanRight | Missing::ZeroAndNanRight => f64::NAN,
        }
    }
}

/// One node of the flattened forest. A split's children are neighbours, left then right; a leaf's "children"
/// are itself, so walking a tree for its full depth ends on the leaf whichever path a row took, and every row
/// of a block takes the same number of steps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Node {
    /// A split's threshold; a leaf's output (LightGBM has folded the learning rate into it).
    pub(crate) value: f64,
    /// Which prepared input the split compares; `LEAF_INPUT` for a leaf.
    pub(crate) input: u32,
    /// Where the row goes if its input is <= `value`; the right child is the next node.
    pub(crate) left: u32,
}

/// The prepared input every leaf compares: -inf, which is <= any value, so a leaf leads to itself.
pub(crate) const LEAF_INPUT: u32 = 0;

/// A tree in the node array: its root, and how many steps reach its deepest leaf.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TreeSpan {
    pub(crate) root: u32,
    pub(crate) depth: u32,
}

/// What the objective does to the sum of the trees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Output {
    /// Regression and ranking objectives: the sum itself.
    Raw,
    /// `binary sigmoid:S`: a probability, 1 / (1 + exp(-S * sum)).
    Sigmoid(f64),
}

impl Output {
    fn apply(self, raw: f64) -> f64 {
        match self {
            Output::Raw => raw,
            // Written as LightGBM's `BinaryLogloss::ConvertOutput`, so the rounding is the same.
            Output::Sigmoid(sigmoid) => 1.0 / (1.0 + (-sigmoid * raw).exp()),
        }
    }
}

/// A loaded LightGBM model, ready to score rows of features in the order of [`Model::feature_names`].
pub struct Model {
    pub(crate) nodes: Vec<Node>,
    /// What the splits compare: prepared input `i + 1` is `inputs[i]` (0 is `LEAF_INPUT`).
    pub(crate) inputs: Vec<Input>,
    pub(crate) trees: Vec<TreeSpan>,
    pub(crate) feature_names: Vec<String>,
    pub(crate) output: Output,
    pub(crate) version: String,
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model")
            .field("version", &self.version)
            .field("trees", &self.trees.len())
            .field("output", &self.output)
            .field("feature_names", &self.feature_names)
            .finish_non_exhaustive()
    }
}

impl Model {
    /// The features the model was trained on, in the order [`Model::score`] takes them.
    pub fn feature_names(&self) -> &[String] {
        &self.feature_names
    }

    pub fn num_features(&self) -> usize {
        self.feature_names.len()
    }

    /// How many trees the model sums.
    pub fn trees(&self) -> usize {
        self.trees.len()
    }

    /// Identifies the model: the FNV-1a 64 hash of its file's text, in hex, so a service can report which
    /// model answered.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Checks that the caller computes the model's features, by name and in order; the error names the first
    /// position where the lists differ.
    pub fn check_features(&self, expected: &[&str]) -> Result<(), ModelError> {
        let model = &self.feature_names;
        let differs_at = model
            .iter()
            .zip(expected)
            .position(|(name, expected)| name != expected)
            .or_else(|| (model.len() != expected.len()).then(|| model.len().min(expected.len())));
        let Some(position) = differs_at else {
            return Ok(());
        };
        let describe = |name: Option<&str>, count: usize| match name {
            Some(name) => format!("`{name}`"),
            None => format!("no feature (it has {count})"),
        };
        Err(ModelError::FeatureMismatch {
            position,
            model: describe(model.get(position).map(String::as_str), model.len()),
            caller: describe(expected.get(position).copied(), expected.len()),
        })
    }

    /// The model's prediction for one row: a probability for a binary model, the raw score for regression
    /// and ranking. A missing feature is `f64::NAN`; features past the end of a short row are missing.
    pub fn score(&self, features: &[f64]) -> f64 {
        let mut prepared = vec![0.0; self.prepared_len()];
        self.prepare(features, &mut prepared);
        let mut raw = 0.0;
        for tree in &self.trees {
            let mut at = tree.root;
            for _ in 0..tree.depth {
                at = self.step(at, &prepared);
            }
            raw += self.nodes[at as usize].value;
        }
        self.output.apply(raw)
    }

    /// Scores `rows` (row-major, [`Model::num_features`] values per row) into `out`, which is cleared first:
    /// one score per row, equal to [`Model::score`] of that row. A shorter last row has its rest missing.
    pub fn score_batch(&self, rows: &[f64], out: &mut Vec<f64>) {
        out.clear();
        let row_len = self.num_features();
        let prepared_len = self.prepared_len();
        let mut prepared = vec![0.0; BLOCK * prepared_len];
        for block in rows.chunks(row_len * BLOCK) {
            let mut block_rows = block.chunks(row_len);
            for inputs in prepared.chunks_exact_mut(prepared_len) {
                // A last block's missing rows are scored as empty rows, and their scores dropped.
                self.prepare(block_rows.next().unwrap_or_default(), inputs);
            }
            let raw = self.block_tree_sums(&prepared);
            let count = block.len().div_ceil(row_len);
            out.extend(raw[..count].iter().map(|&sum| self.output.apply(sum)));
        }
    }

    fn prepared_len(&self) -> usize {
        self.inputs.len() + 1
    }

    fn prepare(&self, row: &[f64], prepared: &mut [f64]) {
        prepared[LEAF_INPUT as usize] = f64::NEG_INFINITY;
        for (value, input) in prepared[1..].iter_mut().zip(&self.inputs) {
            *value = input.prepare(row);
        }
    }

    /// Where a row with these prepared inputs goes from node `at`.
    #[inline(always)]
    fn step(&self, at: u32, prepared: &[f64]) -> u32 {
        let node = &self.nodes[at as usize];
        let goes_left = prepared[node.input as usize] <= node.value;
        node.left + u32::from(!goes_left)
    }

    /// The sums of the tree outputs for `BLOCK` prepared rows, added tree by tree in file order (the order
    /// LightGBM sums in, so the floating-point result is the same). The rows walk each tree in step, so their
    /// walks overlap in the CPU.
    fn block_tree_sums(&self, prepared: &[f64]) -> [f64; BLOCK] {
        let rows: [&[f64]; BLOCK] = std::array::from_fn(|row| {
            &prepared[row * self.prepared_len()..][..self.prepared_len()]
        });
        let mut sums = [0.0; BLOCK];
        for tree in &self.trees {
            let mut at = [tree.root; BLOCK];
            for _ in 0..tree.depth {
                for (at, row) in at.iter_mut().zip(rows) {
                    *at = self.step(*at, row);
                }
            }
            for (sum, at) in sums.iter_mut().zip(at) {
                *sum += self.nodes[at as usize].value;
            }
        }
        sums
    }
}
