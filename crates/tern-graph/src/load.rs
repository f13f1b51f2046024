//! Reading graphs: graph-tool's binary format and edge lists.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use crate::csr::{Graph, NodeId};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a graph-tool file: {0}")]
    NotGt(&'static str),
    #[error("graph-tool file version {0} (only 1 is known)")]
    GtVersion(u8),
    #[error("edge list line {line}: {why}")]
    EdgeList { line: usize, why: String },
    #[error("{0} nodes: more than a 32-bit index holds")]
    TooManyNodes(u64),
}

/// graph-tool's magic: "⛾ gt".
const GT_MAGIC: &[u8; 6] = b"\xe2\x9b\xbe gt";

fn read_u64(input: &mut impl Read, big_endian: bool) -> io::Result<u64> {
    let mut b = [0u8; 8];
    input.read_exact(&mut b)?;
    Ok(if big_endian {
        u64::from_be_bytes(b)
    } else {
        u64::from_le_bytes(b)
    })
}

/// An index of `width` bytes.
fn read_index(input: &mut impl Read, width: usize, big_endian: bool) -> io::Result<u64> {
    let mut b = [0u8; 8];
    let field = &mut b[..width];
    input.read_exact(field)?;
    if big_endian {
        field.reverse();
    }
    Ok(u64::from_le_bytes(b))
}

/// Reads graph-tool's binary format (uncompressed; see [`load_path`] for `.gt.gz`): the header, then each
/// vertex's out-neighbours. The property maps that follow are never read. Documented at
/// graph-tool.skewed.de ("The gt file format"): magic, version, endianness, a length-prefixed comment, the
/// directed flag, the vertex count, then per vertex a 64-bit count and that many indices of the smallest of
/// 1, 2, 4 or 8 bytes that holds the vertex count.
pub fn load_gt(input: impl Read) -> Result<Graph, LoadError> {
    let mut input = BufReader::new(input);
    let mut head = [0u8; 8];
    input.read_exact(&mut head)?;
    if &head[..6] != GT_MAGIC {
        return Err(LoadError::NotGt("bad magic"));
    }
    if head[6] != 1 {
        return Err(LoadError::GtVersion(head[6]));
    }
    let big_endian = head[7] != 0;
    let comment = read_u64(&mut input, big_endian)?;
    io::copy(&mut (&mut input).take(comment), &mut io::sink())?;
    let mut directed = [0u8];
    input.read_exact(&mut directed)?;
    let nodes = read_u64(&mut input, big_endian)?;
    if nodes > u64::from(NodeId::MAX) {
        return Err(LoadError::TooManyNodes(nodes));
    }
    let width = match nodes {
        n if n <= 1 << 8 => 1,
        n if n <= 1 << 16 => 2,
        n if n <= 1 << 32 => 4,
        _ => 8,
    };
    let mut edges = Vec::new();
    for v in 0..nodes as NodeId {
        let count = read_index(&mut input, 8, big_endian)?;
        for _ in 0..count {
            let w = read_index(&mut input, width, big_endian)?;
            if w >= nodes {
                return Err(LoadError::NotGt("a neighbour index past the vertex count"));
            }
            edges.push((v, w as NodeId));
        }
    }
    Ok(Graph::from_edges(nodes as usize, &edges, directed[0] != 0))
}

/// Reads an edge list: two integer user ids per line (`a b`: a follows b), separated by whitespace or a comma;
/// blank lines and `#` comments are skipped. Ids need not be dense: nodes are numbered in order of first
/// appearance, and [`Graph::id`] gives the ids back.
pub fn load_edge_list(input: impl Read, directed: bool) -> Result<Graph, LoadError> {
    let mut index: HashMap<u64, NodeId> = HashMap::new();
    let mut ids = Vec::new();
    let mut edges = Vec::new();
    let mut node = |id: u64, ids: &mut Vec<u64>| -> Result<NodeId, LoadError> {
        if let Some(&v) = index.get(&id) {
            return Ok(v);
        }
        let v =
            NodeId::try_from(ids.len()).map_err(|_| LoadError::TooManyNodes(ids.len() as u64))?;
        index.insert(id, v);
        ids.push(id);
        Ok(v)
    };
    for (n, line) in BufReader::new(input).lines().enumerate() {
        let line = line?;
        let content = line.split('#').next().unwrap_or_default().trim();
        if content.is_empty() {
            continue;
        }
        let mut fields = content
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|f| !f.is_empty());
        let mut id = || -> Result<u64, LoadError> {
            let field = fields.next().ok_or_else(|| LoadError::EdgeList {
                line: n + 1,
                why: "two ids expected".into(),
            })?;
            field.parse().map_err(|_| LoadError::EdgeList {
                line: n + 1,
                why: format!("{field:?} is not a non-negative integer id"),
            })
        };
        let (a, b) = (id()?, id()?);
        if fields.next().is_some() {
            return Err(LoadError::EdgeList {
                line: n + 1,
                why: "more than two fields".into(),
            });
        }
        edges.push((node(a, &mut ids)?, node(b, &mut ids)?));
    }
    Ok(Graph::from_edges(ids.len(), &edges, directed).with_ids(ids))
}

/// Loads `path` by its name: `.gt.gz` and `.gt` as graph-tool files (which say whether they are directed),
/// anything else as an edge list, directed or not as `edge_list_directed` says (gunzipped first when it ends
/// in `.gz`).
pub fn load_path(path: &Path, edge_list_directed: bool) -> Result<Graph, LoadError> {
    let name = path.to_string_lossy();
    let file = std::fs::File::open(path)?;
    let input: Box<dyn Read> = if name.ends_with(".gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    if name.ends_with(".gt") || name.ends_with(".gt.gz") {
        load_gt(input)
    } else {
        load_edge_list(input, edge_list_directed)
    }
}

#[cfg(test)]
mod tests;
