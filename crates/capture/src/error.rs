//! The capture crate's error type: one line each, naming the file and, mid-stream, the byte offset.

use std::io;

/// Why a capture could not be opened or read on.
///
/// Offsets count bytes of the (decompressed) capture stream, from its start, and point at the
/// start of the record or block that failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be opened (missing, no permission, ...).
    #[error("{name}: cannot open: {source}")]
    Open { name: String, source: io::Error },
    /// The file (or the decompressed stream) has no bytes at all.
    #[error("{name}: empty file")]
    Empty { name: String },
    /// The first bytes are neither a pcap nor a pcapng magic number (`detail` says what they
    /// look like when that is known, e.g. a pcapng header with a bad byte-order magic).
    #[error("{name}: not a pcap or pcapng capture (starts with {magic}{detail})")]
    NotCapture {
        name: String,
        magic: String,
        detail: String,
    },
    /// The decompressed stream is itself gzip: the file was compressed twice.
    #[error(
        "{name}: gzip inside gzip: the file was compressed twice; decompress it once (gunzip) and read the result"
    )]
    GzipInGzip { name: String },
    /// The same input can be read only once: standard input named more than once.
    #[error("standard input (-) is named {times} times; it can be read only once")]
    StdinRepeated { times: usize },
    /// The gzip stream ended and what follows it in the file is not another gzip member.
    #[error(
        "{name}: the gzip stream ends at byte {file_offset} of the file and what follows is not gzip (not read); \
         the capture inside ends at byte {offset}"
    )]
    GarbageAfterGzip {
        name: String,
        /// Offset in the decompressed stream where reading stopped.
        offset: u64,
        /// Offset in the file of the first byte that is not gzip.
        file_offset: u64,
    },
    /// The stream ends in the middle of a header, record or block.
    #[error("{name}: capture cut short at byte {offset}: {what}")]
    Truncated {
        name: String,
        offset: u64,
        what: String,
    },
    /// A header, record or block is impossible (bad length, bad magic, bad version).
    #[error("{name}: corrupt capture at byte {offset}: {what}")]
    Corrupt {
        name: String,
        offset: u64,
        what: String,
    },
    /// Reading (or decompressing) failed.
    #[error("{name}: read error at byte {offset}: {source}")]
    Io {
        name: String,
        offset: u64,
        source: io::Error,
    },
}

impl CaptureError {
    /// Stream offset the error refers to, if it happened mid-stream.
    pub fn offset(&self) -> Option<u64> {
        match self {
            CaptureError::Truncated { offset, .. }
            | CaptureError::Corrupt { offset, .. }
            | CaptureError::GarbageAfterGzip { offset, .. }
            | CaptureError::Io { offset, .. } => Some(*offset),
            _ => None,
        }
    }

    /// Whether frames read before this error are good and worth reporting (mid-stream errors).
    pub fn is_mid_stream(&self) -> bool {
        self.offset().is_some()
    }
}
