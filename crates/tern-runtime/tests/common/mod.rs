//! Shared by the runtime's integration tests that serve a line protocol of their own.

use tern_runtime::Decode;

/// One `\n`-terminated line (without its `\n`) as a frame, or a wait for the rest of it.
pub fn decode_line(input: &[u8]) -> Decode<&[u8]> {
    match input.iter().position(|&b| b == b'\n') {
        Some(eol) => Decode::Frame {
            request: &input[..eol],
            consumed: eol + 1,
        },
        None => Decode::Incomplete { needed: None },
    }
}
