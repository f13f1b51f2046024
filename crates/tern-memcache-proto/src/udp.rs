//! memcached's UDP framing: an 8-byte header before every datagram.
//!
//! Header (big-endian u16s): request id, sequence number, total datagrams, reserved (0). memcached 1.6.18
//! takes a request datagram only when it is longer than the header and says it is datagram 1 of 1 (bytes 4-5
//! = 1; the sequence number and reserved bytes are ignored); anything else is dropped without reply, so
//! multi-datagram requests are not supported. The payload is decoded with [`crate::decode`] like a TCP read
//! buffer holding exactly those bytes: every complete request is answered (each with its own reply
//! datagrams), and what is left (`Incomplete`, or `Close`, which on UDP just ends the datagram) is dropped.
//!
//! Replies are split per response unit, exactly as memcached splits its response objects: every `get` hit is
//! its own unit (the `END` joins the last key's unit, which is empty when that key missed), every other
//! command's reply is one unit. A unit is sent as datagrams of at most 1400 bytes (`UDP_MAX_PAYLOAD_SIZE`,
//! header included, so 1392 bytes of payload), numbered from 0 with the unit's datagram count as total; an
//! empty unit is one bare header with total 0.

/// memcached's `UDP_HEADER_SIZE`.
pub const UDP_HEADER_SIZE: usize = 8;
/// memcached's `UDP_MAX_PAYLOAD_SIZE`: the largest datagram it sends, header included.
pub const UDP_MAX_PAYLOAD_SIZE: usize = 1400;
const UDP_CHUNK: usize = UDP_MAX_PAYLOAD_SIZE - UDP_HEADER_SIZE;

/// The header of a memcached UDP datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpHeader {
    /// Chosen by the client, echoed in every reply datagram.
    pub request_id: u16,
    /// Position of this datagram in its message, from 0.
    pub sequence: u16,
    /// Number of datagrams in the message.
    pub total: u16,
}

impl UdpHeader {
    /// Reads the header at the start of `datagram`, if it is long enough.
    pub fn parse(datagram: &[u8]) -> Option<UdpHeader> {
        let h = datagram.get(..UDP_HEADER_SIZE)?;
        Some(UdpHeader {
            request_id: u16::from_be_bytes([h[0], h[1]]),
            sequence: u16::from_be_bytes([h[2], h[3]]),
            total: u16::from_be_bytes([h[4], h[5]]),
        })
    }

    /// The 8 header bytes (reserved bytes zero).
    pub fn to_bytes(self) -> [u8; UDP_HEADER_SIZE] {
        let [r0, r1] = self.request_id.to_be_bytes();
        let [s0, s1] = self.sequence.to_be_bytes();
        let [t0, t1] = self.total.to_be_bytes();
        [r0, r1, s0, s1, t0, t1, 0, 0]
    }
}

/// A request datagram memcached would serve: its request id and the request text after the header.
/// `None` when memcached drops it silently (too short, or not datagram 1 of 1).
pub fn parse_request(datagram: &[u8]) -> Option<(u16, &[u8])> {
    let header = UdpHeader::parse(datagram)?;
    if datagram.len() <= UDP_HEADER_SIZE || header.total != 1 {
        return None;
    }
    Some((header.request_id, &datagram[UDP_HEADER_SIZE..]))
}

/// The datagrams of one response unit: each item is the header and the payload slice to send after it.
pub fn reply_datagrams(
    request_id: u16,
    unit: &[u8],
) -> impl Iterator<Item = ([u8; UDP_HEADER_SIZE], &[u8])> {
    let count = unit.len().div_ceil(UDP_CHUNK).max(1);
    // memcached keeps the count in 16 bits; a unit is bounded by the item size, far below 65535 datagrams.
    let total = if unit.is_empty() { 0 } else { count as u16 };
    (0..count).map(move |i| {
        let payload = &unit[(i * UDP_CHUNK).min(unit.len())..((i + 1) * UDP_CHUNK).min(unit.len())];
        (
            UdpHeader {
                request_id,
                sequence: i as u16,
                total,
            }
            .to_bytes(),
            payload,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_single_datagram_requests() {
        assert_eq!(
            parse_request(b"\x12\x34\x00\x07\x00\x01\x00\x09get s\r\n"),
            Some((0x1234, &b"get s\r\n"[..]))
        );
        assert_eq!(
            parse_request(b"\x12\x34\x00\x00\x00\x02\x00\x00get s\r\n"),
            None
        );
        assert_eq!(
            parse_request(b"\x12\x34\x00\x00\x00\x00\x00\x00get s\r\n"),
            None
        );
        assert_eq!(parse_request(b"\x12\x34\x00\x00\x00\x01\x00\x00"), None);
        assert_eq!(parse_request(b"\x12\x34"), None);
    }

    #[test]
    fn splits_like_memcached() {
        // memcached 1.6.18 sent a 3020-byte unit as 1392 + 1392 + 236 payload bytes, seq 0..2 of 3.
        let unit = vec![b'y'; 3020];
        let grams: Vec<_> = reply_datagrams(0x1234, &unit).collect();
        assert_eq!(grams.len(), 3);
        assert_eq!(grams[0].0, [0x12, 0x34, 0, 0, 0, 3, 0, 0]);
        assert_eq!(grams[2].0, [0x12, 0x34, 0, 2, 0, 3, 0, 0]);
        assert_eq!(
            grams.iter().map(|g| g.1.len()).collect::<Vec<_>>(),
            [1392, 1392, 236]
        );
        let empty: Vec<_> = reply_datagrams(1, b"").collect();
        assert_eq!(empty, [([0, 1, 0, 0, 0, 0, 0, 0], &b""[..])]);
        let exact: Vec<_> = reply_datagrams(1, &unit[..1392]).collect();
        assert_eq!(exact.len(), 1);
    }
}
