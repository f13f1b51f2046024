//! Decoded requests: what a client asked for, borrowing keys and values from the read buffer.

use crate::base64;
use crate::error::ErrorReply;
use crate::tokens::Words;

/// The four retrieval commands of the text protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetKind {
    /// `get` (and the ancient `bget`).
    Get,
    /// `gets`: also return the CAS unique.
    Gets,
    /// `gat <exptime>`: get and touch.
    Gat,
    /// `gats <exptime>`: get and touch, returning the CAS unique.
    Gats,
}

impl GetKind {
    /// Whether `VALUE` lines carry the CAS unique.
    pub fn returns_cas(self) -> bool {
        matches!(self, GetKind::Gets | GetKind::Gats)
    }
}

/// The storage commands of the text protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// `set`
    Set,
    /// `add`
    Add,
    /// `replace`
    Replace,
    /// `append`
    Append,
    /// `prepend`
    Prepend,
    /// `cas`
    Cas,
}

/// `shutdown` as sent; memcached first answers `ERROR: shutdown not enabled` unless started with `-A`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `shutdown`: SIGINT.
    Immediate,
    /// `shutdown graceful`: SIGUSR1.
    Graceful,
    /// Anything else: `CLIENT_ERROR invalid shutdown mode` when shutdown is enabled.
    Invalid,
}

/// Largest class id memcached 1.6.18 takes in a class list (`MAX_NUMBER_OF_SLAB_CLASSES - 1`).
pub const CLASS_ID_MAX: u32 = 63;

/// The item classes an `lru_crawler crawl` or `metadump` names, read as memcached 1.6.18 reads them
/// (`lru_crawler_crawl`): `all`, `hash` (a walk of the hash table, which only a metadump makes), or class
/// ids from 1 to [`CLASS_ID_MAX`] separated by commas, empty parts skipped as `strtok_r` skips them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrawlerClasses {
    All,
    Hash,
    /// Bit `i` set: class `i` named. No bit set (`,`): nothing to crawl, memcached's `NOTSTARTED`.
    Ids(u64),
}

impl CrawlerClasses {
    /// `None` for a part that is not a class id: memcached's `BADCLASS invalid class id`.
    pub fn parse(word: &[u8]) -> Option<CrawlerClasses> {
        match word {
            b"all" => Some(CrawlerClasses::All),
            b"hash" => Some(CrawlerClasses::Hash),
            _ => {
                let mut ids = 0u64;
                for part in word.split(|&b| b == b',').filter(|p| !p.is_empty()) {
                    let id = crate::number::safe_strtoul(part)
                        .filter(|id| (1..=CLASS_ID_MAX).contains(id))?;
                    ids |= 1 << id;
                }
                Some(CrawlerClasses::Ids(ids))
            }
        }
    }

    /// Whether class `class` is named (`all` and `hash` name every class).
    pub fn contains(&self, class: u8) -> bool {
        match *self {
            CrawlerClasses::All | CrawlerClasses::Hash => true,
            CrawlerClasses::Ids(ids) => class < 64 && ids & (1 << class) != 0,
        }
    }

    /// Whether no class is named.
    pub fn is_empty(&self) -> bool {
        *self == CrawlerClasses::Ids(0)
    }
}

/// `lru_crawler` subcommands, already checked as memcached checks them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LruCrawler<'a> {
    /// `lru_crawler crawl <classids|all>`
    Crawl { classes: &'a [u8] },
    /// `lru_crawler metadump <classids|all|hash>`: the key dump.
    Metadump { classes: &'a [u8] },
    /// `lru_crawler tocrawl <n>`
    Tocrawl(u32),
    /// `lru_crawler sleep <microseconds>` (at most 1,000,000).
    Sleep(u32),
    /// `lru_crawler enable`
    Enable,
    /// `lru_crawler disable`
    Disable,
}

/// A meta-command key: the token as sent and whether it is base64 (`b` flag), already validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaKey<'a> {
    /// The key token exactly as the client sent it.
    pub raw: &'a [u8],
    /// The `b` flag: `raw` is base64 and the item key is its decoding.
    pub base64: bool,
}

/// memcached's `KEY_MAX_LENGTH`.
pub const KEY_MAX_LENGTH: usize = 250;

/// What a key token of `KEY_MAX_LENGTH` bytes decodes to at most.
const MAX_DECODED_KEY_LEN: usize = KEY_MAX_LENGTH / 4 * 3;

/// An item key: the request's own bytes, or the base64 decoding of them held inline (a key token is at most
/// 250 bytes, which decode to at most 187).
#[derive(Clone, Copy, Debug)]
#[allow(clippy::large_enum_variant)] // a short-lived stack value; boxing would allocate per request
pub enum DecodedKey<'a> {
    /// A plain key, borrowed from the read buffer.
    Plain(&'a [u8]),
    /// A decoded base64 key.
    Decoded {
        buf: [u8; MAX_DECODED_KEY_LEN],
        len: usize,
    },
}

