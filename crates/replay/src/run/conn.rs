//! One target connection of a replayed session: login, a batch out and its replies in, each
//! byte also fed to the target's protocol session.

use std::io::{Read, Write};
use std::time::Instant;

use proto::{Direction, Session};

use super::{Ctx, Stream, count_replies, feed, is_timeout, new_session};
use crate::fidelity::Tally;
use crate::redis;
use crate::resp;

pub(super) struct TargetConn {
    id: u64,
    stream: Stream,
    session: Box<dyn Session>,
    rbuf: Vec<u8>,
    /// What each read reads into (allocated once).
    buf: Vec<u8>,
    /// Replies still owed from earlier batches (a reply timeout carries them over).
    owed: usize,
}

impl TargetConn {
    /// Connects, logs in with the given credentials and selects `db`; `None` when it fails.
    pub(super) fn open(
        ctx: &Ctx,
        creds: &redis::Credentials,
        db: Option<&[u8]>,
        t: &mut Tally,
    ) -> Option<TargetConn> {
        let mut stream = Stream::connect(&ctx.target).ok()?;
        if let Some(tls) = &ctx.opts.tls {
            // Redis speaks TLS from the first byte.
            stream = stream.upgrade(tls).ok()?;
        }
        let id = ctx.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let session = new_session(id, &stream, &ctx.opts.session, proto::Protocol::Redis)?;
        t.connections += 1;
        let mut setup = Vec::new();
        let mut n = 0;
        if let Some(a) = redis::auth_args(creds) {
            let mut all: Vec<&[u8]> = vec![b"AUTH"];
            all.extend(a.iter().map(|s| s.as_bytes()));
            setup.extend(resp::encode(&all));
            n += 1;
        }
        if let Some(d) = db.filter(|d| *d != b"0") {
            setup.extend(resp::encode(&[b"SELECT", d]));
            n += 1;
        }
        let mut c = TargetConn {
            id,
            stream,
            session,
            rbuf: Vec::new(),
            buf: vec![0u8; 64 << 10],
            owed: 0,
        };
        if n > 0 {
            // Setup is not part of the replayed traffic: not fed to the session.
            c.stream.write_all(&setup).ok()?;
            let deadline = Instant::now() + ctx.opts.reply_timeout;
            let mut got = 0;
            let mut buf = [0u8; 4096];
            while got < n {
                c.stream
                    .set_timeout(deadline.checked_duration_since(Instant::now())?)
                    .ok()?;
                let k = c.stream.read(&mut buf).ok().filter(|&k| k > 0)?;
                c.rbuf.extend_from_slice(buf.get(..k)?);
                let (r, _, used, ok) = count_replies(&c.rbuf);
                if !ok {
                    return None;
                }
                c.rbuf.drain(..used);
                got += r;
            }
        }
        Some(c)
    }

    /// Sends `out` (answered by `expect` replies) and reads until they all came, or the wait
    /// ran out. False when the connection is no longer usable (closed, or replaced after a
    /// blocking command outlived the block wait).
    pub(super) fn exchange(
        &mut self,
        ctx: &Ctx,
        out: &[u8],
        expect: usize,
        blocking: bool,
        t: &mut Tally,
    ) -> bool {
        let ts = ctx.now_ns();
        if self.stream.write_all(out).is_err() {
            t.skip("connection_lost", 1);
            return false;
        }
        feed(self.session.as_mut(), Direction::ToServer, out, ts, &ctx.tx);
        self.owed += expect;
        let wait = if blocking {
            ctx.opts.block_wait
        } else {
            ctx.opts.reply_timeout
        };
        let deadline = Instant::now() + wait;
        while self.owed > 0 {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return self.timed_out(blocking, t);
            };
            if self.stream.set_timeout(left).is_err() {
                return false;
            }
            let k = match self.stream.read(&mut self.buf) {
                Ok(0) => {
                    t.skip("connection_closed_by_target", 1);
                    return false;
                }
                Ok(k) => k,
                Err(e) if is_timeout(&e) => return self.timed_out(blocking, t),
                Err(_) => {
                    t.skip("connection_lost", 1);
                    return false;
                }
            };
            let got = self.buf.get(..k).unwrap_or_default();
            feed(
                self.session.as_mut(),
                Direction::ToClient,
                got,
                ctx.now_ns(),
                &ctx.tx,
            );
            self.rbuf.extend_from_slice(got);
            let (n, _, used, ok) = count_replies(&self.rbuf);
            self.rbuf.drain(..used);
            t.replies += n as u64;
            self.owed = self.owed.saturating_sub(n);
            if !ok {
                t.skip("reply_unframed", 1);
                self.rbuf.clear();
                self.owed = 0;
            }
        }
        true
    }

    /// The replies did not come in time: a blocking command's connection is replaced, any
    /// other session goes on (the replies still owed are waited for with the next batch).
    fn timed_out(&mut self, blocking: bool, t: &mut Tally) -> bool {
        if blocking {
            t.skip("blocking_reply_abandoned", 1);
            return false;
        }
        t.skip("reply_timeout", 1);
        true
    }

    /// Keeps the connection open until `off_ns` from the replay's start (the captured
    /// connection's end), reading what the server pushes (a subscriber's messages).
    pub(super) fn hold_until(&mut self, ctx: &Ctx, off_ns: u64) {
        loop {
            let now = ctx.start.elapsed().as_nanos() as u64;
            if now >= off_ns
                || self
                    .stream
                    .set_timeout(std::time::Duration::from_nanos(off_ns - now))
                    .is_err()
            {
                return;
            }
            match self.stream.read(&mut self.buf) {
                Ok(0) => return,
                Ok(k) => {
                    let got = self.buf.get(..k).unwrap_or_default();
                    feed(
                        self.session.as_mut(),
                        Direction::ToClient,
                        got,
                        ctx.now_ns(),
                        &ctx.tx,
                    );
                }
                Err(e) if is_timeout(&e) => {}
                Err(_) => return,
            }
        }
    }

    /// Closes the target session (its unanswered requests become events) and the connection.
    pub(super) fn close(mut self, ctx: &Ctx) {
        super::close_session(self.session.as_mut(), self.id, ctx);
    }
}
