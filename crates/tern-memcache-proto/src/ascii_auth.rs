//! memcached's ASCII authentication (`-Y authfile`), pure: until a text connection authenticates, memcached
//! reads its input with `try_read_command_asciiauth` instead of the command parser. The one thing it accepts
//! is a storage-shaped line, `set <any key> <any flags> <any exptime> <bytes>`, whose data block holds
//! `<user> <password>`; anything else is answered `CLIENT_ERROR unauthenticated`.

use crate::number::safe_strtoul;
use crate::tokens::Words;

/// Buffered bytes without a newline after which memcached closes an unauthenticated connection.
const MAX_LINE: usize = 2048;

/// What the front of an unauthenticated connection's input holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthDecoded<'a> {
    /// Not enough bytes yet; `needed` is the total worth waiting for, when known.
    Incomplete { needed: Option<usize> },
    /// More than 2048 bytes without a newline: memcached closes the connection.
    Close,
    /// No attempt to check: the reply (`CLIENT_ERROR ...`), after consuming `consumed` bytes.
    Refused {
        reply: &'static [u8],
        consumed: usize,
    },
    /// A user and password to check against the file, in `consumed` bytes.
    Credentials {
        user: &'a [u8],
        password: &'a [u8],
        consumed: usize,
    },
}

/// A C string's bytes: memcached tokenizes up to the first NUL.
fn c_str(bytes: &[u8]) -> &[u8] {
    match memchr::memchr(0, bytes) {
        Some(nul) => &bytes[..nul],
        None => bytes,
    }
}

/// Decodes an unauthenticated connection's input as memcached 1.6.18 does.
pub fn decode_ascii_auth(input: &[u8]) -> AuthDecoded<'_> {
    if input.len() < 2 {
        return AuthDecoded::Incomplete { needed: Some(2) };
    }
    let Some(eol) = memchr::memchr(b'\n', input) else {
        return if input.len() > MAX_LINE {
            AuthDecoded::Close
        } else {
            AuthDecoded::Incomplete { needed: None }
        };
    };
    let line_consumed = eol + 1;
    // The line's `\r` stays in its last word, which `strtoul` stops at.
    let words: Vec<&[u8]> = Words::new(c_str(&input[..eol])).take(5).collect();
    let size = match (words.first(), words.get(4)) {
        (Some(&b"set"), Some(size)) => safe_strtoul(size),
        _ => None,
    };
    let Some(size) = size else {
        return AuthDecoded::Refused {
            reply: b"CLIENT_ERROR unauthenticated\r\n",
            consumed: line_consumed,
        };
    };
    let consumed = line_consumed + size as usize + 2;
    let Some(data) = input.get(line_consumed..consumed) else {
        return AuthDecoded::Incomplete {
            needed: Some(consumed),
        };
    };
    let Some(token) = data.strip_suffix(b"\r\n") else {
        return AuthDecoded::Refused {
            reply: b"CLIENT_ERROR bad command line termination\r\n",
            consumed,
        };
    };
    let mut words = Words::new(c_str(token));
    match (words.next(), words.next()) {
        (Some(user), Some(password)) => AuthDecoded::Credentials {
            user,
            password,
            consumed,
        },
        _ => AuthDecoded::Refused {
            reply: b"CLIENT_ERROR bad authentication token format\r\n",
            consumed,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_memcached_reads_before_authentication() {
        assert_eq!(
            decode_ascii_auth(b"set foo 0 0 7\r\nfoo bar\r\n"),
            AuthDecoded::Credentials {
                user: b"foo",
                password: b"bar",
                consumed: 24
            }
        );
        assert_eq!(
            decode_ascii_auth(b"get foo\r\n"),
            AuthDecoded::Refused {
                reply: b"CLIENT_ERROR unauthenticated\r\n",
                consumed: 9
            }
        );
        assert_eq!(
            decode_ascii_auth(b"set foo 0 0 2\r\nhi\r\n"),
            AuthDecoded::Refused {
                reply: b"CLIENT_ERROR bad authentication token format\r\n",
                consumed: 19
            }
        );
        assert_eq!(
            decode_ascii_auth(b"set foo 0 0 7\r\nfoo barXY"),
            AuthDecoded::Refused {
                reply: b"CLIENT_ERROR bad command line termination\r\n",
                consumed: 24
            }
        );
        assert_eq!(
            decode_ascii_auth(b"set foo 0 0 7\r\nfoo"),
            AuthDecoded::Incomplete { needed: Some(24) }
        );
        assert_eq!(
            decode_ascii_auth(b"set foo"),
            AuthDecoded::Incomplete { needed: None }
        );
        assert_eq!(decode_ascii_auth(&[b'x'; 2049]), AuthDecoded::Close);
    }
}
