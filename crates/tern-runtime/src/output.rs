//! Reply bytes on their way to a socket: what a handler writes ([`Output`]: copied bytes, plus shared
//! references to bytes owned elsewhere, such as a cache item's value, sent without copying), and what a
//! connection still owes its peer ([`Unsent`]).
//!
//! Why references: a reply that copies a large value costs the copy on the I/O thread, and, when the peer
//! does not read, the copy's memory for as long as the connection lives. memcached's replies hold references
//! to items for the same reason; here a reference is a [`Bytes`] whose owner keeps the storage alive.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};
use std::ops::{Deref, DerefMut};

use bytes::{Buf, Bytes};

/// Most buffers one `writev` is given (Linux allows 1024; past a few dozen the gain is nil).
const MAX_IOVECS: usize = 64;

/// A handler's reply bytes: a growable buffer (it derefs to `Vec<u8>`, so reply writers append to it as to
/// any vector) with shared byte ranges spliced in at positions of that buffer.
///
/// Positions are positions in the copied buffer: [`Output::truncate`] to a length taken before a shared range
/// was pushed drops that range. Shrink the buffer only through [`Output::truncate`] and [`Output::clear`].
#[derive(Default)]
pub struct Output {
    buf: Vec<u8>,
    /// Each shared range goes out before `buf[pos..]`; positions never decrease.
    shared: Vec<(usize, Bytes)>,
    shared_len: usize,
}

impl Deref for Output {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.buf
    }
}

impl DerefMut for Output {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
}

/// One piece of an [`Output`] in sending order.
#[derive(Clone, Copy)]
enum Piece<'a> {
    Copied(&'a [u8]),
    Shared(&'a Bytes),
}

impl<'a> Piece<'a> {
    fn as_slice(self) -> &'a [u8] {
        match self {
            Piece::Copied(b) => b,
            Piece::Shared(b) => b.as_ref(),
        }
    }
}

impl Output {
    pub fn with_capacity(capacity: usize) -> Output {
        Output {
            buf: Vec::with_capacity(capacity),
            ..Output::default()
        }
    }

    /// Sends `shared` without copying it, then `suffix` (copied). The suffix must not be empty (a reply
    /// always ends in something of its own, such as `\r\n`), so that every length taken after this call
    /// lies past the shared range and every length taken before it does not.
    pub fn push_shared(&mut self, shared: Bytes, suffix: &[u8]) {
        assert!(!suffix.is_empty(), "a shared range needs a copied suffix");
        if !shared.is_empty() {
            self.shared_len += shared.len();
            self.shared.push((self.buf.len(), shared));
        }
        self.buf.extend_from_slice(suffix);
    }

    /// Every byte to send: the copied ones and the shared ranges.
    pub fn total_len(&self) -> usize {
        self.buf.len() + self.shared_len
    }

