//! Client side of the memcached protocol: encode requests, parse replies incrementally.
//!
//! Encoders append a request straight to a caller-owned buffer, so a client can batch many
//! requests into one reusable write buffer without allocating. [`parse_reply`] reads one reply
//! from the front of a read buffer and borrows from it; when the buffer does not yet hold a
//! whole reply it answers [`Parse::Incomplete`] and the caller reads more and tries again.
//! The text protocol (`get`, `set`, `delete`, `incr`, ...), the meta protocol (`mg`, `ms`, `md`,
//! `ma`, `mn`) and the 8-byte UDP frame header are covered. This module is self-contained: it
//! does not use the server-side types of this crate.

use std::fmt;

use crate::reply::{self, Status};

/// Longest key memcached accepts.
pub const MAX_KEY_LEN: usize = 250;
/// Size of the frame header that starts every memcached UDP datagram.
pub const UDP_HEADER_LEN: usize = 8;

/// Bounds on what [`parse_reply`] accepts, so a broken or hostile server cannot make the client
/// buffer without limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest reply line (status or `VALUE` header) including `\r\n`.
    pub max_line: usize,
    /// Largest value payload.
    pub max_value: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // memcached's default item size limit is 1 MiB; lines are short (keys are at most 250
        // bytes), 2 KiB leaves room for meta flags.
        Limits {
            max_line: 2048,
            max_value: 1 << 20,
        }
    }
}

/// Why a request could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// The key is empty, longer than [`MAX_KEY_LEN`], or holds a space or control byte.
    InvalidKey,
    /// Meta flags may hold only printable, non-newline bytes.
    InvalidFlags,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::InvalidKey => write!(
                f,
                "invalid key: must be 1..={MAX_KEY_LEN} bytes without spaces or control characters"
            ),
            EncodeError::InvalidFlags => write!(f, "invalid meta flags: control characters"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Checks a key against memcached's rules.
pub fn validate_key(key: &[u8]) -> Result<(), EncodeError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || key.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return Err(EncodeError::InvalidKey);
    }
    Ok(())
}

fn validate_flags(flags: &[u8]) -> Result<(), EncodeError> {
    if flags.iter().any(|&b| b < b' ' || b == 0x7f) {
        return Err(EncodeError::InvalidFlags);
    }
    Ok(())
}

/// Appends the decimal form of `n` without allocating.
pub fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Text-protocol storage commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageCommand {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

impl StorageCommand {
    fn name(self) -> &'static [u8] {
        match self {
            StorageCommand::Set => b"set",
            StorageCommand::Add => b"add",
            StorageCommand::Replace => b"replace",
            StorageCommand::Append => b"append",
            StorageCommand::Prepend => b"prepend",
        }
    }
}

