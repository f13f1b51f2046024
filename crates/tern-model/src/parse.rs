//! LightGBM's text model format, read into the flattened forest: the header (`max_feature_idx=`,
//! `objective=`, `feature_names=`, ...), then one `Tree=N` block of `key=value` lines per tree, then
//! `end of trees` (what follows, feature importances and training parameters, is not needed to score). Every
//! field used is checked, and the trees' child links must form trees, so a loaded model cannot walk out of its
//! node array or loop.

use std::collections::HashMap;
use std::iter::Peekable;
use std::str::FromStr;

use std::path::Path;

use crate::forest::{Input, Missing, Node, Output, TreeSpan, LEAF_INPUT};
use crate::{Model, ModelError};

impl Model {
    /// Reads a model from LightGBM's text format. Categorical splits, linear trees, multiclass and
    /// random-forest models are refused, as is any objective whose output transform is not known here.
    pub fn parse(text: &str) -> Result<Model, ModelError> {
        parse(text)
    }

    /// Reads the model file at `path` (see [`Model::parse`]).
    pub fn load(path: &Path) -> Result<Model, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Read {
            path: path.to_owned(),
            source,
        })?;
        Model::parse(&text)
    }
}

/// The FNV-1a 64-bit hash of `text`, as 16 hex digits.
fn content_version(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// `decision_type` bits (LightGBM's `tree.h`): categorical split, default (missing) direction left, and the
/// missing type in bits 2-3.
const CATEGORICAL: u8 = 1;
const DEFAULT_LEFT: u8 = 2;
const MISSING_NONE: u8 = 0;
const MISSING_ZERO: u8 = 1;
const MISSING_NAN: u8 = 2;

/// A `key=value` line's value and its line number.
#[derive(Clone, Copy)]
struct Field<'a> {
    line: usize,
    value: &'a str,
}

/// The `key=value` lines of the header or of one tree, with where the block starts for errors about a
/// missing key.
struct Block<'a> {
    line: usize,
    what: String,
    fields: HashMap<&'a str, Field<'a>>,
}

type Lines<'a> =
    Peekable<std::iter::Map<std::iter::Enumerate<std::str::Lines<'a>>, LineNumber<'a>>>;
type LineNumber<'a> = fn((usize, &'a str)) -> (usize, &'a str);

fn malformed(line: usize, message: impl Into<String>) -> ModelError {
    ModelError::Malformed {
        line,
        message: message.into(),
    }
}

pub(crate) fn parse(text: &str) -> Result<Model, ModelError> {
    let number_from_one: LineNumber = |(index, line)| (index + 1, line);
    let mut lines: Lines = text.lines().enumerate().map(number_from_one).peekable();
    match lines.next() {
        Some((_, "tree")) => {}
        first => {
            let first = first.map_or("", |(_, line)| line);
            return Err(malformed(
                1,
                format!("not a LightGBM text model: the first line is `{first}`, not `tree`"),
            ));
        }
    }
    let header = read_block(&mut lines, 2, "the header".to_owned(), true)?;
    let num_features = read_num_features(&header)?;
    let feature_names = read_feature_names(&header, num_features)?;
    let output = read_objective(&header)?;
    refuse_unsupported_header(&header)?;

    let mut forest = Forest::default();
    loop {
        while lines.next_if(|(_, line)| line.trim().is_empty()).is_some() {}
        let Some((line, content)) = lines.next() else {
            return Err(malformed(
                text.lines().count(),
                "the model ends before `end of trees` (truncated file?)",
            ));
        };
        if content == "end of trees" {
            break;
        }
        let Some(index) = content.strip_prefix("Tree=") else {
            return Err(malformed(
                line,
                format!("expected `Tree=N` or `end of trees`, found `{content}`"),
            ));
        };
        if index.parse::<usize>().ok() != Some(forest.trees.len()) {
            return Err(malformed(
                line,
                format!("expected `Tree={}`, found `{content}`", forest.trees.len()),
            ));
        }
        let block = read_block(&mut lines, line, format!("tree {index}"), false)?;
        forest.add_tree(&block, num_features)?;
    }
    if let Some(sizes) = header.fields.get("tree_sizes") {
        let declared = sizes.value.split_whitespace().count();
        if declared != forest.trees.len() {
            return Err(malformed(
                sizes.line,
                format!(
                    "`tree_sizes` lists {declared} trees but the file has {}",
                    forest.trees.len()
                ),
            ));
        }
    }
    Ok(Model {
        nodes: forest.nodes,
        inputs: forest.inputs,
        trees: forest.trees,
        feature_names,
        output,
        version: content_version(text),
    })
}

/// Reads `key=value` lines up to a blank line, the next tree or the end of the trees. The header also has
/// bare flags (`average_output`), read as a key with an empty value.
fn read_block<'a>(
    lines: &mut Lines<'a>,
    start: usize,
    what: String,
    bare_flags: bool,
) -> Result<Block<'a>, ModelError> {
    let mut fields = HashMap::new();
    while let Some((line, text)) =
        lines.next_if(|(_, text)| !(text.trim().is_empty() || ends_block(text)))
    {
        let (key, value) = match text.split_once('=') {
            Some(pair) => pair,
            None if bare_flags => (text, ""),
            None => {
                return Err(malformed(
                    line,
                    format!("{what}: expected `key=value`, found `{text}`"),
                ))
            }
        };
        if fields.insert(key, Field { line, value }).is_some() {
            return Err(malformed(line, format!("{what}: `{key}` appears twice")));
        }
    }
    Ok(Block {
        line: start,
        what,
        fields,
    })
}

