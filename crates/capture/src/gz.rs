//! Gzip input: one member after another (like `zcat`), and a clear error when what follows a
//! member is not gzip, naming the file offset where it starts.

use std::io::{self, BufRead, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::bufread::GzDecoder;

/// The io error payload for bytes after a gzip member that are not gzip.
#[derive(Debug)]
struct NotGzip {
    file_offset: u64,
}

impl std::fmt::Display for NotGzip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bytes at {} are not gzip", self.file_offset)
    }
}

impl std::error::Error for NotGzip {}

/// The file offset of the first byte after the gzip stream that is not gzip, when `e` says so.
pub(crate) fn garbage_at(e: &io::Error) -> Option<u64> {
    e.get_ref()
        .and_then(|x| x.downcast_ref::<NotGzip>())
        .map(|g| g.file_offset)
}

/// Decompresses gzip members one after another.
pub(crate) struct Members<R: Read> {
    dec: Option<GzDecoder<BufReader<R>>>,
    /// Bytes pulled from the file so far (by the buffer under the decoder).
    pulled: Arc<AtomicU64>,
}

impl<R: Read> Members<R> {
    /// `pulled` counts the bytes read from `r`'s underlying file.
    pub(crate) fn new(r: R, pulled: Arc<AtomicU64>) -> Self {
        Members {
            dec: Some(GzDecoder::new(BufReader::with_capacity(64 << 10, r))),
            pulled,
        }
    }
}

impl<R: Read> Read for Members<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(dec) = self.dec.as_mut() else {
                return Ok(0);
            };
            let n = dec.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            // The end of a member: the end of the file, another member, or something else.
            let Some(dec) = self.dec.take() else {
                return Ok(0);
            };
            let mut inner = dec.into_inner();
            let head = inner.fill_buf()?;
            if head.is_empty() {
                return Ok(0);
            }
            if head.starts_with(&[0x1f, 0x8b]) || head == [0x1f] {
                self.dec = Some(GzDecoder::new(inner));
                continue;
            }
            let file_offset = self
                .pulled
                .load(Ordering::Relaxed)
                .saturating_sub(head.len() as u64);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                NotGzip { file_offset },
            ));
        }
    }
}