/// `get k1 k2 ...\r\n` (or `gets` when `with_cas`). Memcached answers one `VALUE` per hit, in
/// request order, then `END`.
pub fn encode_get<'k>(
    out: &mut Vec<u8>,
    keys: impl IntoIterator<Item = &'k [u8]>,
    with_cas: bool,
) -> Result<(), EncodeError> {
    let start = out.len();
    out.extend_from_slice(if with_cas { b"gets" } else { b"get" });
    let mut any = false;
    for key in keys {
        if let Err(e) = validate_key(key) {
            out.truncate(start);
            return Err(e);
        }
        out.push(b' ');
        out.extend_from_slice(key);
        any = true;
    }
    if !any {
        out.truncate(start);
        return Err(EncodeError::InvalidKey);
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// `<cmd> <key> <flags> <exptime> <bytes> [noreply]\r\n<value>\r\n`.
pub fn encode_storage(
    out: &mut Vec<u8>,
    command: StorageCommand,
    key: &[u8],
    flags: u32,
    exptime: u32,
    value: &[u8],
    noreply: bool,
) -> Result<(), EncodeError> {
    validate_key(key)?;
    out.extend_from_slice(command.name());
    out.push(b' ');
    out.extend_from_slice(key);
    out.push(b' ');
    push_decimal(out, flags.into());
    out.push(b' ');
    push_decimal(out, exptime.into());
    out.push(b' ');
    push_decimal(out, value.len() as u64);
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// `delete <key> [noreply]\r\n`.
pub fn encode_delete(out: &mut Vec<u8>, key: &[u8], noreply: bool) -> Result<(), EncodeError> {
    simple_key_command(out, b"delete", key, None, noreply)
}

/// `incr <key> <delta>\r\n` (or `decr` when `decrement`).
pub fn encode_arithmetic(
    out: &mut Vec<u8>,
    key: &[u8],
    delta: u64,
    decrement: bool,
    noreply: bool,
) -> Result<(), EncodeError> {
    let name: &[u8] = if decrement { b"decr" } else { b"incr" };
    simple_key_command(out, name, key, Some(delta), noreply)
}

/// `touch <key> <exptime>\r\n`.
pub fn encode_touch(
    out: &mut Vec<u8>,
    key: &[u8],
    exptime: u32,
    noreply: bool,
) -> Result<(), EncodeError> {
    simple_key_command(out, b"touch", key, Some(exptime.into()), noreply)
}

fn simple_key_command(
    out: &mut Vec<u8>,
    name: &[u8],
    key: &[u8],
    number: Option<u64>,
    noreply: bool,
) -> Result<(), EncodeError> {
    validate_key(key)?;
    out.extend_from_slice(name);
    out.push(b' ');
    out.extend_from_slice(key);
    if let Some(n) = number {
        out.push(b' ');
        push_decimal(out, n);
    }
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

fn meta_command(
    out: &mut Vec<u8>,
    name: &[u8],
    key: &[u8],
    value_len: Option<usize>,
    flags: &[u8],
) -> Result<(), EncodeError> {
    validate_key(key)?;
    validate_flags(flags)?;
    out.extend_from_slice(name);
    out.push(b' ');
    out.extend_from_slice(key);
    if let Some(len) = value_len {
        out.push(b' ');
        push_decimal(out, len as u64);
    }
    if !flags.is_empty() {
        out.push(b' ');
        out.extend_from_slice(flags);
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// `mg <key> <flags>\r\n`, e.g. flags `b"v"` to return the value.
pub fn encode_meta_get(out: &mut Vec<u8>, key: &[u8], flags: &[u8]) -> Result<(), EncodeError> {
    meta_command(out, b"mg", key, None, flags)
}

/// `ms <key> <datalen> <flags>\r\n<value>\r\n`.
pub fn encode_meta_set(
    out: &mut Vec<u8>,
    key: &[u8],
    value: &[u8],
    flags: &[u8],
) -> Result<(), EncodeError> {
    meta_command(out, b"ms", key, Some(value.len()), flags)?;
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// `md <key> <flags>\r\n`.
pub fn encode_meta_delete(out: &mut Vec<u8>, key: &[u8], flags: &[u8]) -> Result<(), EncodeError> {
    meta_command(out, b"md", key, None, flags)
}

/// `ma <key> <flags>\r\n` (increment by default; flags `MD` decrement, `D<n>` set the delta).
pub fn encode_meta_arithmetic(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: &[u8],
) -> Result<(), EncodeError> {
    meta_command(out, b"ma", key, None, flags)
}

/// `mn\r\n`: the server answers `MN\r\n` once everything before it is answered.
pub fn encode_meta_noop(out: &mut Vec<u8>) {
    out.extend_from_slice(b"mn\r\n");
}

/// Status code of a meta reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaStatus {
    /// `VA`: a value follows.
    Value,
    /// `HD`: success, no value.
    Stored,
    /// `EN`: miss.
    Miss,
    /// `NF`: not found (delete, arithmetic).
    NotFound,
    /// `NS`: not stored.
    NotStored,
    /// `EX`: CAS mismatch.
    Exists,
    /// `MN`: answer to `mn`.
    Noop,
}

/// One reply, borrowing from the read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply<'a> {
    /// One `VALUE <key> <flags> <bytes> [<cas>]` block of a `get`/`gets` answer.
    Value {
        key: &'a [u8],
        flags: u32,
        cas: Option<u64>,
        data: &'a [u8],
    },
    /// `END`: the last line of a `get` answer.
    End,
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    /// The new value after `incr`/`decr`.
    Number(u64),
    /// `VERSION <text>`.
    Version(&'a [u8]),
    /// `ERROR`: unknown command.
    Error,
    /// `CLIENT_ERROR <message>`.
    ClientError(&'a [u8]),
    /// `SERVER_ERROR <message>`.
    ServerError(&'a [u8]),
    /// A meta reply: status, the return flags, and the value for `VA`.
    Meta {
        status: MetaStatus,
        flags: &'a [u8],
        data: Option<&'a [u8]>,
    },
}

impl MetaStatus {
    /// Its two-letter code on the wire (`VA`, `HD`, `EN`...).
    pub fn code(self) -> &'static str {
        match self {
            MetaStatus::Value => "VA",
            MetaStatus::Stored => "HD",
            MetaStatus::Miss => "EN",
            MetaStatus::NotFound => "NF",
            MetaStatus::NotStored => "NS",
            MetaStatus::Exists => "EX",
            MetaStatus::Noop => "MN",
        }
    }
}

/// The reply's line as memcached writes it, without the `\r\n` and the data block that may follow
/// (`VALUE k 0 5`, `STORED`, `CLIENT_ERROR bad data chunk`, `VA 5 f0`): what an error message shows of it.
impl fmt::Display for Reply<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = String::from_utf8_lossy;
        match self {
            Reply::Value {
                key,
                flags,
                cas,
                data,
            } => {
                write!(f, "VALUE {} {flags} {}", text(key), data.len())?;
                match cas {
                    Some(cas) => write!(f, " {cas}"),
                    None => Ok(()),
                }
            }
            Reply::End => f.write_str("END"),
            Reply::Stored => f.write_str("STORED"),
            Reply::NotStored => f.write_str("NOT_STORED"),
            Reply::Exists => f.write_str("EXISTS"),
            Reply::NotFound => f.write_str("NOT_FOUND"),
            Reply::Deleted => f.write_str("DELETED"),
            Reply::Touched => f.write_str("TOUCHED"),
            Reply::Ok => f.write_str("OK"),
            Reply::Number(n) => write!(f, "{n}"),
            Reply::Version(v) => write!(f, "VERSION {}", text(v)),
            Reply::Error => f.write_str("ERROR"),
            Reply::ClientError(m) => write!(f, "CLIENT_ERROR {}", text(m)),
            Reply::ServerError(m) => write!(f, "SERVER_ERROR {}", text(m)),
            Reply::Meta {
                status,
                flags,
                data,
            } => {
                f.write_str(status.code())?;
                if let Some(data) = data {
                    write!(f, " {}", data.len())?;
                }
                if !flags.is_empty() {
                    write!(f, " {}", text(flags))?;
                }
                Ok(())
            }
        }
    }
}

/// Result of trying to parse one reply from the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parse<'a> {
    /// A whole reply, and how many bytes of the input it took.
    Complete { reply: Reply<'a>, consumed: usize },
    /// The input ends inside a reply: read more and parse again from the same start.
    Incomplete,
}

/// A reply that does not follow the protocol. The connection cannot be resynchronised after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyError {
    /// No `\r\n` within [`Limits::max_line`] bytes.
    LineTooLong { limit: usize },
    /// A value larger than [`Limits::max_value`].
    ValueTooLarge { len: u64, limit: usize },
    /// A line that is not a reply this client knows, or a malformed one.
    Malformed { line: String },
    /// A value block not followed by `\r\n`.
    MissingValueTerminator,
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::LineTooLong { limit } => write!(f, "reply line longer than {limit} bytes"),
            ReplyError::ValueTooLarge { len, limit } => {
                write!(
                    f,
                    "reply value of {len} bytes exceeds the {limit}-byte limit"
                )
            }
            ReplyError::Malformed { line } => write!(f, "malformed reply line: {line:?}"),
            ReplyError::MissingValueTerminator => write!(f, "value block not ended by \\r\\n"),
        }
    }
}

impl std::error::Error for ReplyError {}

fn malformed(line: &[u8]) -> ReplyError {
    let shown = &line[..line.len().min(80)];
    ReplyError::Malformed {
        line: String::from_utf8_lossy(shown).into_owned(),
    }
}

fn parse_u64(field: &[u8]) -> Option<u64> {
    if field.is_empty() || field.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in field {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

/// Finds the first line; answers its content (without `\r\n`) and the offset after it.
fn split_line<'a>(
    input: &'a [u8],
    limits: &Limits,
) -> Result<Option<(&'a [u8], usize)>, ReplyError> {
    let window = &input[..input.len().min(limits.max_line)];
    match window.iter().position(|&b| b == b'\n') {
        Some(nl) if nl > 0 && window[nl - 1] == b'\r' => Ok(Some((&input[..nl - 1], nl + 1))),
        Some(nl) => Err(malformed(&input[..nl])),
        None if input.len() >= limits.max_line => Err(ReplyError::LineTooLong {
            limit: limits.max_line,
        }),
        None => Ok(None),
    }
}

/// Reads `len` bytes of value plus `\r\n` at `start`; `None` when not all there yet.
fn take_value<'a>(
    input: &'a [u8],
    start: usize,
    len: u64,
    limits: &Limits,
) -> Result<Option<(&'a [u8], usize)>, ReplyError> {
    if len > limits.max_value as u64 {
        return Err(ReplyError::ValueTooLarge {
            len,
            limit: limits.max_value,
        });
    }
    let end = start + len as usize;
    if input.len() < end + 2 {
        return Ok(None);
    }
    if &input[end..end + 2] != b"\r\n" {
        return Err(ReplyError::MissingValueTerminator);
    }
    Ok(Some((&input[start..end], end + 2)))
}

/// Parses one reply from the front of `input`.
pub fn parse_reply<'a>(input: &'a [u8], limits: &Limits) -> Result<Parse<'a>, ReplyError> {
    let Some((line, after_line)) = split_line(input, limits)? else {
        return Ok(Parse::Incomplete);
    };
    let complete = |reply| {
        Ok(Parse::Complete {
            reply,
            consumed: after_line,
        })
    };
    let (word, rest) = match line.iter().position(|&b| b == b' ') {
        Some(sp) => (&line[..sp], &line[sp + 1..]),
        None => (line, &line[line.len()..]),
    };
    match word {
        b"VALUE" => parse_value_block(input, line, rest, after_line, limits),
        b"VA" => {
            let (size, flags) = match rest.iter().position(|&b| b == b' ') {
                Some(sp) => (&rest[..sp], &rest[sp + 1..]),
                None => (rest, &rest[rest.len()..]),
            };
            let len = parse_u64(size).ok_or_else(|| malformed(line))?;
            match take_value(input, after_line, len, limits)? {
                None => Ok(Parse::Incomplete),
                Some((data, consumed)) => Ok(Parse::Complete {
                    reply: Reply::Meta {
                        status: MetaStatus::Value,
                        flags,
                        data: Some(data),
                    },
                    consumed,
                }),
            }
        }
        b"CLIENT_ERROR" => complete(Reply::ClientError(rest)),
        b"SERVER_ERROR" => complete(Reply::ServerError(rest)),
        b"VERSION" => complete(Reply::Version(rest)),
        _ => {
            // One lookup in the writers' table serves both the meta codes (`MN`) and the text statuses.
            let status = Status::parse(word);
            if let Some(status) = meta_status(word, status) {
                return complete(Reply::Meta {
                    status,
                    flags: rest,
                    data: None,
                });
            }
            if !rest.is_empty() {
                return Err(malformed(line));
            }
            if let Some(reply) = status.and_then(text_status) {
                return complete(reply);
            }
            match (word, parse_u64(word)) {
                (b"ERROR", _) => complete(Reply::Error),
                (_, Some(n)) => complete(Reply::Number(n)),
                (_, None) => Err(malformed(line)),
            }
        }
    }
}

