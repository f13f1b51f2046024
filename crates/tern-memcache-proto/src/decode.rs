//! The server-side decoder: one request at a time out of the connection's read buffer.

use memchr::memchr;

use crate::base64;
use crate::error::ErrorReply;
use crate::number::{safe_strtol, safe_strtoul, safe_strtoull};
use crate::request::KEY_MAX_LENGTH;
use crate::request::{GetKind, LruCrawler, MetaFlags, MetaKey, Request, ShutdownMode, StoreKind};
use crate::tokens::{Tokens, Words};

/// Limits the decoder enforces; the defaults are memcached 1.6.18's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest key (memcached: `KEY_MAX_LENGTH`, 250, a compile-time limit; larger values act as 250).
    pub max_key_len: usize,
    /// Buffered bytes without a newline after which the connection is closed (memcached: 2048), except for
    /// a `get `/`gets ` line, which memcached lets grow.
    pub max_line_len: usize,
    /// Longest line memcached can ever see whole (its 16 KiB read buffer): a longer non-multiget line can
    /// never be processed, so the connection is closed.
    pub read_buffer_size: usize,
    /// Longest `get`/`gets` line accepted (memcached: unbounded; here explicit).
    pub max_multiget_line_len: usize,
    /// Largest item (`-I`, memcached default 1 MiB), counted as memcached counts it (see `item_size`).
    pub max_item_size: usize,
    /// Whether items carry an 8-byte CAS (memcached without `-C`), which counts toward `max_item_size`.
    pub use_cas: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key_len: KEY_MAX_LENGTH,
            max_line_len: 2048,
            read_buffer_size: 16384,
            max_multiget_line_len: 16 * 1024 * 1024,
            max_item_size: 1024 * 1024,
            use_cas: true,
        }
    }
}

/// memcached's item header (`sizeof(item)` on 64-bit Linux).
const ITEM_HEADER_SIZE: usize = 48;

impl Limits {
    /// The size memcached's `item_size_ok` checks against `-I`: header, CAS, key and its NUL, the value with
    /// its `\r\n`, and 4 bytes of client flags when they are non-zero (measured against memcached 1.6.18).
    pub fn item_size(&self, key_len: usize, flags: u32, value_len: usize) -> usize {
        ITEM_HEADER_SIZE
            + if self.use_cas { 8 } else { 0 }
            + key_len
            + 1
            + value_len
            + 2
            + if flags != 0 { 4 } else { 0 }
    }

    fn key_limit(&self) -> usize {
        self.max_key_len.min(KEY_MAX_LENGTH)
    }

    fn too_large(&self, key_len: usize, flags: u32, value_len: usize) -> bool {
        self.item_size(key_len, flags, value_len) > self.max_item_size
    }
}

/// The outcome of one `decode` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// Not enough bytes for a frame yet. `needed`: the total length of `buf` (counted from its start) needed
    /// before it is worth calling `decode` again, when known (a storage command's data block).
    Incomplete { needed: Option<usize> },
    /// One request, borrowing from `buf`, which consumed `consumed` bytes. `consumed` may exceed `buf.len()`:
    /// the server then discards that many bytes in total as they arrive (memcached's swallow of a data block
    /// it refused).
    Frame {
        request: Request<'a>,
        consumed: usize,
    },
    /// Close the connection, after writing `reply` if any (a line without newline past the line limit).
    Close { reply: Option<&'static [u8]> },
}

/// Decodes the first request in `buf` as memcached 1.6.18 (`-B ascii`) does.
///
/// Lines end at `\n`; one `\r` before it is dropped. A NUL byte ends the line's text (memcached's C strings).
/// Binary-protocol requests (first byte 0x80) are not special in ascii mode: they are text lines like any
/// other, which memcached answers with `ERROR` once a newline arrives (or closes past the line limit).
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Decoded<'a> {
    let Some(newline) = memchr(b'\n', buf) else {
        if buf.len() > limits.max_line_len && !may_grow(buf, limits) {
            return Decoded::Close { reply: None };
        }
        return Decoded::Incomplete { needed: None };
    };
    if newline >= limits.read_buffer_size && !may_grow(&buf[..newline], limits) {
        return Decoded::Close { reply: None };
    }
    let line_consumed = newline + 1;
    let mut end = newline;
    if newline > 1 && buf[newline - 1] == b'\r' {
        end -= 1;
    }
    let mut line = &buf[..end];
    if let Some(nul) = memchr(0, line) {
        line = &line[..nul];
    }
    let decoder = LineDecoder {
        buf,
        line_consumed,
        limits,
    };
    if let Some(command) = Words::new(line).next() {
        let kind = match command {
            b"get" | b"bget" => Some(GetKind::Get),
            b"gets" => Some(GetKind::Gets),
            b"gat" => Some(GetKind::Gat),
            b"gats" => Some(GetKind::Gats),
            _ => None,
        };
        if let Some(kind) = kind {
            return decoder.get(line, command, kind);
        }
    }
    decoder.dispatch(&Tokens::new(line), line)
}

