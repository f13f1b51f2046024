//! memcached's binary protocol (deprecated upstream since 1.6, still served by 1.6.18 and still spoken by
//! libmemcached's binary mode, pylibmc, spymemcached, EnyimMemcached and every SASL client), pure: a
//! request's 24-byte header, extras, key and value decoded and checked in the order and with the outcomes of
//! memcached's `dispatch_bin_command` (`proto_bin.c`), and the reply packets it writes. Like memcached, a
//! request is acted on once its header, extras and key are in; a value is waited for unless the item would
//! be refused as too large, whose value is then swallowed as it arrives.

use crate::decode::Limits;
use crate::request::KEY_MAX_LENGTH;

/// First byte of every request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// First byte of every response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Length of a request or response header.
pub const HEADER_LEN: usize = 24;
/// memcached's `MAX_SASL_MECH_LEN`: a longer mechanism name is refused.
pub const MAX_SASL_MECH_LEN: usize = 32;

/// The opcodes memcached 1.6.18 knows (`protocol_binary.h`).
pub mod opcode {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    /// Declared by the protocol, answered "Unknown command" by memcached 1.6.18, which has no handler for it.
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// A response's status, with the text memcached sends in an error's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    Success = 0x00,
    KeyNotFound = 0x01,
    KeyExists = 0x02,
    TooLarge = 0x03,
    InvalidArguments = 0x04,
    NotStored = 0x05,
    DeltaBadValue = 0x06,
    AuthError = 0x20,
    AuthContinue = 0x21,
    UnknownCommand = 0x81,
    OutOfMemory = 0x82,
}

impl Status {
    /// memcached's default text for the status (`write_bin_error`).
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::Success | Status::AuthContinue => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::DeltaBadValue => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
        }
    }
}

/// The request header fields a response echoes or a server checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The opcode as sent (a quiet variant stays quiet here; responses carry it unchanged).
    pub opcode: u8,
    pub extlen: u8,
    pub keylen: u16,
    pub bodylen: u32,
    /// Echoed in the response byte for byte (memcached never swaps it).
    pub opaque: [u8; 4],
    pub cas: u64,
}

impl Header {
    /// Whether the opcode is one that SASL lets through before authentication (memcached's
    /// `authenticated`: the SASL commands and VERSION).
    pub fn allowed_unauthenticated(&self) -> bool {
        matches!(
            self.opcode,
            opcode::SASL_LIST_MECHS | opcode::SASL_AUTH | opcode::SASL_STEP | opcode::VERSION
        )
    }
}

/// The three storage commands with extras (flags and expiry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryStore {
    Set,
    Add,
    Replace,
}