/// The client's reply for a text status (`stats reset`'s `RESET` and `mn`'s `MN` are not text replies here).
fn text_status(status: Status) -> Option<Reply<'static>> {
    Some(match status {
        Status::End => Reply::End,
        Status::Stored => Reply::Stored,
        Status::NotStored => Reply::NotStored,
        Status::Exists => Reply::Exists,
        Status::NotFound => Reply::NotFound,
        Status::Deleted => Reply::Deleted,
        Status::Touched => Reply::Touched,
        Status::Ok => Reply::Ok,
        Status::Reset | Status::MetaNoop => return None,
    })
}

/// The meta status of a code without a value (`HD`, `EN`, `NF`, `NS`, `EX`, and `MN`, which the writers keep
/// among the text statuses), from the writers' own tables; `status` is `code`'s text status, if any.
fn meta_status(code: &[u8], status: Option<Status>) -> Option<MetaStatus> {
    if status == Some(Status::MetaNoop) {
        return Some(MetaStatus::Noop);
    }
    if code.len() != 2 {
        return None;
    }
    Some(match reply::MetaStatus::parse_valueless(code)? {
        reply::MetaStatus::Done => MetaStatus::Stored,
        reply::MetaStatus::Miss => MetaStatus::Miss,
        reply::MetaStatus::NotFound => MetaStatus::NotFound,
        reply::MetaStatus::NotStored => MetaStatus::NotStored,
        reply::MetaStatus::Exists => MetaStatus::Exists,
        reply::MetaStatus::Value(_) => MetaStatus::Value,
    })
}

