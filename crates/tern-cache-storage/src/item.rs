//! The on-segment item record: a variable-length header, the key, the value.
//!
//! ```text
//! [key_len u8][bits u8][value_len LEB128][atime u16][flags u32]?[exptime u32]?[cas u64]?[key][value]
//! ```
//! Optional fields are present only when their bit is set, so the common item
//! (flags 0, no TTL, CAS derived from its position) has a 5-byte header for
//! values under 128 bytes. A key length byte of [`PAD`] marks one byte of
//! padding (keys are at most 250 bytes).
//!
//! The `bits` byte is full (three presence bits, fetched, stale, token sent,
//! a 2-bit frequency). The `atime` field holds a 15-bit time code and, in its
//! top bit ([`ATIME_KEY_BINARY`]), whether the key is binary (memcached's
//! `ITEM_KEY_BINARY`: stored by `ms` with `b`, echoed in base64). The time
//! code fits 15 bits because its mantissa's leading one is implicit (see
//! [`encode_atime`]).

/// Longest key memcached accepts.
pub const KEY_MAX_LEN: usize = 250;
/// A padding byte in a segment (never a valid key length).
pub(crate) const PAD: u8 = 0xFF;

pub(crate) const HAS_FLAGS: u8 = 1;
pub(crate) const HAS_EXP: u8 = 1 << 1;
pub(crate) const HAS_CAS: u8 = 1 << 2;
pub(crate) const FETCHED: u8 = 1 << 3;
pub(crate) const STALE: u8 = 1 << 4;
pub(crate) const TOKEN_SENT: u8 = 1 << 5;
const FREQ_SHIFT: u8 = 6;
/// In the `atime` u16 (not in `bits`, which is full): the key is binary.
pub(crate) const ATIME_KEY_BINARY: u16 = 1 << 15;
/// The time code's part of the `atime` field.
const ATIME_CODE_MASK: u16 = ATIME_KEY_BINARY - 1;
/// Eviction frequency counter saturates here (2 bits, as in S3-FIFO).
pub(crate) const FREQ_MAX: u8 = 3;

/// Longest encoded header: key length, bits, a 5-byte value length, atime,
/// flags, exptime and CAS.
pub(crate) const MAX_HEADER_LEN: usize = 2 + 5 + 2 + 4 + 4 + 8;

/// A decoded header. `cas` is `Some` only for an explicitly stored CAS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub key_len: u8,
    pub bits: u8,
    pub value_len: u32,
    /// The 15-bit access time code ([`encode_atime`]).
    pub atime_code: u16,
    /// The key is binary: kept in the top bit of the `atime` field.
    pub key_binary: bool,
    pub flags: u32,
    pub exptime: u32,
    pub cas: Option<u64>,
}

/// The `atime` field as stored: the time code and the binary-key bit.
pub(crate) fn atime_field(code: u16, key_binary: bool) -> u16 {
    debug_assert!(code <= ATIME_CODE_MASK);
    code | if key_binary { ATIME_KEY_BINARY } else { 0 }
}

impl Header {
    pub(crate) fn freq(&self) -> u8 {
        self.bits >> FREQ_SHIFT
    }

    pub(crate) fn set_freq(&mut self, f: u8) {
        self.bits = (self.bits & !(FREQ_MAX << FREQ_SHIFT)) | (f.min(FREQ_MAX) << FREQ_SHIFT);
    }

    pub(crate) fn has(&self, bit: u8) -> bool {
        self.bits & bit != 0
    }

    /// Bytes the header occupies when encoded.
    pub(crate) fn encoded_len(&self) -> usize {
        2 + varint_len(self.value_len)
            + 2
            + if self.flags != 0 { 4 } else { 0 }
            + if self.exptime_field() { 4 } else { 0 }
            + if self.cas.is_some() { 8 } else { 0 }
    }

    /// Whether the record has an exptime field: a TTL, or a field a touch has set to 0 in place (the
    /// record keeps its length, so the field stays, holding 0).
    fn exptime_field(&self) -> bool {
        self.exptime != 0 || self.has(HAS_EXP)
    }

    /// Total record length: header, key and value.
    pub(crate) fn record_len(&self) -> usize {
        self.encoded_len() + self.key_len as usize + self.value_len as usize
    }

