//! Capture file sources: pcap and pcapng files (plain or gzip, or standard input) yielding frames.
//!
//! [`Reader`] streams through a capture with a bounded buffer (1 MiB, grown only for a larger
//! record, up to 16 MiB), so memory stays flat whatever the file size. Frames borrow the buffer.
//! A damaged capture gives one [`CaptureError::Truncated`] or [`CaptureError::Corrupt`] with the
//! byte offset in the (decompressed) stream, then a clean end; frames read before stay valid.
//! [`Input`] checks a run's inputs before any is read without keeping them open: a regular file
//! is probed (its header read through a 64-byte buffer) and closed, and opened again when its
//! turn comes, so memory and open files do not grow with the number of files.
//!
//! The record loops are hand-written rather than built on pcap-parser: they are as fast or
//! faster (see `examples/readbench.rs`, which runs both on the same file), and they give exact
//! error offsets and frames that borrow the reader without a second parse.

#![forbid(unsafe_code)]

mod bulk;
mod error;
mod gz;
mod pcap;
mod pcapng;

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use bulk::FrameAt;
pub use error::CaptureError;

use pcapng::Iface;

/// Read buffer size: large reads keep syscalls and decompressor calls rare.
const BUF_SIZE: usize = 1 << 20;

/// Buffer of [`Reader::probe`]: enough for the file header, nothing more.
const PROBE_BUF_SIZE: usize = 64;

/// One captured frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The pcap LINKTYPE_* number of the interface it was captured on.
    pub linktype: u32,
    /// The captured bytes (possibly fewer than `orig_len`: snaplen).
    pub data: &'a [u8],
    /// Length of the frame on the wire.
    pub orig_len: u32,
}

/// Counters of what a [`Reader`] returned and skipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Frames returned.
    pub frames: u64,
    /// Captured bytes of the frames returned.
    pub bytes: u64,
    /// Frames returned with fewer bytes than were on the wire (caplen < orig_len).
    pub truncated_frames: u64,
    /// pcapng packet blocks naming an interface the section never described: skipped.
    pub unknown_interface_frames: u64,
    /// pcapng blocks of other kinds (statistics, name resolution, custom, ...): skipped.
    pub skipped_blocks: u64,
    /// pcapng sections seen.
    pub sections: u64,
}

/// The container format of a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Classic libpcap format (micro- or nanosecond, either byte order).
    Pcap,
    /// pcapng.
    PcapNg,
}

enum State {
    Pcap(pcap::PcapHeader),
    PcapNg {
        big: bool,
        ifaces: Vec<Iface>,
        last_ts: u64,
    },
    /// After an error or the clean end: nothing more.
    Done,
}

/// Counts bytes pulled from the underlying input, for progress reporting.
struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// A streaming reader of pcap / pcapng captures, plain or gzip-compressed.
pub struct Reader {
    name: String,
    src: Box<dyn Read + Send>,
    consumed: Arc<AtomicU64>,
    input_len: Option<u64>,
    gzip: bool,
    format: Format,
    /// The read buffer.
    buf: Vec<u8>,
    /// The size `buf` returns to after a larger record ([`BUF_SIZE`], or less for a probe).
    buf_size: usize,
    /// Unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// Stream offset of `buf[0]`.
    base: u64,
    eof: bool,
    state: State,
    stats: ReaderStats,
    /// Set by [`Reader::next_bulk`] (`bulk.rs`).
    bulk: Option<Box<bulk::BulkState>>,
}

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("name", &self.name)
            .field("format", &self.format)
            .field("gzip", &self.gzip)
            .field("offset", &self.offset())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// A frame found in the buffer: (ts_ns, linktype, data start, data end, orig_len).
type Located = (u64, u32, usize, usize, u32);

/// What one pcapng block gave.
enum NgStep {
    /// A frame.
    Frame(Located),
    /// Nothing to return yet: read the next block.
    More,
    /// No more frames.
    End,
}

enum Fill {
    Ready,
    /// The stream ended with this many bytes (fewer than asked) left.
    Eof(usize),
}

impl Reader {
    /// Opens a file, or standard input for "-". Detects pcap (both byte orders, micro- and
    /// nanosecond magic), pcapng, and gzip-compressed versions of both.
    pub fn open(path: &Path) -> Result<Reader, CaptureError> {
        Self::open_with(path, BUF_SIZE)
    }

