//! memcached's tuning commands (`slabs`, `lru`, `extstore`, and `refresh_certs` without TLS),
//! answered as memcached 1.6.18 answers them (`proto_text.c`): the same argument checks, the same replies,
//! `noreply` where memcached honours it. tern's store has no slab classes to move, LRU segments to tune or
//! flash tier, so an accepted setting changes nothing; docs/cache-compat.md lists these as deliberate
//! differences. With TLS, `refresh_certs` reloads the certificates (`dispatch.rs`). `watch` turns a TCP
//! connection into a log stream (`watch.rs`); over UDP it is an unknown command.

use tern_memcache_proto::number::{safe_strtol as strtol, safe_strtoul as strtoul};

/// memcached's `safe_strtod`.
fn strtod(word: &[u8]) -> Option<f64> {
    std::str::from_utf8(word).ok()?.parse().ok()
}

/// The reply to one tuning command; `None` when `noreply` hides it.
pub fn answer(command: &[u8], args: &[&[u8]]) -> Option<&'static [u8]> {
    // memcached's token count: the command, its arguments, and the terminating empty token.
    let ntokens = args.len() + 2;
    let arg = |i: usize| args.get(i).copied().unwrap_or_default();
    let noreply = args.last() == Some(&&b"noreply"[..]);
    match command {
        b"refresh_certs" => Some(b"Error TLS not enabled\r\n"),
        b"slabs" => Some(slabs(ntokens, arg(0), arg(1), arg(2))),
        b"lru" => {
            let reply = lru(ntokens, arg(0), args);
            (!noreply).then_some(reply)
        }
        b"extstore" => {
            let ok = extstore(ntokens, arg(0), arg(1), arg(2));
            (!noreply).then_some(if ok { b"OK\r\n" } else { b"ERROR\r\n" })
        }
        _ => Some(b"ERROR\r\n"),
    }
}

fn slabs(ntokens: usize, sub: &[u8], a: &[u8], b: &[u8]) -> &'static [u8] {
    if ntokens == 5 && sub == b"reassign" {
        let (Some(src), Some(dst)) = (strtol(a), strtol(b)) else {
            return b"CLIENT_ERROR bad command line format\r\n";
        };
        // memcached's slabs_reassign checks (class 0 is the global page pool). A source of -1 asks memcached
        // to pick a class with spare pages; with none it stays -1, a bad class.
        if src == dst {
            b"SAME src and dst class are identical\r\n"
        } else if !(0..=MAX_SLAB_CLASS).contains(&src) || !(0..=MAX_SLAB_CLASS).contains(&dst) {
            b"BADCLASS invalid src or dst class id\r\n"
        } else {
            // Segments are not owned by size classes, so there is never a spare page to move.
            b"NOSPARE source class has no spare pages\r\n"
        }
    } else if ntokens >= 4 && sub == b"automove" {
        if a == b"ratio" {
            match strtod(b) {
                Some(_) if ntokens >= 5 => b"OK\r\n",
                _ => b"ERROR\r\n",
            }
        } else {
            match strtoul(a) {
                None => b"CLIENT_ERROR bad command line format\r\n",
                Some(0..=2) => b"OK\r\n",
                Some(_) => b"ERROR\r\n",
            }
        }
    } else {
        b"ERROR\r\n"
    }
}

/// The largest slab class memcached 1.6.18 creates with its default `-f 1.25 -n 48 -I 1m`.
const MAX_SLAB_CLASS: i32 = 39;

fn lru(ntokens: usize, sub: &[u8], args: &[&[u8]]) -> &'static [u8] {
    let arg = |i: usize| args.get(i).copied().unwrap_or_default();
    match sub {
        b"tune" if ntokens >= 7 => {
            match (
                strtoul(arg(1)),
                strtoul(arg(2)),
                strtod(arg(3)),
                strtod(arg(4)),
            ) {
                (Some(hot), Some(warm), Some(hot_factor), Some(factor)) => {
                    if u64::from(hot) + u64::from(warm) > 80 {
                        b"ERROR hot and warm pcts must not exceed 80\r\n"
                    } else if factor <= 0.0 || hot_factor <= 0.0 {
                        b"ERROR hot/warm age factors must be greater than 0\r\n"
                    } else {
                        b"OK\r\n"
                    }
                }
                _ => b"ERROR\r\n",
            }
        }
        b"mode" if ntokens >= 4 => match arg(1) {
            b"flat" | b"segmented" => b"OK\r\n",
            _ => b"ERROR\r\n",
        },
        b"temp_ttl" if ntokens >= 4 => match strtol(arg(1)) {
            Some(_) => b"OK\r\n",
            None => b"ERROR\r\n",
        },
        _ => b"ERROR\r\n",
    }
}