    /// Encodes into `out` (which must hold `encoded_len()` bytes); optional
    /// fields and their bits follow the values, not the incoming bits, but
    /// for an exptime field already there (see [`Header::exptime_field`]).
    pub(crate) fn encode(&self, out: &mut [u8]) -> usize {
        let mut bits = self.bits & !(HAS_FLAGS | HAS_EXP | HAS_CAS);
        if self.flags != 0 {
            bits |= HAS_FLAGS;
        }
        let exptime_field = self.exptime_field();
        if exptime_field {
            bits |= HAS_EXP;
        }
        if self.cas.is_some() {
            bits |= HAS_CAS;
        }
        out[0] = self.key_len;
        out[1] = bits;
        let mut p = 2;
        let mut v = self.value_len;
        loop {
            let b = (v & 0x7F) as u8;
            v >>= 7;
            if v == 0 {
                out[p] = b;
                p += 1;
                break;
            }
            out[p] = b | 0x80;
            p += 1;
        }
        out[p..p + 2].copy_from_slice(&atime_field(self.atime_code, self.key_binary).to_le_bytes());
        p += 2;
        if self.flags != 0 {
            out[p..p + 4].copy_from_slice(&self.flags.to_le_bytes());
            p += 4;
        }
        if exptime_field {
            out[p..p + 4].copy_from_slice(&self.exptime.to_le_bytes());
            p += 4;
        }
        if let Some(c) = self.cas {
            out[p..p + 8].copy_from_slice(&c.to_le_bytes());
            p += 8;
        }
        p
    }

