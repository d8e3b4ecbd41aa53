//! One replayed PostgreSQL session: dbtap's own startup and login, then the captured messages
//! batch by batch (up to a Sync, Flush or Query, as the client sent them), each batch complete
//! when the target sent one ReadyForQuery per Sync/Query; everything fed to the target's session.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use proto::{Direction, Health, QueryEvent, Session, Sink};

use super::pglight;
use super::readbuf::ReadBuf;
use super::{Ctx, Msg, Stream, is_timeout, new_session};
use crate::capture::Plan;
use crate::fidelity::Tally;
use crate::postgres::{self, server_message};
use crate::scram::Scram;

/// The target session's sink: its events go into the connection's own batch (one move of
/// each event, not the three or four of the thread-local batch), sent to the collector
/// [`super::EVENT_BATCH`] at a time.
struct ChanSink<'a> {
    tx: &'a std::sync::mpsc::SyncSender<Msg>,
    events: &'a mut Vec<QueryEvent>,
    health: Health,
}

impl Sink for ChanSink<'_> {
    fn event(&mut self, ev: QueryEvent) {
        if self.events.capacity() == 0 {
            // Sized once per batch: no reallocation while it fills.
            self.events.reserve_exact(super::EVENT_BATCH);
        }
        self.events.push(ev);
        if self.events.len() >= super::EVENT_BATCH {
            let _ = self.tx.send(Msg::Events(std::mem::take(self.events)));
        }
    }
    fn health(&mut self) -> &mut Health {
        &mut self.health
    }
}

struct Conn {
    id: u64,
    stream: Stream,
    session: Box<dyn Session>,
    /// Server bytes read and not yet split into messages.
    inbuf: ReadBuf,
    /// The session's events not yet sent to the collector (see [`ChanSink`]).
    events: Vec<QueryEvent>,
    /// Where they go (also from `drop`, so none is lost on any path).
    tx: std::sync::mpsc::SyncSender<Msg>,
    /// The light reply reader (see [`pglight`]).
    light: pglight::Light,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.flush();
    }
}

/// One batch's exchange.
struct Exchange<'a> {
    /// Its messages, sent as one write.
    out: &'a [u8],
    /// The ReadyForQuery it expects (one per Sync or Query).
    expect: usize,
    /// The COPY FROM STDIN data (CopyData..CopyDone) sent when the target asks for it;
    /// `None` when the batch carries its own.
    copy: Option<&'a [u8]>,
    /// It ends with a Sync or a Query.
    synced: bool,
}

/// The read buffer of a connection (a message longer than this grows it).
const READ_BUF: usize = 64 << 10;

/// Why a read stopped.
enum Stop {
    Timeout,
    Closed,
    Lost,
}

impl Conn {
    /// Sends the queued events to the collector.
    fn flush(&mut self) {
        if !self.events.is_empty() {
            let _ = self.tx.send(Msg::Events(std::mem::take(&mut self.events)));
        }
    }

    fn feed(&mut self, dir: Direction, b: &[u8], ts: u64) {
        let mut s = ChanSink {
            tx: &self.tx,
            events: &mut self.events,
            health: Health::default(),
        };
        self.session.feed(dir, b, ts, &mut s);
    }

    /// The light reader's log of the current batch is full: it goes to the session.
    fn spill(&mut self) {
        let mut s = ChanSink {
            tx: &self.tx,
            events: &mut self.events,
            health: Health::default(),
        };
        self.light.spill(self.session.as_mut(), &mut s);
    }

    fn send(&mut self, ctx: &Ctx, b: &[u8]) -> Result<(), Stop> {
        self.stream.write_all(b).map_err(|_| Stop::Lost)?;
        let ts = ctx.now_ns();
        if self.light.logging() {
            if self.light.log(true, ts, b) {
                self.spill();
            }
        } else {
            self.light.prime(self.session.as_mut());
            self.feed(Direction::ToServer, b, ts);
        }
        Ok(())
    }

    /// The next whole server message (type, body).
    fn next(&mut self, ctx: &Ctx, deadline: Instant) -> Result<(u8, Vec<u8>), Stop> {
        // Login only: the body is copied (not on the replay's per-query path).
        let (t, body) = self.next_msg(ctx, deadline)?;
        Ok((t, self.inbuf.get(body).to_vec()))
    }