/// A binary request, checked: what memcached would do with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BinaryCommand<'a> {
    /// GET, GETQ, GETK, GETKQ. A quiet miss is silent; a hit is answered even when quiet.
    Get {
        key: &'a [u8],
        quiet: bool,
        with_key: bool,
    },
    /// TOUCH: a new expiry, answered with the flags only.
    Touch {
        key: &'a [u8],
        exptime: u32,
    },
    /// GAT, GATQ, GATK, GATKQ: get and touch.
    Gat {
        key: &'a [u8],
        exptime: u32,
        quiet: bool,
        with_key: bool,
    },
    /// SET, ADD, REPLACE (and their quiet variants); a non-zero header CAS makes it a compare-and-swap.
    Store {
        kind: BinaryStore,
        key: &'a [u8],
        flags: u32,
        exptime: u32,
        value: &'a [u8],
        quiet: bool,
    },
    /// APPEND, PREPEND (and quiet); extras are not allowed, and the header CAS is checked.
    Concat {
        prepend: bool,
        key: &'a [u8],
        value: &'a [u8],
        quiet: bool,
    },
    /// A storage command whose item would pass the item size limit: answered "Too large." (memcached's
    /// `E2BIG`, sent even when quiet) and its value swallowed; a SET also removes the key's old item.
    TooLarge {
        key: &'a [u8],
        unlink_existing: bool,
    },
    /// DELETE, DELETEQ; a non-zero header CAS must match.
    Delete {
        key: &'a [u8],
        quiet: bool,
    },
    /// INCREMENT, DECREMENT (and quiet): `exptime` 0xffffffff means "do not create a missing item".
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        initial: u64,
        exptime: u32,
        quiet: bool,
    },
    /// FLUSH, FLUSHQ, with an optional delay.
    Flush {
        exptime: u32,
        quiet: bool,
    },
    Noop,
    Version,
    /// QUIT, QUITQ: close once the replies are out (QUITQ without a reply).
    Quit {
        quiet: bool,
    },
    /// STAT with its group as the key (empty: the general stats).
    Stat {
        group: &'a [u8],
    },
    SaslListMechs,
    /// SASL_AUTH (`step` false) or SASL_STEP: the mechanism as the key, the client's data as the value.
    SaslAuth {
        step: bool,
        mechanism: &'a [u8],
        data: &'a [u8],
    },
    /// An opcode memcached does not serve (VERBOSITY among them): "Unknown command", and memcached swallows
    /// `bodylen` bytes after the key (more than the body: what it does, reproduced).
    Unknown,
    /// The request breaks its opcode's rules for extras, key and body (or its key is over 250 bytes):
    /// "Invalid arguments", then the connection closes.
    Invalid,
    /// The key and extras claim more than the body: "Unknown command", then the connection closes.
    BadLengths,
}

impl BinaryCommand<'_> {
    /// Whether the connection closes once this request's reply is out.
    pub fn closes(&self) -> bool {
        matches!(
            self,
            BinaryCommand::Invalid | BinaryCommand::BadLengths | BinaryCommand::Quit { .. }
        )
    }
}

/// The outcome of decoding the front of a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BinaryDecoded<'a> {
    /// Not enough bytes yet; `needed` is the total length worth waiting for, when known.
    Incomplete { needed: Option<usize> },
    /// One request. `consumed` may pass the buffer's length: the rest is discarded as it arrives.
    Frame {
        header: Header,
        command: BinaryCommand<'a>,
        consumed: usize,
    },
    /// The first byte is not the request magic: memcached closes the connection without a reply.
    BadMagic,
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

