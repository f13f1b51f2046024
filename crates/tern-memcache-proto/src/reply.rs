//! Reply composition: appends memcached's exact reply bytes to the connection's output `Vec<u8>`.
//!
//! Nothing here allocates beyond growing the output vector (integers go through `itoa` on the stack).

pub use crate::error::ErrorReply;

use crate::base64;
use crate::request::MetaFlags;

/// The fixed one-word replies of the text protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `STORED`
    Stored,
    /// `NOT_STORED`
    NotStored,
    /// `EXISTS`
    Exists,
    /// `NOT_FOUND`
    NotFound,
    /// `DELETED`
    Deleted,
    /// `TOUCHED`
    Touched,
    /// `OK`
    Ok,
    /// `END`
    End,
    /// `RESET` (`stats reset`)
    Reset,
    /// `MN` (`mn`)
    MetaNoop,
}

impl Status {
    /// The reply line, `\r\n` included.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            Status::Stored => b"STORED\r\n",
            Status::NotStored => b"NOT_STORED\r\n",
            Status::Exists => b"EXISTS\r\n",
            Status::NotFound => b"NOT_FOUND\r\n",
            Status::Deleted => b"DELETED\r\n",
            Status::Touched => b"TOUCHED\r\n",
            Status::Ok => b"OK\r\n",
            Status::End => b"END\r\n",
            Status::Reset => b"RESET\r\n",
            Status::MetaNoop => b"MN\r\n",
        }
    }

    /// Every status, `END` first (the word a client parses most often).
    const ALL: [Status; 10] = [
        Status::End,
        Status::Stored,
        Status::NotStored,
        Status::Exists,
        Status::NotFound,
        Status::Deleted,
        Status::Touched,
        Status::Ok,
        Status::Reset,
        Status::MetaNoop,
    ];

    /// The status whose line is `word` (without `\r\n`): the client's parser reads the same table the
    /// server writes from.
    pub fn parse(word: &[u8]) -> Option<Status> {
        Status::ALL.into_iter().find(|status| {
            let line = status.as_bytes();
            &line[..line.len() - 2] == word
        })
    }
}

/// Appends a status line.
pub fn write_status(out: &mut Vec<u8>, status: Status) {
    out.extend_from_slice(status.as_bytes());
}

/// Appends an error line.
pub fn write_error(out: &mut Vec<u8>, error: ErrorReply) {
    out.extend_from_slice(error.as_bytes());
}