    /// The next whole server message: its type and where its body is in `inbuf` (valid until
    /// the next call). Every read is fed to the session as it comes, whole; nothing is copied:
    /// reads go straight into `inbuf`.
    fn next_msg(
        &mut self,
        ctx: &Ctx,
        deadline: Instant,
    ) -> Result<(u8, std::ops::Range<usize>), Stop> {
        loop {
            if let Some((t, _, used)) = server_message(self.inbuf.pending()) {
                let r = self.inbuf.take(used);
                return Ok((t, r.start + 5..r.end));
            }
            let left = deadline
                .checked_duration_since(Instant::now())
                .ok_or(Stop::Timeout)?;
            self.stream.set_timeout(left).map_err(|_| Stop::Lost)?;
            match self.stream.read(self.inbuf.room()) {
                Ok(0) => return Err(Stop::Closed),
                Ok(k) => {
                    let got = self.inbuf.filled(k);
                    if self.light.logging() {
                        if self.light.log(false, ctx.now_ns(), got) {
                            self.spill();
                        }
                        continue;
                    }
                    let mut s = ChanSink {
                        tx: &self.tx,
                        events: &mut self.events,
                        health: Health::default(),
                    };
                    self.session
                        .feed(Direction::ToClient, got, ctx.now_ns(), &mut s);
                }
                Err(e) if is_timeout(&e) => return Err(Stop::Timeout),
                Err(_) => return Err(Stop::Lost),
            }
        }
    }

