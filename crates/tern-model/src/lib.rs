//! The model-serving piece of `tern recommend`: loads a gradient-boosted tree ensemble that LightGBM trained
//! offline (its own text format, as `Booster.save_model` writes it, see `scripts/train_model.py`) and scores
//! feature rows with LightGBM's exact arithmetic (the same routing of missing values and zeros, the same order
//! of summation, the same output transform), so a score computed at serve time equals the one Python computed,
//! with no Python in the process. All trees live in one contiguous node array, and a batch walks them tree by
//! tree, a block of rows in step, without branching on the data (scoring about 400 candidates with 100 trees:
//! 284 µs of CPU in tern recommend's benchmark, docs/benchmarks.md).

mod forest;
mod parse;

pub use forest::{Model, ModelError};
