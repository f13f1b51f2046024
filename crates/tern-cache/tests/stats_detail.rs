//! `stats detail` and `stats reset`, in a test binary of their own: `stats reset` zeroes the process's
//! counters, and the other tests' in-process servers share them (a concurrent reset once made the idle-kick
//! test read 0 kicks).

mod common;

use common::{replies_to, stat, Tern};

/// `stats detail` counts and dumps exactly as memcached 1.6.18: which commands count, keys without the
/// delimiter, an empty prefix, memcached's dump order and its prefix-matching quirk ("u" and "uh" share a
/// bucket), `on`/`off`/usage errors, `stats reset`, `-D`.
#[test]
fn stats_detail_matches_memcached() {
    if !common::have("memcached") {
        return;
    }
    let script = |delimiter: &str| -> Vec<Vec<u8>> {
        let d = delimiter;
        [
            "stats detail dump\r\n".to_string(),
            "stats detail on\r\n".into(),
            format!("get a{d}b c{d}d e nokey a{d}x\r\n"),
            format!("set a{d}1 0 0 1\r\nx\r\n"),
            format!("get a{d}1\r\n"),
            "set foo 0 0 1\r\nx\r\n".into(),
            format!("delete a{d}1\r\n"),
            format!("delete zz{d}1 noreply\r\n"),
            format!("mg a{d}1 v\r\n"),
            format!("ms mm{d}1 1\r\nx\r\n"),
            format!("md mm{d}1\r\n"),
            format!("ma q{d}1 N0\r\n"),
            format!("touch a{d}1 10\r\n"),
            format!("incr a{d}1 1\r\n"),
            format!("gat 10 g{d}1\r\n"),
            format!("gets g{d}2\r\n"),
            format!("append a{d}2 0 0 1\r\nx\r\n"),
            format!("cas a{d}3 0 0 1 5\r\nx\r\n"),
            // A bad data chunk and a value over -I still count as sets.
            format!("set b{d}1 0 0 1\r\nxyz\r\n"),
            format!(
                "set b{d}2 0 0 2000000 noreply\r\n{}\r\n",
                "v".repeat(2_000_000)
            ),
            format!("get {d}x\r\n"),
            format!("get x{d}\r\n"),
            format!("set b{d}{d}c 0 0 1\r\nx\r\n"),
            format!("set uh{d}k 0 0 1\r\nx\r\n"),
            format!("set u{d}k 0 0 1\r\nx\r\n"),
            format!("get u{d}k\r\n"),
            "stats detail dump\r\n".into(),
            "stats detail off\r\n".into(),
            format!("get a{d}b\r\n"),
            "stats detail dump\r\n".into(),
            "stats detail\r\n".into(),
            "stats detail foo\r\n".into(),
            "stats detail on off\r\n".into(),
            format!("get a{d}b\r\n"),
            "stats reset\r\n".into(),
            "stats detail dump\r\n".into(),
            format!("set c{d}1 0 0 1\r\nx\r\n"),
            "stats detail dump\r\n".into(),
        ]
        .into_iter()
        .map(String::into_bytes)
        .collect()
    };
    for flags in [&[][..], &["-D", "#"][..]] {
        let delimiter = if flags.is_empty() { ":" } else { "#" };
        let memcached = common::Memcached::start(flags);
        let tern = Tern::start(flags);
        let expected = replies_to(memcached.addr, &script(delimiter));
        let actual = replies_to(tern.addr, &script(delimiter));
        assert!(
            expected.windows(7).any(|w| w == b"PREFIX "),
            "the script dumps prefixes"
        );
        assert_eq!(
            String::from_utf8_lossy(&actual),
            String::from_utf8_lossy(&expected),
            "flags {flags:?}"
        );
        for name in ["stat_key_prefix", "detail_enabled"] {
            assert_eq!(
                stat(tern.addr, "settings", name),
                stat(memcached.addr, "settings", name),
                "{name} with {flags:?}"
            );
        }
    }
}
