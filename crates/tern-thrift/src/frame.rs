//! Thrift's framed transport: each message is preceded by its length, a big-endian i32.

/// Bytes of the length prefix.
const PREFIX_LEN: usize = 4;

/// What the front of a connection's input holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framed<'a> {
    /// Not a whole frame yet: `needed` is the input length (from the start of `input`) worth waiting for.
    Incomplete { needed: usize },
    /// One frame: its payload, and the input bytes it took with its prefix.
    Frame { payload: &'a [u8], consumed: usize },
    /// The prefix claims a negative length (read here as the u32 it is on the wire) or one over the limit.
    TooLarge { length: u64 },
}

/// Splits the frame at the front of `input`, refusing a payload over `max_frame_bytes`.
pub fn decode_frame(input: &[u8], max_frame_bytes: usize) -> Framed<'_> {
    let Some(prefix) = input.first_chunk::<PREFIX_LEN>() else {
        return Framed::Incomplete { needed: PREFIX_LEN };
    };
    let length = u32::from_be_bytes(*prefix);
    // A length with the top bit set is a negative i32.
    if length > i32::MAX as u32 || length as usize > max_frame_bytes {
        return Framed::TooLarge {
            length: u64::from(length),
        };
    }
    let end = PREFIX_LEN + length as usize;
    match input.get(PREFIX_LEN..end) {
        Some(payload) => Framed::Frame {
            payload,
            consumed: end,
        },
        None => Framed::Incomplete { needed: end },
    }
}

/// Appends one frame to `out`: reserves the length prefix, lets `body` write the payload after it, then
/// fills the prefix in.
pub fn write_frame(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; PREFIX_LEN]);
    body(out);
    // A payload of 2 GiB or more has no i32 length; its prefix then reads as negative, which every peer
    // refuses instead of misframing the stream.
    let length = u32::try_from(out.len() - start - PREFIX_LEN).unwrap_or(u32::MAX);
    out[start..start + PREFIX_LEN].copy_from_slice(&length.to_be_bytes());
}