/// Decodes one binary request from the front of `input` as memcached 1.6.18 does.
pub fn decode_binary<'a>(input: &'a [u8], limits: &Limits) -> BinaryDecoded<'a> {
    if input.len() < HEADER_LEN {
        return BinaryDecoded::Incomplete {
            needed: Some(HEADER_LEN),
        };
    }
    if input[0] != REQUEST_MAGIC {
        return BinaryDecoded::BadMagic;
    }
    let header = Header {
        opcode: input[1],
        keylen: be16(&input[2..]),
        extlen: input[4],
        bodylen: be32(&input[8..]),
        opaque: input[12..16].try_into().expect("4 bytes"),
        cas: be64(&input[16..]),
    };
    let (extlen, keylen, bodylen) = (
        usize::from(header.extlen),
        usize::from(header.keylen),
        header.bodylen as usize,
    );
    // memcached acts once the header, extras and key are in.
    let head = HEADER_LEN + extlen + keylen;
    if input.len() < head {
        return BinaryDecoded::Incomplete { needed: Some(head) };
    }
    let frame = |command, consumed| BinaryDecoded::Frame {
        header,
        command,
        consumed,
    };
    if keylen > bodylen || keylen + extlen > bodylen {
        return frame(BinaryCommand::BadLengths, head);
    }
    let extras = &input[HEADER_LEN..HEADER_LEN + extlen];
    let key = &input[HEADER_LEN + extlen..head];
    if keylen > limits.max_key_len.min(KEY_MAX_LENGTH) {
        return frame(BinaryCommand::Invalid, head);
    }
    let whole = HEADER_LEN + bodylen;
    let value_len = bodylen - extlen - keylen;
    // A command that reads a value waits for it, unless it is refused first (then it is swallowed).
    let with_value = |command: BinaryCommand<'a>| match input.get(head..whole) {
        Some(_) => frame(command, whole),
        None => BinaryDecoded::Incomplete {
            needed: Some(whole),
        },
    };
    let value = input.get(head..whole).unwrap_or_default();
    let op = header.opcode;
    let quiet = matches!(
        op,
        opcode::SETQ
            | opcode::ADDQ
            | opcode::REPLACEQ
            | opcode::DELETEQ
            | opcode::INCREMENTQ
            | opcode::DECREMENTQ
            | opcode::QUITQ
            | opcode::FLUSHQ
            | opcode::APPENDQ
            | opcode::PREPENDQ
            | opcode::GETQ
            | opcode::GETKQ
            | opcode::GATQ
            | opcode::GATKQ
    );
    let invalid = frame(BinaryCommand::Invalid, head);
    let empty = extlen == 0 && keylen == 0 && bodylen == 0;
    match op {
        opcode::VERSION if empty => frame(BinaryCommand::Version, head),
        opcode::NOOP if empty => frame(BinaryCommand::Noop, head),
        opcode::QUIT | opcode::QUITQ if empty => frame(BinaryCommand::Quit { quiet }, head),
        opcode::SASL_LIST_MECHS if empty => frame(BinaryCommand::SaslListMechs, head),
        opcode::VERSION | opcode::NOOP | opcode::QUIT | opcode::QUITQ | opcode::SASL_LIST_MECHS => {
            invalid
        }
        opcode::FLUSH | opcode::FLUSHQ => {
            if keylen == 0 && bodylen == extlen && (extlen == 0 || extlen == 4) {
                let exptime = if extlen == 4 { be32(extras) } else { 0 };
                frame(BinaryCommand::Flush { exptime, quiet }, head)
            } else {
                invalid
            }
        }
        opcode::SET
        | opcode::SETQ
        | opcode::ADD
        | opcode::ADDQ
        | opcode::REPLACE
        | opcode::REPLACEQ => {
            if extlen != 8 || keylen == 0 || bodylen < keylen + 8 {
                return invalid;
            }
            let flags = be32(extras);
            let kind = match op {
                opcode::SET | opcode::SETQ => BinaryStore::Set,
                opcode::ADD | opcode::ADDQ => BinaryStore::Add,
                _ => BinaryStore::Replace,
            };
            if limits.item_size(keylen, flags, value_len) > limits.max_item_size {
                let command = BinaryCommand::TooLarge {
                    key,
                    unlink_existing: kind == BinaryStore::Set,
                };
                return frame(command, whole);
            }
            with_value(BinaryCommand::Store {
                kind,
                key,
                flags,
                exptime: be32(&extras[4..]),
                value,
                quiet,
            })
        }
        opcode::APPEND | opcode::APPENDQ | opcode::PREPEND | opcode::PREPENDQ => {
            if keylen == 0 || extlen != 0 {
                return invalid;
            }
            if limits.item_size(keylen, 0, value_len) > limits.max_item_size {
                let command = BinaryCommand::TooLarge {
                    key,
                    unlink_existing: false,
                };
                return frame(command, whole);
            }
            with_value(BinaryCommand::Concat {
                prepend: matches!(op, opcode::PREPEND | opcode::PREPENDQ),
                key,
                value,
                quiet,
            })
        }
        opcode::GET | opcode::GETQ | opcode::GETK | opcode::GETKQ => {
            if extlen == 0 && bodylen == keylen && keylen > 0 {
                let with_key = matches!(op, opcode::GETK | opcode::GETKQ);
                frame(
                    BinaryCommand::Get {
                        key,
                        quiet,
                        with_key,
                    },
                    head,
                )
            } else {
                invalid
            }
        }
        opcode::DELETE | opcode::DELETEQ => {
            if keylen > 0 && extlen == 0 && bodylen == keylen {
                frame(BinaryCommand::Delete { key, quiet }, head)
            } else {
                invalid
            }
        }
        opcode::INCREMENT | opcode::INCREMENTQ | opcode::DECREMENT | opcode::DECREMENTQ => {
            if keylen > 0 && extlen == 20 && bodylen == keylen + extlen {
                let command = BinaryCommand::Arith {
                    incr: matches!(op, opcode::INCREMENT | opcode::INCREMENTQ),
                    key,
                    delta: be64(extras),
                    initial: be64(&extras[8..]),
                    exptime: be32(&extras[16..]),
                    quiet,
                };
                frame(command, head)
            } else {
                invalid
            }
        }
        opcode::STAT => {
            if extlen == 0 {
                frame(BinaryCommand::Stat { group: key }, head)
            } else {
                invalid
            }
        }
        opcode::SASL_AUTH | opcode::SASL_STEP => {
            if extlen != 0 || keylen == 0 {
                return invalid;
            }
            with_value(BinaryCommand::SaslAuth {
                step: op == opcode::SASL_STEP,
                mechanism: key,
                data: value,
            })
        }
        opcode::TOUCH | opcode::GAT | opcode::GATQ | opcode::GATK | opcode::GATKQ => {
            if extlen != 4 || keylen == 0 {
                return invalid;
            }
            let exptime = be32(extras);
            let command = if op == opcode::TOUCH {
                BinaryCommand::Touch { key, exptime }
            } else {
                BinaryCommand::Gat {
                    key,
                    exptime,
                    quiet,
                    with_key: matches!(op, opcode::GATK | opcode::GATKQ),
                }
            };
            frame(command, head)
        }
        _ => frame(BinaryCommand::Unknown, head + bodylen),
    }
}

