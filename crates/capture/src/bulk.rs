//! Bulk reading: frames handed out together with the buffer they were read into, so that a
//! reader thread can share whole read buffers with other threads without copying a frame.
//!
//! [`Reader::next_bulk`] walks records exactly as [`Reader::next_frame`] does (same checks,
//! same errors, same counters), but where `next_frame` would move the unread tail of its
//! buffer to the front to read more, bulk mode hands the whole buffer out (with the positions
//! of the frames in it) and goes on in a spare buffer given by the caller, into which only the
//! incomplete record at the tail is copied. Reading a plain file this way costs one read
//! per buffer and a look at each record header; gzip and standard input go the same way
//! (decompression stays in the reading thread).

use crate::{CaptureError, Reader, State};

/// Where one frame is in a bulk buffer, and what its record said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameAt {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The pcap LINKTYPE_* number of the interface it was captured on.
    pub linktype: u32,
    /// Length of the frame on the wire.
    pub orig_len: u32,
    /// The captured bytes are `buffer[start..end]`.
    pub start: usize,
    pub end: usize,
}

/// A reader's bulk-mode state.
#[derive(Default)]
pub(crate) struct BulkState {
    /// The buffer to read into next (given by the caller).
    spare: Option<Vec<u8>>,
    /// The buffer just handed over by a refill, holding the frames found so far.
    spent: Option<Vec<u8>>,
    /// A frame found in the current buffer after the previous one was handed over: the first
    /// of the next call.
    carry: Option<FrameAt>,
    /// An error after frames that were handed out first: returned by the next call.
    pending: Option<CaptureError>,
}

impl Reader {
    /// The next run of frames: `Ok(Some(buffer))` with `frames` (cleared first) holding where
    /// each frame is in `buffer`; `Ok(None)` at a clean end. `spare` is the buffer to read into
    /// next: its length is how much is read at a time (an emptied buffer handed out earlier
    /// can come back here; its contents do not matter and it is not cleared, only grown when a
    /// record needs more room). Errors are
    /// [`Reader::next_frame`]'s, returned after the frames before them, once; then `Ok(None)`.
    /// Do not mix with `next_frame` on one reader.
    pub fn next_bulk(
        &mut self,
        spare: Vec<u8>,
        frames: &mut Vec<FrameAt>,
    ) -> Result<Option<Vec<u8>>, CaptureError> {
        frames.clear();
        let b = self.bulk.get_or_insert_with(Box::default);
        if let Some(e) = b.pending.take() {
            return Err(e);
        }
        b.spare = Some(spare);
        if let Some(f) = b.carry.take() {
            frames.push(f);
        }
        loop {
            let r = match self.state {
                State::Pcap(h) => self.next_pcap(h),
                State::PcapNg { .. } => self.next_pcapng(),
                State::Done => Ok(None),
            };
            let spent = self.bulk.as_mut().and_then(|b| b.spent.take());
            match r {
                Ok(Some((ts_ns, linktype, start, end, orig_len))) => {
                    self.count(end - start, orig_len);
                    let f = FrameAt {
                        ts_ns,
                        linktype,
                        orig_len,
                        start,
                        end,
                    };
                    let Some(old) = spent else {
                        frames.push(f);
                        continue;
                    };
                    if frames.is_empty() {
                        // Nothing in the old buffer: it is the next spare.
                        self.set_spare(old);
                        frames.push(f);
                        continue;
                    }
                    if let Some(b) = self.bulk.as_mut() {
                        b.carry = Some(f);
                    }
                    return Ok(Some(old));
                }
                Ok(None) => {
                    self.state = State::Done;
                    return Ok(self.last(spent, frames));
                }
                Err(e) => {
                    self.state = State::Done;
                    if frames.is_empty() {
                        return Err(e);
                    }
                    if let Some(b) = self.bulk.as_mut() {
                        b.pending = Some(e);
                    }
                    return Ok(self.last(spent, frames));
                }
            }
        }
    }

    /// The buffer holding `frames` at the end of the input (or before an error).
    fn last(&mut self, spent: Option<Vec<u8>>, frames: &[FrameAt]) -> Option<Vec<u8>> {
        if frames.is_empty() {
            return None;
        }
        Some(spent.unwrap_or_else(|| std::mem::take(&mut self.buf)))
    }

    fn set_spare(&mut self, v: Vec<u8>) {
        if let Some(b) = self.bulk.as_mut() {
            b.spare = Some(v);
        }
    }

    /// A returned frame in the counters.
    fn count(&mut self, len: usize, orig_len: u32) {
        self.stats.frames += 1;
        self.stats.bytes += len as u64;
        if (len as u64) < u64::from(orig_len) {
            self.stats.truncated_frames += 1;
        }
    }

    /// In bulk mode, where a refill needing `n` bytes would move the unread tail to the front:
    /// hands the buffer over instead and goes on in the spare one (grown to at least `n`
    /// bytes; its length is how much is read at a time), with the unread tail copied to its
    /// front. False when not in bulk mode, or when
    /// a buffer was already handed over during this record (the current one holds no frame
    /// yet, so it can move its tail as usual).
    pub(crate) fn hand_over(&mut self, n: usize) -> bool {
        let Some(b) = self.bulk.as_mut() else {
            return false;
        };
        if b.spent.is_some() {
            return false;
        }
        let mut next = b.spare.take().unwrap_or_default();
        let tail = self.end - self.start;
        let want = n.max(next.len());
        if next.len() < want {
            next.resize(want, 0);
        }
        if let (Some(dst), Some(src)) = (next.get_mut(..tail), self.buf.get(self.start..self.end)) {
            dst.copy_from_slice(src);
        }
        b.spent = Some(std::mem::replace(&mut self.buf, next));
        self.base += self.start as u64;
        self.start = 0;
        self.end = tail;
        true
    }
}
