//! Unit tests of `decode`: every command, every error path, and the framing (`consumed`, `needed`, close).
//! Reply texts were checked against memcached 1.6.18 (see `against_memcached.rs` for the live comparison).

use tern_memcache_proto::reply::ErrorReply;
use tern_memcache_proto::{
    decode, Decoded, GetKind, Limits, LruCrawler, MetaSetMode, Request, ShutdownMode, StoreKind,
};

fn frame(input: &[u8]) -> (Request<'_>, usize) {
    match decode(input, &Limits::default()) {
        Decoded::Frame { request, consumed } => (request, consumed),
        other => panic!(
            "expected a frame for {:?}, got {other:?}",
            String::from_utf8_lossy(input)
        ),
    }
}

fn request(input: &[u8]) -> Request<'_> {
    frame(input).0
}

fn error(input: &[u8]) -> ErrorReply {
    match request(input) {
        Request::Error(e) => e,
        other => panic!(
            "expected an error for {:?}, got {other:?}",
            String::from_utf8_lossy(input)
        ),
    }
}

#[test]
fn get_family() {
    let (req, consumed) = frame(b"get a bb  ccc\r\nget x\r\n");
    assert_eq!(consumed, 15);
    let Request::Get {
        kind,
        exptime,
        keys,
    } = req
    else {
        panic!()
    };
    assert_eq!((kind, exptime), (GetKind::Get, 0));
    assert_eq!(keys.collect::<Vec<_>>(), [&b"a"[..], b"bb", b"ccc"]);
    let Request::Get {
        kind,
        exptime,
        keys,
    } = request(b"gats -5 k\n")
    else {
        panic!()
    };
    assert_eq!(
        (kind, exptime, keys.collect::<Vec<_>>()),
        (GetKind::Gats, -5, vec![&b"k"[..]])
    );
    let Request::Get { kind, .. } = request(b"gets k\r\n") else {
        panic!()
    };
    assert!(kind.returns_cas());
    let Request::Get { kind, .. } = request(b"bget k\r\n") else {
        panic!()
    };
    assert_eq!(kind, GetKind::Get);
    let Request::Get { keys, .. } = request(b"gat 10\r\n") else {
        panic!()
    };
    assert!(keys.is_empty());
    assert_eq!(error(b"gat x k\r\n"), ErrorReply::InvalidExptime);
    assert_eq!(error(b"get\r\n"), ErrorReply::Error);
    assert_eq!(error(b"getx k\r\n"), ErrorReply::Error);
    let long = format!("gat 5 a  b {} c\r\n", "k".repeat(251));
    let Request::GetKeyTooLong {
        kind: GetKind::Gat,
        exptime: 5,
        keys,
    } = request(long.as_bytes())
    else {
        panic!()
    };
    assert_eq!(
        keys.collect::<Vec<_>>(),
        [&b"a"[..], b"b"],
        "the keys before the long one"
    );
    let long = format!("get {} a\r\n", "k".repeat(251));
    let Request::GetKeyTooLong { keys, .. } = request(long.as_bytes()) else {
        panic!()
    };
    assert!(keys.is_empty());
    // More keys than memcached's 24 tokens: all of them are keys.
    let many: String = format!(
        "get {}\r\n",
        (0..100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let Request::Get { keys, .. } = request(many.as_bytes()) else {
        panic!()
    };
    assert_eq!(keys.count(), 100);
}

#[test]
fn storage_commands() {
    let input = b"set k 5 -1 3 noreply\r\nabc\r\nget k\r\n";
    let (req, consumed) = frame(input);
    assert_eq!(consumed, 27);
    assert_eq!(
        req,
        Request::Store {
            kind: StoreKind::Set,
            key: b"k",
            flags: 5,
            exptime: -1,
            data: b"abc",
            cas: 0,
            noreply: true
        }
    );
    for (word, kind) in [
        ("add", StoreKind::Add),
        ("replace", StoreKind::Replace),
        ("append", StoreKind::Append),
        ("prepend", StoreKind::Prepend),
    ] {
        let line = format!("{word} k 0 0 1\r\nx\r\n");
        let Request::Store { kind: got, .. } = request(line.as_bytes()) else {
            panic!()
        };
        assert_eq!(got, kind);
    }
    let Request::Store {
        kind, cas, noreply, ..
    } = request(b"cas k 0 0 1 99 noreply\r\nx\r\n")
    else {
        panic!()
    };
    assert_eq!((kind, cas, noreply), (StoreKind::Cas, 99, true));
    // memcached's C number parsing: truncation to 32 bits, leading sign and whitespace, trailing whitespace.
    let Request::Store { flags, data, .. } = request(b"set k 4294967297 0 4294967297\r\nx\r\n")
    else {
        panic!()
    };
    assert_eq!((flags, data), (1, &b"x"[..]));
    let Request::Store { data, .. } = request(b"set k 0 0 +2\thello\r\nhi\r\n") else {
        panic!()
    };
    assert_eq!(data, b"hi");
    // A trailing token other than noreply is ignored, as memcached does.
    let Request::Store { noreply, .. } = request(b"set k 0 0 1 junk\r\nx\r\n") else {
        panic!()
    };
    assert!(!noreply);
}

#[test]
fn storage_errors() {
    assert_eq!(error(b"set k 0 0 -1\r\n"), ErrorReply::BadCommandLineFormat);
    assert_eq!(
        request(b"set k 0 0 -1 noreply\r\n"),
        Request::Silent(ErrorReply::BadCommandLineFormat)
    );
    assert_eq!(error(b"set k x 0 1\r\n"), ErrorReply::BadCommandLineFormat);
    assert_eq!(error(b"set k -1 0 1\r\n"), ErrorReply::BadCommandLineFormat);
    assert_eq!(error(b"set k 0 x 1\r\n"), ErrorReply::BadCommandLineFormat);
    assert_eq!(
        error(b"set k 0 0 2147483646\r\n"),
        ErrorReply::BadCommandLineFormat
    );
    assert_eq!(
        error(b"cas k 0 0 1 x\r\n"),
        ErrorReply::BadCommandLineFormat
    );
    assert_eq!(error(b"set k 0 0\r\n"), ErrorReply::Error);
    assert_eq!(error(b"cas k 0 0 1\r\n"), ErrorReply::Error);
    assert_eq!(error(b"set k 0 0 1 2 3\r\n"), ErrorReply::Error);
    let long = format!("set {} 0 0 1\r\nx\r\n", "k".repeat(251));
    assert_eq!(error(long.as_bytes()), ErrorReply::BadCommandLineFormat);
    // Bad data chunk: the block is consumed and the bytes after it are the next command.
    let (req, consumed) = frame(b"set k 0 0 1\r\nxyz\r\n");
    assert_eq!(
        (req, consumed),
        (
            Request::BadDataChunk {
                key: b"k",
                noreply: false
            },
            16
        )
    );
    assert_eq!(
        frame(b"set k 0 0 1 noreply\r\nxyz\r\n").0,
        Request::BadDataChunk {
            key: b"k",
            noreply: true
        }
    );
}

#[test]
fn data_block_framing() {
    let limits = Limits::default();
    assert_eq!(
        decode(b"set k 0 0 5\r\nhel", &limits),
        Decoded::Incomplete { needed: Some(20) }
    );
    assert_eq!(
        decode(b"set k 0 0 5\r\nhello\r", &limits),
        Decoded::Incomplete { needed: Some(20) }
    );
    assert_eq!(
        decode(b"set k 0 0 5", &limits),
        Decoded::Incomplete { needed: None }
    );
    assert_eq!(decode(b"", &limits), Decoded::Incomplete { needed: None });
}

#[test]
fn too_large_is_swallowed() {
    let limits = Limits::default();
    // memcached 1.6.18 -I 1m: key "big", flags 0 fits 1048514 bytes and not one more; flags cost 4 bytes.
    assert_eq!(
        decode(b"set big 0 0 1048514\r\n", &limits),
        Decoded::Incomplete {
            needed: Some(21 + 1048516)
        }
    );
    let Decoded::Frame { request, consumed } = decode(b"set big 0 0 1048515\r\n", &limits) else {
        panic!()
    };
    assert_eq!(consumed, 21 + 1048517);
    let Request::TooLarge {
        key,
        unlink_existing,
        noreply,
        meta,
    } = request
    else {
        panic!()
    };
    assert_eq!(
        (key.raw, unlink_existing, noreply, meta),
        (&b"big"[..], true, false, false)
    );
    let Decoded::Frame { request, .. } = decode(b"add big 1 0 1048511 noreply\r\n", &limits) else {
        panic!()
    };
    assert!(matches!(
        request,
        Request::TooLarge {
            unlink_existing: false,
            noreply: true,
            ..
        }
    ));
    let Decoded::Frame { request, consumed } = decode(b"ms big 2000000 q\r\n", &limits) else {
        panic!()
    };
    assert_eq!(consumed, 18 + 2000002);
    assert!(matches!(
        request,
        Request::TooLarge {
            unlink_existing: true,
            noreply: false,
            meta: true,
            ..
        }
    ));
    let small = Limits {
        max_item_size: 100,
        ..Limits::default()
    };
    assert!(matches!(
        decode(b"set k 0 0 50\r\n", &small),
        Decoded::Frame {
            request: Request::TooLarge { .. },
            ..
        }
    ));
}

#[test]
fn line_endings_and_odd_bytes() {
    let Request::Get { keys, .. } = request(b"get k\n") else {
        panic!()
    };
    assert_eq!(keys.collect::<Vec<_>>(), [&b"k"[..]]);
    // Only one \r is dropped; a second one is part of the last token.
    let Request::Get { keys, .. } = request(b"get k\r\r\n") else {
        panic!()
    };
    assert_eq!(keys.collect::<Vec<_>>(), [&b"k\r"[..]]);
    assert_eq!(error(b"\r\n"), ErrorReply::Error);
    assert_eq!(error(b"\n"), ErrorReply::Error);
    assert_eq!(error(b"x\r\n"), ErrorReply::Error);
    // A NUL ends the command text.
    let (req, consumed) = frame(b"get a\0 b\r\n");
    let Request::Get { keys, .. } = req else {
        panic!()
    };
    assert_eq!((keys.collect::<Vec<_>>(), consumed), (vec![&b"a"[..]], 10));
    // Tabs and control bytes belong to keys.
    let Request::Get { keys, .. } = request(b"get a\tb\x01\r\n") else {
        panic!()
    };
    assert_eq!(keys.collect::<Vec<_>>(), [&b"a\tb\x01"[..]]);
    // Binary-protocol magic is plain text to an ascii-only memcached.
    assert_eq!(error(b"\x80\x00\x00\x00\r\n"), ErrorReply::Error);
}

#[test]
fn http_request_lines_hang_up() {
    for line in [
        &b"GET / HTTP/1.0\r\n"[..],
        b"PUT /a/b HTTP/1.1\r\n",
        b"DELETE HTTP/1.1\r\n",
        b"HTTP/1.1\r\n",
        b"foo HTTP/\r\n",
        b"mxx HTTP/1.0\r\n",
        b"rx a HTTP/1.0  \r\n",
    ] {
        assert_eq!(request(line), Request::Hangup, "{line:?}");
    }
    // A short command, a meta command, a first letter memcached dispatches on, or another last token: ERROR.
    for line in [
        &b"x HTTP/1.0\r\n"[..],
        b"mx HTTP/1.0\r\n",
        b"ge HTTP/1.0\r\n",
        b"statsx HTTP/1.0\r\n",
        b"touchy HTTP/1.0\r\n",
        b"rx HTTP/1.0 b\r\n",
        b"rx http/1.0\r\n",
    ] {
        assert_eq!(error(line), ErrorReply::Error, "{line:?}");
    }
}

#[test]
fn long_lines_close_except_multiget() {
    let limits = Limits::default();
    assert_eq!(
        decode(&[b'x'; 2049], &limits),
        Decoded::Close { reply: None }
    );
    assert_eq!(
        decode(&[b'x'; 2048], &limits),
        Decoded::Incomplete { needed: None }
    );
    let mut multiget = b"get ".to_vec();
    multiget.extend([b'k'; 5000]);
    assert_eq!(
        decode(&multiget, &limits),
        Decoded::Incomplete { needed: None }
    );
    let mut spaced = vec![b' '; 100];
    spaced.extend_from_slice(&multiget);
    assert_eq!(
        decode(&spaced, &limits),
        Decoded::Incomplete { needed: None }
    );
    let mut too_spaced = vec![b' '; 101];
    too_spaced.extend_from_slice(&multiget);
    assert_eq!(decode(&too_spaced, &limits), Decoded::Close { reply: None });
    let mut gat = b"gat ".to_vec();
    gat.extend([b'k'; 5000]);
    assert_eq!(decode(&gat, &limits), Decoded::Close { reply: None });
    // A non-multiget line longer than memcached's read buffer can never be processed.
    let mut huge = b"set ".to_vec();
    huge.extend([b'k'; 20000]);
    huge.extend_from_slice(b" 0 0 1\r\n");
    assert_eq!(decode(&huge, &limits), Decoded::Close { reply: None });
    let capped = Limits {
        max_multiget_line_len: 4096,
        ..Limits::default()
    };
    assert_eq!(decode(&multiget, &capped), Decoded::Close { reply: None });
}

#[test]
fn delete_forms() {
    assert_eq!(
        request(b"delete k\r\n"),
        Request::Delete {
            key: b"k",
            noreply: false
        }
    );
    assert_eq!(
        request(b"delete k 0\r\n"),
        Request::Delete {
            key: b"k",
            noreply: false
        }
    );
    assert_eq!(
        request(b"delete k noreply\r\n"),
        Request::Delete {
            key: b"k",
            noreply: true
        }
    );
    assert_eq!(
        request(b"delete k 0 noreply\r\n"),
        Request::Delete {
            key: b"k",
            noreply: true
        }
    );
    assert_eq!(error(b"delete k 1\r\n"), ErrorReply::DeleteUsage);
    assert_eq!(error(b"delete k 0 0\r\n"), ErrorReply::DeleteUsage);
    assert_eq!(
        request(b"delete k x noreply\r\n"),
        Request::Silent(ErrorReply::DeleteUsage)
    );
    assert_eq!(error(b"delete\r\n"), ErrorReply::Error);
    assert_eq!(error(b"delete a b c d\r\n"), ErrorReply::Error);
}

#[test]
fn arithmetic_touch_flush() {
    assert_eq!(
        request(b"incr k 18446744073709551615\r\n"),
        Request::Arithmetic {
            incr: true,
            key: b"k",
            delta: u64::MAX,
            noreply: false
        }
    );
    assert_eq!(
        request(b"decr k 1 noreply\r\n"),
        Request::Arithmetic {
            incr: false,
            key: b"k",
            delta: 1,
            noreply: true
        }
    );
    assert_eq!(
        request(b"incr k 5 x\r\n"),
        Request::Arithmetic {
            incr: true,
            key: b"k",
            delta: 5,
            noreply: false
        }
    );
    for bad in [
        &b"incr k x\r\n"[..],
        b"incr k -1\r\n",
        b"incr k 18446744073709551616\r\n",
        b"decr k 1x\r\n",
    ] {
        assert_eq!(error(bad), ErrorReply::InvalidDelta);
    }
    assert_eq!(
        request(b"incr k x noreply\r\n"),
        Request::Silent(ErrorReply::InvalidDelta)
    );
    assert_eq!(error(b"incr k\r\n"), ErrorReply::Error);
    assert_eq!(
        request(b"touch k 10\r\n"),
        Request::Touch {
            key: b"k",
            exptime: 10,
            noreply: false
        }
    );
    assert_eq!(error(b"touch k x\r\n"), ErrorReply::InvalidExptime);
    assert_eq!(
        request(b"touch k x noreply\r\n"),
        Request::Silent(ErrorReply::InvalidExptime)
    );
    assert_eq!(
        request(b"flush_all\r\n"),
        Request::FlushAll {
            delay: 0,
            noreply: false
        }
    );
    assert_eq!(
        request(b"flush_all 10 noreply\r\n"),
        Request::FlushAll {
            delay: 10,
            noreply: true
        }
    );
    assert_eq!(
        request(b"flush_all noreply\r\n"),
        Request::FlushAll {
            delay: 0,
            noreply: true
        }
    );
    assert_eq!(error(b"flush_all x\r\n"), ErrorReply::InvalidExptime);
    assert_eq!(
        request(b"flush_all x noreply\r\n"),
        Request::Silent(ErrorReply::InvalidExptime)
    );
    assert_eq!(error(b"flush_all 1 2 3\r\n"), ErrorReply::Error);
}

#[test]
fn misc_and_admin_commands() {
    assert_eq!(request(b"version\r\n"), Request::Version);
    assert_eq!(request(b"quit now\r\n"), Request::Quit);
    assert_eq!(
        request(b"verbosity 1\r\n"),
        Request::Verbosity {
            level: 1,
            noreply: false
        }
    );
    assert_eq!(error(b"verbosity x\r\n"), ErrorReply::BadCommandLineFormat);
    assert_eq!(error(b"verbosity\r\n"), ErrorReply::Error);
    assert_eq!(
        request(b"shutdown\r\n"),
        Request::Shutdown(ShutdownMode::Immediate)
    );
    assert_eq!(
        request(b"shutdown graceful\r\n"),
        Request::Shutdown(ShutdownMode::Graceful)
    );
    assert_eq!(
        request(b"shutdown now\r\n"),
        Request::Shutdown(ShutdownMode::Invalid)
    );
    assert_eq!(
        request(b"cache_memlimit 100\r\n"),
        Request::CacheMemlimit {
            megabytes: Some(100),
            noreply: false
        }
    );
    assert_eq!(
        request(b"cache_memlimit x\r\n"),
        Request::CacheMemlimit {
            megabytes: None,
            noreply: false
        }
    );
    let Request::Stats { args } = request(b"stats  detail on\r\n") else {
        panic!()
    };
    assert_eq!(args.collect::<Vec<_>>(), [&b"detail"[..], b"on"]);
    let Request::Stats { args } = request(b"stats\r\n") else {
        panic!()
    };
    assert!(args.is_empty());
    assert_eq!(
        request(b"lru_crawler metadump all\r\n"),
        Request::LruCrawler(LruCrawler::Metadump { classes: b"all" })
    );
    assert_eq!(
        request(b"lru_crawler crawl 1,2\r\n"),
        Request::LruCrawler(LruCrawler::Crawl { classes: b"1,2" })
    );
    assert_eq!(
        request(b"lru_crawler sleep 10\r\n"),
        Request::LruCrawler(LruCrawler::Sleep(10))
    );
    assert_eq!(
        request(b"lru_crawler tocrawl 5\r\n"),
        Request::LruCrawler(LruCrawler::Tocrawl(5))
    );
    assert_eq!(
        request(b"lru_crawler enable\r\n"),
        Request::LruCrawler(LruCrawler::Enable)
    );
    assert_eq!(
        request(b"lru_crawler disable\r\n"),
        Request::LruCrawler(LruCrawler::Disable)
    );
    assert_eq!(
        error(b"lru_crawler sleep 1000001\r\n"),
        ErrorReply::CrawlerSleepTooLong
    );
    assert_eq!(
        error(b"lru_crawler tocrawl x\r\n"),
        ErrorReply::BadCommandLineFormat
    );
    assert_eq!(error(b"lru_crawler metadump\r\n"), ErrorReply::Error);
    let Request::Admin { command, args } = request(b"slabs reassign 1 2\r\n") else {
        panic!()
    };
    assert_eq!(
        (command, args.collect::<Vec<_>>()),
        (&b"slabs"[..], vec![&b"reassign"[..], b"1", b"2"])
    );
    assert_eq!(error(b"lru\r\n"), ErrorReply::Error);
    assert_eq!(error(b"misbehave\r\n"), ErrorReply::Error);
}

#[test]
fn meta_get_flags() {
    let Request::MetaGet { key, flags } = request(b"mg k s v f t c k O123 q u h l T10 N20 R30\r\n")
    else {
        panic!()
    };
    assert_eq!((key.raw, key.base64), (&b"k"[..], false));
    assert!(flags.value && flags.quiet && flags.no_update);
    assert_eq!(flags.opaque, Some(&b"O123"[..]));
    assert_eq!(
        (flags.ttl, flags.vivify_ttl, flags.recache_ttl),
        (Some(10), Some(20), Some(30))
    );
    assert_eq!(flags.order(), b"svftckOquhlTNR");
    let Request::MetaGet { key, .. } = request(b"mg YWJj b k\r\n") else {
        panic!()
    };
    assert_eq!((&key.decoded()[..], key.base64), (&b"abc"[..], true));
    assert_eq!(request(b"mn\r\n"), Request::MetaNoop);
}

#[test]
fn meta_errors() {
    assert_eq!(error(b"mg\r\n"), ErrorReply::Error);
    assert_eq!(error(b"mx k\r\n"), ErrorReply::Error);
    assert_eq!(error(b"mg k v v\r\n"), ErrorReply::DuplicateFlag);
    assert_eq!(error(b"mg k \x7f\r\n"), ErrorReply::DuplicateFlag);
    assert_eq!(error(b"mg k \xff\r\n"), ErrorReply::DuplicateFlag);
    assert_eq!(error(b"mg k x\r\n"), ErrorReply::InvalidFlag);
    assert_eq!(error(b"mg k Tx\r\n"), ErrorReply::BadToken);
    assert_eq!(error(b"mg k b\r\n"), ErrorReply::KeyDecode);
    // The last error set wins, as in memcached's flag loop.
    assert_eq!(error(b"mg k b Tx\r\n"), ErrorReply::BadToken);
    assert_eq!(error(b"mg k Tx b\r\n"), ErrorReply::KeyDecode);
    let long = format!("mg {} v\r\n", "k".repeat(251));
    assert_eq!(error(long.as_bytes()), ErrorReply::BadCommandLineFormat);
    let many = format!("mg k {}\r\n", ["O"; 18].join(" "));
    assert_eq!(error(many.as_bytes()), ErrorReply::MetaGetFlagsTooLong);
    let opaque = format!("mg k O{}\r\n", "1".repeat(32));
    assert_eq!(error(opaque.as_bytes()), ErrorReply::OpaqueTooLong);
    assert!(matches!(
        request(format!("mg k O{}\r\n", "1".repeat(31)).as_bytes()),
        Request::MetaGet { .. }
    ));
    assert_eq!(error(b"md k zz\r\n"), ErrorReply::InvalidOrDuplicateFlag);
    assert_eq!(error(b"ma k Dx\r\n"), ErrorReply::InvalidOrDuplicateFlag);
    assert_eq!(error(b"ma k Mx\r\n"), ErrorReply::InvalidArithmeticMode);
    let many = format!("md k {}\r\n", ["s"; 18].join(" "));
    assert_eq!(error(many.as_bytes()), ErrorReply::MetaFlagsTooLong);
    assert_eq!(error(b"me\r\n"), ErrorReply::BadCommandLineFormat);
    assert!(matches!(request(b"me k\r\n"), Request::MetaDebug { .. }));
    assert_eq!(error(b"me YQ= b\r\n"), ErrorReply::BadCommandLineFormat);
}

#[test]
fn meta_set_and_arithmetic() {
    assert_eq!(
        frame(b"ms k 2 b\r\nhi\r\n"),
        (Request::Error(ErrorReply::KeyDecode), 14)
    );
    let (req, consumed) = frame(b"ms k 2 F7 T-1 C5 MA I q O1 k c\r\nhi\r\n");
    assert_eq!(consumed, 36);
    let Request::MetaSet { key, flags, data } = req else {
        panic!()
    };
    assert_eq!((key.raw, data), (&b"k"[..], &b"hi"[..]));
    assert_eq!(
        (flags.client_flags, flags.ttl, flags.compare_cas),
        (Some(7), Some(-1), Some(5))
    );
    assert_eq!(flags.set_mode(), MetaSetMode::Append);
    assert!(flags.invalidate && flags.quiet);
    // Errors after the data length is known swallow the data block.
    for (input, reply) in [
        (&b"ms k 2 MX\r\nhi\r\n"[..], ErrorReply::InvalidSetMode),
        (b"ms k 2 Mxx\r\nhi\r\n", ErrorReply::ModeTokenLength),
        (b"ms k 2 Fx\r\nhi\r\n", ErrorReply::BadCommandLineFormat),
        (b"ms k 2 zz\r\nhi\r\n", ErrorReply::InvalidFlag),
        (b"ms k 2\r\nhixx\r\n", ErrorReply::BadDataChunk),
    ] {
        let (req, consumed) = frame(input);
        assert_eq!(
            (req, consumed),
            (
                Request::Error(reply),
                input.len() - 2 * usize::from(reply == ErrorReply::BadDataChunk)
            )
        );
    }
    // Errors before it do not.
    for input in [
        &b"ms k\r\nhi\r\n"[..],
        b"ms k x\r\nhi\r\n",
        b"ms k -1\r\nhi\r\n",
    ] {
        assert_eq!(
            frame(input),
            (
                Request::Error(ErrorReply::BadCommandLineFormat),
                input.len() - 4
            )
        );
    }
    let Request::MetaArithmetic { flags, .. } = request(b"ma k MD D10 J5 N0 v\r\n") else {
        panic!()
    };
    assert!(!flags.incr());
    assert_eq!(
        (flags.delta, flags.initial, flags.vivify_ttl),
        (Some(10), Some(5), Some(0))
    );
    let Request::MetaArithmetic { flags, .. } = request(b"ma k\r\n") else {
        panic!()
    };
    assert!(flags.incr());
    let Request::MetaDelete { flags, .. } = request(b"md k C5 I T30 q\r\n") else {
        panic!()
    };
    assert_eq!(
        (flags.compare_cas, flags.invalidate, flags.ttl),
        (Some(5), true, Some(30))
    );
    let Request::MetaDebug { key } = request(b"me YWJj b\r\n") else {
        panic!()
    };
    assert_eq!(&key.decoded()[..], b"abc");
}

#[test]
fn key_limit_is_configurable_up_to_memcached_s() {
    let short = Limits {
        max_key_len: 3,
        ..Limits::default()
    };
    let Decoded::Frame { request, .. } = decode(b"get abcd\r\n", &short) else {
        panic!()
    };
    assert!(matches!(request, Request::GetKeyTooLong { .. }));
    let Decoded::Frame { request, .. } = decode(b"mg abcd v\r\n", &short) else {
        panic!()
    };
    assert_eq!(request, Request::Error(ErrorReply::BadCommandLineFormat));
    let long = Limits {
        max_key_len: 1000,
        ..Limits::default()
    };
    let line = format!("delete {}\r\n", "k".repeat(251));
    let Decoded::Frame { request, .. } = decode(line.as_bytes(), &long) else {
        panic!()
    };
    assert_eq!(request, Request::Error(ErrorReply::BadCommandLineFormat));
}