fn ends_block(text: &str) -> bool {
    text.starts_with("Tree=") || text == "end of trees"
}

impl<'a> Block<'a> {
    fn required(&self, key: &str) -> Result<Field<'a>, ModelError> {
        self.fields
            .get(key)
            .copied()
            .ok_or_else(|| malformed(self.line, format!("{} has no `{key}=` line", self.what)))
    }

    fn number<T: FromStr>(&self, key: &str) -> Result<T, ModelError> {
        let field = self.required(key)?;
        field.value.trim().parse().map_err(|_| {
            malformed(
                field.line,
                format!(
                    "{}: `{key}={}` is not a valid number",
                    self.what, field.value
                ),
            )
        })
    }

    /// The `count` numbers of an array field; `default` when the field is absent, if it may be.
    fn numbers<T: FromStr + Clone>(
        &self,
        key: &str,
        count: usize,
        default: Option<T>,
    ) -> Result<Vec<T>, ModelError> {
        let field = match (self.fields.get(key), default) {
            (Some(field), _) => *field,
            (None, Some(default)) => return Ok(vec![default; count]),
            (None, None) => self.required(key)?,
        };
        let values = field
            .value
            .split_whitespace()
            .enumerate()
            .map(|(position, word)| {
                word.parse().map_err(|_| {
                    malformed(
                        field.line,
                        format!(
                            "{}: `{key}` value {position} (`{word}`) is not a valid number",
                            self.what
                        ),
                    )
                })
            })
            .collect::<Result<Vec<T>, _>>()?;
        if values.len() != count {
            return Err(malformed(
                field.line,
                format!(
                    "{}: `{key}` has {} values, expected {count}",
                    self.what,
                    values.len()
                ),
            ));
        }
        Ok(values)
    }
}

fn read_num_features(header: &Block) -> Result<usize, ModelError> {
    let max_feature_idx: i64 = header.number("max_feature_idx")?;
    usize::try_from(max_feature_idx)
        .ok()
        .and_then(|max| max.checked_add(1))
        .ok_or_else(|| {
            let line = header.fields["max_feature_idx"].line;
            malformed(
                line,
                format!("`max_feature_idx={max_feature_idx}`: a model needs a feature"),
            )
        })
}

fn read_feature_names(header: &Block, num_features: usize) -> Result<Vec<String>, ModelError> {
    let field = header.required("feature_names")?;
    let names: Vec<String> = field.value.split_whitespace().map(str::to_owned).collect();
    if names.len() != num_features {
        return Err(malformed(
            field.line,
            format!(
                "`feature_names` lists {} names, but `max_feature_idx` means {num_features} features",
                names.len()
            ),
        ));
    }
    Ok(names)
}