impl std::ops::Deref for DecodedKey<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            DecodedKey::Plain(key) => key,
            DecodedKey::Decoded { buf, len } => &buf[..*len],
        }
    }
}

impl<'a> MetaKey<'a> {
    /// A plain (not base64) key.
    pub fn plain(raw: &'a [u8]) -> Self {
        MetaKey { raw, base64: false }
    }

    /// The item key: `raw` itself, or its base64 decoding (validated by the decoder, so it cannot fail here).
    pub fn decoded(&self) -> DecodedKey<'a> {
        if !self.base64 {
            return DecodedKey::Plain(self.raw);
        }
        let mut buf = [0; MAX_DECODED_KEY_LEN];
        let len = base64::decode(self.raw, &mut buf).unwrap_or(0);
        DecodedKey::Decoded { buf, len }
    }
}

/// `ms` mode (`M<mode>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaSetMode {
    /// `MS` (default): set; with `C` a compare-and-swap.
    Set,
    /// `ME`: add.
    Add,
    /// `MA`: append.
    Append,
    /// `MP`: prepend.
    Prepend,
    /// `MR`: replace; with `C` a compare-and-swap.
    Replace,
}

/// The flags of a meta command (`mg ms md ma`), parsed as memcached's `_meta_flag_preparse` does.
///
/// Return flags are echoed in the order the client sent them, so that order is kept in `order`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaFlags<'a> {
    /// `b`: the key is base64.
    pub base64_key: bool,
    /// `v`: return the value.
    pub value: bool,
    /// `q`: quiet mode. memcached 1.6.18 then hides only: `EN` of `mg` (a hit's `HD`/`VA` is still sent),
    /// `HD` of `ms` and `md`, and the `HD`/`VA` of an `ma` that updated an existing item (not of one it
    /// vivified). Errors, `NS`, `NF` and `EX` are always sent.
    pub quiet: bool,
    /// `u`: do not bump the item in the LRU.
    pub no_update: bool,
    /// `I`: invalidate (mark stale instead of deleting; with `ms` + `C`, allow a stale CAS).
    pub invalidate: bool,
    /// `O<token>`: the opaque token to echo, including its leading `O` (at most 32 bytes).
    pub opaque: Option<&'a [u8]>,
    /// `T<ttl>`: new TTL, as memcached's int32 reads it.
    pub ttl: Option<i32>,
    /// `N<ttl>`: vivify on miss with this TTL.
    pub vivify_ttl: Option<i32>,
    /// `R<ttl>`: win the recache token if the TTL remaining is below this.
    pub recache_ttl: Option<i32>,
    /// `F<flags>`: client flags for `ms`.
    pub client_flags: Option<u32>,
    /// `C<cas>`: compare CAS.
    pub compare_cas: Option<u64>,
    /// `M<c>`: the raw mode character (`ms`: E A P R S; `ma`: I + D -).
    pub mode: Option<u8>,
    /// `D<delta>` for `ma`.
    pub delta: Option<u64>,
    /// `J<initial>` for `ma` (vivified value).
    pub initial: Option<u64>,
    order: [u8; 20],
    order_len: usize,
}

impl<'a> MetaFlags<'a> {
    pub(crate) fn push_order(&mut self, flag: u8) {
        if self.order_len < self.order.len() {
            self.order[self.order_len] = flag;
            self.order_len += 1;
        }
    }

    /// The flag characters in request order (each appears at most once).
    pub fn order(&self) -> &[u8] {
        &self.order[..self.order_len]
    }

    /// Whether the client sent flag `c` (e.g. `b'k'`).
    pub fn has(&self, c: u8) -> bool {
        self.order().contains(&c)
    }

    /// The `ms` mode; the decoder has already rejected invalid ones.
    pub fn set_mode(&self) -> MetaSetMode {
        match self.mode {
            Some(b'E') => MetaSetMode::Add,
            Some(b'A') => MetaSetMode::Append,
            Some(b'P') => MetaSetMode::Prepend,
            Some(b'R') => MetaSetMode::Replace,
            _ => MetaSetMode::Set,
        }
    }

    /// The `ma` direction: true to increment (the default); invalid modes were rejected by the decoder.
    pub fn incr(&self) -> bool {
        !matches!(self.mode, Some(b'D' | b'-'))
    }
}