fn parse_value_block<'a>(
    input: &'a [u8],
    line: &'a [u8],
    fields: &'a [u8],
    after_line: usize,
    limits: &Limits,
) -> Result<Parse<'a>, ReplyError> {
    let mut parts = fields.split(|&b| b == b' ');
    let key = parts
        .next()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| malformed(line))?;
    let flags = parts
        .next()
        .and_then(parse_u64)
        .and_then(|f| u32::try_from(f).ok())
        .ok_or_else(|| malformed(line))?;
    let len = parts
        .next()
        .and_then(parse_u64)
        .ok_or_else(|| malformed(line))?;
    let cas = match parts.next() {
        None => None,
        Some(c) => Some(parse_u64(c).ok_or_else(|| malformed(line))?),
    };
    if parts.next().is_some() {
        return Err(malformed(line));
    }
    match take_value(input, after_line, len, limits)? {
        None => Ok(Parse::Incomplete),
        Some((data, consumed)) => Ok(Parse::Complete {
            reply: Reply::Value {
                key,
                flags,
                cas,
                data,
            },
            consumed,
        }),
    }
}

/// Finds a meta return flag (e.g. `k` for the key, `c` for the CAS) and answers its token.
pub fn meta_flag(flags: &[u8], flag: u8) -> Option<&[u8]> {
    flags
        .split(|&b| b == b' ')
        .find(|token| token.first() == Some(&flag))
        .map(|token| &token[1..])
}