    fn open(ctx: &Ctx, user: &str, pw: &str, db: Option<&str>) -> Result<Conn, String> {
        let mut stream = Stream::connect(&ctx.target).map_err(|e| e.to_string())?;
        if let Some(tls) = &ctx.opts.tls {
            stream = ssl_request(stream, tls)?;
        }
        let id = ctx.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let session = new_session(id, &stream, &ctx.opts.session, proto::Protocol::Postgres)
            .ok_or("no postgres session")?;
        let mut c = Conn {
            id,
            stream,
            session,
            inbuf: ReadBuf::new(READ_BUF),
            events: Vec::new(),
            tx: ctx.tx.clone(),
            light: pglight::Light::default(),
        };
        let deadline = Instant::now() + ctx.opts.reply_timeout.max(Duration::from_secs(5));
        let lost = |_| "connection lost during login".to_string();
        c.send(ctx, &postgres::startup(user, db)).map_err(lost)?;
        let mut scram: Option<Scram> = None;
        loop {
            let (t, body) = c.next(ctx, deadline).map_err(lost)?;
            match t {
                b'R' => {
                    let code = body
                        .get(..4)
                        .map_or(u32::MAX, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                    let data = body.get(4..).unwrap_or_default();
                    let reply = match code {
                        0 => continue,
                        3 => [pw.as_bytes(), b"\0"].concat(),
                        5 => postgres::md5_password(user, pw, body.get(4..8).unwrap_or_default()),
                        10 => {
                            let s = Scram::new("", pw)?;
                            let r = postgres::sasl_initial(data, &s.client_first())?;
                            scram = Some(s);
                            r
                        }
                        11 => scram
                            .as_mut()
                            .ok_or("SASL continue before SASL")?
                            .client_final(data)?
                            .into_bytes(),
                        12 => {
                            scram
                                .as_ref()
                                .ok_or("SASL final before SASL")?
                                .verify(data)?;
                            continue;
                        }
                        n => {
                            return Err(format!(
                                "the target asks for authentication method {n}: not supported \
                                 (trust, password, md5, SCRAM-SHA-256 are)"
                            ));
                        }
                    };
                    c.send(ctx, &postgres::message(b'p', &reply))
                        .map_err(lost)?;
                }
                b'E' => return Err(format!("login refused: {}", error_text(&body))),
                b'Z' => {
                    c.light.set_quiet(c.inbuf.pending().is_empty());
                    return Ok(c);
                }
                _ => {}
            }
        }
    }

    /// Sends one batch and reads until `expect` ReadyForQuery came; false when the
    /// connection is unusable. A batch of the light reader's shape is answered by it when it
    /// can (see [`pglight`]), else its traffic goes to the session as it would have.
    fn exchange(&mut self, ctx: &Ctx, b: &Exchange<'_>, t: &mut Tally) -> bool {
        self.light.begin(b.out);
        let (usable, complete) = self.exchange_inner(ctx, b, t);
        let clean = complete && self.inbuf.pending().is_empty();
        let mut sink = ChanSink {
            tx: &self.tx,
            events: &mut self.events,
            health: Health::default(),
        };
        self.light
            .settle(b.out, clean, b.synced, self.session.as_mut(), &mut sink);
        usable
    }

    /// [`Conn::exchange`]'s traffic: (the connection is usable, every reply came).
    fn exchange_inner(&mut self, ctx: &Ctx, b: &Exchange<'_>, t: &mut Tally) -> (bool, bool) {
        let (out, expect, copy) = (b.out, b.expect, b.copy);
        if self.send(ctx, out).is_err() {
            t.skip("connection_lost", 1);
            return (false, false);
        }
        let deadline = Instant::now() + ctx.opts.reply_timeout;
        let mut got = 0;
        while got < expect {
            match self.next_msg(ctx, deadline).map(|(t, _)| t) {
                Ok(b'Z') => got += 1,
                Ok(b'G') => {
                    // COPY FROM STDIN: its captured data, or (none captured) a CopyFail.
                    let fail;
                    let m = match copy {
                        None => continue,
                        Some(c) if !c.is_empty() => c,
                        Some(_) => {
                            t.skip("copy_from_stdin_not_replayed", 1);
                            fail = postgres::message(b'f', b"dbtap replay: no COPY data\0");
                            &fail
                        }
                    };
                    if self.send(ctx, m).is_err() {
                        return (false, false);
                    }
                }
                Ok(_) => {}
                Err(Stop::Timeout) => {
                    t.skip("reply_timeout", 1);
                    return (true, false);
                }
                Err(Stop::Closed) => {
                    t.skip("connection_closed_by_target", 1);
                    return (false, false);
                }
                Err(Stop::Lost) => {
                    t.skip("connection_lost", 1);
                    return (false, false);
                }
            }
        }
        t.replies += expect as u64;
        (true, true)
    }

    fn close(mut self, ctx: &Ctx) {
        // The session's queued events go before those its close makes and the close itself.
        self.flush();
        self.light.prime(self.session.as_mut());
        super::close_session(self.session.as_mut(), self.id, ctx);
    }
}

/// The message of an ErrorResponse body (its 'M' field).
fn error_text(body: &[u8]) -> String {
    let mut rest = body;
    while let Some((&k, r)) = rest.split_first() {
        if k == 0 {
            break;
        }
        let end = r.iter().position(|&c| c == 0).unwrap_or(r.len());
        if k == b'M' {
            return String::from_utf8_lossy(r.get(..end).unwrap_or_default()).into_owned();
        }
        rest = r.get(end + 1..).unwrap_or_default();
    }
    "unknown error".into()
}

/// Replays one PostgreSQL session copy.
pub(super) fn run_session(ctx: &Ctx, plan: &Plan, offsets: &[u64]) -> Tally {
    let mut t = Tally::default();
    let mut conn: Option<Conn> = None;
    let creds = ctx.opts.creds.for_user(plan.user.as_deref());
    let pw = creds.password.clone().unwrap_or_default();
    let user = creds
        .user
        .clone()
        .or_else(|| plan.user.as_deref().map(str::to_string))
        .unwrap_or_else(|| "postgres".into());
    let db = plan.database.as_deref();
    // A refused login is not tried again for every batch of the session.
    let mut refused = false;
    let mut feed = super::batches(ctx, plan, offsets).peekable();
    // The batch's messages, sent as one write (reused: no allocation per batch).
    let mut out = Vec::new();
    while let Some((batch, off)) = feed.next() {
        if is_copy_data(&batch) {
            // Not taken by a COPY before it (see copy_after).
            t.skip("copy_data_without_copy", batch.requests.len() as u64);
            continue;
        }
        let late = ctx.wait_until(off);
        if batch.requests.first().and_then(|r| r.bytes.first()) == Some(&b'X') {
            if conn.is_none() {
                // Nothing to end: the session never got a connection (counted as not sent).
                t.skip("connect_failed", 1);
            }
            if let Some(mut c) = conn.take() {
                t.sent += 1;
                let _ = c.send(
                    ctx,
                    &batch
                        .requests
                        .first()
                        .map(|r| r.bytes.clone())
                        .unwrap_or_default(),
                );
                c.close(ctx);
            }
            continue;
        }
        let n = batch.requests.len();
        if refused {
            t.skip("connect_failed", n as u64);
            continue;
        }
        let Some((c, _)) = super::connected(&mut conn, &mut t, n, "postgres", || {
            let r = Conn::open(ctx, &user, &pw, db);
            refused = r.as_ref().is_err_and(|e| e.starts_with("login refused"));
            r
        }) else {
            continue;
        };
        ctx.record_lag(&mut t, late);
        out.clear();
        let mut expect = 0;
        for r in &batch.requests {
            out.extend_from_slice(&r.bytes);
            expect += usize::from(matches!(r.bytes.first(), Some(b'S' | b'Q')));
            t.sent += 1;
        }
        t.batches += 1;
        let copy = copy_after(&batch, &mut feed, &mut t);
        let inline = batch
            .requests
            .iter()
            .any(|r| matches!(r.bytes.first(), Some(b'c' | b'f')));
        let copy = (!inline).then_some(&copy[..]);
        let synced = batch
            .requests
            .last()
            .is_some_and(|r| matches!(r.bytes.first(), Some(b'S' | b'Q')));
        let ex = Exchange {
            out: &out,
            expect,
            copy,
            synced,
        };
        if !c.exchange(ctx, &ex, &mut t)
            && let Some(c) = conn.take()
        {
            c.close(ctx);
        }
    }
    if let Some(c) = conn {
        c.close(ctx);
    }
    t
}

/// A batch of COPY FROM STDIN data (CopyData, CopyDone, CopyFail).
/// The COPY data that followed `batch` in the capture (a batch with its own CopyDone/CopyFail
/// carries it), taken from the feed. Looked for only after a batch that may start a COPY: on a
/// live feed, looking ahead waits for the session's next batch.
fn copy_after<'a>(
    batch: &crate::capture::Batch,
    feed: &mut std::iter::Peekable<
        impl Iterator<Item = (std::borrow::Cow<'a, crate::capture::Batch>, u64)>,
    >,
    t: &mut Tally,
) -> Vec<u8> {
    let mut copy = Vec::new();
    let may_copy = batch.requests.iter().any(|r| names_copy(&r.bytes));
    if !may_copy {
        return copy;
    }
    while let Some((b, _)) = feed.next_if(|(b, _)| is_copy_data(b)) {
        for r in &b.requests {
            copy.extend_from_slice(&r.bytes);
            t.sent += 1;
        }
    }
    copy
}

/// Whether `b` holds "copy" in any case (a statement that may start a COPY). Every request of
/// every batch is looked at (a byte-by-byte window scan was 6 % of a pgbench -S session
/// thread's instructions), so eight bytes are tested at once for a `c`/`C` and only a chunk
/// holding one has its positions compared.
fn names_copy(b: &[u8]) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let at = |i: usize| {
        b.get(i..i + 4)
            .is_some_and(|w| w.eq_ignore_ascii_case(b"copy"))
    };
    let mut chunks = b.chunks_exact(8);
    for (k, chunk) in chunks.by_ref().enumerate() {
        let w = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        // Bytes that are `c` or `C` become 0; the zero-byte test has no false negatives, and
        // its false positives only cost the position check.
        let v = (w | (LO * 0x20)) ^ (LO * u64::from(b'c'));
        if (v.wrapping_sub(LO) & !v & HI) != 0 && (k * 8..k * 8 + 8).any(at) {
            return true;
        }
    }
    let tail = b.len() - chunks.remainder().len();
    (tail..b.len()).any(at)
}

