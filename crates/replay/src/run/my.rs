//! One replayed MySQL/MariaDB session: dbtap's own login, then the captured commands one at a
//! time, statement ids remapped, each reply complete when the target's session emits its event.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use proto::{Direction, Health, QueryEvent, Session, Sink};

use super::{Ctx, Msg, Stream, is_timeout, new_session};
use crate::capture::Plan;
use crate::fidelity::Tally;
use crate::mysql::{self, AuthReply, Send, Statements};
use crate::redis::Credentials;

/// Forwards the target session's events and counts them.
struct Counting<'a> {
    tx: &'a std::sync::mpsc::SyncSender<Msg>,
    health: Health,
    events: usize,
}

impl Sink for Counting<'_> {
    fn event(&mut self, ev: QueryEvent) {
        self.events += 1;
        super::send_event(self.tx, ev);
    }
    fn health(&mut self) -> &mut Health {
        &mut self.health
    }
}

struct Conn {
    id: u64,
    stream: Stream,
    session: Box<dyn Session>,
    buf: Vec<u8>,
    /// The salt the target's last native-password exchange used (the greeting's, or an auth
    /// switch's): a COM_CHANGE_USER's scramble answers it.
    salt: Vec<u8>,
    charset: u8,
}

impl Conn {
    fn feed(&mut self, ctx: &Ctx, dir: Direction, b: &[u8]) -> usize {
        let mut s = Counting {
            tx: &ctx.tx,
            health: Health::default(),
            events: 0,
        };
        self.session.feed(dir, b, ctx.now_ns(), &mut s);
        s.events
    }

    /// Reads one whole packet (fed to the session); its payload.
    fn packet(&mut self, ctx: &Ctx, deadline: Instant) -> Result<Vec<u8>, String> {
        let mut head = [0u8; 4];
        self.read_exact(&mut head, deadline)?;
        let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
        let mut p = vec![0u8; len];
        self.read_exact(&mut p, deadline)?;
        self.feed(ctx, Direction::ToClient, &head);
        self.feed(ctx, Direction::ToClient, &p);
        Ok(p)
    }

    fn read_exact(&mut self, b: &mut [u8], deadline: Instant) -> Result<(), String> {
        let left = deadline
            .checked_duration_since(Instant::now())
            .ok_or("login timed out")?;
        self.stream.set_timeout(left).map_err(|e| e.to_string())?;
        self.stream.read_exact(b).map_err(|e| e.to_string())
    }

    fn send(&mut self, ctx: &Ctx, b: &[u8]) -> Result<(), String> {
        self.stream.write_all(b).map_err(|e| e.to_string())?;
        self.feed(ctx, Direction::ToServer, b);
        Ok(())
    }

    /// Connects and logs in (the exchange is fed to the session: it learns the capabilities
    /// and the database; the handshake emits no event).
    fn open(ctx: &Ctx, creds: &Credentials, db: Option<&[u8]>) -> Result<Conn, String> {
        let stream = Stream::connect(&ctx.target).map_err(|e| e.to_string())?;
        let id = ctx.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let session = new_session(id, &stream, &ctx.opts.session, proto::Protocol::Mysql)
            .ok_or("no mysql session")?;
        let mut c = Conn {
            id,
            stream,
            session,
            buf: vec![0u8; 64 << 10],
            salt: Vec::new(),
            charset: 0,
        };
        let deadline = Instant::now() + ctx.opts.reply_timeout.max(Duration::from_secs(5));
        let g = c.packet(ctx, deadline)?;
        let g =
            mysql::parse_greeting(&g).ok_or("the target's greeting is not MySQL protocol 10")?;
        (c.salt, c.charset) = (g.salt.clone(), g.charset);
        let user = creds.user.clone().unwrap_or_else(|| "root".into());
        let pw = creds.password.clone().unwrap_or_default();
        let mut login = mysql::login_response(&g, &user, &pw, db);
        let mut seq = 1;
        if let Some(tls) = &ctx.opts.tls {
            // The SSL request (the login's first 32 bytes with CLIENT_SSL), then TLS; the
            // session is told, and reads the login that follows inside TLS.
            login = mysql::with_ssl(login);
            c.send(ctx, &mysql::packet(1, login.get(..32).unwrap_or_default()))?;
            c.session.start_tls();
            c.stream
                .upgrade_in_place(tls)
                .map_err(|e| format!("TLS: {e}"))?;
            seq = 2;
        }
        c.send(ctx, &mysql::packet(seq, &login))?;
        c.finish_auth(ctx, seq, &pw, deadline)?;
        Ok(c)
    }