    /// Decodes the header at the start of `buf`; returns it and its length.
    /// Segments only ever hold records this crate wrote, so a malformed
    /// header is a bug, not input: indexing panics rather than guessing.
    pub(crate) fn decode(buf: &[u8]) -> (Header, usize) {
        let key_len = buf[0];
        let bits = buf[1];
        let mut p = 2;
        let mut value_len: u32 = 0;
        let mut shift = 0;
        loop {
            let b = buf[p];
            p += 1;
            value_len |= u32::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        let atime = u16::from_le_bytes([buf[p], buf[p + 1]]);
        p += 2;
        let mut flags = 0;
        if bits & HAS_FLAGS != 0 {
            flags = u32::from_le_bytes(buf[p..p + 4].try_into().unwrap());
            p += 4;
        }
        let mut exptime = 0;
        if bits & HAS_EXP != 0 {
            exptime = u32::from_le_bytes(buf[p..p + 4].try_into().unwrap());
            p += 4;
        }
        let mut cas = None;
        if bits & HAS_CAS != 0 {
            cas = Some(u64::from_le_bytes(buf[p..p + 8].try_into().unwrap()));
            p += 8;
        }
        (
            Header {
                key_len,
                bits,
                value_len,
                atime_code: atime & ATIME_CODE_MASK,
                key_binary: atime & ATIME_KEY_BINARY != 0,
                flags,
                exptime,
                cas,
            },
            p,
        )
    }
}

/// Where the key lies in the record starting at `buf[0]`, without a full
/// decode (index probes call this on every tag match).
pub(crate) fn key_range(buf: &[u8]) -> std::ops::Range<usize> {
    let bits = buf[1];
    let mut p = 2;
    while buf[p] & 0x80 != 0 {
        p += 1;
    }
    p += 3;
    p += usize::from(bits & HAS_FLAGS != 0) * 4
        + usize::from(bits & HAS_EXP != 0) * 4
        + usize::from(bits & HAS_CAS != 0) * 8;
    p..p + usize::from(buf[0])
}

/// Offset of the `bits` byte within a record (updated in place on reads).
pub(crate) const BITS_OFFSET: usize = 1;

/// Offset of the atime field within a record (its code and the binary-key bit: write it with
/// [`atime_field`]).
pub(crate) fn atime_offset(value_len: u32) -> usize {
    2 + varint_len(value_len)
}

/// Offset of the exptime field, if the record has one.
pub(crate) fn exptime_offset(h: &Header) -> Option<usize> {
    if h.has(HAS_EXP) {
        Some(atime_offset(h.value_len) + 2 + if h.has(HAS_FLAGS) { 4 } else { 0 })
    } else {
        None
    }
}

fn varint_len(v: u32) -> usize {
    match v {
        0..=0x7F => 1,
        0x80..=0x3FFF => 2,
        0x4000..=0x1F_FFFF => 3,
        0x20_0000..=0xFFF_FFFF => 4,
        _ => 5,
    }
}

/// Time codes below this are exact seconds.
const ATIME_EXACT: u32 = 2048;

/// Encodes seconds since the segment's epoch as a 15-bit float: exact below
/// 2048 s (34 min), then within 1/1024 of the true value, rounding down.
/// Memcached itself only refreshes an item's access time every 60 s.
///
/// Past 2048 s the value is `m << e` with an 11-bit mantissa `m` whose top
/// bit is always set, so only its low 10 bits are stored, after the exact
/// range: code = 2048 + ((e - 1) << 10) + (m - 1024). With e <= 21 (any u32)
/// the largest code is 23551, under 2^15: the field's top bit stays free for
/// [`ATIME_KEY_BINARY`].
pub(crate) fn encode_atime(delta: u32) -> u16 {
    if delta < ATIME_EXACT {
        return delta as u16;
    }
    let e = 32 - delta.leading_zeros() - 11;
    let m = delta >> e;
    (ATIME_EXACT + ((e - 1) << 10) + (m - 1024)) as u16
}

pub(crate) fn decode_atime(code: u16) -> u32 {
    let code = u32::from(code & ATIME_CODE_MASK);
    if code < ATIME_EXACT {
        return code;
    }
    let k = code - ATIME_EXACT;
    let e = (k >> 10) + 1;
    (1024 | (k & 1023)) << e
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn header_roundtrips(key_len in 1u8..=250, bits in any::<u8>(), value_len in any::<u32>(),
                             atime_code in 0u16..=ATIME_CODE_MASK, key_binary in any::<bool>(),
                             flags in any::<u32>(), exptime in any::<u32>(),
                             cas in proptest::option::of(any::<u64>())) {
            let h = Header { key_len, bits, value_len, atime_code, key_binary, flags, exptime, cas };
            let mut buf = [0u8; 32];
            let n = h.encode(&mut buf);
            prop_assert_eq!(n, h.encoded_len());
            let (d, m) = Header::decode(&buf);
            prop_assert_eq!(m, n);
            prop_assert_eq!(key_range(&buf), n..n + usize::from(key_len));
            prop_assert_eq!(d.key_len, key_len);
            prop_assert_eq!(d.value_len, value_len);
            prop_assert_eq!(d.atime_code, atime_code);
            prop_assert_eq!(d.key_binary, key_binary);
            prop_assert_eq!(d.flags, flags);
            prop_assert_eq!(d.exptime, exptime);
            prop_assert_eq!(d.cas, cas);
            prop_assert_eq!(d.bits & !(HAS_FLAGS | HAS_EXP | HAS_CAS), bits & !(HAS_FLAGS | HAS_EXP | HAS_CAS));
            if let Some(off) = exptime_offset(&d) {
                prop_assert_eq!(u32::from_le_bytes(buf[off..off + 4].try_into().unwrap()), exptime);
            }
            prop_assert_eq!(u16::from_le_bytes([buf[atime_offset(value_len)], buf[atime_offset(value_len) + 1]]), atime_field(atime_code, key_binary));
        }

        #[test]
        fn atime_rounds_down_within_a_thousandth(delta in any::<u32>()) {
            let code = encode_atime(delta);
            prop_assert!(code <= ATIME_CODE_MASK, "the time code leaves the binary-key bit free");
            let back = decode_atime(code);
            prop_assert!(back <= delta);
            prop_assert!(delta - back <= delta / 1024);
            prop_assert_eq!(decode_atime(code | ATIME_KEY_BINARY), back);
        }
    }

    #[test]
    fn atime_exact_below_2048_and_header_small() {
        for d in 0..2048 {
            assert_eq!(decode_atime(encode_atime(d)), d);
        }
        assert_eq!(encode_atime(u32::MAX), 23551);
        // Codes grow with the time they stand for, across the exact range's end and every exponent step.
        let mut times: Vec<u32> = (0..32)
            .flat_map(|s| [(1u64 << s) - 1, 1 << s, (1 << s) + 1])
            .map(|d| d.min(u64::from(u32::MAX)) as u32)
            .collect();
        times.sort_unstable();
        for pair in times.windows(2) {
            assert!(encode_atime(pair[0]) <= encode_atime(pair[1]), "{pair:?}");
        }
        let h = Header {
            key_len: 16,
            bits: 0,
            value_len: 100,
            atime_code: 0,
            key_binary: true,
            flags: 0,
            exptime: 0,
            cas: None,
        };
        assert_eq!(h.encoded_len(), 5, "the binary-key bit costs no byte");
    }
}
