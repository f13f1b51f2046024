//! The error lines of the text protocol, each with memcached's exact text.

/// Every error line the decoder (or a server following memcached) sends, with memcached's exact text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorReply {
    /// `ERROR`: unknown command or wrong number of tokens.
    Error,
    /// `CLIENT_ERROR bad command line format`
    BadCommandLineFormat,
    /// `CLIENT_ERROR bad data chunk`: the data block did not end in `\r\n`.
    BadDataChunk,
    /// `SERVER_ERROR object too large for cache`
    ObjectTooLarge,
    /// `SERVER_ERROR out of memory storing object`
    OutOfMemoryStoring,
    /// `SERVER_ERROR out of memory writing get response`: memcached's answer to a get whose reply it cannot
    /// hold.
    OutOfMemoryWritingGet,
    /// `CLIENT_ERROR invalid exptime argument`
    InvalidExptime,
    /// `CLIENT_ERROR invalid numeric delta argument`
    InvalidDelta,
    /// `CLIENT_ERROR cannot increment or decrement non-numeric value`
    NonNumeric,
    /// `CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]`
    DeleteUsage,
    /// `CLIENT_ERROR bad command line` (`stats cachedump` with too few arguments)
    BadCommandLine,
    /// `CLIENT_ERROR usage: stats detail on|off|dump`
    StatsDetailUsage,
    /// `CLIENT_ERROR Illegal slab id` (`stats cachedump` of a class past memcached's 63)
    IllegalSlabId,
    /// `CLIENT_ERROR sleep must be one second or less`
    CrawlerSleepTooLong,
    /// `ERROR: shutdown not enabled`
    ShutdownNotEnabled,
    /// `CLIENT_ERROR invalid shutdown mode`
    InvalidShutdownMode,
    /// `CLIENT_ERROR duplicate flag`
    DuplicateFlag,
    /// `CLIENT_ERROR invalid flag`
    InvalidFlag,
    /// `CLIENT_ERROR invalid or duplicate flag` (`md`, `ma`)
    InvalidOrDuplicateFlag,
    /// `CLIENT_ERROR error decoding key`
    KeyDecode,
    /// `CLIENT_ERROR bad token in command line format`
    BadToken,
    /// `CLIENT_ERROR incorrect length for M token`
    ModeTokenLength,
    /// `CLIENT_ERROR invalid numeric initial value`
    InvalidInitial,
    /// `CLIENT_ERROR invalid numeric delta value`
    InvalidDeltaValue,
    /// `CLIENT_ERROR options flags are too long` (`mg`)
    MetaGetFlagsTooLong,
    /// `CLIENT_ERROR options flags too long` (`ms`, `md`, `ma`)
    MetaFlagsTooLong,
    /// `CLIENT_ERROR opaque token too long`
    OpaqueTooLong,
    /// `CLIENT_ERROR invalid mode for ms M token`
    InvalidSetMode,
    /// `CLIENT_ERROR invalid mode for ma M token`
    InvalidArithmeticMode,
}

impl ErrorReply {
    /// The reply line, `\r\n` included.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            ErrorReply::Error => b"ERROR\r\n",
            ErrorReply::BadCommandLineFormat => b"CLIENT_ERROR bad command line format\r\n",
            ErrorReply::BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            ErrorReply::ObjectTooLarge => b"SERVER_ERROR object too large for cache\r\n",
            ErrorReply::OutOfMemoryStoring => b"SERVER_ERROR out of memory storing object\r\n",
            ErrorReply::OutOfMemoryWritingGet => {
                b"SERVER_ERROR out of memory writing get response\r\n"
            }
            ErrorReply::InvalidExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            ErrorReply::InvalidDelta => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            ErrorReply::NonNumeric => {
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
            }
            ErrorReply::DeleteUsage => {
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
            }
            ErrorReply::BadCommandLine => b"CLIENT_ERROR bad command line\r\n",
            ErrorReply::StatsDetailUsage => b"CLIENT_ERROR usage: stats detail on|off|dump\r\n",
            ErrorReply::IllegalSlabId => b"CLIENT_ERROR Illegal slab id\r\n",
            ErrorReply::CrawlerSleepTooLong => b"CLIENT_ERROR sleep must be one second or less\r\n",
            ErrorReply::ShutdownNotEnabled => b"ERROR: shutdown not enabled\r\n",
            ErrorReply::InvalidShutdownMode => b"CLIENT_ERROR invalid shutdown mode\r\n",
            ErrorReply::DuplicateFlag => b"CLIENT_ERROR duplicate flag\r\n",
            ErrorReply::InvalidFlag => b"CLIENT_ERROR invalid flag\r\n",
            ErrorReply::InvalidOrDuplicateFlag => b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ErrorReply::KeyDecode => b"CLIENT_ERROR error decoding key\r\n",
            ErrorReply::BadToken => b"CLIENT_ERROR bad token in command line format\r\n",
            ErrorReply::ModeTokenLength => b"CLIENT_ERROR incorrect length for M token\r\n",
            ErrorReply::InvalidInitial => b"CLIENT_ERROR invalid numeric initial value\r\n",
            ErrorReply::InvalidDeltaValue => b"CLIENT_ERROR invalid numeric delta value\r\n",
            ErrorReply::MetaGetFlagsTooLong => b"CLIENT_ERROR options flags are too long\r\n",
            ErrorReply::MetaFlagsTooLong => b"CLIENT_ERROR options flags too long\r\n",
            ErrorReply::OpaqueTooLong => b"CLIENT_ERROR opaque token too long\r\n",
            ErrorReply::InvalidSetMode => b"CLIENT_ERROR invalid mode for ms M token\r\n",
            ErrorReply::InvalidArithmeticMode => b"CLIENT_ERROR invalid mode for ma M token\r\n",
        }
    }
}