    /// Reads the answer to the authentication packet sent with sequence number `seq` (the
    /// login, or a COM_CHANGE_USER) and follows an auth switch to a plugin dbtap speaks.
    fn finish_auth(
        &mut self,
        ctx: &Ctx,
        seq: u8,
        pw: &str,
        deadline: Instant,
    ) -> Result<(), String> {
        match mysql::auth_reply(&self.packet(ctx, deadline)?) {
            AuthReply::Ok => Ok(()),
            AuthReply::Err(m) => Err(format!("login refused: {m}")),
            AuthReply::Switch(p, salt) if p == mysql::NATIVE => {
                self.send(
                    ctx,
                    &mysql::packet(seq + 2, &mysql::native_scramble(pw.as_bytes(), &salt)),
                )?;
                self.salt = salt;
                match mysql::auth_reply(&self.packet(ctx, deadline)?) {
                    AuthReply::Ok => Ok(()),
                    AuthReply::Err(m) => Err(format!("login refused: {m}")),
                    _ => Err("unexpected reply to the mysql_native_password login".into()),
                }
            }
            AuthReply::Switch(p, mut nonce) if p == mysql::ED25519 => {
                // The 32-byte nonce lost a final zero byte to the switch request's parsing.
                if nonce.len() == 31 {
                    nonce.push(0);
                }
                let sig = mysql::ed25519_signature(pw.as_bytes(), &nonce);
                self.send(ctx, &mysql::packet(seq + 2, &sig))?;
                match mysql::auth_reply(&self.packet(ctx, deadline)?) {
                    AuthReply::Ok => Ok(()),
                    AuthReply::Err(m) => Err(format!("login refused: {m}")),
                    _ => Err("unexpected reply to the ed25519 login".into()),
                }
            }
            AuthReply::Switch(p, mut nonce) if p == mysql::CACHING_SHA2 => {
                nonce.truncate(20);
                let tls = ctx.opts.tls.is_some();
                self.caching_sha2(ctx, seq + 2, pw, &nonce, tls, deadline)
            }
            AuthReply::Switch(p, _) => Err(format!(
                "the target asks for auth plugin {p}: not supported (mysql_native_password, \
                 client_ed25519 and caching_sha2_password are)"
            )),
            AuthReply::Other(b) => Err(format!(
                "the target answered the login with packet 0x{b:02x}: auth plugin not supported \
                 (mysql_native_password, client_ed25519 and caching_sha2_password are)"
            )),
        }
    }

    /// A captured COM_CHANGE_USER (payload `captured`), sent with the credentials of the user
    /// it names (its captured scramble answers another salt) and answered like a login.
    fn change_user(&mut self, ctx: &Ctx, captured: &[u8]) -> Result<(), String> {
        let cu = mysql::parse_change_user(captured).ok_or("COM_CHANGE_USER not readable")?;
        let creds = ctx.opts.creds.for_user(Some(&cu.user));
        let cu = mysql::ChangeUser {
            user: creds.user.clone().unwrap_or(cu.user),
            ..cu
        };
        let pw = creds.password.unwrap_or_default();
        let p = mysql::change_user_payload(&cu, &pw, &self.salt, self.charset);
        let deadline = Instant::now() + ctx.opts.reply_timeout.max(Duration::from_secs(5));
        self.send(ctx, &mysql::packet(0, &p))?;
        self.finish_auth(ctx, 0, &pw, deadline)
            .map_err(|e| format!("{}: {e}", cu.user))
    }

    /// MySQL 8's `caching_sha2_password` after the switch to it (packet `seq` on): the
    /// scramble; on "fast auth ok" (0x01 0x03) the OK follows; on "full authentication"
    /// (0x01 0x04) the password goes in clear inside TLS. Without TLS the full authentication
    /// needs the server's RSA key: not supported (one line). Untested against a server: none
    /// installs here (the scramble is checked against PyMySQL's).
    fn caching_sha2(
        &mut self,
        ctx: &Ctx,
        seq: u8,
        pw: &str,
        nonce: &[u8],
        tls: bool,
        deadline: Instant,
    ) -> Result<(), String> {
        let refused = |m: String| format!("login refused: {m}");
        let scramble = mysql::caching_sha2_scramble(pw.as_bytes(), nonce);
        self.send(ctx, &mysql::packet(seq, &scramble))?;
        let mut seq = seq;
        loop {
            let p = self.packet(ctx, deadline)?;
            match (p.first(), p.get(1)) {
                (Some(1), Some(3)) => continue,
                (Some(1), Some(4)) if tls => {
                    seq = seq.wrapping_add(2);
                    let clear = [pw.as_bytes(), b"\0"].concat();
                    self.send(ctx, &mysql::packet(seq, &clear))?;
                }
                (Some(1), Some(4)) => {
                    return Err("caching_sha2_password: the target asks for full \
                                authentication, which needs --target-tls here (its RSA key \
                                exchange is not supported)"
                        .into());
                }
                _ => {
                    return match mysql::auth_reply(&p) {
                        AuthReply::Ok => Ok(()),
                        AuthReply::Err(m) => Err(refused(m)),
                        _ => Err("unexpected reply to the caching_sha2_password login".into()),
                    };
                }
            }
        }
    }