    /// Keeps what was written before the buffer had length `len` (a length read earlier with `len()`).
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
        while self.shared.last().is_some_and(|(pos, _)| *pos >= len) {
            let (_, b) = self.shared.pop().expect("checked");
            self.shared_len -= b.len();
        }
    }

    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Every byte to send, copied into one vector (for a reply that must be contiguous, such as a datagram).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut all = Vec::with_capacity(self.total_len());
        for piece in self.pieces(0) {
            all.extend_from_slice(piece.as_slice());
        }
        all
    }

    /// The pieces from buffer position `from` on, in sending order (a shared range at `from` included).
    fn pieces(&self, from: usize) -> impl Iterator<Item = Piece<'_>> {
        let first = self.shared.partition_point(|(pos, _)| *pos < from);
        let mut at = from;
        let mut rest = self.shared[first..].iter();
        let mut next = rest.next();
        std::iter::from_fn(move || loop {
            match next {
                Some((pos, b)) if *pos <= at => {
                    next = rest.next();
                    return Some(Piece::Shared(b));
                }
                _ => {
                    let end = next.map_or(self.buf.len(), |(pos, _)| *pos);
                    if at >= self.buf.len() && next.is_none() {
                        return None;
                    }
                    let piece = &self.buf[at..end];
                    at = end;
                    if !piece.is_empty() {
                        return Some(Piece::Copied(piece));
                    }
                }
            }
        })
    }

    /// Writes as much as `stream` takes without blocking, but at most `limit` bytes; returns the bytes
    /// written.
    pub(crate) fn write_to(&self, stream: &mut impl Write, limit: usize) -> io::Result<usize> {
        if self.shared.is_empty() {
            return write_some(stream, &self.buf[..self.buf.len().min(limit)]);
        }
        let mut written = 0;
        while written < limit {
            let mut skip = written;
            let mut room = limit - written;
            let mut iov = Vec::with_capacity(MAX_IOVECS);
            for piece in self.pieces(0) {
                let bytes = piece.as_slice();
                if skip >= bytes.len() {
                    skip -= bytes.len();
                    continue;
                }
                let take = &bytes[skip..(bytes.len() - skip).min(room) + skip];
                iov.push(IoSlice::new(take));
                room -= take.len();
                skip = 0;
                if iov.len() == MAX_IOVECS || room == 0 {
                    break;
                }
            }
            if iov.is_empty() {
                break;
            }
            match stream.write_vectored(&iov) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    /// Moves everything from buffer position `from` on into `unsent` (shared ranges by reference), leaving
    /// the output truncated to `from`.
    pub(crate) fn split_into(&mut self, from: usize, unsent: &mut Unsent) {
        for piece in self.pieces(from) {
            match piece {
                Piece::Copied(b) => unsent.push_copy(b),
                Piece::Shared(b) => unsent.push(b.clone()),
            }
        }
        self.truncate(from);
    }

    /// Appends to `unsent` everything after the first `written` bytes, and empties the output.
    pub(crate) fn drain_after(&mut self, mut written: usize, unsent: &mut Unsent) {
        for piece in self.pieces(0) {
            let bytes = piece.as_slice();
            if written >= bytes.len() {
                written -= bytes.len();
                continue;
            }
            match piece {
                Piece::Copied(b) => unsent.push_copy(&b[written..]),
                Piece::Shared(b) => unsent.push(b.slice(written..)),
            }
            written = 0;
        }
        self.clear();
    }
}

/// Bytes a connection still owes its peer, in order, as shared chunks (a partially written chunk is
/// advanced in place).
#[derive(Default)]
pub(crate) struct Unsent {
    chunks: VecDeque<Bytes>,
    len: usize,
}

impl Unsent {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.len += chunk.len();
            self.chunks.push_back(chunk);
        }
    }

    pub(crate) fn push_copy(&mut self, bytes: &[u8]) {
        self.push(Bytes::copy_from_slice(bytes));
    }

    pub(crate) fn append(&mut self, other: &mut Unsent) {
        self.len += std::mem::take(&mut other.len);
        self.chunks.append(&mut other.chunks);
    }

    /// Writes as much as `stream` takes without blocking, but at most `limit` bytes; returns the bytes
    /// written.
    pub(crate) fn write_to(&mut self, stream: &mut impl Write, limit: usize) -> io::Result<usize> {
        let mut written = 0;
        while !self.chunks.is_empty() && written < limit {
            let mut room = limit - written;
            let mut iov = Vec::with_capacity(MAX_IOVECS);
            for chunk in self.chunks.iter().take(MAX_IOVECS) {
                let take = &chunk[..chunk.len().min(room)];
                iov.push(IoSlice::new(take));
                room -= take.len();
                if room == 0 {
                    break;
                }
            }
            let n = match stream.write_vectored(&iov) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            written += n;
            self.consume(n);
        }
        Ok(written)
    }

    fn consume(&mut self, mut n: usize) {
        self.len -= n;
        while n > 0 {
            let front = self
                .chunks
                .front_mut()
                .expect("wrote at most what was queued");
            if n >= front.len() {
                n -= front.len();
                self.chunks.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
    }
}

impl From<Vec<u8>> for Unsent {
    fn from(bytes: Vec<u8>) -> Unsent {
        let mut unsent = Unsent::default();
        unsent.push(Bytes::from(bytes));
        unsent
    }
}

impl From<&'static [u8]> for Unsent {
    fn from(bytes: &'static [u8]) -> Unsent {
        let mut unsent = Unsent::default();
        unsent.push(Bytes::from_static(bytes));
        unsent
    }
}