/// memcached keeps reading a line without newline only for a large multiget: `get ` or `gets ` after at
/// most 100 leading spaces.
fn may_grow(buf: &[u8], limits: &Limits) -> bool {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    spaces <= 100
        && (rest.starts_with(b"get ") || rest.starts_with(b"gets "))
        && buf.len() <= limits.max_multiget_line_len
}

struct LineDecoder<'a, 'l> {
    buf: &'a [u8],
    line_consumed: usize,
    limits: &'l Limits,
}

impl<'a> LineDecoder<'a, '_> {
    fn frame(&self, request: Request<'a>) -> Decoded<'a> {
        Decoded::Frame {
            request,
            consumed: self.line_consumed,
        }
    }

    fn error(&self, reply: ErrorReply) -> Decoded<'a> {
        self.frame(Request::Error(reply))
    }

    /// An error subject to `noreply`, as memcached's `out_string`.
    fn error_unless(&self, noreply: bool, reply: ErrorReply) -> Decoded<'a> {
        self.frame(if noreply {
            Request::Silent(reply)
        } else {
            Request::Error(reply)
        })
    }

    fn dispatch(&self, tokens: &Tokens<'a>, line: &'a [u8]) -> Decoded<'a> {
        let ntokens = tokens.ntokens();
        let command = tokens.get(0);
        if ntokens < 2 || command.len() < 2 {
            return self.error(ErrorReply::Error);
        }
        if command[0] == b'm' && command.len() == 2 {
            return match command[1] {
                b'g' => self.meta_get(tokens),
                b's' => self.meta_set(tokens),
                b'd' => self.meta_delete_or_arithmetic(tokens, false),
                b'a' => self.meta_delete_or_arithmetic(tokens, true),
                b'n' => self.frame(Request::MetaNoop),
                b'e' => self.meta_debug(tokens),
                _ => self.error(ErrorReply::Error),
            };
        }
        let want = |ok: bool, decoded: &dyn Fn() -> Decoded<'a>| {
            if ok {
                decoded()
            } else {
                self.error(ErrorReply::Error)
            }
        };
        let store = |kind: StoreKind| {
            let ok = if kind == StoreKind::Cas {
                ntokens == 7 || ntokens == 8
            } else {
                ntokens == 6 || ntokens == 7
            };
            want(ok, &|| self.store(tokens, kind))
        };
        match command {
            b"set" => store(StoreKind::Set),
            b"add" => store(StoreKind::Add),
            b"replace" => store(StoreKind::Replace),
            b"append" => store(StoreKind::Append),
            b"prepend" => store(StoreKind::Prepend),
            b"cas" => store(StoreKind::Cas),
            b"incr" => want(ntokens == 4 || ntokens == 5, &|| {
                self.arithmetic(tokens, true)
            }),
            b"decr" => want(ntokens == 4 || ntokens == 5, &|| {
                self.arithmetic(tokens, false)
            }),
            b"delete" => want((3..=5).contains(&ntokens), &|| self.delete(tokens)),
            b"touch" => want(ntokens == 4 || ntokens == 5, &|| self.touch(tokens)),
            b"flush_all" => want((2..=4).contains(&ntokens), &|| self.flush_all(tokens)),
            b"version" => self.frame(Request::Version),
            b"quit" => self.frame(Request::Quit),
            b"verbosity" => want(ntokens == 3 || ntokens == 4, &|| {
                let noreply = tokens.noreply();
                match safe_strtoul(tokens.get(1)) {
                    Some(level) => self.frame(Request::Verbosity { level, noreply }),
                    None => self.error_unless(noreply, ErrorReply::BadCommandLineFormat),
                }
            }),
            b"cache_memlimit" => want(ntokens == 3 || ntokens == 4, &|| {
                self.frame(Request::CacheMemlimit {
                    megabytes: safe_strtoul(tokens.get(1)),
                    noreply: tokens.noreply(),
                })
            }),
            b"shutdown" => self.frame(Request::Shutdown(match (ntokens, tokens.get(1)) {
                (2, _) => ShutdownMode::Immediate,
                (3, b"graceful") => ShutdownMode::Graceful,
                _ => ShutdownMode::Invalid,
            })),
            b"stats" => self.frame(Request::Stats {
                args: Words::new(after_word(line, command)),
            }),
            b"lru_crawler" => self.lru_crawler(tokens),
            b"lru" => want(ntokens >= 3, &|| self.admin(line, command)),
            b"slabs" | b"watch" | b"extstore" | b"refresh_certs" => self.admin(line, command),
            _ => self.unknown(tokens),
        }
    }

    /// memcached answers an unknown command `ERROR`, but hangs up on one that looks like an HTTP request: the
    /// last token starts with `HTTP/`, and the command's first letter is none of those it dispatches on
    /// first (`g s a c i d t`: their unknown commands get `ERROR` whatever follows).
    fn unknown(&self, tokens: &Tokens<'a>) -> Decoded<'a> {
        let first = tokens.get(0)[0];
        let last = tokens.get(tokens.ntokens() - 2);
        if !b"gsacidt".contains(&first) && last.starts_with(b"HTTP/") {
            self.frame(Request::Hangup)
        } else {
            self.error(ErrorReply::Error)
        }
    }

    fn admin(&self, line: &'a [u8], command: &'a [u8]) -> Decoded<'a> {
        self.frame(Request::Admin {
            command,
            args: Words::new(after_word(line, command)),
        })
    }

    /// The get family, without the general tokenizer: multigets are the hot path and can be long.
    fn get(&self, line: &'a [u8], command: &'a [u8], kind: GetKind) -> Decoded<'a> {
        let rest = after_word(line, command);
        let mut words = Words::new(rest);
        // memcached's WANT_TOKENS_MIN(3): a key (or, for gat, the exptime) must follow.
        let Some(first) = words.clone().next() else {
            return self.error(ErrorReply::Error);
        };
        let mut exptime = 0;
        if matches!(kind, GetKind::Gat | GetKind::Gats) {
            match safe_strtol(first) {
                Some(e) => exptime = e,
                None => return self.error(ErrorReply::InvalidExptime),
            }
            words.next();
        }
        if let Some(long) = words.clone().find(|k| k.len() > self.limits.key_limit()) {
            // memcached serves the keys before the long one (touching them for gat) before it fails.
            let first = words.clone().next().map_or(0, |k| offset_in(rest, k));
            let keys = Words::new(&rest[first..offset_in(rest, long)]);
            return self.frame(Request::GetKeyTooLong {
                kind,
                exptime,
                keys,
            });
        }
        self.frame(Request::Get {
            kind,
            exptime,
            keys: words,
        })
    }

    fn store(&self, tokens: &Tokens<'a>, kind: StoreKind) -> Decoded<'a> {
        let noreply = tokens.noreply();
        let key = tokens.get(1);
        if let Some(refusal) = self.refuse_long_key(key, noreply) {
            return refusal;
        }
        let (Some(flags), Some(exptime), Some(vlen)) = (
            safe_strtoul(tokens.get(2)),
            safe_strtol(tokens.get(3)),
            safe_strtol(tokens.get(4)),
        ) else {
            return self.error_unless(noreply, ErrorReply::BadCommandLineFormat);
        };
        let mut cas = 0;
        if kind == StoreKind::Cas {
            match safe_strtoull(tokens.get(5)) {
                Some(c) => cas = c,
                None => return self.error_unless(noreply, ErrorReply::BadCommandLineFormat),
            }
        }
        if !(0..=i32::MAX - 2).contains(&vlen) {
            return self.error_unless(noreply, ErrorReply::BadCommandLineFormat);
        }
        let vlen = vlen as usize;
        let total = self.line_consumed + vlen + 2;
        if self.limits.too_large(key.len(), flags, vlen) {
            let request = Request::TooLarge {
                key: MetaKey::plain(key),
                unlink_existing: kind == StoreKind::Set,
                noreply,
                meta: false,
            };
            return Decoded::Frame {
                request,
                consumed: total,
            };
        }
        match self.data_block(vlen) {
            None => Decoded::Incomplete {
                needed: Some(total),
            },
            Some(Err(())) => Decoded::Frame {
                request: Request::BadDataChunk { key, noreply },
                consumed: total,
            },
            Some(Ok(data)) => Decoded::Frame {
                request: Request::Store {
                    kind,
                    key,
                    flags,
                    exptime,
                    data,
                    cas,
                    noreply,
                },
                consumed: total,
            },
        }
    }

    /// The data block after the line: `None` until all `vlen + 2` bytes are buffered, `Err` when it does
    /// not end in `\r\n` (memcached's bad data chunk).
    fn data_block(&self, vlen: usize) -> Option<Result<&'a [u8], ()>> {
        let start = self.line_consumed;
        let block = self.buf.get(start..start + vlen + 2)?;
        Some(if block.ends_with(b"\r\n") {
            Ok(&block[..vlen])
        } else {
            Err(())
        })
    }

    /// memcached's refusal of a classic command's key over the length limit, if it is.
    fn refuse_long_key(&self, key: &[u8], noreply: bool) -> Option<Decoded<'a>> {
        (key.len() > self.limits.key_limit())
            .then(|| self.error_unless(noreply, ErrorReply::BadCommandLineFormat))
    }

    fn arithmetic(&self, tokens: &Tokens<'a>, incr: bool) -> Decoded<'a> {
        let noreply = tokens.noreply();
        let key = tokens.get(1);
        if let Some(refusal) = self.refuse_long_key(key, noreply) {
            return refusal;
        }
        match safe_strtoull(tokens.get(2)) {
            Some(delta) => self.frame(Request::Arithmetic {
                incr,
                key,
                delta,
                noreply,
            }),
            None => self.error_unless(noreply, ErrorReply::InvalidDelta),
        }
    }

    fn delete(&self, tokens: &Tokens<'a>) -> Decoded<'a> {
        let ntokens = tokens.ntokens();
        let mut noreply = false;
        if ntokens > 3 {
            // memcached still accepts the ancient `delete <key> 0` hold time, and nothing else.
            let hold_is_zero = tokens.get(2) == b"0";
            noreply = tokens.noreply();
            let valid = (ntokens == 4 && (hold_is_zero || noreply))
                || (ntokens == 5 && hold_is_zero && noreply);
            if !valid {
                return self.error_unless(noreply, ErrorReply::DeleteUsage);
            }
        }
        let key = tokens.get(1);
        if let Some(refusal) = self.refuse_long_key(key, noreply) {
            return refusal;
        }
        self.frame(Request::Delete { key, noreply })
    }

    fn touch(&self, tokens: &Tokens<'a>) -> Decoded<'a> {
        let noreply = tokens.noreply();
        let key = tokens.get(1);
        if let Some(refusal) = self.refuse_long_key(key, noreply) {
            return refusal;
        }
        match safe_strtol(tokens.get(2)) {
            Some(exptime) => self.frame(Request::Touch {
                key,
                exptime,
                noreply,
            }),
            None => self.error_unless(noreply, ErrorReply::InvalidExptime),
        }
    }

    fn flush_all(&self, tokens: &Tokens<'a>) -> Decoded<'a> {
        let noreply = tokens.noreply();
        let mut delay = 0;
        if tokens.ntokens() != if noreply { 3 } else { 2 } {
            match safe_strtol(tokens.get(1)) {
                Some(d) => delay = d,
                None => return self.error_unless(noreply, ErrorReply::InvalidExptime),
            }
        }
        self.frame(Request::FlushAll { delay, noreply })
    }

    fn lru_crawler(&self, tokens: &Tokens<'a>) -> Decoded<'a> {
        let ntokens = tokens.ntokens();
        let sub = tokens.get(1);
        let request = match (ntokens, sub) {
            (4, b"crawl") => LruCrawler::Crawl {
                classes: tokens.get(2),
            },
            (4, b"metadump") => LruCrawler::Metadump {
                classes: tokens.get(2),
            },
            (4, b"tocrawl") => match safe_strtoul(tokens.get(2)) {
                Some(n) => LruCrawler::Tocrawl(n),
                None => return self.error(ErrorReply::BadCommandLineFormat),
            },
            (4, b"sleep") => match safe_strtoul(tokens.get(2)) {
                Some(us) if us > 1_000_000 => return self.error(ErrorReply::CrawlerSleepTooLong),
                Some(us) => LruCrawler::Sleep(us),
                None => return self.error(ErrorReply::BadCommandLineFormat),
            },
            (3, b"enable") => LruCrawler::Enable,
            (3, b"disable") => LruCrawler::Disable,
            _ => return self.error(ErrorReply::Error),
        };
        self.frame(Request::LruCrawler(request))
    }

    /// The checks every meta command but `mn` starts with, in memcached's order. `Err` is the reply.
    fn meta_prelude(&self, tokens: &Tokens<'a>, too_long: ErrorReply) -> Result<(), ErrorReply> {
        if tokens.ntokens() < 3 {
            return Err(ErrorReply::Error);
        }
        if tokens.get(1).len() > self.limits.key_limit() {
            return Err(ErrorReply::BadCommandLineFormat);
        }
        if tokens.ntokens() > MAX_META_TOKENS {
            return Err(too_long);
        }
        Ok(())
    }

    fn meta_get(&self, tokens: &Tokens<'a>) -> Decoded<'a> {
        if let Err(reply) = self.meta_prelude(tokens, ErrorReply::MetaGetFlagsTooLong) {
            return self.error(reply);
        }
        match parse_meta_flags(tokens, 2) {
            Ok(flags) if opaque_too_long(&flags) => self.error(ErrorReply::OpaqueTooLong),
            Ok(flags) => self.frame(Request::MetaGet {
                key: meta_key(tokens, &flags),
                flags,
            }),
            Err(e) => self.error(e),
        }
    }

    fn meta_delete_or_arithmetic(&self, tokens: &Tokens<'a>, arithmetic: bool) -> Decoded<'a> {
        if let Err(reply) = self.meta_prelude(tokens, ErrorReply::MetaFlagsTooLong) {
            return self.error(reply);
        }
        let Ok(flags) = parse_meta_flags(tokens, 2) else {
            return self.error(ErrorReply::InvalidOrDuplicateFlag);
        };
        let key = meta_key(tokens, &flags);
        if arithmetic && !matches!(flags.mode, None | Some(b'I' | b'+' | b'D' | b'-')) {
            return self.error(ErrorReply::InvalidArithmeticMode);
        }
        if opaque_too_long(&flags) {
            return self.error(ErrorReply::OpaqueTooLong);
        }
        if arithmetic {
            return self.frame(Request::MetaArithmetic { key, flags });
        }
        self.frame(Request::MetaDelete { key, flags })
    }

    fn meta_set(&self, tokens: &Tokens<'a>) -> Decoded<'a> {
        if let Err(reply) = self.meta_prelude(tokens, ErrorReply::MetaFlagsTooLong) {
            return self.error(reply);
        }
        if tokens.ntokens() == 3 {
            return self.error(ErrorReply::BadCommandLineFormat);
        }
        let vlen = match safe_strtol(tokens.get(2)) {
            Some(v) if (0..=i32::MAX - 2).contains(&v) => v as usize,
            _ => return self.error(ErrorReply::BadCommandLineFormat),
        };
        let total = self.line_consumed + vlen + 2;
        // From here on memcached swallows the data block on any error.
        let refuse = |reply: ErrorReply| Decoded::Frame {
            request: Request::Error(reply),
            consumed: total,
        };
        let flags = match parse_meta_flags(tokens, 3) {
            Ok(flags) => flags,
            Err(e) => return refuse(e),
        };
        if !matches!(flags.mode, None | Some(b'E' | b'A' | b'P' | b'R' | b'S')) {
            return refuse(ErrorReply::InvalidSetMode);
        }
        if opaque_too_long(&flags) {
            return refuse(ErrorReply::OpaqueTooLong);
        }
        let key = meta_key(tokens, &flags);
        let key_len = key.decoded().len();
        if self
            .limits
            .too_large(key_len, flags.client_flags.unwrap_or(0), vlen)
        {
            let request = Request::TooLarge {
                key,
                unlink_existing: true,
                noreply: false,
                meta: true,
            };
            return Decoded::Frame {
                request,
                consumed: total,
            };
        }
        match self.data_block(vlen) {
            None => Decoded::Incomplete {
                needed: Some(total),
            },
            Some(Err(())) => refuse(ErrorReply::BadDataChunk),
            Some(Ok(data)) => Decoded::Frame {
                request: Request::MetaSet { key, flags, data },
                consumed: total,
            },
        }
    }

    fn meta_debug(&self, tokens: &Tokens<'a>) -> Decoded<'a> {
        let ntokens = tokens.ntokens();
        let raw = tokens.get(1);
        if ntokens < 3 || raw.len() > self.limits.key_limit() {
            return self.error(ErrorReply::BadCommandLineFormat);
        }
        let base64 = ntokens >= 4 && tokens.get(2) == b"b";
        if base64 && base64::decode(raw, &mut [0u8; KEY_MAX_LENGTH]).is_none() {
            return self.error(ErrorReply::BadCommandLineFormat);
        }
        self.frame(Request::MetaDebug {
            key: MetaKey { raw, base64 },
        })
    }
}

/// memcached's `MFLAG_MAX_OPT_LENGTH`: meta commands with more tokens (terminal included) are refused.
const MAX_META_TOKENS: usize = 20;
/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`.
const MAX_OPAQUE_LEN: usize = 32;

fn meta_key<'a>(tokens: &Tokens<'a>, flags: &MetaFlags<'a>) -> MetaKey<'a> {
    MetaKey {
        raw: tokens.get(1),
        base64: flags.base64_key,
    }
}

/// memcached's `_meta_flag_preparse` plus the opaque-length check of the reply loops. Duplicate and unknown
/// flags fail at once; other errors let parsing go on and the last one set wins, as in memcached.
fn parse_meta_flags<'a>(tokens: &Tokens<'a>, start: usize) -> Result<MetaFlags<'a>, ErrorReply> {
    let mut flags = MetaFlags::default();
    let mut seen = [false; 127];
    let mut error: Option<ErrorReply> = None;
    let mut failed = false;
    for &token in tokens.from(start) {
        let flag = token[0];
        if flag >= 127 || seen[usize::from(flag)] {
            return Err(ErrorReply::DuplicateFlag);
        }
        seen[usize::from(flag)] = true;
        let arg = &token[1..];
        let mut fail = |reply: Option<ErrorReply>| {
            failed = true;
            if reply.is_some() {
                error = reply;
            }
        };
        match flag {
            b'b' => {
                flags.base64_key = true;
                if base64::decode(tokens.get(1), &mut [0u8; KEY_MAX_LENGTH]).is_none() {
                    fail(Some(ErrorReply::KeyDecode));
                }
            }
            b'N' | b'T' | b'R' => match safe_strtol(arg) {
                Some(ttl) => match flag {
                    b'N' => flags.vivify_ttl = Some(ttl),
                    b'T' => flags.ttl = Some(ttl),
                    _ => flags.recache_ttl = Some(ttl),
                },
                None => fail(Some(ErrorReply::BadToken)),
            },
            b'O' => flags.opaque = Some(token),
            b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'l' | b'h' => {}
            b'v' => flags.value = true,
            b'u' => flags.no_update = true,
            b'q' => flags.quiet = true,
            b'I' => flags.invalidate = true,
            b'F' => match safe_strtoul(arg) {
                Some(f) => flags.client_flags = Some(f),
                None => fail(None),
            },
            b'C' => match safe_strtoull(arg) {
                Some(c) => flags.compare_cas = Some(c),
                None => fail(Some(ErrorReply::BadToken)),
            },
            b'M' => {
                if token.len() == 2 {
                    flags.mode = Some(token[1]);
                } else {
                    fail(Some(ErrorReply::ModeTokenLength));
                }
            }
            b'J' => match safe_strtoull(arg) {
                Some(v) => flags.initial = Some(v),
                None => fail(Some(ErrorReply::InvalidInitial)),
            },
            b'D' => match safe_strtoull(arg) {
                Some(v) => flags.delta = Some(v),
                None => fail(Some(ErrorReply::InvalidDeltaValue)),
            },
            _ => return Err(ErrorReply::InvalidFlag),
        }
        flags.push_order(flag);
    }
    if failed {
        return Err(error.unwrap_or(ErrorReply::BadCommandLineFormat));
    }
    Ok(flags)
}

/// memcached checks the opaque length while writing the reply, after the other flag errors.
fn opaque_too_long(flags: &MetaFlags<'_>) -> bool {
    flags.opaque.is_some_and(|o| o.len() > MAX_OPAQUE_LEN)
}

/// The rest of `line` after `word` (a token of it) and the spaces that follow.
fn after_word<'a>(line: &'a [u8], word: &[u8]) -> &'a [u8] {
    &line[offset_in(line, word) + word.len()..]
}

/// Where `token` (a subslice of `line`) starts.
fn offset_in(line: &[u8], token: &[u8]) -> usize {
    token.as_ptr() as usize - line.as_ptr() as usize
}