    /// Sends one command and, when it is answered, reads until its event came; the reply's
    /// first payload (a PREPARE_OK) is returned.
    fn exchange(&mut self, ctx: &Ctx, out: &[u8], reply: bool, t: &mut Tally) -> Option<Vec<u8>> {
        if self.stream.write_all(out).is_err() {
            t.skip("connection_lost", 1);
            return None;
        }
        // A command without reply has its event now; one with a reply when its reply ends.
        self.feed(ctx, Direction::ToServer, out);
        if !reply {
            return Some(Vec::new());
        }
        let mut first = Vec::new();
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.read_reply(ctx, &mut buf, &mut first, t);
        self.buf = buf;
        r.then_some(first)
    }

    /// Reads until the session emitted an event; false when the connection is unusable.
    fn read_reply(
        &mut self,
        ctx: &Ctx,
        buf: &mut [u8],
        first: &mut Vec<u8>,
        t: &mut Tally,
    ) -> bool {
        let mut events = 0;
        let deadline = Instant::now() + ctx.opts.reply_timeout;
        while events == 0 {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                t.skip("reply_timeout", 1);
                return true;
            };
            if self.stream.set_timeout(left).is_err() {
                return false;
            }
            let k = match self.stream.read(buf) {
                Ok(0) => {
                    t.skip("connection_closed_by_target", 1);
                    return false;
                }
                Ok(k) => k,
                Err(e) if is_timeout(&e) => {
                    t.skip("reply_timeout", 1);
                    return true;
                }
                Err(_) => {
                    t.skip("connection_lost", 1);
                    return false;
                }
            };
            let got = buf.get(..k).unwrap_or_default();
            if first.len() < 9 {
                first.extend_from_slice(got.get(..9 - first.len()).unwrap_or(got));
            }
            events += self.feed(ctx, Direction::ToClient, got);
        }
        t.replies += 1;
        true
    }

    fn close(mut self, ctx: &Ctx) {
        let ts = ctx.now_ns();
        let mut s = Counting {
            tx: &ctx.tx,
            health: Health::default(),
            events: 0,
        };
        self.session.close(ts, &mut s);
        super::send_close(&ctx.tx, self.id, ts);
    }
}

/// Replays one MySQL session copy.
pub(super) fn run_session(ctx: &Ctx, plan: &Plan, offsets: &[u64]) -> Tally {
    let mut t = Tally::default();
    let mut conn: Option<Conn> = None;
    let mut st = Statements::default();
    let creds = ctx.opts.creds.for_user(plan.user.as_deref());
    let db = plan.database.as_ref().map(|d| d.as_bytes().to_vec());
    // A refused login is not tried again for every batch of the session.
    let mut refused = false;
    for (batch, off) in super::batches(ctx, plan, offsets) {
        let n = batch.requests.len();
        if refused {
            t.skip("connect_failed", n as u64);
            continue;
        }
        let late = ctx.wait_until(off);
        let Some((c, opened)) = super::connected(&mut conn, &mut t, n, "mysql", || {
            let r = Conn::open(ctx, &creds, db.as_deref());
            refused = r.as_ref().is_err_and(|e| e.starts_with("login refused"));
            r
        }) else {
            continue;
        };
        if opened {
            st = Statements::default();
        }
        ctx.record_lag(&mut t, late);
        let mut lost = false;
        for r in &batch.requests {
            let send = st.rewrite(r);
            if let Send::Skip(why) = send {
                t.skip(why, 1);
                continue;
            }
            t.sent += 1;
            t.batches += 1;
            let Send::Bytes { bytes, reply } = send else {
                // Send::ChangeUser: a new login on the same connection.
                match c.change_user(ctx, r.bytes.get(4..).unwrap_or_default()) {
                    Ok(()) => t.replies += 1,
                    Err(e) => {
                        super::warn_once(&format!("dbtap: replay: mysql: change user: {e}"));
                        lost = true;
                        break;
                    }
                }
                continue;
            };
            let Some(head) = c.exchange(ctx, &bytes, reply, &mut t) else {
                lost = true;
                break;
            };
            if r.bytes.get(4) == Some(&proto::mysql::message::cmd::QUIT) {
                lost = true;
                break;
            }
            if r.bytes.get(4) == Some(&proto::mysql::message::cmd::STMT_PREPARE)
                && head.get(4) == Some(&0)
                && let Some(&[a, b, c2, d]) = head.get(5..9)
            {
                st.prepared(r.prepared_id, u32::from_le_bytes([a, b, c2, d]));
            }
        }
        if lost && let Some(c) = conn.take() {
            c.close(ctx);
        }
    }
    if let Some(c) = conn {
        c.close(ctx);
    }
    t
}