/// One request of the text or meta protocol.
///
/// Numbers are what memcached's C parsing makes of the client's text: exptimes and the like are the `strtol`
/// result truncated to memcached's `int32` (so `4294967297` reads as 1), flags the `strtoul` result truncated
/// to 32 bits. Exptimes are passed on raw; the server converts them as memcached's `realtime()` does. A
/// `noreply` field means memcached sends nothing for this request, errors included (`out_string`); meta
/// commands instead carry `q` in their flags, which hides only the nominal reply, never an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get|gets|gat|gats [exptime] <key>*`: every key is within the key limit (checked by the decoder).
    Get {
        kind: GetKind,
        exptime: i32,
        keys: Words<'a>,
    },
    /// `set|add|replace|append|prepend|cas`, with the data block (without its `\r\n`).
    Store {
        kind: StoreKind,
        key: &'a [u8],
        flags: u32,
        exptime: i32,
        data: &'a [u8],
        cas: u64,
        noreply: bool,
    },
    /// A storage command whose item can never fit (`-I`): answer `SERVER_ERROR object too large for cache`
    /// unless `noreply`; for `set` and every `ms`, memcached also unlinks the existing item (`unlink_existing`)
    /// so that stale data does not persist. The data block is swallowed (counted in `consumed`).
    TooLarge {
        key: MetaKey<'a>,
        unlink_existing: bool,
        noreply: bool,
        /// From `ms` (memcached's per-prefix `stats detail` counts only the classic commands).
        meta: bool,
    },
    /// A classic storage command whose data block does not end in `\r\n`: `CLIENT_ERROR bad data chunk`
    /// unless `noreply` (the block is swallowed). memcached has already counted the command for the key's
    /// prefix in `stats detail` by then. (`ms` answers the error in every case: [`Request::Error`].)
    BadDataChunk { key: &'a [u8], noreply: bool },
    /// `delete <key> [0] [noreply]`
    Delete { key: &'a [u8], noreply: bool },
    /// `incr|decr <key> <delta> [noreply]`
    Arithmetic {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    /// `touch <key> <exptime> [noreply]`
    Touch {
        key: &'a [u8],
        exptime: i32,
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`
    FlushAll { delay: i32, noreply: bool },
    /// `version`
    Version,
    /// `verbosity <level> [noreply]`
    Verbosity { level: u32, noreply: bool },
    /// `quit`: close the connection after writing pending replies.
    Quit,
    /// An unknown command line whose last token starts with `HTTP/` (e.g. `GET / HTTP/1.0`): memcached takes
    /// it for an HTTP request and closes the connection at once, without writing the replies it had not
    /// written yet (see [`Request::GetKeyTooLong`] for which those are; over UDP, all but what a get or `mn`
    /// before it sent).
    Hangup,
    /// `shutdown [graceful]`
    Shutdown(ShutdownMode),
    /// `cache_memlimit <megabytes> [noreply]`; `None` when the number is invalid (memcached: `ERROR`, hidden
    /// by `noreply` like every reply of this command).
    CacheMemlimit {
        megabytes: Option<u32>,
        noreply: bool,
    },
    /// `stats [group [args]]`: the words after `stats` (the server knows its groups; unknown -> `ERROR`).
    Stats { args: Words<'a> },
    /// `lru_crawler ...`
    LruCrawler(LruCrawler<'a>),
    /// Other administrative commands whose answer depends on server settings (`slabs`, `lru`, `watch`,
    /// `extstore`, `refresh_certs`): the command word and the words after it, as sent.
    Admin { command: &'a [u8], args: Words<'a> },
    /// `mg <key> <flags>*`
    MetaGet {
        key: MetaKey<'a>,
        flags: MetaFlags<'a>,
    },
    /// `ms <key> <datalen> <flags>*` with its data block (without `\r\n`).
    MetaSet {
        key: MetaKey<'a>,
        flags: MetaFlags<'a>,
        data: &'a [u8],
    },
    /// `md <key> <flags>*`
    MetaDelete {
        key: MetaKey<'a>,
        flags: MetaFlags<'a>,
    },
    /// `ma <key> <flags>*`
    MetaArithmetic {
        key: MetaKey<'a>,
        flags: MetaFlags<'a>,
    },
    /// `mn`: reply `MN` (and flush).
    MetaNoop,
    /// `me <key> [b]`: the debug line.
    MetaDebug { key: MetaKey<'a> },
    /// A request memcached answers with exactly this error line.
    Error(ErrorReply),
    /// A multiget with a key longer than the limit: memcached first serves the keys before the long one
    /// (`keys`: fetched, and touched for `gat`/`gats`, with their stats), then drops the connection's replies
    /// not yet written (those of earlier pipelined commands too, and the values just found), and answers
    /// `CLIENT_ERROR bad command line format`. It writes after every request for which
    /// [`Request::flushes_replies`] is true, whenever its read buffer runs empty, and when a batch uses up
    /// its `-R` budget (after request R + 1 of a read, then after every R more), so the dropped replies are
    /// those since the last of these.
    GetKeyTooLong {
        kind: GetKind,
        exptime: i32,
        keys: Words<'a>,
    },
    /// A request memcached answers with nothing: an error suppressed by `noreply` (which memcached's `-vv`
    /// log still shows, as `>NN NOREPLY <error>`).
    Silent(ErrorReply),
}

impl Request<'_> {
    /// Whether memcached writes out all pending replies right after answering this request (its
    /// `conn_mwrite` after a get-family command and after `mn`); see [`Request::GetKeyTooLong`].
    pub fn flushes_replies(&self) -> bool {
        matches!(self, Request::Get { .. } | Request::MetaNoop)
    }
}