    /// Checks that `path` opens as a capture, as [`Reader::open`] would, reading no more than its
    /// file header (through a 64-byte buffer), and closes it again. Returns the file's size when
    /// it is a regular file. Only for inputs that can be read twice: not for standard input or a
    /// pipe (see [`Input::check`]).
    pub fn probe(path: &Path) -> Result<Option<u64>, CaptureError> {
        Self::open_with(path, PROBE_BUF_SIZE).map(|r| r.input_len)
    }

    fn open_with(path: &Path, buf_size: usize) -> Result<Reader, CaptureError> {
        if path.as_os_str() == "-" {
            return Self::build(Box::new(io::stdin()), "stdin".to_string(), None, buf_size);
        }
        let name = path.display().to_string();
        let file = File::open(path).map_err(|source| CaptureError::Open {
            name: name.clone(),
            source,
        })?;
        let meta = file.metadata().map_err(|source| CaptureError::Open {
            name: name.clone(),
            source,
        })?;
        if meta.is_dir() {
            return Err(CaptureError::Open {
                name,
                source: io::Error::new(io::ErrorKind::IsADirectory, "is a directory"),
            });
        }
        let len = meta.is_file().then_some(meta.len());
        Self::build(Box::new(file), name, len, buf_size)
    }

    /// Reads a capture from any byte stream; `name` is used in errors.
    pub fn from_reader(r: Box<dyn Read + Send>, name: &str) -> Result<Reader, CaptureError> {
        Self::build(r, name.to_string(), None, BUF_SIZE)
    }

