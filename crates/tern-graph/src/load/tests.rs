use super::*;

/// A graph-tool file of `nodes` vertices with these out-lists (little-endian, 1-byte indices).
fn gt_bytes(directed: bool, out: &[&[u8]]) -> Vec<u8> {
    let mut b = GT_MAGIC.to_vec();
    b.extend_from_slice(&[1, 0]);
    let comment = b"made by a test";
    b.extend_from_slice(&(comment.len() as u64).to_le_bytes());
    b.extend_from_slice(comment);
    b.push(u8::from(directed));
    b.extend_from_slice(&(out.len() as u64).to_le_bytes());
    for list in out {
        b.extend_from_slice(&(list.len() as u64).to_le_bytes());
        b.extend_from_slice(list);
    }
    // Property maps follow in a real file; the reader stops before them.
    b.extend_from_slice(b"property maps, never read");
    b
}

#[test]
fn reads_graph_tool_topology() {
    let g = load_gt(&gt_bytes(true, &[&[1, 2], &[2], &[]])[..]).unwrap();
    assert!(g.is_directed());
    assert_eq!(g.nodes(), 3);
    assert_eq!(g.out_neighbours(0), [1, 2]);
    assert_eq!(g.in_neighbours(2), [0, 1]);
    let u = load_gt(&gt_bytes(false, &[&[1], &[]])[..]).unwrap();
    assert_eq!(u.out_neighbours(1), [0]);
}

#[test]
fn refuses_what_is_not_a_graph_tool_file() {
    assert!(matches!(
        load_gt(&b"hello world, not a graph"[..]),
        Err(LoadError::NotGt(_))
    ));
    let mut wrong = gt_bytes(true, &[&[5]]);
    assert!(matches!(load_gt(&wrong[..]), Err(LoadError::NotGt(_))));
    wrong[6] = 2;
    assert!(matches!(load_gt(&wrong[..]), Err(LoadError::GtVersion(2))));
    let cut = gt_bytes(true, &[&[1, 0], &[]]);
    assert!(matches!(load_gt(&cut[..30]), Err(LoadError::Io(_))));
}

#[test]
fn reads_edge_lists_with_comments_and_sparse_ids() {
    let text = "# a comment\n10 20\n\n20 30 # trailing\n10,30\n";
    let g = load_edge_list(text.as_bytes(), true).unwrap();
    assert_eq!(g.nodes(), 3);
    let (a, b, c) = (
        g.node(10).unwrap(),
        g.node(20).unwrap(),
        g.node(30).unwrap(),
    );
    assert_eq!(g.out_neighbours(a), [b, c]);
    assert_eq!(g.in_neighbours(c), [a, b]);
    assert_eq!(g.id(c), 30);
    assert_eq!(g.node(99), None);
}

#[test]
fn edge_list_errors_name_the_line() {
    let e = load_edge_list("1 2\n3\n".as_bytes(), true).unwrap_err();
    assert_eq!(e.to_string(), "edge list line 2: two ids expected");
    let e = load_edge_list("1 -2\n".as_bytes(), true).unwrap_err();
    assert!(e.to_string().starts_with("edge list line 1:"), "{e}");
    let e = load_edge_list("1 2 3\n".as_bytes(), true).unwrap_err();
    assert_eq!(e.to_string(), "edge list line 1: more than two fields");
}

/// The two real graphs (scripts/fetch-graphs.sh puts them in target/graphs): node and edge counts as
/// graph-tool's collection documents them (pgp-strong-2009: 39,796 nodes, 301,498 directed edges;
/// email-Enron: 36,692 nodes, 183,831 undirected edges).
#[test]
fn real_graphs_have_their_documented_sizes() {
    let dir = std::env::var("TERN_GRAPHS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/graphs"));
    for (name, nodes, edges, directed) in [
        ("pgp-strong-2009", 39_796, 301_498, true),
        ("email-Enron", 36_692, 183_831, false),
    ] {
        let path = dir.join(format!("{name}.gt.gz"));
        if !path.exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{} is missing in CI (scripts/fetch-graphs.sh)",
                path.display()
            );
            eprintln!(
                "SKIPPED: {} is missing (run scripts/fetch-graphs.sh)",
                path.display()
            );
            continue;
        }
        let g = load_path(&path, true).unwrap();
        assert_eq!(g.nodes(), nodes, "{name}");
        assert_eq!(g.is_directed(), directed, "{name}");
        let stored = if directed { edges } else { 2 * edges };
        // Self-loops are stored once even in an undirected graph, so allow for them there.
        let loops = (0..g.nodes() as NodeId)
            .filter(|&v| g.has_arc(v, v))
            .count();
        assert_eq!(
            g.arcs() + if directed { 0 } else { loops },
            stored,
            "{name}"
        );
    }
}
