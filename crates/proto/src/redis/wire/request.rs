//! The streaming reader of client commands (arrays of bulk strings, or inline lines) and the
//! inline-command splitter.

use super::{MAX_ARGS, MAX_BULK, MAX_INLINE, MAX_NUMBER_LINE, Res, WireError, parse_i64};

/// What [`RequestReader::push`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqEvent {
    /// A command with `argc` arguments begins (its arguments follow).
    Begin { argc: u64 },
    /// Argument `index` is complete; its first bytes are in [`RequestReader::arg_head`].
    Arg { index: u64, len: u64 },
    /// The command is complete.
    End { argc: u64, wire: u64, start_ts: u64 },
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

    /// Drops the command in progress; returns the bytes it had consumed.
    pub fn reset(&mut self) -> u64 {
        let n = self.partial_bytes();
        self.st = RSt::Start;
        self.line.clear();
        if self.line.capacity() > 4096 {
            self.line = Vec::new();
        }
        self.inline = Vec::new();
        self.active = false;
        self.end_pending = false;
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
        }
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
        while let Some(&b) = input.get(*pos) {
            match self.st {
                RSt::Start => {
                    self.active = true;
                    self.start_ts = ts;
                    self.wire = 0;
                    self.line.clear();
                    self.st = if b == b'*' {
                        *pos += 1;
                        self.wire += 1;
                        RSt::Count { cr: false }
                    } else {
                        RSt::Inline
                    };
                }
                RSt::Count { cr } => {
                    let (cr, n) = self.number_line(b, cr, "command count")?;
                    *pos += 1;
                    self.wire += 1;
                    self.st = RSt::Count { cr };
                    if let Some(n) = n {
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
                        return Ok(Some(ReqEvent::Begin { argc }));
                    }
                }
                RSt::ArgHeader { dollar: false, .. } => {
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
                }
                RSt::ArgHeader { dollar: true, cr } => {
                    let (cr, n) = self.number_line(b, cr, "argument length")?;
                    *pos += 1;
                    self.wire += 1;
                    self.st = RSt::ArgHeader { dollar: true, cr };
                    if let Some(n) = n {
                        let len = u64::try_from(n).ok().filter(|&l| l <= MAX_BULK).ok_or(
                            WireError::BadLength {
                                what: "argument length",
                                len: n,
                            },
                        )?;
                        self.keep = keep(self.index);
                        self.head.clear();
                        self.st = if len == 0 {
                            RSt::ArgCr
                        } else {
                            RSt::Arg { left: len }
                        };
                        self.arg_len = len;
                    }
                }
                RSt::Arg { left } => {
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
                RSt::ArgCr => {
                    if b != b'\r' {
                        return Err(WireError::Invalid {
                            what: "argument",
                            why: "missing CRLF",
                        });
                    }
                    *pos += 1;
                    self.wire += 1;
                    self.st = RSt::ArgLf;
                }
                RSt::ArgLf => {
                    if b != b'\n' {
                        return Err(WireError::Invalid {
                            what: "argument",
                            why: "missing CRLF",
                        });
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
                    return Ok(Some(ev));
                }
                RSt::Inline => {
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
                        break;
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
                    return Ok(Some(ReqEvent::Begin { argc: self.argc }));
                }
                RSt::InlineArgs { next } => {
                    return Ok(Some(self.inline_arg(next, keep)));
                }
            }
        }
        Ok(None)
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

/// Splits an inline command line into arguments the way Redis' `sdssplitargs` does: words
/// separated by whitespace; `"..."` with `\n \r \t \b \a \\ \"` and `\xHH` escapes; `'...'`
/// with `\'`. A closing quote must be followed by whitespace or the end of the line.
pub fn split_inline(line: &[u8]) -> Res<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0usize;
    let at = |i: usize| line.get(i).copied();
    let space = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0B | 0x0C);
    loop {
        while at(i).is_some_and(space) {
            i += 1;
        }
        let Some(first) = at(i) else {
            return Ok(args);
        };
        let mut cur = Vec::new();
        match first {
            b'"' => {
                i += 1;
                loop {
                    match at(i) {
                        None => {
                            return Err(WireError::Invalid {
                                what: "inline command",
                                why: "unbalanced quotes",
                            });
                        }
                        Some(b'\\') => {
                            let hex = |c: Option<u8>| {
                                c.and_then(|c| (c as char).to_digit(16)).map(|d| d as u8)
                            };
                            if at(i + 1) == Some(b'x')
                                && let (Some(h), Some(l)) = (hex(at(i + 2)), hex(at(i + 3)))
                            {
                                cur.push(h << 4 | l);
                                i += 4;
                                continue;
                            }
                            match at(i + 1) {
                                None => {
                                    return Err(WireError::Invalid {
                                        what: "inline command",
                                        why: "unbalanced quotes",
                                    });
                                }
                                Some(c) => {
                                    cur.push(match c {
                                        b'n' => b'\n',
                                        b'r' => b'\r',
                                        b't' => b'\t',
                                        b'b' => 0x08,
                                        b'a' => 0x07,
                                        other => other,
                                    });
                                    i += 2;
                                }
                            }
                        }
                        Some(b'"') => {
                            if at(i + 1).is_some_and(|c| !space(c)) {
                                return Err(WireError::Invalid {
                                    what: "inline command",
                                    why: "unbalanced quotes",
                                });
                            }
                            i += 1;
                            break;
                        }
                        Some(c) => {
                            cur.push(c);
                            i += 1;
                        }
                    }
                }
            }
            b'\'' => {
                i += 1;
                loop {
                    match at(i) {
                        None => {
                            return Err(WireError::Invalid {
                                what: "inline command",
                                why: "unbalanced quotes",
                            });
                        }
                        Some(b'\\') if at(i + 1) == Some(b'\'') => {
                            cur.push(b'\'');
                            i += 2;
                        }
                        Some(b'\'') => {
                            if at(i + 1).is_some_and(|c| !space(c)) {
                                return Err(WireError::Invalid {
                                    what: "inline command",
                                    why: "unbalanced quotes",
                                });
                            }
                            i += 1;
                            break;
                        }
                        Some(c) => {
                            cur.push(c);
                            i += 1;
                        }
                    }
                }
            }
            _ => {
                while let Some(c) = at(i).filter(|&c| !space(c)) {
                    cur.push(c);
                    i += 1;
                }
            }
        }
        args.push(cur);
    }
}
