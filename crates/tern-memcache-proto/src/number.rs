//! memcached's `safe_strto*` number parsers (util.c), reproduced bit for bit.
//!
//! memcached parses numbers with glibc's `strtol`/`strtoul`/`strtoull` on a 64-bit `long`, accepts leading C
//! whitespace and a sign, accepts any trailing text that starts with whitespace, and stores `strtol`/`strtoul`
//! results into 32-bit integers by plain truncation. A differential test against memcached sees every one of
//! those quirks (`set k 0 0 4294967297` stores a 1-byte value), so the standard library parsers cannot be used.

/// `isspace` in the C locale.
pub(crate) fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// What `strtoull(str, &end, 10)` saw: the sign, the magnitude (`None` on overflow) and where it stopped.
struct Scan {
    negative: bool,
    magnitude: Option<u64>,
    end: usize,
}

/// Scans like glibc's base-10 `strto*`: whitespace, optional sign, digits. `None` when there are no digits
/// (glibc then sets `endptr = str`, which every `safe_strto*` rejects).
fn scan(token: &[u8]) -> Option<Scan> {
    let mut i = 0;
    while i < token.len() && is_c_space(token[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < token.len() && (token[i] == b'+' || token[i] == b'-') {
        negative = token[i] == b'-';
        i += 1;
    }
    let digits_start = i;
    let mut magnitude = Some(0u64);
    while i < token.len() && token[i].is_ascii_digit() {
        let digit = u64::from(token[i] - b'0');
        magnitude = magnitude
            .and_then(|m| m.checked_mul(10))
            .and_then(|m| m.checked_add(digit));
        i += 1;
    }
    if i == digits_start {
        return None;
    }
    Some(Scan {
        negative,
        magnitude,
        end: i,
    })
}

/// The `safe_strto*` acceptance rule: the number must be followed by whitespace or the end of the token.
fn ends_cleanly(token: &[u8], end: usize) -> bool {
    end == token.len() || is_c_space(token[end])
}

/// `safe_strtoull`: `u64`, rejecting a `-` only when the wrapped result looks negative as an `i64`.
pub fn safe_strtoull(token: &[u8]) -> Option<u64> {
    let scan = scan(token)?;
    let magnitude = scan.magnitude?; // ERANGE
    if !ends_cleanly(token, scan.end) {
        return None;
    }
    let value = if scan.negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    };
    if (value as i64) < 0 && token.contains(&b'-') {
        return None;
    }
    Some(value)
}

/// `safe_strtoul`: `strtoul` on a 64-bit `unsigned long`, then truncated into a `uint32_t` as memcached does.
pub fn safe_strtoul(token: &[u8]) -> Option<u32> {
    safe_strtoull(token).map(|v| v as u32)
}

/// `safe_strtol`: `strtol` on a 64-bit `long` (ERANGE outside `i64`), then truncated into an `int32_t`.
pub fn safe_strtol(token: &[u8]) -> Option<i32> {
    let scan = scan(token)?;
    let magnitude = scan.magnitude?;
    let value = if scan.negative {
        if magnitude > 1u64 << 63 {
            return None;
        }
        (magnitude as i64).wrapping_neg()
    } else {
        i64::try_from(magnitude).ok()?
    };
    if !ends_cleanly(token, scan.end) {
        return None;
    }
    Some(value as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtol_matches_memcached_quirks() {
        assert_eq!(safe_strtol(b"10"), Some(10));
        assert_eq!(safe_strtol(b"-10"), Some(-10));
        assert_eq!(safe_strtol(b"+7"), Some(7));
        assert_eq!(safe_strtol(b"\t7"), Some(7));
        assert_eq!(safe_strtol(b"7\r"), Some(7));
        assert_eq!(safe_strtol(b"7\tjunk"), Some(7));
        assert_eq!(safe_strtol(b"7x"), None);
        assert_eq!(safe_strtol(b""), None);
        assert_eq!(safe_strtol(b"-"), None);
        assert_eq!(safe_strtol(b"4294967297"), Some(1));
        assert_eq!(safe_strtol(b"9223372036854775807"), Some(-1));
        assert_eq!(safe_strtol(b"9223372036854775808"), None);
        assert_eq!(safe_strtol(b"-9223372036854775808"), Some(0));
        assert_eq!(safe_strtol(b"-9223372036854775809"), None);
    }

    #[test]
    fn strtoul_matches_memcached_quirks() {
        assert_eq!(safe_strtoul(b"4294967297"), Some(1));
        assert_eq!(safe_strtoul(b"-1"), None);
        assert_eq!(safe_strtoul(b"-0"), Some(0));
        assert_eq!(safe_strtoul(b"-18446744073709551615"), Some(1));
        assert_eq!(safe_strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(safe_strtoull(b"18446744073709551616"), None);
        assert_eq!(safe_strtoull(b"-1"), None);
        assert_eq!(safe_strtoull(b"9223372036854775808"), Some(1 << 63));
        assert_eq!(safe_strtoull(b" 5 "), Some(5));
    }

    proptest::proptest! {
        #[test]
        fn plain_numbers_parse_like_rust(n: u64, m: i64, pad in "[ \t]{0,2}") {
            proptest::prop_assert_eq!(safe_strtoull(format!("{pad}{n}").as_bytes()), Some(n));
            proptest::prop_assert_eq!(safe_strtoull(format!("+{n}\r").as_bytes()), Some(n));
            proptest::prop_assert_eq!(safe_strtoul(n.to_string().as_bytes()), Some(n as u32));
            proptest::prop_assert_eq!(safe_strtol(format!("{pad}{m}").as_bytes()), Some(m as i32));
        }

        #[test]
        fn trailing_garbage_is_refused(n: u32, junk in "[a-z.]") {
            let token = format!("{n}{junk}");
            proptest::prop_assert_eq!(safe_strtoull(token.as_bytes()), None);
            proptest::prop_assert_eq!(safe_strtol(token.as_bytes()), None);
        }
    }
}
