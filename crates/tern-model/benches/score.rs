//! What ranking one request's candidates costs: `score_batch` over 300 rows of 40 features (a tenth missing,
//! a fifth exact zeros) with 150 trees of 31 and of 63 leaves, and `score` of one row. The trees are random,
//! grown a leaf at a time as LightGBM grows them, and as deep as its trees on real data are (a tree of 31
//! leaves about 11 splits deep at most, one of 63 about 14), since scoring costs a step per level.

use std::fmt::Write as _;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tern_model::Model;

const FEATURES: usize = 40;
const ROWS: usize = 300;
const TREES: usize = 150;

/// splitmix64, so every run benches the same model and rows.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// Roughly normal: the sum of four uniforms, centred.
    fn value(&mut self) -> f64 {
        (0..4)
            .map(|_| (self.next_u64() >> 11) as f64 / (1_u64 << 53) as f64)
            .sum::<f64>()
            - 2.0
    }
}

/// A `Tree=N` block body of `leaves` leaves: each split replaces a leaf with a split and two leaves, often
/// one of the two the last split made (LightGBM's best split is often below its last one).
fn random_tree(rng: &mut Rng, leaves: usize) -> String {
    // Per split: feature, threshold, decision type, left and right child (a split's index, or !leaf).
    let mut splits: Vec<(usize, f64, u8, i64, i64)> = Vec::new();
    // Per leaf: the split pointing at it and whether as its left child (none for the root leaf).
    let mut parents: Vec<Option<(usize, bool)>> = vec![None];
    let mut last_split_leaves = None;
    while parents.len() < leaves {
        let leaf = match last_split_leaves {
            Some((left, right)) if rng.chance(30) => [left, right][rng.below(2)],
            _ => rng.below(parents.len()),
        };
        let split = splits.len();
        let new_leaf = parents.len();
        let decision = [0, 2, 8, 10][rng.below(4)];
        splits.push((
            rng.below(FEATURES),
            rng.value(),
            decision,
            !(leaf as i64),
            !(new_leaf as i64),
        ));
        if let Some((parent, is_left)) = parents[leaf] {
            let link = split as i64;
            if is_left {
                splits[parent].3 = link;
            } else {
                splits[parent].4 = link;
            }
        }
        parents[leaf] = Some((split, true));
        parents.push(Some((split, false)));
        last_split_leaves = Some((leaf, new_leaf));
    }
    let join = |values: Vec<String>| values.join(" ");
    format!(
        "num_leaves={leaves}\nnum_cat=0\nsplit_feature={}\nthreshold={}\ndecision_type={}\nleft_child={}\n\
         right_child={}\nleaf_value={}\nis_linear=0\nshrinkage=0.05\n",
        join(splits.iter().map(|s| s.0.to_string()).collect()),
        join(splits.iter().map(|s| format!("{:?}", s.1)).collect()),
        join(splits.iter().map(|s| s.2.to_string()).collect()),
        join(splits.iter().map(|s| s.3.to_string()).collect()),
        join(splits.iter().map(|s| s.4.to_string()).collect()),
        join((0..leaves).map(|_| format!("{:?}", rng.value() * 0.1)).collect()),
    )
}

fn random_model(rng: &mut Rng, leaves: usize) -> Model {
    let names: Vec<String> = (0..FEATURES).map(|f| format!("f{f}")).collect();
    let mut text = format!(
        "tree\nversion=v4\nnum_class=1\nnum_tree_per_iteration=1\nmax_feature_idx={}\n\
         objective=binary sigmoid:1\nfeature_names={}\n\n",
        FEATURES - 1,
        names.join(" ")
    );
    for index in 0..TREES {
        writeln!(text, "Tree={index}\n{}", random_tree(rng, leaves)).unwrap();
    }
    text += "end of trees\n";
    Model::parse(&text).unwrap()
}

fn random_rows(rng: &mut Rng) -> Vec<f64> {
    (0..ROWS * FEATURES)
        .map(|_| match rng.below(10) {
            0 => f64::NAN,
            1 | 2 => 0.0,
            _ => rng.value(),
        })
        .collect()
}

fn score(c: &mut Criterion) {
    let mut rng = Rng(7);
    let rows = random_rows(&mut rng);
    let mut group = c.benchmark_group("score_batch");
    group.throughput(Throughput::Elements(ROWS as u64));
    for leaves in [31, 63] {
        let model = random_model(&mut rng, leaves);
        let mut out = Vec::with_capacity(ROWS);
        group.bench_function(format!("{ROWS}_rows_{TREES}_trees_{leaves}_leaves"), |b| {
            b.iter(|| {
                model.score_batch(black_box(&rows), &mut out);
                out[0]
            })
        });
    }
    group.finish();

    let model = random_model(&mut rng, 31);
    c.bench_function(&format!("score_1_row_{TREES}_trees_31_leaves"), |b| {
        b.iter(|| model.score(black_box(&rows[..FEATURES])))
    });
}

criterion_group!(benches, score);
criterion_main!(benches);
