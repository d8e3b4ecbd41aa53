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
    /// The first bytes are neither a pcap nor a pcapng magic number.
    #[error("{name}: not a pcap or pcapng capture (starts with {magic})")]
    NotCapture { name: String, magic: String },
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
            | CaptureError::Io { offset, .. } => Some(*offset),
            _ => None,
        }
    }

    /// Whether frames read before this error are good and worth reporting (mid-stream errors).
    pub fn is_mid_stream(&self) -> bool {
        self.offset().is_some()
    }
}