/// Writes as much of `bytes` as the stream takes without blocking.
fn write_some(stream: &mut impl Write, mut bytes: &[u8]) -> io::Result<usize> {
    let mut total = 0;
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                total += n;
                bytes = &bytes[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A socket that takes at most `room` bytes per call and `limit` in all, then would block.
    struct Throttled {
        got: Vec<u8>,
        room: usize,
        limit: usize,
    }

    impl Write for Throttled {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.room).min(self.limit - self.got.len());
            if n == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn sample() -> (Output, Vec<u8>) {
        let mut out = Output::default();
        out.extend_from_slice(b"VALUE a 0 5\r\n");
        out.push_shared(Bytes::from_static(b"hello"), b"\r\n");
        out.push_shared(Bytes::from_static(b"world"), b"\r\nEND\r\n");
        (out, b"VALUE a 0 5\r\nhello\r\nworld\r\nEND\r\n".to_vec())
    }

    #[test]
    fn writes_every_piece_in_order_whatever_the_socket_takes() {
        for room in 1..8 {
            for limit in 0..40 {
                for cap in [1, 4, 13, 14, 20, usize::MAX] {
                    let (mut out, want) = sample();
                    let mut sock = Throttled {
                        got: Vec::new(),
                        room,
                        limit,
                    };
                    let n = out.write_to(&mut sock, cap).unwrap();
                    assert_eq!(n, sock.got.len());
                    assert!(n <= cap, "wrote {n} bytes past the cap of {cap}");
                    let mut unsent = Unsent::default();
                    out.drain_after(n, &mut unsent);
                    assert_eq!(unsent.len(), want.len() - n);
                    sock.limit = usize::MAX;
                    while !unsent.is_empty() {
                        let before = unsent.len();
                        let n = unsent.write_to(&mut sock, cap).unwrap();
                        assert!(n > 0 && n <= cap && unsent.len() == before - n);
                    }
                    assert_eq!(sock.got, want, "room {room} limit {limit} cap {cap}");
                }
            }
        }
    }

    #[test]
    fn truncate_drops_shared_ranges_pushed_after_the_mark() {
        let (mut out, _) = sample();
        let mark = out.len();
        out.push_shared(Bytes::from_static(b"later"), b"\r\n");
        assert_eq!(out.total_len(), mark + 10 + 7);
        out.truncate(mark);
        assert_eq!(out.total_len(), mark + 10);
        out.truncate(13);
        assert_eq!(out.total_len(), 13);
        let mut unsent = Unsent::default();
        out.split_into(0, &mut unsent);
        assert_eq!(unsent.len(), 13);
        assert_eq!(out.total_len(), 0);
    }

    /// One way a handler and the runtime change an output.
    #[derive(Debug, Clone)]
    enum Op {
        Copy(Vec<u8>),
        Share(Vec<u8>, Vec<u8>),
        /// Truncate to a length taken `n` operations ago (0: now).
        TruncateBack(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..40);
        prop_oneof![
            bytes().prop_map(Op::Copy),
            (bytes(), proptest::collection::vec(any::<u8>(), 1..4))
                .prop_map(|(shared, suffix)| Op::Share(shared, suffix)),
            (0usize..6).prop_map(Op::TruncateBack),
        ]
    }

    proptest! {
        /// Whatever a handler writes, shares and truncates, and however little the socket takes at a time,
        /// the peer gets exactly the bytes of a plain vector that saw the same operations.
        #[test]
        fn sends_what_a_plain_vector_would_hold(
            ops in proptest::collection::vec(op(), 0..30),
            room in 1usize..50,
            first in 0usize..200,
            cap in 1usize..300,
            split_at in 0usize..100,
        ) {
            let mut out = Output::default();
            let mut model: Vec<u8> = Vec::new();
            // (output length, model length) after each operation.
            let mut marks = vec![(0usize, 0usize)];
            for op in ops {
                match op {
                    Op::Copy(b) => {
                        out.extend_from_slice(&b);
                        model.extend_from_slice(&b);
                    }
                    Op::Share(b, suffix) => {
                        out.push_shared(Bytes::from(b.clone()), &suffix);
                        model.extend_from_slice(&b);
                        model.extend_from_slice(&suffix);
                    }
                    Op::TruncateBack(n) => {
                        // Lengths taken after the one truncated to are gone with what they measured.
                        marks.truncate(marks.len().saturating_sub(n).max(1));
                        let (len, model_len) = *marks.last().unwrap();
                        out.truncate(len);
                        model.truncate(model_len);
                    }
                }
                marks.push((out.len(), model.len()));
                prop_assert_eq!(out.total_len(), model.len());
            }
            // Part goes to a slot (the ordered path), the rest is written as the socket allows.
            let split = marks[split_at % marks.len()];
            let mut tail = Unsent::default();
            out.split_into(split.0, &mut tail);
            prop_assert_eq!(tail.len(), model.len() - split.1);
            let mut sock = Throttled { got: Vec::new(), room, limit: first };
            let n = out.write_to(&mut sock, cap).unwrap();
            prop_assert!(n <= cap);
            let mut unsent = Unsent::default();
            out.drain_after(n, &mut unsent);
            unsent.append(&mut tail);
            sock.limit = usize::MAX;
            while !unsent.is_empty() {
                prop_assert!(unsent.write_to(&mut sock, cap).unwrap() <= cap);
            }
            prop_assert_eq!(sock.got, model);
        }
    }

    #[test]
    fn split_keeps_the_tail_with_its_shared_ranges() {
        let (mut out, want) = sample();
        let mut unsent = Unsent::default();
        out.split_into(13, &mut unsent);
        assert_eq!(&out[..], &want[..13]);
        let mut sock = Throttled {
            got: Vec::new(),
            room: 3,
            limit: usize::MAX,
        };
        unsent.write_to(&mut sock, usize::MAX).unwrap();
        assert_eq!(sock.got, &want[13..]);
    }
}
