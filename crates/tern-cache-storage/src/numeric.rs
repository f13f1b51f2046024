//! incr/decr value arithmetic, byte-for-byte as memcached 1.6.18 does it.
//!
//! memcached parses the stored value with `safe_strtoull` (strtoull in base
//! 10 on the value followed by its `\r\n`): leading whitespace and one sign
//! are accepted, the number must end at whitespace or the value's end, a
//! negative number is rejected, overflow is rejected. The result is written
//! back in place, space-padded to the old length, when it fits; otherwise
//! the value grows to the new number of digits.

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// Parses a stored value as memcached's incr/decr does; `None` means
/// "cannot increment or decrement non-numeric value".
pub fn parse_counter(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    let mut i = 0;
    while i < value.len() && is_c_space(value[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < value.len() && (value[i] == b'+' || value[i] == b'-') {
        negative = value[i] == b'-';
        i += 1;
    }
    let digits_start = i;
    let mut n: u64 = 0;
    let mut overflow = false;
    while i < value.len() && value[i].is_ascii_digit() {
        match n
            .checked_mul(10)
            .and_then(|m| m.checked_add(u64::from(value[i] - b'0')))
        {
            Some(m) => n = m,
            None => overflow = true,
        }
        i += 1;
    }
    // No digits: strtoull leaves its end pointer at the start, and safe_strtoull refuses that.
    if i == digits_start {
        return None;
    }
    let end = i;
    // The byte after the number: the value's own, or the "\r" memcached stores.
    let terminated = end == value.len() || is_c_space(value[end]);
    if !terminated || overflow {
        return None;
    }
    if negative {
        let wrapped = n.wrapping_neg();
        // safe_strtoull only rejects a '-' when the result looks negative.
        if (wrapped as i64) < 0 {
            return None;
        }
        return Some(wrapped);
    }
    Some(n)
}

/// Applies a delta: incr wraps at 2^64, decr stops at 0.
pub fn apply_delta(value: u64, delta: u64, incr: bool) -> u64 {
    if incr {
        value.wrapping_add(delta)
    } else {
        value.saturating_sub(delta)
    }
}

/// The bytes stored after incr/decr: the decimal number, space-padded to
/// `old_len` when it fits there (memcached's in-place update).
pub fn render_counter(value: u64, old_len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(value.to_string().as_bytes());
    if out.len() < old_len {
        out.resize(old_len, b' ');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn memcached_parse_cases() {
        assert_eq!(parse_counter(b"0"), Some(0));
        assert_eq!(parse_counter(b"42"), Some(42));
        assert_eq!(parse_counter(b"  7"), Some(7));
        assert_eq!(parse_counter(b"7  "), Some(7));
        assert_eq!(parse_counter(b"+5"), Some(5));
        assert_eq!(parse_counter(b"-0"), Some(0));
        assert_eq!(parse_counter(b"-1"), None);
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None);
        assert_eq!(parse_counter(b"12abc"), None);
        assert_eq!(parse_counter(b"abc"), None);
        assert_eq!(parse_counter(b"0x10"), None);
        assert_eq!(parse_counter(b""), None);
        // Observed on memcached 1.6.18: values without digits are non-numeric.
        assert_eq!(parse_counter(b" "), None);
        assert_eq!(parse_counter(b" x"), None);
        assert_eq!(parse_counter(b"\t"), None);
        assert_eq!(parse_counter(b" 5"), Some(5));
        assert_eq!(parse_counter(b"1 2"), Some(1));
    }

    #[test]
    fn delta_wraps_and_floors() {
        assert_eq!(apply_delta(u64::MAX, 1, true), 0);
        assert_eq!(apply_delta(u64::MAX, 3, true), 2);
        assert_eq!(apply_delta(5, 10, false), 0);
        assert_eq!(apply_delta(10, 3, false), 7);
        let mut v = Vec::new();
        render_counter(9, 3, &mut v);
        assert_eq!(v, b"9  ");
        render_counter(1000, 3, &mut v);
        assert_eq!(v, b"1000");
    }

    proptest! {
        #[test]
        fn parses_every_rendered_u64(n in any::<u64>(), pad in 0usize..4) {
            let mut v = Vec::new();
            render_counter(n, n.to_string().len() + pad, &mut v);
            prop_assert_eq!(parse_counter(&v), Some(n));
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..30)) {
            let _ = parse_counter(&bytes);
        }
    }
}