    fn build(
        raw: Box<dyn Read + Send>,
        name: String,
        input_len: Option<u64>,
        buf_size: usize,
    ) -> Result<Reader, CaptureError> {
        let consumed = Arc::new(AtomicU64::new(0));
        let mut raw = Counting {
            inner: raw,
            count: Arc::clone(&consumed),
        };
        // Peek two bytes for the gzip magic.
        let mut head = [0u8; 2];
        let mut got = 0;
        while got < 2 {
            match raw.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(CaptureError::Io {
                        name,
                        offset: 0,
                        source,
                    });
                }
            }
        }
        if got == 0 {
            return Err(CaptureError::Empty { name });
        }
        let prefix = io::Cursor::new(head.get(..got).unwrap_or_default().to_vec());
        let gzip = head == [0x1f, 0x8b];
        let src: Box<dyn Read + Send> = if gzip {
            Box::new(gz::Members::new(prefix.chain(raw), Arc::clone(&consumed)))
        } else {
            Box::new(prefix.chain(raw))
        };
        let mut r = Reader {
            name,
            src,
            consumed,
            input_len,
            gzip,
            format: Format::Pcap,
            buf: vec![0; buf_size],
            buf_size,
            start: 0,
            end: 0,
            base: 0,
            eof: false,
            state: State::Done,
            stats: ReaderStats::default(),
            bulk: None,
        };
        r.detect()?;
        Ok(r)
    }

    /// Look at the first bytes of the (decompressed) stream and read the file header.
    fn detect(&mut self) -> Result<(), CaptureError> {
        let avail = match self.fill(24)? {
            Fill::Ready => 24,
            Fill::Eof(n) => n,
        };
        if avail == 0 {
            return Err(CaptureError::Empty {
                name: self.name.clone(),
            });
        }
        let head = self.unread().get(..avail.min(4)).unwrap_or_default();
        if self.gzip && head.starts_with(&[0x1f, 0x8b]) {
            return Err(CaptureError::GzipInGzip {
                name: self.name.clone(),
            });
        }
        let magic4: Option<[u8; 4]> = head.try_into().ok();
        if magic4.is_some_and(pcap::is_magic) {
            if avail < 24 {
                return Err(self.truncated(0, "pcap file header cut short"));
            }
            let h = pcap::parse_header(self.unread()).map_err(|what| self.corrupt(0, what))?;
            self.start += 24;
            self.format = Format::Pcap;
            self.state = State::Pcap(h);
            return Ok(());
        }
        if magic4.is_some_and(|m| u32::from_le_bytes(m) == pcapng::SHB) {
            // The section header block is parsed by the block loop; check its byte-order magic now
            // so that a stray 0a0d0d0a is "not a capture" rather than a corrupt capture.
            if avail < 12 {
                return Err(self.truncated(0, "pcapng section header cut short"));
            }
            let bom = pcap::u32_at(self.unread(), 8, false).unwrap_or(0);
            if bom != pcapng::BYTE_ORDER_MAGIC && bom.swap_bytes() != pcapng::BYTE_ORDER_MAGIC {
                let mut e = self.not_capture();
                if let CaptureError::NotCapture { detail, .. } = &mut e {
                    *detail = format!(
                        ", a pcapng section header, but its byte-order magic is {}, not 1a 2b 3c 4d \
                         or 4d 3c 2b 1a",
                        hex(self.unread().get(8..12).unwrap_or_default())
                    );
                }
                return Err(e);
            }
            self.format = Format::PcapNg;
            self.state = State::PcapNg {
                big: bom != pcapng::BYTE_ORDER_MAGIC,
                ifaces: Vec::new(),
                last_ts: 0,
            };
            return Ok(());
        }
        Err(self.not_capture())
    }

    fn not_capture(&self) -> CaptureError {
        CaptureError::NotCapture {
            name: self.name.clone(),
            magic: hex(self.unread().get(..4).unwrap_or(self.unread())),
            detail: String::new(),
        }
    }

    fn truncated(&self, offset: u64, what: impl Into<String>) -> CaptureError {
        CaptureError::Truncated {
            name: self.name.clone(),
            offset,
            what: what.into(),
        }
    }

    fn corrupt(&self, offset: u64, what: impl Into<String>) -> CaptureError {
        CaptureError::Corrupt {
            name: self.name.clone(),
            offset,
            what: what.into(),
        }
    }

    fn unread(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or_default()
    }

    /// Stream offset of the next unread byte.
    fn offset(&self) -> u64 {
        self.base + self.start as u64
    }

    /// Make at least `n` unread bytes available, reading more as needed.
    #[inline(always)]
    fn fill(&mut self, n: usize) -> Result<Fill, CaptureError> {
        if self.end - self.start >= n {
            Ok(Fill::Ready)
        } else {
            self.refill(n)
        }
    }

    #[cold]
    #[inline(never)]
    fn refill(&mut self, n: usize) -> Result<Fill, CaptureError> {
        if self.start + n > self.buf.len() && !self.hand_over(n) {
            self.move_tail(n);
        }
        self.read_more(n)
    }

    /// Moves the unread tail to the front of the read buffer, growing (or shrinking back) the
    /// buffer to fit `n` bytes.
    fn move_tail(&mut self, n: usize) {
        let buf = &mut self.buf;
        buf.copy_within(self.start..self.end, 0);
        self.base += self.start as u64;
        self.end -= self.start;
        self.start = 0;
        let size = self.buf_size;
        let want = n.max(size);
        if buf.len() < want {
            buf.resize(want, 0);
        } else if buf.len() > size && self.end <= size && n <= size {
            buf.truncate(size);
            buf.shrink_to_fit();
        }
    }

    /// Reads until `n` bytes are unread or the input ends.
    fn read_more(&mut self, n: usize) -> Result<Fill, CaptureError> {
        while self.end - self.start < n {
            if self.eof {
                return Ok(Fill::Eof(self.end - self.start));
            }
            let Some(room) = self.buf.get_mut(self.end..) else {
                return Ok(Fill::Eof(self.end - self.start));
            };
            let room_len = room.len();
            match self.src.read(room) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k.min(room_len),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.read_error(e)),
            }
        }
        Ok(Fill::Ready)
    }

    /// The error of a failed read.
    fn read_error(&mut self, e: io::Error) -> CaptureError {
        let offset = self.base + self.end as u64;
        self.state = State::Done;
        if let Some(g) = gz::garbage_at(&e) {
            return CaptureError::GarbageAfterGzip {
                name: self.name.clone(),
                offset,
                file_offset: g,
            };
        }
        if e.kind() == io::ErrorKind::UnexpectedEof {
            self.truncated(offset, format!("compressed stream ends early ({e})"))
        } else {
            CaptureError::Io {
                name: self.name.clone(),
                offset,
                source: e,
            }
        }
    }

    /// The next frame; Ok(None) at a clean end. A record cut short or a corrupt record gives
    /// `Err(Truncated/Corrupt)` once, with its byte offset in the (decompressed) stream; after
    /// that, Ok(None).
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, CaptureError> {
        let r = match self.state {
            State::Pcap(h) => self.next_pcap(h),
            State::PcapNg { .. } => self.next_pcapng(),
            State::Done => return Ok(None),
        };
        match r {
            Ok(Some((ts_ns, linktype, s, e, orig_len))) => {
                let data = self.buf.get(s..e).unwrap_or_default();
                self.stats.frames += 1;
                self.stats.bytes += data.len() as u64;
                if (data.len() as u64) < u64::from(orig_len) {
                    self.stats.truncated_frames += 1;
                }
                Ok(Some(Frame {
                    ts_ns,
                    linktype,
                    data,
                    orig_len,
                }))
            }
            Ok(None) => {
                self.state = State::Done;
                Ok(None)
            }
            Err(e) => {
                self.state = State::Done;
                Err(e)
            }
        }
    }

    /// One pcap record: (ts, linktype, data start, data end, orig_len) with data in `buf`.
    #[inline]
    fn next_pcap(&mut self, h: pcap::PcapHeader) -> Result<Option<Located>, CaptureError> {
        let off = self.offset();
        let hl = h.record_header;
        if let Fill::Eof(n) = self.fill(hl)? {
            return if n == 0 {
                Ok(None)
            } else {
                Err(self.truncated(off, format!("record header cut short ({n} of {hl} bytes)")))
            };
        }
        let Some(rec) = self.unread().first_chunk::<16>() else {
            return Err(self.truncated(off, "record header cut short"));
        };
        let word = |i: usize| {
            let b = [rec[i], rec[i + 1], rec[i + 2], rec[i + 3]];
            if h.big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let (ts_s, ts_frac, caplen, orig_len) = (word(0), word(4), word(8), word(12));
        if caplen > h.max_caplen {
            return Err(self.corrupt(
                off,
                format!(
                    "record length {caplen} is larger than the maximum {}",
                    h.max_caplen
                ),
            ));
        }
        let total = hl + caplen as usize;
        if let Fill::Eof(n) = self.fill(total)? {
            return Err(self.truncated(
                off,
                format!(
                    "record of {caplen} bytes cut short ({} bytes present)",
                    n.saturating_sub(hl)
                ),
            ));
        }
        let frac = if h.nanos {
            u64::from(ts_frac)
        } else {
            u64::from(ts_frac) * 1000
        };
        let ts_ns = u64::from(ts_s) * 1_000_000_000 + frac;
        let s = self.start + hl;
        self.start += total;
        Ok(Some((ts_ns, h.linktype, s, s + caplen as usize, orig_len)))
    }

    /// pcapng blocks until the next packet. One handler per block type.
    fn next_pcapng(&mut self) -> Result<Option<Located>, CaptureError> {
        loop {
            let off = self.offset();
            let Some((btype, big, body)) = self.pcapng_block(off)? else {
                return Ok(None);
            };
            let step = match btype {
                pcapng::SHB => self.pcapng_section(off, big, body)?,
                pcapng::IDB => self.pcapng_interface(off, big, body)?,
                pcapng::EPB | pcapng::PB_OBSOLETE => {
                    self.pcapng_packet(off, btype == pcapng::EPB, big, body)?
                }
                pcapng::SPB => self.pcapng_simple_packet(off, big, body)?,
                _ => {
                    self.stats.skipped_blocks += 1;
                    NgStep::More
                }
            };
            match step {
                NgStep::Frame(located) => return Ok(Some(located)),
                NgStep::End => return Ok(None),
                NgStep::More => {}
            }
        }
    }

    /// Reads the next whole pcapng block and checks its lengths. Returns its type, the
    /// section's byte order and where its body (between the length fields) is in the buffer;
    /// `None` at the end of the input.
    fn pcapng_block(
        &mut self,
        off: u64,
    ) -> Result<Option<(u32, bool, Range<usize>)>, CaptureError> {
        if let Fill::Eof(n) = self.fill(12)? {
            return if n == 0 {
                Ok(None)
            } else {
                Err(self.truncated(off, format!("block header cut short ({n} bytes)")))
            };
        }
        if pcap::u32_at(self.unread(), 0, false).unwrap_or(0) == pcapng::SHB {
            self.pcapng_byte_order(off)?;
        }
        let State::PcapNg { big, .. } = self.state else {
            return Ok(None);
        };
        let head = self.unread();
        let btype = pcap::u32_at(head, 0, big).unwrap_or(0);
        let blen = pcap::u32_at(head, 4, big).unwrap_or(0);
        if blen < 12 || !blen.is_multiple_of(4) || blen > pcapng::MAX_BLOCK {
            return Err(self.corrupt(
                off,
                format!("block of type {btype:#x} with impossible length {blen}"),
            ));
        }
        let blen = blen as usize;
        if let Fill::Eof(n) = self.fill(blen)? {
            return Err(self.truncated(
                off,
                format!("block of {blen} bytes cut short ({n} bytes present)"),
            ));
        }
        let block = self
            .buf
            .get(self.start..self.start + blen)
            .unwrap_or_default();
        if pcap::u32_at(block, blen - 4, big) != Some(blen as u32) {
            return Err(self.corrupt(
                off,
                format!("block of type {btype:#x}: trailing length does not match {blen}"),
            ));
        }
        let body = self.start + 8..self.start + blen - 4;
        self.start += blen;
        Ok(Some((btype, big, body)))
    }

    /// A section header block starts: its byte-order magic sets the byte order of what
    /// follows, and the section's interfaces are forgotten.
    fn pcapng_byte_order(&mut self, off: u64) -> Result<(), CaptureError> {
        let bom = pcap::u32_at(self.unread(), 8, false).unwrap_or(0);
        let big = if bom == pcapng::BYTE_ORDER_MAGIC {
            false
        } else if bom.swap_bytes() == pcapng::BYTE_ORDER_MAGIC {
            true
        } else {
            return Err(self.corrupt(
                off,
                format!(
                    "section header with a bad byte-order magic {bom:08x} (expected \
                     1a2b3c4d in either byte order)"
                ),
            ));
        };
        if let State::PcapNg { big: b, ifaces, .. } = &mut self.state {
            *b = big;
            ifaces.clear();
        }
        Ok(())
    }

    /// A section header block: only version 1 is read.
    fn pcapng_section(
        &mut self,
        off: u64,
        big: bool,
        body: Range<usize>,
    ) -> Result<NgStep, CaptureError> {
        let body = self.buf.get(body).unwrap_or_default();
        let major = pcap::u16_at(body, 4, big).unwrap_or(0);
        if major != 1 {
            return Err(self.corrupt(off, format!("unsupported pcapng version {major}")));
        }
        self.stats.sections += 1;
        Ok(NgStep::More)
    }

    /// An interface description block: one more interface in this section.
    fn pcapng_interface(
        &mut self,
        off: u64,
        big: bool,
        body: Range<usize>,
    ) -> Result<NgStep, CaptureError> {
        let body = self.buf.get(body).unwrap_or_default();
        let Some(iface) = pcapng::parse_idb(body, big) else {
            return Err(self.corrupt(off, "interface description block too short"));
        };
        if let State::PcapNg { ifaces, .. } = &mut self.state {
            ifaces.push(iface);
        }
        Ok(NgStep::More)
    }

    /// An enhanced packet block (`epb`), or an obsolete packet block: a frame, unless its
    /// interface is unknown.
    fn pcapng_packet(
        &mut self,
        off: u64,
        epb: bool,
        big: bool,
        body_range: Range<usize>,
    ) -> Result<NgStep, CaptureError> {
        let body_at = body_range.start;
        let body = self.buf.get(body_range).unwrap_or_default();
        let id = if epb {
            pcap::u32_at(body, 0, big)
        } else {
            pcap::u16_at(body, 0, big).map(u32::from)
        };
        let (Some(id), Some(hi), Some(lo), Some(caplen), Some(orig_len)) = (
            id,
            pcap::u32_at(body, 4, big),
            pcap::u32_at(body, 8, big),
            pcap::u32_at(body, 12, big),
            pcap::u32_at(body, 16, big),
        ) else {
            return Err(self.corrupt(off, "packet block too short"));
        };
        if u64::from(caplen) + 20 > body.len() as u64 {
            return Err(self.corrupt(
                off,
                format!("packet block: captured length {caplen} is larger than the block"),
            ));
        }
        let State::PcapNg {
            ifaces, last_ts, ..
        } = &mut self.state
        else {
            return Ok(NgStep::End);
        };
        let Some(iface) = ifaces.get(id as usize) else {
            self.stats.unknown_interface_frames += 1;
            return Ok(NgStep::More);
        };
        let units = (u64::from(hi) << 32) | u64::from(lo);
        let ts = iface.ts.to_ns(units, iface.offset_s);
        *last_ts = ts;
        let s = body_at + 20;
        Ok(NgStep::Frame((
            ts,
            iface.linktype,
            s,
            s + caplen as usize,
            orig_len,
        )))
    }

    /// A simple packet block: a frame on the first interface, with the previous packet's
    /// timestamp (it has none).
    fn pcapng_simple_packet(
        &mut self,
        off: u64,
        big: bool,
        body_range: Range<usize>,
    ) -> Result<NgStep, CaptureError> {
        let body_at = body_range.start;
        let body = self.buf.get(body_range).unwrap_or_default();
        let Some(orig_len) = pcap::u32_at(body, 0, big) else {
            return Err(self.corrupt(off, "simple packet block too short"));
        };
        let State::PcapNg {
            ifaces, last_ts, ..
        } = &self.state
        else {
            return Ok(NgStep::End);
        };
        let Some(iface) = ifaces.first() else {
            self.stats.unknown_interface_frames += 1;
            return Ok(NgStep::More);
        };
        let mut caplen = (body.len() - 4).min(orig_len as usize);
        if iface.snaplen != 0 {
            caplen = caplen.min(iface.snaplen as usize);
        }
        let s = body_at + 4;
        Ok(NgStep::Frame((
            *last_ts,
            iface.linktype,
            s,
            s + caplen,
            orig_len,
        )))
    }

    /// Bytes consumed from the underlying file (compressed bytes for gzip), for a progress bar.
    pub fn input_position(&self) -> u64 {
        self.consumed.load(Ordering::Relaxed)
    }

    /// Size of the underlying file when known (not for stdin).
    pub fn input_len(&self) -> Option<u64> {
        self.input_len
    }

    /// The name given to errors: the path, or "stdin".
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn stats(&self) -> ReaderStats {
        self.stats
    }

    /// pcap or pcapng.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether the input is gzip-compressed.
    pub fn is_gzip(&self) -> bool {
        self.gzip
    }

    /// Offset in the (decompressed) stream of the next unread byte.
    pub fn stream_position(&self) -> u64 {
        self.offset()
    }
}