fn extstore(ntokens: usize, sub: &[u8], a: &[u8], b: &[u8]) -> bool {
    if ntokens < 4 {
        return false;
    }
    match sub {
        b"free_memchunks" if ntokens > 4 => {
            matches!((strtoul(a), strtoul(b)), (Some(class), Some(_)) if class < 64)
        }
        b"item_size" | b"item_age" | b"low_ttl" | b"recache_rate" | b"compact_under"
        | b"drop_under" | b"max_sleep" | b"drop_unread" => strtoul(a).is_some(),
        b"max_frag" => strtod(a).is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::answer;
    use proptest::prelude::*;

    proptest! {
        /// Any words: no panic, one line ending in `\r\n`, and `noreply` hides only what memcached hides.
        #[test]
        fn any_words_get_one_line(
            command in prop::sample::select(vec!["slabs", "lru", "extstore", "watch", "refresh_certs", "other"]),
            args in prop::collection::vec(
                prop::sample::select(vec![
                    "reassign", "automove", "ratio", "tune", "mode", "flat", "temp_ttl", "item_size",
                    "max_frag", "free_memchunks", "noreply", "0", "1", "-1", "39", "40", "0.5", "x",
                    "4294967296", "+3",
                ]),
                0..6,
            ),
        ) {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            if let Some(reply) = answer(command.as_bytes(), &args) {
                prop_assert!(reply.ends_with(b"\r\n"));
                prop_assert_eq!(reply.iter().filter(|&&b| b == b'\n').count(), 1);
            } else {
                prop_assert!(matches!(command, "lru" | "extstore"));
                prop_assert_eq!(args.last().copied(), Some(&b"noreply"[..]));
            }
        }
    }

    fn ask(line: &str) -> Option<&'static [u8]> {
        let mut words = line.split(' ').map(str::as_bytes);
        let command = words.next().unwrap();
        let args: Vec<&[u8]> = words.collect();
        answer(command, &args)
    }

    #[test]
    fn replies_match_memcached() {
        // Each reply below is what memcached 1.6.18 (Debian) sent for the same line.
        let cases: &[(&str, &[u8])] = &[
            ("refresh_certs", b"Error TLS not enabled\r\n"),
            ("extstore foo", b"ERROR\r\n"),
            ("extstore item_size 10", b"OK\r\n"),
            ("extstore free_memchunks 0 0", b"OK\r\n"),
            ("extstore max_frag 0.5", b"OK\r\n"),
            ("extstore bad 1", b"ERROR\r\n"),
            ("slabs automove 1", b"OK\r\n"),
            (
                "slabs reassign 1 2",
                b"NOSPARE source class has no spare pages\r\n",
            ),
            ("slabs", b"ERROR\r\n"),
            (
                "slabs reassign 1 40",
                b"BADCLASS invalid src or dst class id\r\n",
            ),
            (
                "slabs reassign 0 3",
                b"NOSPARE source class has no spare pages\r\n",
            ),
            (
                "slabs reassign -1 3",
                b"BADCLASS invalid src or dst class id\r\n",
            ),
            ("extstore free_memchunks 64 1", b"ERROR\r\n"),
            ("lru mode flat", b"OK\r\n"),
            ("lru tune 1", b"ERROR\r\n"),
        ];
        for (line, reply) in cases {
            assert_eq!(ask(line), Some(*reply), "{line}");
        }
        assert_eq!(ask("extstore item_size 10 noreply"), None);
        assert_eq!(
            ask("lru tune 50 40 0.1 2"),
            Some(&b"ERROR hot and warm pcts must not exceed 80\r\n"[..])
        );
    }
}