fn is_copy_data(b: &crate::capture::Batch) -> bool {
    b.requests
        .first()
        .is_some_and(|r| matches!(r.bytes.first(), Some(b'd' | b'c' | b'f')))
}

/// PostgreSQL's SSLRequest, then the TLS handshake (`--target-tls`); not fed to the session
/// (it would take the request for a startup message).
fn ssl_request(mut s: Stream, tls: &crate::tls::Tls) -> Result<Stream, String> {
    const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    s.set_timeout(Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    s.write_all(&SSL_REQUEST).map_err(|e| e.to_string())?;
    let mut answer = [0u8; 1];
    s.read_exact(&mut answer).map_err(|e| e.to_string())?;
    if answer[0] != b'S' {
        return Err("the target does not accept TLS (it answered the SSLRequest with N)".into());
    }
    s.upgrade(tls).map_err(|e| format!("TLS: {e}"))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// The one-byte-first test finds "copy" exactly where the plain window scan does.
        #[test]
        fn names_copy_matches_window_scan(
            b in proptest::collection::vec(prop_oneof![
                Just(b'c'), Just(b'C'), Just(b'o'), Just(b'O'), Just(b'p'), Just(b'P'),
                Just(b'y'), Just(b'Y'), any::<u8>()
            ], 0..64)
        ) {
            let want = b.windows(4).any(|w| w.eq_ignore_ascii_case(b"copy"));
            prop_assert_eq!(super::names_copy(&b), want);
        }
    }
}