/// The output transform of the `objective=` line (`binary sigmoid:1`, `lambdarank`, `regression`, ...).
fn read_objective(header: &Block) -> Result<Output, ModelError> {
    let field = header.required("objective")?;
    let mut words = field.value.split_whitespace();
    match words.next().unwrap_or("") {
        "binary" => {
            let sigmoid = words
                .find_map(|word| word.strip_prefix("sigmoid:"))
                .and_then(|sigmoid| sigmoid.parse::<f64>().ok())
                .filter(|sigmoid| sigmoid.is_finite())
                .ok_or_else(|| {
                    malformed(
                        field.line,
                        format!("`objective={}` has no valid `sigmoid:` parameter", field.value),
                    )
                })?;
            Ok(Output::Sigmoid(sigmoid))
        }
        "regression" | "regression_l1" | "lambdarank" | "rank_xendcg" => {
            if words.any(|word| word == "sqrt") {
                return Err(ModelError::Unsupported(format!(
                    "`objective={}`: regression on the square root of the label",
                    field.value
                )));
            }
            Ok(Output::Raw)
        }
        _ => Err(ModelError::Unsupported(format!(
            "`objective={}` (supported: binary, regression, regression_l1, lambdarank, rank_xendcg)",
            field.value
        ))),
    }
}

fn refuse_unsupported_header(header: &Block) -> Result<(), ModelError> {
    for key in ["num_class", "num_tree_per_iteration"] {
        if let Some(field) = header.fields.get(key) {
            if field.value.trim() != "1" {
                return Err(ModelError::Unsupported(format!(
                    "`{key}={}`: multiclass models",
                    field.value
                )));
            }
        }
    }
    if header.fields.contains_key("average_output") {
        return Err(ModelError::Unsupported(
            "`average_output`: random-forest models".to_owned(),
        ));
    }
    Ok(())
}

/// The node array being built, tree after tree, and the inputs its splits compare.
#[derive(Default)]
struct Forest {
    nodes: Vec<Node>,
    trees: Vec<TreeSpan>,
    inputs: Vec<Input>,
    input_index: HashMap<Input, u32>,
}

impl Forest {
    /// Appends a tree's nodes to the node array, breadth first.
    fn add_tree(&mut self, tree: &Block, num_features: usize) -> Result<(), ModelError> {
        let what = &tree.what;
        let num_leaves: usize = tree.number("num_leaves")?;
        if num_leaves == 0 {
            return Err(malformed(
                tree.required("num_leaves")?.line,
                format!("{what}: `num_leaves=0`"),
            ));
        }
        if tree.number::<usize>("num_cat")? > 0 {
            return Err(ModelError::Unsupported(format!(
                "{what} has categorical splits (encode categorical features as numbers)"
            )));
        }
        if tree.fields.contains_key("is_linear") && tree.number::<u8>("is_linear")? != 0 {
            return Err(ModelError::Unsupported(format!("{what} is a linear tree")));
        }
        let leaf_values: Vec<f64> = tree.numbers("leaf_value", num_leaves, None)?;
        if let Some(position) = leaf_values.iter().position(|v| !v.is_finite()) {
            return Err(malformed(
                tree.required("leaf_value")?.line,
                format!("{what}: leaf {position}'s value is not finite"),
            ));
        }
        let splits = num_leaves - 1;
        let base = self.nodes.len();
        let too_large = || ModelError::Unsupported("more than 2^32 nodes".to_owned());
        let index = |at: usize| u32::try_from(base + at).map_err(|_| too_large());
        let root = index(0)?;
        if splits == 0 {
            // A tree that could not split: LightGBM's `Tree::Predict` returns its one leaf's value.
            self.nodes.push(leaf(root, leaf_values[0]));
            self.trees.push(TreeSpan { root, depth: 0 });
            return Ok(());
        }

        let features: Vec<u32> = tree.numbers("split_feature", splits, None)?;
        if let Some(position) = features.iter().position(|&f| f as usize >= num_features) {
            return Err(malformed(
                tree.required("split_feature")?.line,
                format!(
                    "{what}: node {position} splits on feature {}, but the model has {num_features}",
                    features[position]
                ),
            ));
        }
        let thresholds: Vec<f64> = tree.numbers("threshold", splits, None)?;
        if let Some(position) = thresholds.iter().position(|t| t.is_nan()) {
            return Err(malformed(
                tree.required("threshold")?.line,
                format!("{what}: node {position}'s threshold is NaN"),
            ));
        }
        // LightGBM reads a tree without `decision_type` as all plain numerical splits.
        let decision_types: Vec<u8> = tree.numbers("decision_type", splits, Some(0))?;
        let left: Vec<i64> = tree.numbers("left_child", splits, None)?;
        let right: Vec<i64> = tree.numbers("right_child", splits, None)?;
        let depth = tree_depth(tree, num_leaves, &left, &right)?;
        let decision_line = tree
            .fields
            .get("decision_type")
            .map_or(tree.line, |f| f.line);
        let mut split_inputs = Vec::with_capacity(splits);
        for position in 0..splits {
            let decision = decision_types[position];
            if decision & CATEGORICAL != 0 {
                return Err(ModelError::Unsupported(format!(
                    "{what} node {position} is a categorical split (encode categorical features as numbers)"
                )));
            }
            let default_left = decision & DEFAULT_LEFT != 0;
            let missing = match (decision >> 2, default_left) {
                (MISSING_NONE, _) => Missing::NanIsZero,
                (MISSING_NAN, true) => Missing::NanLeft,
                (MISSING_NAN, false) => Missing::NanRight,
                (MISSING_ZERO, true) => Missing::ZeroAndNanLeft,
                (MISSING_ZERO, false) => Missing::ZeroAndNanRight,
                _ => {
                    return Err(malformed(
                        decision_line,
                        format!("{what}: node {position} has an unknown decision type {decision}"),
                    ))
                }
            };
            split_inputs.push(self.input(Input {
                feature: features[position],
                missing,
            })?);
        }
        // Breadth first, so that each split's children are neighbours. A link is a split's index, or a
        // leaf's as its bitwise complement.
        let mut links = vec![0_i64];
        let mut next = 0;
        while let Some(&link) = links.get(next) {
            let at = index(next)?;
            next += 1;
            let Ok(split) = usize::try_from(link) else {
                self.nodes.push(leaf(at, leaf_values[!link as usize]));
                continue;
            };
            self.nodes.push(Node {
                value: thresholds[split],
                input: split_inputs[split],
                left: index(links.len())?,
            });
            links.extend([left[split], right[split]]);
        }
        self.trees.push(TreeSpan { root, depth });
        Ok(())
    }

