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

/// The `Service` items every line-protocol test service shares: a request is one line ([`decode_line`]) and
/// a loop keeps no state. Used inside `impl Service for ... { line_service!(); ... }`.
macro_rules! line_service {
    () => {
        type Request<'a> = &'a [u8];
        type Loop = ();

        fn init_loop(self: &std::sync::Arc<Self>, _info: &tern_runtime::LoopInfo) {}

        fn decode<'a>(&self, input: &'a [u8]) -> tern_runtime::Decode<&'a [u8]> {
            common::decode_line(input)
        }
    };
}
