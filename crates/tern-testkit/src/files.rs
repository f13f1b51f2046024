//! Files a test writes and then opens as a person would.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// A directory `tern-{name}-{pid}` in the system's temporary directory, created if missing.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tern-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// Decodes a PNG chart: its size and how many colours it uses (a chart drawn with text and series uses
/// many; a blank one, one).
pub fn png_size_and_colours(path: &Path) -> ((u32, u32), usize) {
    let image = image::open(path)
        .unwrap_or_else(|e| panic!("{} is not a PNG: {e}", path.display()))
        .to_rgb8();
    let colours: HashSet<[u8; 3]> = image.pixels().map(|p| p.0).collect();
    (image.dimensions(), colours.len())
}