/// The frame header of a memcached UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    /// Chosen by the client, echoed by the server in every datagram of the reply.
    pub request_id: u16,
    /// Index of this datagram within the reply, from 0.
    pub sequence: u16,
    /// How many datagrams the reply has.
    pub total: u16,
}

/// Appends the 8-byte frame header (request id, sequence, total, reserved; big-endian).
pub fn encode_udp_header(out: &mut Vec<u8>, header: UdpHeader) {
    out.extend_from_slice(&header.request_id.to_be_bytes());
    out.extend_from_slice(&header.sequence.to_be_bytes());
    out.extend_from_slice(&header.total.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
}

/// Splits a datagram into its frame header and payload.
pub fn parse_udp_header(datagram: &[u8]) -> Result<(UdpHeader, &[u8]), ReplyError> {
    if datagram.len() < UDP_HEADER_LEN {
        return Err(malformed(datagram));
    }
    let field = |i: usize| u16::from_be_bytes([datagram[i], datagram[i + 1]]);
    let header = UdpHeader {
        request_id: field(0),
        sequence: field(2),
        total: field(4),
    };
    if header.total == 0 || header.sequence >= header.total {
        return Err(malformed(&datagram[..UDP_HEADER_LEN]));
    }
    Ok((header, &datagram[UDP_HEADER_LEN..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &[u8]) -> Result<Parse<'_>, ReplyError> {
        parse_reply(input, &Limits::default())
    }

    #[test]
    fn a_reply_displays_as_its_line() {
        for line in [
            &b"VALUE k 3 5 99\r\nhello\r\n"[..],
            b"STORED\r\n",
            b"NOT_FOUND\r\n",
            b"42\r\n",
            b"CLIENT_ERROR bad data chunk\r\n",
            b"VA 2 f3\r\nhi\r\n",
            b"EN\r\n",
        ] {
            let Ok(Parse::Complete { reply, .. }) = parse(line) else {
                panic!("{}", String::from_utf8_lossy(line));
            };
            let head = line.split(|&b| b == b'\r').next().unwrap();
            assert_eq!(reply.to_string().as_bytes(), head);
        }
    }

    #[test]
    fn encodes_text_commands() {
        let mut out = Vec::new();
        encode_get(&mut out, [&b"a"[..], b"bb"], false).unwrap();
        encode_storage(&mut out, StorageCommand::Set, b"k", 5, 0, b"xyz", false).unwrap();
        encode_delete(&mut out, b"k", true).unwrap();
        encode_arithmetic(&mut out, b"n", 7, true, false).unwrap();
        encode_touch(&mut out, b"k", 30, false).unwrap();
        assert_eq!(
            out,
            b"get a bb\r\nset k 5 0 3\r\nxyz\r\ndelete k noreply\r\ndecr n 7\r\ntouch k 30\r\n"
        );
    }

    #[test]
    fn encodes_meta_commands() {
        let mut out = Vec::new();
        encode_meta_get(&mut out, b"k", b"v f").unwrap();
        encode_meta_set(&mut out, b"k", b"hello", b"T0").unwrap();
        encode_meta_delete(&mut out, b"k", b"").unwrap();
        encode_meta_arithmetic(&mut out, b"n", b"v").unwrap();
        encode_meta_noop(&mut out);
        assert_eq!(
            out,
            b"mg k v f\r\nms k 5 T0\r\nhello\r\nmd k\r\nma n v\r\nmn\r\n"
        );
    }

    #[test]
    fn rejects_bad_keys_without_writing() {
        let mut out = b"keep".to_vec();
        assert_eq!(
            encode_get(&mut out, [&b"ok"[..], b"with space"], false),
            Err(EncodeError::InvalidKey)
        );
        assert_eq!(
            encode_delete(&mut out, &[b'a'; 251], false),
            Err(EncodeError::InvalidKey)
        );
        assert_eq!(
            encode_meta_get(&mut out, b"", b"v"),
            Err(EncodeError::InvalidKey)
        );
        assert_eq!(
            encode_get(&mut out, std::iter::empty(), false),
            Err(EncodeError::InvalidKey)
        );
        assert_eq!(
            encode_meta_get(&mut out, b"k", b"v\r\n"),
            Err(EncodeError::InvalidFlags)
        );
        assert_eq!(out, b"keep");
    }

    #[test]
    fn parses_get_reply_incrementally() {
        let full = b"VALUE foo 3 5 99\r\nhello\r\nEND\r\n";
        for cut in 0..18 + 7 {
            assert_eq!(parse(&full[..cut]), Ok(Parse::Incomplete), "cut at {cut}");
        }
        let Parse::Complete { reply, consumed } = parse(full).unwrap() else {
            panic!()
        };
        assert_eq!(
            reply,
            Reply::Value {
                key: b"foo",
                flags: 3,
                cas: Some(99),
                data: b"hello"
            }
        );
        assert_eq!(
            parse(&full[consumed..]),
            Ok(Parse::Complete {
                reply: Reply::End,
                consumed: 5
            })
        );
    }

    #[test]
    fn parses_status_lines() {
        let cases: [(&[u8], Reply); 10] = [
            (b"STORED\r\n", Reply::Stored),
            (b"NOT_STORED\r\n", Reply::NotStored),
            (b"EXISTS\r\n", Reply::Exists),
            (b"NOT_FOUND\r\n", Reply::NotFound),
            (b"DELETED\r\n", Reply::Deleted),
            (b"TOUCHED\r\n", Reply::Touched),
            (b"ERROR\r\n", Reply::Error),
            (b"42\r\n", Reply::Number(42)),
            (
                b"CLIENT_ERROR bad data chunk\r\n",
                Reply::ClientError(b"bad data chunk"),
            ),
            (
                b"SERVER_ERROR out of memory\r\n",
                Reply::ServerError(b"out of memory"),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse(input),
                Ok(Parse::Complete {
                    reply: want,
                    consumed: input.len()
                }),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn parses_meta_replies() {
        let input = b"VA 2 kfoo c7\r\nhi\r\nEN\r\nHD\r\nMN\r\n";
        let Parse::Complete { reply, consumed } = parse(input).unwrap() else {
            panic!()
        };
        assert_eq!(
            reply,
            Reply::Meta {
                status: MetaStatus::Value,
                flags: b"kfoo c7",
                data: Some(b"hi")
            }
        );
        if let Reply::Meta { flags, .. } = reply {
            assert_eq!(meta_flag(flags, b'k'), Some(&b"foo"[..]));
            assert_eq!(meta_flag(flags, b'c'), Some(&b"7"[..]));
            assert_eq!(meta_flag(flags, b'f'), None);
        }
        let rest = &input[consumed..];
        assert_eq!(
            parse(rest),
            Ok(Parse::Complete {
                reply: Reply::Meta {
                    status: MetaStatus::Miss,
                    flags: b"",
                    data: None
                },
                consumed: 4
            })
        );
    }

    #[test]
    fn rejects_malformed_replies() {
        assert!(matches!(
            parse(b"WHAT\r\n"),
            Err(ReplyError::Malformed { .. })
        ));
        assert!(matches!(
            parse(b"END extra\r\n"),
            Err(ReplyError::Malformed { .. })
        ));
        assert!(matches!(
            parse(b"STORED\n"),
            Err(ReplyError::Malformed { .. })
        ));
        assert!(matches!(
            parse(b"VALUE k x 1\r\n"),
            Err(ReplyError::Malformed { .. })
        ));
        assert_eq!(
            parse(b"VALUE k 0 1\r\nab\r\n"),
            Err(ReplyError::MissingValueTerminator)
        );
        let limits = Limits {
            max_line: 16,
            max_value: 4,
        };
        assert_eq!(
            parse_reply(&[b'A'; 16], &limits),
            Err(ReplyError::LineTooLong { limit: 16 })
        );
        assert_eq!(
            parse_reply(b"VA 5\r\n", &limits),
            Err(ReplyError::ValueTooLarge { len: 5, limit: 4 })
        );
        assert!(matches!(
            parse(b"99999999999999999999999\r\n"),
            Err(ReplyError::Malformed { .. })
        ));
    }

    #[test]
    fn udp_header_round_trips() {
        let mut out = Vec::new();
        let header = UdpHeader {
            request_id: 0xBEEF,
            sequence: 1,
            total: 3,
        };
        encode_udp_header(&mut out, header);
        out.extend_from_slice(b"END\r\n");
        assert_eq!(parse_udp_header(&out), Ok((header, &b"END\r\n"[..])));
        assert!(parse_udp_header(&out[..7]).is_err());
        assert!(parse_udp_header(&[0, 1, 0, 3, 0, 3, 0, 0]).is_err());
    }
}
