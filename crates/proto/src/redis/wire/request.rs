//! The streaming reader of client commands (arrays of bulk strings, or inline lines) and the
//! inline-command splitter.

use super::{MAX_ARGS, MAX_BULK, MAX_INLINE, MAX_NUMBER_LINE, Res, WireError, parse_i64};

mod command;

pub use command::{Span, WHOLE_ARGS, WholeCommand};

/// What [`RequestReader::push`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqEvent {
    /// A command with `argc` arguments begins (its arguments follow).
    Begin { argc: u64 },
    /// Argument `index` is complete; its first bytes are in [`RequestReader::arg_head`].
    Arg { index: u64, len: u64 },
    /// The command is complete. `lost`: bytes of it were lost in a capture gap inside an
    /// argument (see [`RequestReader::gap`]); `wire` counts them.
    End {
        argc: u64,
        wire: u64,
        start_ts: u64,
        lost: bool,
    },
    /// Bytes the server ignores: an empty inline line, or `*0`/`*-1`.
    Empty { wire: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RSt {
    Start,
    /// `*<n>` line; `cr`: the `\r` was seen.
    Count {
        cr: bool,
    },
    /// `$<n>` line of the next argument; `dollar`: the `$` was seen.
    ArgHeader {
        dollar: bool,
        cr: bool,
    },
    Arg {
        left: u64,
    },
    ArgCr,
    ArgLf,
    /// Collecting an inline line up to `\n`.
    Inline,
    /// Handing out the arguments of a split inline line.
    InlineArgs {
        next: usize,
    },
}

/// Reads client commands: `*<n>\r\n` followed by `n` bulk strings, or an inline line of
/// space-separated words (quoted as Redis' `sdssplitargs` does). Arguments are streamed: only
/// the first `keep(index)` bytes of each are kept.
#[derive(Debug)]
pub struct RequestReader {
    st: RSt,
    line: Vec<u8>,
    argc: u64,
    index: u64,
    keep: usize,
    arg_len: u64,
    head: Vec<u8>,
    wire: u64,
    start_ts: u64,
    active: bool,
    inline: Vec<Vec<u8>>,
    /// The last argument was reported; the end of the command is reported next.
    end_pending: bool,
    /// Bytes of the command in progress lost in gaps inside its arguments (counted in `wire`).
    lost: u64,
}

impl Default for RequestReader {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestReader {
    pub fn new() -> Self {
        RequestReader {
            st: RSt::Start,
            line: Vec::new(),
            argc: 0,
            index: 0,
            keep: 0,
            arg_len: 0,
            head: Vec::new(),
            wire: 0,
            start_ts: 0,
            active: false,
            inline: Vec::new(),
            end_pending: false,
            lost: 0,
        }
    }

    /// The kept first bytes of the last argument reported.
    pub fn arg_head(&self) -> &[u8] {
        &self.head
    }

    /// Bytes of the unfinished command consumed so far.
    pub fn partial_bytes(&self) -> u64 {
        if self.active { self.wire } else { 0 }
    }

    /// True between commands.
    pub fn is_idle(&self) -> bool {
        !self.active
    }

    /// Heap bytes held.
    pub fn buffered_bytes(&self) -> usize {
        self.line.capacity()
            + self.head.capacity()
            + self.inline.iter().map(Vec::capacity).sum::<usize>()
            + self.inline.capacity() * std::mem::size_of::<Vec<u8>>()
    }

    /// Drops the command in progress; returns the bytes it had consumed (those lost in gaps
    /// excepted: they were never captured).
    pub fn reset(&mut self) -> u64 {
        let n = self.partial_bytes().saturating_sub(self.lost);
        self.st = RSt::Start;
        self.line.clear();
        if self.line.capacity() > 4096 {
            self.line = Vec::new();
        }
        self.inline = Vec::new();
        self.active = false;
        self.end_pending = false;
        self.lost = 0;
        n
    }

    fn finish(&mut self) -> ReqEvent {
        self.active = false;
        self.end_pending = false;
        self.st = RSt::Start;
        ReqEvent::End {
            argc: self.argc,
            wire: self.wire,
            start_ts: self.start_ts,
            lost: std::mem::take(&mut self.lost) > 0,
        }
    }

    /// `len` bytes of the stream were lost (a capture gap). When they all fall inside the
    /// announced length of the argument being read, the framing holds: they are skipped (and
    /// counted in the command's wire bytes), the argument keeps only the bytes seen before the
    /// gap, and the command is marked `lost`. Returns false (nothing changed) otherwise: the
    /// gap crosses a boundary and the caller must resynchronize.
    pub fn gap(&mut self, len: u64) -> bool {
        let RSt::Arg { left } = self.st else {
            return false;
        };
        if !self.active || self.end_pending || len > left {
            return false;
        }
        if len == 0 {
            return true;
        }
        // What follows the gap is not the continuation of what was kept.
        self.keep = self.head.len().min(self.keep);
        self.wire += len;
        self.lost += len;
        self.st = if left == len {
            RSt::ArgCr
        } else {
            RSt::Arg { left: left - len }
        };
        true
    }

    /// Reads a header line byte by byte into `self.line`; `Some(number)` when it ended.
    fn number_line(&mut self, b: u8, cr: bool, what: &'static str) -> Res<(bool, Option<i64>)> {
        if cr {
            if b != b'\n' {
                return Err(WireError::Invalid {
                    what,
                    why: "missing CRLF",
                });
            }
            let n = parse_i64(&self.line).ok_or(WireError::Invalid {
                what,
                why: "bad line",
            })?;
            self.line.clear();
            return Ok((false, Some(n)));
        }
        match b {
            b'\r' => Ok((true, None)),
            b'0'..=b'9' | b'-' | b'+' if self.line.len() < MAX_NUMBER_LINE => {
                self.line.push(b);
                Ok((false, None))
            }
            b'0'..=b'9' | b'-' | b'+' => Err(WireError::Invalid {
                what,
                why: "line too long",
            }),
            _ => Err(WireError::Invalid {
                what,
                why: "bad line",
            }),
        }
    }

    /// Consumes bytes until something is reported; returns the bytes consumed. `keep(index)`
    /// says how many bytes of argument `index` to keep.
    ///
    /// On an error the count excludes the offending byte, and the reader must be
    /// [`reset`](Self::reset) before it is used again.
    pub fn push(
        &mut self,
        input: &[u8],
        ts: u64,
        keep: &dyn Fn(u64) -> usize,
    ) -> (usize, Res<Option<ReqEvent>>) {
        let mut pos = 0usize;
        let r = self.step(input, ts, keep, &mut pos);
        (pos, r)
    }

    /// Runs the state machine over `input` from `*pos` until something is reported or the
    /// input ends. One handler per state.
    fn step(
        &mut self,
        input: &[u8],
        ts: u64,
        keep: &dyn Fn(u64) -> usize,
        pos: &mut usize,
    ) -> Res<Option<ReqEvent>> {
        if self.end_pending {
            return Ok(Some(self.finish()));
        }
        if let RSt::InlineArgs { next } = self.st {
            return Ok(Some(self.inline_arg(next, keep)));
        }
        loop {
            if self.st
                == (RSt::ArgHeader {
                    dollar: false,
                    cr: false,
                })
                && let Some(ev) = self.whole_arg(input, keep, pos)
            {
                return Ok(Some(ev));
            }
            if matches!(
                self.st,
                RSt::Count { cr: false }
                    | RSt::ArgHeader {
                        dollar: true,
                        cr: false
                    }
            ) {
                self.digits(input, pos);
            }
            if self.st == RSt::ArgCr && input.get(*pos..*pos + 2) == Some(&b"\r\n"[..]) {
                // The CRLF after an argument, both bytes at once.
                self.arg_cr(b'\r', pos)?;
                return Ok(Some(self.arg_lf(b'\n', pos)?));
            }
            let Some(&b) = input.get(*pos) else {
                break;
            };
            let ev = match self.st {
                RSt::Start => {
                    self.start(b, ts, pos);
                    if self.st == (RSt::Count { cr: false })
                        && let Some(ev) = self.whole_count(input, pos)
                    {
                        return Ok(Some(ev));
                    }
                    None
                }
                RSt::Count { cr } => self.count(b, cr, pos)?,
                RSt::ArgHeader { dollar: false, .. } => {
                    self.dollar(b, pos)?;
                    None
                }
                RSt::ArgHeader { dollar: true, cr } => {
                    self.arg_len(b, cr, keep, pos)?;
                    None
                }
                RSt::Arg { left } => {
                    self.arg_bytes(left, input, pos);
                    None
                }
                RSt::ArgCr => {
                    self.arg_cr(b, pos)?;
                    None
                }
                RSt::ArgLf => Some(self.arg_lf(b, pos)?),
                RSt::Inline => self.inline_line(input, pos)?,
                RSt::InlineArgs { next } => Some(self.inline_arg(next, keep)),
            };
            if ev.is_some() {
                return Ok(ev);
            }
        }
        Ok(None)
    }

    /// A whole argument at `*pos` (`$<len>\r\n<bytes>\r\n`, all in `input`, the length
    /// valid) in one step: exactly what the byte-at-a-time states do with it (the same wire
    /// bytes, kept head and event), without a state turn per piece. `None`, with nothing
    /// consumed or changed, for anything else (split over inputs, malformed): the ordinary
    /// path then takes it and reports what it finds.
    #[inline]
    fn whole_arg(
        &mut self,
        input: &[u8],
        keep: &dyn Fn(u64) -> usize,
        pos: &mut usize,
    ) -> Option<ReqEvent> {
        let rest = input.get(*pos..)?;
        if rest.first() != Some(&b'$') || !self.line.is_empty() {
            return None;
        }
        let (len, used) = command::number(rest.get(1..)?)?;
        let len = u64::try_from(len).ok().filter(|&l| l <= MAX_BULK)?;
        let body = 1 + used;
        let end = usize::try_from(len).ok()?.checked_add(body)?;
        if rest.get(end..end.checked_add(2)?)? != b"\r\n" {
            return None;
        }
        self.keep = keep(self.index);
        self.head.clear();
        let kept = rest.get(body..end)?;
        self.head
            .extend_from_slice(kept.get(..self.keep.min(kept.len()))?);
        self.arg_len = len;
        *pos += end + 2;
        self.wire += (end + 2) as u64;
        let index = self.index;
        self.index += 1;
        if self.index >= self.argc {
            // As after the LF of the ordinary path: the end is reported next.
            self.st = RSt::ArgLf;
            self.end_pending = true;
        }
        Some(ReqEvent::Arg { index, len })
    }

    /// A whole argument count line after the `*` (`<n>\r\n`, all in `input`, `1..=MAX_ARGS`)
    /// in one step: what [`Self::count`] does at its LF. `None`, with nothing consumed or
    /// changed, for anything else (the ordinary path reports it).
    #[inline]
    fn whole_count(&mut self, input: &[u8], pos: &mut usize) -> Option<ReqEvent> {
        let rest = input.get(*pos..)?;
        if !self.line.is_empty() {
            return None;
        }
        let (argc, used) = command::number(rest)?;
        let argc = u64::try_from(argc)
            .ok()
            .filter(|&n| (1..=MAX_ARGS).contains(&n))?;
        *pos += used;
        self.wire += used as u64;
        self.argc = argc;
        self.index = 0;
        self.st = RSt::ArgHeader {
            dollar: false,
            cr: false,
        };
        Some(ReqEvent::Begin { argc })
    }

    /// The digits of a number line at `*pos` and the CR after them, taken in one run: what
    /// [`Self::number_line`] does byte by byte for them (digits kept in `self.line`, at most
    /// [`MAX_NUMBER_LINE`]); any other byte after them takes the ordinary path.
    #[inline]
    fn digits(&mut self, input: &[u8], pos: &mut usize) {
        let room = MAX_NUMBER_LINE.saturating_sub(self.line.len());
        let rest = input.get(*pos..).unwrap_or(&[]);
        let n = rest
            .iter()
            .take(room)
            .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+'))
            .count();
        if n > 0 {
            self.line.extend_from_slice(rest.get(..n).unwrap_or(&[]));
            *pos += n;
            self.wire += n as u64;
        }
        // A CR next ends the digits, whatever they were (the LF takes the ordinary path).
        if rest.get(n) == Some(&b'\r') {
            *pos += 1;
            self.wire += 1;
            self.st = match self.st {
                RSt::Count { .. } => RSt::Count { cr: true },
                _ => RSt::ArgHeader {
                    dollar: true,
                    cr: true,
                },
            };
        }
    }

    /// The first byte of a request: `*` starts an array, anything else an inline command.
    #[inline]
    fn start(&mut self, b: u8, ts: u64, pos: &mut usize) {
        self.active = true;
        self.start_ts = ts;
        self.wire = 0;
        self.lost = 0;
        self.line.clear();
        self.st = if b == b'*' {
            *pos += 1;
            self.wire += 1;
            RSt::Count { cr: false }
        } else {
            RSt::Inline
        };
    }

    /// A byte of the argument count line: at its end, the request begins (or is empty).
    #[inline]
    fn count(&mut self, b: u8, cr: bool, pos: &mut usize) -> Res<Option<ReqEvent>> {
        let (cr, n) = self.number_line(b, cr, "command count")?;
        *pos += 1;
        self.wire += 1;
        self.st = RSt::Count { cr };
        let Some(n) = n else {
            return Ok(None);
        };
        if n <= 0 {
            self.active = false;
            self.st = RSt::Start;
            return Ok(Some(ReqEvent::Empty { wire: self.wire }));
        }
        let argc = n as u64;
        if argc > MAX_ARGS {
            return Err(WireError::BadLength {
                what: "command count",
                len: n,
            });
        }
        self.argc = argc;
        self.index = 0;
        self.st = RSt::ArgHeader {
            dollar: false,
            cr: false,
        };
        Ok(Some(ReqEvent::Begin { argc }))
    }

    /// The `$` that starts an argument.
    #[inline]
    fn dollar(&mut self, b: u8, pos: &mut usize) -> Res<()> {
        if b != b'$' {
            return Err(WireError::BadByte {
                what: "request argument (expected '$')",
                at: *pos,
                byte: b,
            });
        }
        *pos += 1;
        self.wire += 1;
        self.st = RSt::ArgHeader {
            dollar: true,
            cr: false,
        };
        Ok(())
    }

    /// A byte of an argument's length line: at its end, the argument's bytes follow.
    #[inline]
    fn arg_len(
        &mut self,
        b: u8,
        cr: bool,
        keep: &dyn Fn(u64) -> usize,
        pos: &mut usize,
    ) -> Res<()> {
        let (cr, n) = self.number_line(b, cr, "argument length")?;
        *pos += 1;
        self.wire += 1;
        self.st = RSt::ArgHeader { dollar: true, cr };
        if let Some(n) = n {
            let len =
                u64::try_from(n)
                    .ok()
                    .filter(|&l| l <= MAX_BULK)
                    .ok_or(WireError::BadLength {
                        what: "argument length",
                        len: n,
                    })?;
            self.keep = keep(self.index);
            self.head.clear();
            self.st = if len == 0 {
                RSt::ArgCr
            } else {
                RSt::Arg { left: len }
            };
            self.arg_len = len;
        }
        Ok(())
    }

    /// Bytes of an argument (its head kept, as asked).
    #[inline]
    fn arg_bytes(&mut self, left: u64, input: &[u8], pos: &mut usize) {
        let avail = input.len() - *pos;
        let n = usize::try_from(left).map_or(avail, |l| l.min(avail));
        let room = self.keep.saturating_sub(self.head.len()).min(n);
        self.head
            .extend_from_slice(input.get(*pos..*pos + room).unwrap_or(&[]));
        *pos += n;
        self.wire += n as u64;
        let left = left - n as u64;
        self.st = if left == 0 {
            RSt::ArgCr
        } else {
            RSt::Arg { left }
        };
    }

    /// The CR after an argument.
    #[inline]
    fn arg_cr(&mut self, b: u8, pos: &mut usize) -> Res<()> {
        if b != b'\r' {
            return Err(arg_missing_crlf());
        }
        *pos += 1;
        self.wire += 1;
        self.st = RSt::ArgLf;
        Ok(())
    }

    /// The LF after an argument: the argument is reported (and the request ends after the
    /// last one).
    #[inline]
    fn arg_lf(&mut self, b: u8, pos: &mut usize) -> Res<ReqEvent> {
        if b != b'\n' {
            return Err(arg_missing_crlf());
        }
        *pos += 1;
        self.wire += 1;
        let index = self.index;
        self.index += 1;
        let ev = ReqEvent::Arg {
            index,
            len: self.arg_len,
        };
        if self.index >= self.argc {
            self.end_pending = true;
        } else {
            self.st = RSt::ArgHeader {
                dollar: false,
                cr: false,
            };
        }
        Ok(ev)
    }

    /// Bytes of an inline command line: at its LF, the line is split into arguments.
    fn inline_line(&mut self, input: &[u8], pos: &mut usize) -> Res<Option<ReqEvent>> {
        let rest = input.get(*pos..).unwrap_or(&[]);
        let nl = rest.iter().position(|&c| c == b'\n');
        let take = nl.map_or(rest.len(), |i| i + 1);
        if self.line.len() + take > MAX_INLINE {
            let room = MAX_INLINE.saturating_sub(self.line.len());
            *pos += room;
            self.wire += room as u64;
            self.line.extend_from_slice(rest.get(..room).unwrap_or(&[]));
            return Err(WireError::Invalid {
                what: "inline command",
                why: "line too long",
            });
        }
        self.line.extend_from_slice(rest.get(..take).unwrap_or(&[]));
        *pos += take;
        self.wire += take as u64;
        if nl.is_none() {
            // The input ended inside the line (everything was consumed).
            return Ok(None);
        }
        let mut line = std::mem::take(&mut self.line);
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let args = split_inline(&line)?;
        line.clear();
        self.line = line;
        if args.is_empty() {
            self.active = false;
            self.st = RSt::Start;
            return Ok(Some(ReqEvent::Empty { wire: self.wire }));
        }
        self.argc = args.len() as u64;
        self.index = 0;
        self.inline = args;
        self.st = RSt::InlineArgs { next: 0 };
        Ok(Some(ReqEvent::Begin { argc: self.argc }))
    }

    fn inline_arg(&mut self, next: usize, keep: &dyn Fn(u64) -> usize) -> ReqEvent {
        let Some(arg) = self.inline.get(next) else {
            self.inline = Vec::new();
            return self.finish();
        };
        let k = keep(next as u64).min(arg.len());
        self.head.clear();
        self.head.extend_from_slice(arg.get(..k).unwrap_or(&[]));
        let len = arg.len() as u64;
        self.st = RSt::InlineArgs { next: next + 1 };
        ReqEvent::Arg {
            index: next as u64,
            len,
        }
    }
}

/// The error for an argument not ended by CRLF.
fn arg_missing_crlf() -> WireError {
    WireError::Invalid {
        what: "argument",
        why: "missing CRLF",
    }
}

/// Splits an inline command line into arguments the way Redis' `sdssplitargs` does: words
/// separated by whitespace; `"..."` with `\n \r \t \b \a \\ \"` and `\xHH` escapes; `'...'`
/// with `\'`. A closing quote must be followed by whitespace or the end of the line.
pub fn split_inline(line: &[u8]) -> Res<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0usize;
    loop {
        while line.get(i).copied().is_some_and(is_space) {
            i += 1;
        }
        let Some(first) = line.get(i).copied() else {
            return Ok(args);
        };
        let arg = match first {
            b'"' => double_quoted(line, &mut i)?,
            b'\'' => single_quoted(line, &mut i)?,
            _ => bare_word(line, &mut i),
        };
        args.push(arg);
    }
}

/// Whitespace between inline arguments (C `isspace`).
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0B | 0x0C)
}

