//! memcached's base64 (base64.c, Jouni Malinen's code as modified for memcached).
//!
//! Written here rather than taken from the `base64` crate because meta commands must accept exactly what
//! memcached accepts: its decoder skips bytes outside the alphabet, requires a multiple of four alphabet bytes,
//! and stops after the first padded block. A strict decoder would answer differently from memcached.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn decode_symbol(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        b'=' => Some(0),
        _ => None,
    }
}

/// Decodes `src` into `out` as memcached does; `None` where memcached's `base64_decode` returns 0 (failure, or
/// an empty result, which memcached cannot tell apart). `out` must hold `src.len() / 4 * 3` bytes.
pub(crate) fn decode(src: &[u8], out: &mut [u8]) -> Option<usize> {
    let count = src.iter().filter(|&&b| decode_symbol(b).is_some()).count();
    if count == 0 || count % 4 != 0 || count / 4 * 3 > out.len() {
        return None;
    }
    let mut pos = 0;
    let mut block = [0u8; 4];
    let mut filled = 0;
    let mut pad = 0;
    for &b in src {
        let Some(symbol) = decode_symbol(b) else {
            continue;
        };
        if b == b'=' {
            pad += 1;
        }
        block[filled] = symbol;
        filled += 1;
        if filled == 4 {
            out[pos] = (block[0] << 2) | (block[1] >> 4);
            out[pos + 1] = (block[1] << 4) | (block[2] >> 2);
            out[pos + 2] = (block[2] << 6) | block[3];
            pos += 3;
            filled = 0;
            if pad > 0 {
                match pad {
                    1 => pos -= 1,
                    2 => pos -= 2,
                    _ => return None,
                }
                break;
            }
        }
    }
    (pos > 0).then_some(pos)
}

/// Appends the padded base64 encoding of `src` to `out`.
pub(crate) fn encode_into(src: &[u8], out: &mut Vec<u8>) {
    let mut chunks = src.chunks_exact(3);
    for c in &mut chunks {
        out.extend_from_slice(&[
            ALPHABET[usize::from(c[0] >> 2)],
            ALPHABET[usize::from(((c[0] & 0x03) << 4) | (c[1] >> 4))],
            ALPHABET[usize::from(((c[1] & 0x0f) << 2) | (c[2] >> 6))],
            ALPHABET[usize::from(c[2] & 0x3f)],
        ]);
    }
    match *chunks.remainder() {
        [a] => out.extend_from_slice(&[
            ALPHABET[usize::from(a >> 2)],
            ALPHABET[usize::from((a & 0x03) << 4)],
            b'=',
            b'=',
        ]),
        [a, b] => out.extend_from_slice(&[
            ALPHABET[usize::from(a >> 2)],
            ALPHABET[usize::from(((a & 0x03) << 4) | (b >> 4))],
            ALPHABET[usize::from((b & 0x0f) << 2)],
            b'=',
        ]),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &[u8]) -> Option<Vec<u8>> {
        let mut out = [0u8; 256];
        decode(s, &mut out).map(|n| out[..n].to_vec())
    }

    #[test]
    fn decodes_like_memcached() {
        assert_eq!(dec(b"YQ==").as_deref(), Some(&b"a"[..]));
        assert_eq!(dec(b"Ym0="), Some(b"bm".to_vec()));
        assert_eq!(dec(b"YQ="), None);
        assert_eq!(dec(b"bm"), None);
        assert_eq!(dec(b""), None);
        // Bytes outside the alphabet are skipped; decoding stops after the first padded block.
        assert_eq!(dec(b"Y.Q=!="), Some(b"a".to_vec()));
        assert_eq!(dec(b"YQ==YWJj"), Some(b"a".to_vec()));
        assert_eq!(dec(b"Y==="), None);
        assert_eq!(dec(b"===="), None);
    }

    #[test]
    fn encode_round_trips() {
        for len in 0..20 {
            let src: Vec<u8> = (0..len).map(|i| (i * 37) as u8).collect();
            let mut enc = Vec::new();
            encode_into(&src, &mut enc);
            if len > 0 {
                assert_eq!(dec(&enc), Some(src));
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn decode_inverts_encode(src in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..186)) {
            let mut enc = Vec::new();
            encode_into(&src, &mut enc);
            proptest::prop_assert_eq!(dec(&enc), Some(src));
        }
    }
}