    /// The index of `input` among the prepared inputs, added if new.
    fn input(&mut self, input: Input) -> Result<u32, ModelError> {
        if let Some(&index) = self.input_index.get(&input) {
            return Ok(index);
        }
        let index = u32::try_from(self.inputs.len() + 1)
            .map_err(|_| ModelError::Unsupported("more than 2^32 split inputs".to_owned()))?;
        self.inputs.push(input);
        self.input_index.insert(input, index);
        Ok(index)
    }
}

/// A leaf at `at` in the node array: it leads to itself.
fn leaf(at: u32, value: f64) -> Node {
    Node {
        value,
        input: LEAF_INPUT,
        left: at,
    }
}

/// Checks that the child links make one tree of all splits and leaves (each reached exactly once from the
/// root, so walking it ends) and returns the number of steps to its deepest leaf.
fn tree_depth(
    tree: &Block,
    num_leaves: usize,
    left: &[i64],
    right: &[i64],
) -> Result<u32, ModelError> {
    let splits = num_leaves - 1;
    let line = tree.fields["left_child"].line;
    let what = &tree.what;
    let mut split_seen = vec![false; splits];
    let mut leaf_seen = vec![false; num_leaves];
    let mut depth = 0;
    let mut pending = vec![(0_i64, 0_u32)];
    while let Some((link, at_depth)) = pending.pop() {
        let seen = match usize::try_from(link) {
            Ok(split) => split_seen.get_mut(split),
            Err(_) => leaf_seen.get_mut(!link as usize),
        };
        let Some(seen) = seen else {
            return Err(malformed(
                line,
                format!("{what}: child {link} is out of range for {num_leaves} leaves"),
            ));
        };
        if std::mem::replace(seen, true) {
            return Err(malformed(
                line,
                format!("{what}: child {link} is reached twice, the links are not a tree"),
            ));
        }
        match usize::try_from(link) {
            Ok(split) => {
                pending.push((left[split], at_depth + 1));
                pending.push((right[split], at_depth + 1));
            }
            Err(_) => depth = depth.max(at_depth),
        }
    }
    if let Some(split) = split_seen.iter().position(|seen| !seen) {
        return Err(malformed(
            line,
            format!("{what}: node {split} is unreachable"),
        ));
    }
    if let Some(leaf) = leaf_seen.iter().position(|seen| !seen) {
        return Err(malformed(
            line,
            format!("{what}: leaf {leaf} is unreachable"),
        ));
    }
    Ok(depth)
}