/// A well-formed request packet: its header's lengths are the parts' ([`write_request`] writes one that may
/// lie).
pub fn request_packet(
    opcode: u8,
    opaque: [u8; 4],
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) -> Vec<u8> {
    let header = Header {
        opcode,
        extlen: extras.len() as u8,
        keylen: key.len() as u16,
        bodylen: (extras.len() + key.len() + value.len()) as u32,
        opaque,
        cas,
    };
    let mut out = Vec::with_capacity(HEADER_LEN + header.bodylen as usize);
    write_request(&mut out, &header, extras, key, value);
    out
}

/// A client's request packet: `header`'s opcode, opaque, CAS and body length (which may disagree with the
/// parts, to test a server), then the extras, key and value.
pub fn write_request(out: &mut Vec<u8>, header: &Header, extras: &[u8], key: &[u8], value: &[u8]) {
    out.push(REQUEST_MAGIC);
    out.push(header.opcode);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.extend_from_slice(&[0, 0, 0]); // data type and vbucket
    out.extend_from_slice(&header.bodylen.to_be_bytes());
    out.extend_from_slice(&header.opaque);
    out.extend_from_slice(&header.cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Writes a response header for the request `header`.
pub fn write_response_header(
    out: &mut Vec<u8>,
    header: &Header,
    status: Status,
    extlen: u8,
    keylen: u16,
    bodylen: u32,
    cas: u64,
) {
    out.push(RESPONSE_MAGIC);
    out.push(header.opcode);
    out.extend_from_slice(&keylen.to_be_bytes());
    out.push(extlen);
    out.push(0); // data type: raw bytes
    out.extend_from_slice(&(status as u16).to_be_bytes());
    out.extend_from_slice(&bodylen.to_be_bytes());
    out.extend_from_slice(&header.opaque);
    out.extend_from_slice(&cas.to_be_bytes());
}

/// An error response with memcached's text for `status` (`write_bin_error`), or `message` instead.
pub fn write_error(out: &mut Vec<u8>, header: &Header, status: Status, message: Option<&[u8]>) {
    let message = message.unwrap_or(status.message());
    write_response_header(out, header, status, 0, 0, message.len() as u32, 0);
    out.extend_from_slice(message);
}

/// Whether memcached writes out every reply it holds once it has queued a response with `status` to this
/// request, rather than when its read buffer runs dry: `write_bin_error` goes to `conn_mwrite` unless the
/// request's body is still to be swallowed (a value too large or out of memory, an unknown command with a
/// body, a SASL mechanism name too long), and a SASL exchange that continues is sent at once; successes and
/// the key-returning misses (GETK, GATK) wait. A later request that makes memcached drop the connection (a
/// wrong magic byte) so loses only the replies queued after the last response that flushed.
pub fn response_flushes(header: &Header, status: u16) -> bool {
    let is = |s: Status| status == s as u16;
    let sasl = matches!(
        header.opcode,
        opcode::SASL_LIST_MECHS | opcode::SASL_AUTH | opcode::SASL_STEP
    );
    let store = matches!(
        header.opcode,
        opcode::SET
            | opcode::SETQ
            | opcode::ADD
            | opcode::ADDQ
            | opcode::REPLACE
            | opcode::REPLACEQ
            | opcode::APPEND
            | opcode::APPENDQ
            | opcode::PREPEND
            | opcode::PREPENDQ
    );
    if is(Status::Success) || is(Status::TooLarge) {
        false
    } else if is(Status::KeyNotFound) {
        !matches!(
            header.opcode,
            opcode::GETK | opcode::GETKQ | opcode::GATK | opcode::GATKQ
        )
    } else if is(Status::OutOfMemory) {
        !store && !sasl
    } else if is(Status::InvalidArguments) {
        !matches!(header.opcode, opcode::SASL_AUTH | opcode::SASL_STEP)
    } else if is(Status::UnknownCommand) {
        // The body memcached swallows: SASL commands (unknown without `-S`) keep their key.
        let swallowed = if sasl {
            header.bodylen.saturating_sub(u32::from(header.keylen))
        } else {
            header.bodylen
        };
        swallowed == 0
    } else {
        true
    }
}

/// A success response carrying `body` (no extras, no key) and `cas`.
pub fn write_success(out: &mut Vec<u8>, header: &Header, body: &[u8], cas: u64) {
    write_response_header(out, header, Status::Success, 0, 0, body.len() as u32, cas);
    out.extend_from_slice(body);
}

/// A hit's response before its value: header, the 4-byte flags as extras, and the key when asked for.
/// `value_len` is the length of the value the caller sends after it (0 for TOUCH).
pub fn write_hit_head(
    out: &mut Vec<u8>,
    header: &Header,
    flags: u32,
    key: Option<&[u8]>,
    value_len: usize,
    cas: u64,
) {
    let key = key.unwrap_or_default();
    let bodylen = 4 + key.len() + value_len;
    write_response_header(
        out,
        header,
        Status::Success,
        4,
        key.len() as u16,
        bodylen as u32,
        cas,
    );
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(key);
}

/// A miss of GETK/GATK: "Not found" status with the key as key and body (`write_bin_miss_response`).
pub fn write_key_miss(out: &mut Vec<u8>, header: &Header, key: &[u8]) {
    write_response_header(
        out,
        header,
        Status::KeyNotFound,
        0,
        key.len() as u16,
        key.len() as u32,
        0,
    );
    out.extend_from_slice(key);
}

/// One `STAT` response packet: the stat's name as key, its value as body; the empty name ends the list.
pub fn write_stat(out: &mut Vec<u8>, header: &Header, name: &[u8], value: &[u8]) {
    let stat = Header {
        opcode: opcode::STAT,
        ..*header
    };
    write_response_header(
        out,
        &stat,
        Status::Success,
        0,
        name.len() as u16,
        (name.len() + value.len()) as u32,
        0,
    );
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(op: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
        request_packet(op, [1, 2, 3, 4], cas, extras, key, value)
    }

    fn command(input: &[u8]) -> (BinaryCommand<'_>, usize) {
        match decode_binary(input, &Limits::default()) {
            BinaryDecoded::Frame {
                command, consumed, ..
            } => (command, consumed),
            other => panic!("not a frame: {other:?}"),
        }
    }

    #[test]
    fn a_set_waits_for_its_value_and_reads_flags_and_expiry() {
        let mut extras = 7u32.to_be_bytes().to_vec();
        extras.extend_from_slice(&60u32.to_be_bytes());
        let req = request(opcode::SETQ, &extras, b"k", b"value", 9);
        for cut in 0..req.len() {
            assert!(
                matches!(
                    decode_binary(&req[..cut], &Limits::default()),
                    BinaryDecoded::Incomplete { .. }
                ),
                "cut at {cut}"
            );
        }
        let BinaryDecoded::Frame {
            header,
            command,
            consumed,
        } = decode_binary(&req, &Limits::default())
        else {
            panic!("a frame");
        };
        assert_eq!(consumed, req.len());
        assert_eq!(header.cas, 9);
        assert_eq!(header.opaque, [1, 2, 3, 4]);
        assert_eq!(
            command,
            BinaryCommand::Store {
                kind: BinaryStore::Set,
                key: b"k",
                flags: 7,
                exptime: 60,
                value: b"value",
                quiet: true,
            }
        );
    }

    #[test]
    fn a_value_over_the_item_limit_is_refused_before_it_arrives() {
        let mut req = request(opcode::SET, &[0; 8], b"k", &[], 0);
        let bodylen = 9 + (2 << 20);
        req[8..12].copy_from_slice(&(bodylen as u32).to_be_bytes());
        let (command, consumed) = command(&req);
        assert_eq!(
            command,
            BinaryCommand::TooLarge {
                key: b"k",
                unlink_existing: true
            }
        );
        assert_eq!(consumed, HEADER_LEN + bodylen);
    }

    #[test]
    fn rules_of_each_opcode_are_memcacheds() {
        assert_eq!(
            command(&request(opcode::GET, &[], b"", &[], 0)).0,
            BinaryCommand::Invalid
        );
        assert_eq!(
            command(&request(opcode::GET, &[0; 4], b"k", &[], 0)).0,
            BinaryCommand::Invalid
        );
        assert_eq!(
            command(&request(opcode::NOOP, &[], b"k", &[], 0)).0,
            BinaryCommand::Invalid
        );
        assert_eq!(
            command(&request(opcode::INCREMENT, &[0; 8], b"k", &[], 0)).0,
            BinaryCommand::Invalid
        );
        assert_eq!(
            command(&request(opcode::GET, &[], &[b'k'; 251], &[], 0)).0,
            BinaryCommand::Invalid
        );
        assert_eq!(
            command(&request(opcode::GETKQ, &[], b"key", &[], 0)).0,
            BinaryCommand::Get {
                key: b"key",
                quiet: true,
                with_key: true
            }
        );
        let verbosity = request(opcode::VERBOSITY, &[0; 4], b"", &[], 0);
        let (unknown, consumed) = command(&verbosity);
        assert_eq!(unknown, BinaryCommand::Unknown);
        assert_eq!(consumed, HEADER_LEN + 4 + 4);
        let mut bad = request(opcode::GET, &[], b"key", &[], 0);
        bad[8..12].copy_from_slice(&2u32.to_be_bytes());
        assert_eq!(command(&bad).0, BinaryCommand::BadLengths);
        assert_eq!(
            decode_binary(
                b"get k\r\n\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
                &Limits::default()
            ),
            BinaryDecoded::BadMagic
        );
    }

    #[test]
    fn an_error_response_carries_memcacheds_text_and_the_opaque() {
        let header = Header {
            opcode: opcode::GETQ,
            extlen: 0,
            keylen: 1,
            bodylen: 1,
            opaque: [9, 8, 7, 6],
            cas: 0,
        };
        let mut out = Vec::new();
        write_error(&mut out, &header, Status::KeyNotFound, None);
        assert_eq!(&out[..2], &[RESPONSE_MAGIC, opcode::GETQ]);
        assert_eq!(be16(&out[6..]), 1);
        assert_eq!(be32(&out[8..]), 9);
        assert_eq!(&out[12..16], &[9, 8, 7, 6]);
        assert_eq!(&out[HEADER_LEN..], b"Not found");
    }
}