fn unbalanced() -> WireError {
    WireError::Invalid {
        what: "inline command",
        why: "unbalanced quotes",
    }
}

/// A `"..."` argument starting at `*i` (the quote), with its escapes; `*i` ends past the
/// closing quote.
fn double_quoted(line: &[u8], i: &mut usize) -> Res<Vec<u8>> {
    let at = |i: usize| line.get(i).copied();
    let hex = |c: Option<u8>| c.and_then(|c| (c as char).to_digit(16)).map(|d| d as u8);
    let mut cur = Vec::new();
    *i += 1;
    loop {
        match at(*i) {
            None => return Err(unbalanced()),
            Some(b'\\') => {
                if at(*i + 1) == Some(b'x')
                    && let (Some(h), Some(l)) = (hex(at(*i + 2)), hex(at(*i + 3)))
                {
                    cur.push(h << 4 | l);
                    *i += 4;
                    continue;
                }
                let Some(c) = at(*i + 1) else {
                    return Err(unbalanced());
                };
                cur.push(match c {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    other => other,
                });
                *i += 2;
            }
            Some(b'"') => return closing_quote(line, i).map(|()| cur),
            Some(c) => {
                cur.push(c);
                *i += 1;
            }
        }
    }
}

/// A `'...'` argument starting at `*i` (the quote), with `\'`; `*i` ends past the closing
/// quote.
fn single_quoted(line: &[u8], i: &mut usize) -> Res<Vec<u8>> {
    let at = |i: usize| line.get(i).copied();
    let mut cur = Vec::new();
    *i += 1;
    loop {
        match at(*i) {
            None => return Err(unbalanced()),
            Some(b'\\') if at(*i + 1) == Some(b'\'') => {
                cur.push(b'\'');
                *i += 2;
            }
            Some(b'\'') => return closing_quote(line, i).map(|()| cur),
            Some(c) => {
                cur.push(c);
                *i += 1;
            }
        }
    }
}

/// A closing quote at `*i`: it must be followed by whitespace or the end of the line.
fn closing_quote(line: &[u8], i: &mut usize) -> Res<()> {
    if line.get(*i + 1).copied().is_some_and(|c| !is_space(c)) {
        return Err(unbalanced());
    }
    *i += 1;
    Ok(())
}

/// An unquoted argument: up to the next whitespace.
fn bare_word(line: &[u8], i: &mut usize) -> Vec<u8> {
    let mut cur = Vec::new();
    while let Some(c) = line.get(*i).copied().filter(|&c| !is_space(c)) {
        cur.push(c);
        *i += 1;
    }
    cur
}