fn write_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn write_i64(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends `VALUE <key> <flags> <bytes>[ <cas>]\r\n`, the header of one `get` hit (for writing the data
/// separately, e.g. from the cache's own storage).
pub fn write_value_header(out: &mut Vec<u8>, key: &[u8], flags: u32, len: usize, cas: Option<u64>) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    write_u64(out, u64::from(flags));
    out.push(b' ');
    write_u64(out, len as u64);
    if let Some(cas) = cas {
        out.push(b' ');
        write_u64(out, cas);
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends one whole `get` hit: the `VALUE` line, the data and its `\r\n`.
pub fn write_value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    write_value_header(out, key, flags, data.len(), cas);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends the result of `incr`/`decr`: the number and `\r\n`.
pub fn write_number(out: &mut Vec<u8>, n: u64) {
    write_u64(out, n);
    out.extend_from_slice(b"\r\n");
}

/// Appends `STAT <name> <value>\r\n`.
pub fn write_stat(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(b"STAT ");
    out.extend_from_slice(name);
    out.push(b' ');
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends `STAT <name> <number>\r\n`.
pub fn write_stat_u64(out: &mut Vec<u8>, name: &[u8], value: u64) {
    out.extend_from_slice(b"STAT ");
    out.extend_from_slice(name);
    out.push(b' ');
    write_u64(out, value);
    out.extend_from_slice(b"\r\n");
}

/// Appends `VERSION <version>\r\n`.
pub fn write_version(out: &mut Vec<u8>, version: &[u8]) {
    out.extend_from_slice(b"VERSION ");
    out.extend_from_slice(version);
    out.extend_from_slice(b"\r\n");
}

/// The status code of a meta reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaStatus {
    /// `HD`: success without value.
    Done,
    /// `VA <len>`: success; the value follows the flags line.
    Value(usize),
    /// `EN`: `mg` miss.
    Miss,
    /// `NF`: not found (`md`, `ma`, `ms` in replace/append/prepend/CAS mode).
    NotFound,
    /// `NS`: not stored.
    NotStored,
    /// `EX`: CAS mismatch.
    Exists,
}

impl MetaStatus {
    /// The reply's two-letter code.
    pub fn code(self) -> &'static [u8] {
        match self {
            MetaStatus::Done => b"HD",
            MetaStatus::Value(_) => b"VA",
            MetaStatus::Miss => b"EN",
            MetaStatus::NotFound => b"NF",
            MetaStatus::NotStored => b"NS",
            MetaStatus::Exists => b"EX",
        }
    }

    /// The status whose code is `code`, for the codes without a value (`VA` is parsed with its length).
    pub fn parse_valueless(code: &[u8]) -> Option<MetaStatus> {
        [
            MetaStatus::Done,
            MetaStatus::Miss,
            MetaStatus::NotFound,
            MetaStatus::NotStored,
            MetaStatus::Exists,
        ]
        .into_iter()
        .find(|status| status.code() == code)
    }
}

/// What a meta reply echoes about the item, for the return flags the client asked for. A flag is written
/// only when the client sent it and its field here is `Some` (memcached echoes `s t c f l h` on an `mg` hit,
/// `c t` on an `ma` success, `c` on `ms`, and `O k` everywhere), so the server fills what the command echoes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaFields<'k> {
    /// `k`: the item key, and whether it is binary (then echoed base64 followed by ` b`).
    pub key: Option<(&'k [u8], bool)>,
    /// `s`: value size.
    pub size: Option<usize>,
    /// `t`: seconds to expiry, `-1` for none.
    pub ttl: Option<i64>,
    /// `c`: CAS unique.
    pub cas: Option<u64>,
    /// `f`: client flags.
    pub client_flags: Option<u32>,
    /// `l`: seconds since last access.
    pub last_access: Option<u64>,
    /// `h`: whether the item had been fetched before.
    pub fetched: Option<bool>,
    /// `Z`: a win token was already sent for this item.
    pub token_sent: bool,
    /// `X`: the item is stale.
    pub stale: bool,
    /// `W`: this client won the right to recache.
    pub won: bool,
}

/// Appends a meta reply line: the status, the requested flags in request order, then `Z`, `X`, `W`, and
/// `\r\n`. For `VA` the caller appends the value and its `\r\n` after this line.
pub fn write_meta(
    out: &mut Vec<u8>,
    status: MetaStatus,
    request: &MetaFlags<'_>,
    fields: &MetaFields<'_>,
) {
    out.extend_from_slice(status.code());
    if let MetaStatus::Value(len) = status {
        out.push(b' ');
        write_u64(out, len as u64);
    }
    for &flag in request.order() {
        match flag {
            b'O' => {
                if let Some(opaque) = request.opaque {
                    out.push(b' ');
                    out.extend_from_slice(opaque);
                }
            }
            b'k' => {
                if let Some((key, binary)) = fields.key {
                    out.extend_from_slice(b" k");
                    if binary {
                        base64::encode_into(key, out);
                        out.extend_from_slice(b" b");
                    } else {
                        out.extend_from_slice(key);
                    }
                }
            }
            b's' => write_flag_u64(out, b's', fields.size.map(|s| s as u64)),
            b't' => {
                if let Some(ttl) = fields.ttl {
                    out.extend_from_slice(b" t");
                    write_i64(out, ttl);
                }
            }
            b'c' => write_flag_u64(out, b'c', fields.cas),
            b'f' => write_flag_u64(out, b'f', fields.client_flags.map(u64::from)),
            b'l' => write_flag_u64(out, b'l', fields.last_access),
            b'h' => write_flag_u64(out, b'h', fields.fetched.map(u64::from)),
            _ => {}
        }
    }
    for (set, flag) in [
        (fields.token_sent, b" Z"),
        (fields.stale, b" X"),
        (fields.won, b" W"),
    ] {
        if set {
            out.extend_from_slice(flag);
        }
    }
    out.extend_from_slice(b"\r\n");
}

fn write_flag_u64(out: &mut Vec<u8>, flag: u8, value: Option<u64>) {
    if let Some(value) = value {
        out.push(b' ');
        out.push(flag);
        write_u64(out, value);
    }
}

/// What `me` reports about an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaDebugInfo<'k> {
    /// The item key and whether it is binary (then written base64).
    pub key: (&'k [u8], bool),
    /// The `exp=` field: memcached writes `current_time - exptime` (negative while the item lives), `-1` for
    /// no expiry.
    pub exp: i64,
    /// Seconds since last access.
    pub last_access: u64,
    /// CAS unique.
    pub cas: u64,
    /// Whether the item has been fetched.
    pub fetched: bool,
    /// Slab class id.
    pub class: u32,
    /// Total item size in memory.
    pub size: u64,
}

/// Appends `ME <key> exp=<e> la=<l> cas=<c> fetch=<yes|no> cls=<n> size=<s>\r\n`.
pub fn write_meta_debug(out: &mut Vec<u8>, info: &MetaDebugInfo<'_>) {
    out.extend_from_slice(b"ME ");
    let (key, binary) = info.key;
    if binary {
        base64::encode_into(key, out);
    } else {
        out.extend_from_slice(key);
    }
    out.extend_from_slice(b" exp=");
    write_i64(out, info.exp);
    out.extend_from_slice(b" la=");
    write_u64(out, info.last_access);
    out.extend_from_slice(b" cas=");
    write_u64(out, info.cas);
    out.extend_from_slice(if info.fetched {
        b" fetch=yes"
    } else {
        b" fetch=no"
    });
    out.extend_from_slice(b" cls=");
    write_u64(out, u64::from(info.class));
    out.extend_from_slice(b" size=");
    write_u64(out, info.size);
    out.extend_from_slice(b"\r\n");
}

/// One item of `lru_crawler metadump`, as memcached 1.6.18 writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetadumpEntry<'k> {
    /// The item key (written URI-encoded).
    pub key: &'k [u8],
    /// Absolute expiry (unix seconds), `None` for never (`-1`).
    pub expires_at: Option<i64>,
    /// Absolute last access (unix seconds).
    pub last_access: i64,
    /// CAS unique.
    pub cas: u64,
    /// Whether the item has been fetched.
    pub fetched: bool,
    /// Slab class id.
    pub class: u32,
    /// Total item size in memory.
    pub size: u64,
}

/// Appends `key=<uri-encoded key> exp=<abs|-1> la=<abs> cas=<n> fetch=<yes|no> cls=<n> size=<n>\n` (note
/// the bare `\n`; the dump ends with `END\r\n`, [`Status::End`]).
pub fn write_metadump_entry(out: &mut Vec<u8>, entry: &MetadumpEntry<'_>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.extend_from_slice(b"key=");
    // memcached's uriencode: alphanumerics and `-._~` pass, every other byte is %XX.
    for &b in entry.key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0x0f)]]);
        }
    }
    out.extend_from_slice(b" exp=");
    write_i64(out, entry.expires_at.unwrap_or(-1));
    out.extend_from_slice(b" la=");
    write_i64(out, entry.last_access);
    out.extend_from_slice(b" cas=");
    write_u64(out, entry.cas);
    out.extend_from_slice(if entry.fetched {
        b" fetch=yes"
    } else {
        b" fetch=no"
    });
    out.extend_from_slice(b" cls=");
    write_u64(out, u64::from(entry.class));
    out.extend_from_slice(b" size=");
    write_u64(out, entry.size);
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, Decoded, Limits, Request};

    /// The flags of a meta request line, as the decoder parses them.
    fn flags_of(line: &[u8]) -> MetaFlags<'_> {
        match decode(line, &Limits::default()) {
            Decoded::Frame {
                request:
                    Request::MetaGet { flags, .. }
                    | Request::MetaSet { flags, .. }
                    | Request::MetaDelete { flags, .. }
                    | Request::MetaArithmetic { flags, .. },
                ..
            } => flags,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn text_replies() {
        let mut out = Vec::new();
        write_value(&mut out, b"a", 5, b"hello", None);
        write_value(&mut out, b"b", 0, b"", Some(u64::MAX));
        write_status(&mut out, Status::End);
        assert_eq!(
            out,
            b"VALUE a 5 5\r\nhello\r\nVALUE b 0 0 18446744073709551615\r\n\r\nEND\r\n"
        );
        out.clear();
        write_number(&mut out, 0);
        write_stat(&mut out, b"version", b"1.6.18");
        write_stat_u64(&mut out, b"curr_items", 42);
        write_version(&mut out, b"1.6.18");
        write_error(&mut out, ErrorReply::DeleteUsage);
        assert_eq!(
            out,
            &b"0\r\nSTAT version 1.6.18\r\nSTAT curr_items 42\r\nVERSION 1.6.18\r\n\
               CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"[..]
        );
    }

    #[test]
    fn meta_replies_in_request_order() {
        // Bytes memcached 1.6.18 sent for these requests.
        let mut out = Vec::new();
        let flags = flags_of(b"mg a v f s t c k O123 q\r\n");
        let fields = MetaFields {
            key: Some((b"a", false)),
            size: Some(5),
            ttl: Some(-1),
            cas: Some(48),
            client_flags: Some(5),
            ..MetaFields::default()
        };
        write_meta(&mut out, MetaStatus::Value(5), &flags, &fields);
        assert_eq!(out, b"VA 5 f5 s5 t-1 c48 ka O123\r\n");
        out.clear();
        let flags = flags_of(b"ms Ym0= 2 b k O1 c\r\nhi\r\n");
        let fields = MetaFields {
            key: Some((b"bm", true)),
            cas: Some(71),
            ..MetaFields::default()
        };
        write_meta(&mut out, MetaStatus::Done, &flags, &fields);
        assert_eq!(out, b"HD kYm0= b O1 c71\r\n");
        out.clear();
        let flags = flags_of(b"mg missing v k O9\r\n");
        write_meta(
            &mut out,
            MetaStatus::Miss,
            &flags,
            &MetaFields {
                key: Some((b"missing", false)),
                ..Default::default()
            },
        );
        assert_eq!(out, b"EN kmissing O9\r\n");
        out.clear();
        let flags = flags_of(b"mg a h l t\r\n");
        let fields = MetaFields {
            fetched: Some(true),
            last_access: Some(3),
            ttl: Some(10),
            token_sent: true,
            stale: true,
            won: true,
            ..MetaFields::default()
        };
        write_meta(&mut out, MetaStatus::Done, &flags, &fields);
        assert_eq!(out, b"HD h1 l3 t10 Z X W\r\n");
        out.clear();
        for (status, text) in [
            (MetaStatus::NotFound, &b"NF\r\n"[..]),
            (MetaStatus::NotStored, b"NS\r\n"),
            (MetaStatus::Exists, b"EX\r\n"),
        ] {
            write_meta(
                &mut out,
                status,
                &MetaFlags::default(),
                &MetaFields::default(),
            );
            assert_eq!(out, text);
            out.clear();
        }
    }

    #[test]
    fn metadump_entry() {
        // memcached 1.6.18 for `set m%20x\x01 5 0 2` and `set plain 0 100 1`.
        let mut out = Vec::new();
        let entry = MetadumpEntry {
            key: b"m%20x\x01",
            expires_at: None,
            last_access: 1795257671,
            cas: 85,
            fetched: false,
            class: 1,
            size: 71,
        };
        write_metadump_entry(&mut out, &entry);
        let plain = MetadumpEntry {
            key: b"plain",
            expires_at: Some(1795257771),
            cas: 86,
            size: 65,
            ..entry
        };
        write_metadump_entry(&mut out, &plain);
        write_status(&mut out, Status::End);
        assert_eq!(
            out,
            &b"key=m%2520x%01 exp=-1 la=1795257671 cas=85 fetch=no cls=1 size=71\n\
               key=plain exp=1795257771 la=1795257671 cas=86 fetch=no cls=1 size=65\nEND\r\n"[..]
        );
    }

    #[test]
    fn meta_debug_line() {
        let mut out = Vec::new();
        let info = MetaDebugInfo {
            key: (b"n", false),
            exp: -1,
            last_access: 0,
            cas: 70,
            fetched: false,
            class: 1,
            size: 61,
        };
        write_meta_debug(&mut out, &info);
        assert_eq!(out, b"ME n exp=-1 la=0 cas=70 fetch=no cls=1 size=61\r\n");
        out.clear();
        write_meta_debug(
            &mut out,
            &MetaDebugInfo {
                key: (b"bm", true),
                fetched: true,
                ..info
            },
        );
        assert_eq!(
            out,
            b"ME Ym0= exp=-1 la=0 cas=70 fetch=yes cls=1 size=61\r\n"
        );
    }
}