/// Bytes as `0a 0d 0d 0a`.
fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One input of a run, checked before any is read. A file that can be opened again (a regular
/// file) was checked by [`Reader::probe`] and closed: it is opened when its turn comes, so any
/// number of files fits in any file-descriptor limit and memory does not grow with their count.
/// Standard input and other streams (pipes, devices) can be read only once: they are opened at
/// the check and kept open.
#[derive(Debug)]
pub enum Input {
    /// A regular file, checked and closed; `len` is its size.
    Later { path: PathBuf, len: Option<u64> },
    /// A stream opened at the check.
    Open(Box<Reader>),
}

impl Input {
    /// Checks one input: the errors are [`Reader::open`]'s (missing, unreadable, a directory,
    /// empty, not a capture, gzip inside gzip, a file header cut short).
    pub fn check(path: &Path) -> Result<Input, CaptureError> {
        let regular = path.as_os_str() != "-"
            && std::fs::metadata(path).is_ok_and(|m| m.file_type().is_file());
        if regular {
            let len = Reader::probe(path)?;
            return Ok(Input::Later {
                path: path.to_path_buf(),
                len,
            });
        }
        Reader::open(path).map(|r| Input::Open(Box::new(r)))
    }

    /// The size of the underlying file when known (not for stdin or a pipe), for a progress bar.
    pub fn input_len(&self) -> Option<u64> {
        match self {
            Input::Later { len, .. } => *len,
            Input::Open(r) => r.input_len(),
        }
    }

    /// The reader: the stream opened at the check, or the file opened now. A file that changed
    /// since the check can fail here with the same errors as [`Input::check`].
    pub fn open(self) -> Result<Reader, CaptureError> {
        match self {
            Input::Later { path, .. } => Reader::open(&path),
            Input::Open(r) => Ok(*r),
        }
    }
}

/// Checks a list of inputs before any is opened: standard input ("-") can be read only once.
pub fn check_inputs(files: &[PathBuf]) -> Result<(), CaptureError> {
    let times = files.iter().filter(|f| f.as_os_str() == "-").count();
    if times > 1 {
        return Err(CaptureError::StdinRepeated { times });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reader_is_send() {
        fn is_send<T: Send>() {}
        is_send::<super::Reader>();
    }
}
