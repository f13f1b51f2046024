//! The byte cursor under both readers.

use crate::{MessageType, ThriftError};

#[derive(Debug, Clone)]
pub(crate) struct Input<'a> {
    bytes: &'a [u8],
    pub(crate) position: usize,
}

impl<'a> Input<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, position: 0 }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    pub(crate) fn byte(&mut self) -> Result<u8, ThriftError> {
        let [byte] = self.array::<1>()?;
        Ok(byte)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], ThriftError> {
        let array =
            self.bytes[self.position..]
                .first_chunk::<N>()
                .ok_or(ThriftError::Truncated {
                    position: self.position,
                })?;
        self.position += N;
        Ok(*array)
    }

    /// The next `len` bytes, where `len` was read at `position` (for the error).
    pub(crate) fn slice(&mut self, len: usize, position: usize) -> Result<&'a [u8], ThriftError> {
        let len = self.count(len as u64, 1, position)?;
        let slice = &self.bytes[self.position..self.position + len];
        self.position += len;
        Ok(slice)
    }

    /// `count`, read at `position`, as a length, if the bytes left can hold that many values of at least
    /// `min_bytes` each: the check that keeps a hostile size from sizing an allocation or a loop.
    pub(crate) fn count(
        &self,
        count: u64,
        min_bytes: u64,
        position: usize,
    ) -> Result<usize, ThriftError> {
        let remaining = self.remaining();
        if count.saturating_mul(min_bytes) > remaining as u64 {
            return Err(ThriftError::SizeOverRemaining {
                size: count,
                remaining,
                position,
            });
        }
        // At most the bytes left, so it fits.
        Ok(count as usize)
    }
}

/// The message type with wire code `code`, read at `position`.
pub(crate) fn message_type(code: u8, position: usize) -> Result<MessageType, ThriftError> {
    MessageType::try_from(code).map_err(|code| ThriftError::InvalidMessageType { code, position })
}
