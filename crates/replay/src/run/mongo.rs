//! One replayed MongoDB session: dbtap's own hello (is there session support?) and login
//! (with the captured user's password, [`crate::mongo::auth`]), then the
//! captured messages one at a time with the replay's request ids, each rewritten for the
//! target ([`crate::mongo::rewrite`]) and waiting for its reply. Cursors are remapped across
//! all sessions of a scale copy: a getMore whose cursor another session opens waits for that
//! session's reply (at most the reply timeout), as mongoreplay learnt to. The map is keyed by
//! the captured request that opened a cursor, so a live mirror can fill its two halves (the
//! capture's reply, the target's) in either order.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{Read, Write};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use proto::mongodb::wire::{HEADER_LEN, Header, op, put_message};
use proto::{Direction, Session};

use super::{Ctx, Stream, feed, is_timeout, new_session};
use crate::capture::{Batch, Plan};
use crate::fidelity::Tally;
use crate::mongo::reply_cursor;
use crate::mongo::rewrite::{self, Conv, Out};
use crate::mongo::{auth, doc};

/// Entries each cursor table holds at most in a live mirror (the oldest go first).
const MAX_CURSORS: usize = 1 << 16;

/// Whether the target's refusal of a command without a login was reported (once a run).
static UNAUTHORIZED_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A captured request: (captured connection, its request id).
type Opener = (u64, i32);

/// What the MongoDB sessions of one replay share: which captured request opened each
/// captured cursor, and the target's cursor each copy's replay of that request got.
#[derive(Default)]
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    cv: Condvar,
    /// Session copies started per captured connection: the copy number of the next.
    copies: Mutex<HashMap<u64, u32>>,
}

#[derive(Default)]
struct Inner {
    openers: HashMap<i64, Opener>,
    /// The requests in `openers`.
    opener_reqs: HashSet<Opener>,
    opener_order: VecDeque<i64>,
    /// (copy, opener) → the target's cursor (0: none, or exhausted).
    target: HashMap<(u32, Opener), i64>,
    target_order: VecDeque<(u32, Opener)>,
}

impl Shared {
    pub(super) fn new(plans: &[Plan]) -> Shared {
        let s = Shared::default();
        {
            let mut i = s.lock();
            for p in plans {
                for &(rid, c) in &p.mongo_cursors {
                    i.openers.insert(c, (p.conn, rid));
                    i.opener_reqs.insert((p.conn, rid));
                }
            }
        }
        s
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `--live`: a captured reply to request `rid` of `conn` opened `cursor` (the first reply
    /// naming it wins).
    pub(crate) fn opened(&self, conn: u64, rid: i32, cursor: i64) {
        let mut i = self.lock();
        if i.openers.contains_key(&cursor) {
            return;
        }
        i.openers.insert(cursor, (conn, rid));
        i.opener_reqs.insert((conn, rid));
        i.opener_order.push_back(cursor);
        if i.opener_order.len() > MAX_CURSORS
            && let Some(old) = i.opener_order.pop_front()
            && let Some(who) = i.openers.remove(&old)
        {
            i.opener_reqs.remove(&who);
        }
    }

    /// Whether a captured request opened a cursor (as far as is known now).
    fn opens(&self, who: Opener) -> bool {
        self.lock().opener_reqs.contains(&who)
    }

    /// The copy number of a session copy of captured connection `conn` (its k-th start).
    fn copy_of(&self, conn: u64) -> u32 {
        let mut m = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(conn).or_default();
        *n += 1;
        *n - 1
    }

    /// Copy `copy`'s replay of request `who` got `target` (0: no cursor).
    fn publish(&self, copy: u32, who: Opener, target: i64) {
        let mut i = self.lock();
        if i.target.insert((copy, who), target).is_none() {
            i.target_order.push_back((copy, who));
            if i.target_order.len() > MAX_CURSORS
                && let Some(old) = i.target_order.pop_front()
            {
                i.target.remove(&old);
            }
        }
        self.cv.notify_all();
    }

    /// The target's cursor of copy `copy` for a captured one went away (exhausted).
    fn exhausted(&self, copy: u32, captured: i64) {
        let who = self.lock().openers.get(&captured).copied();
        if let Some(who) = who {
            self.publish(copy, who, 0);
        }
    }

    /// The target's cursor for a captured one, waiting up to `wait` for the session that
    /// opens it.
    fn lookup(&self, copy: u32, captured: i64, wait: Duration) -> Result<i64, &'static str> {
        let deadline = Instant::now() + wait;
        let mut i = self.lock();
        let Some(&who) = i.openers.get(&captured) else {
            return Err("mongodb_cursor_opened_before_capture");
        };
        loop {
            match i.target.get(&(copy, who)) {
                Some(0) => return Err("mongodb_cursor_not_on_target"),
                Some(&id) => return Ok(id),
                None => {}
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Err("mongodb_cursor_wait_timeout");
            };
            i = self
                .cv
                .wait_timeout(i, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

struct Conn {
    id: u64,
    stream: Stream,
    session: Box<dyn Session>,
    conv: Conv,
    next_rid: i32,
}

impl Conn {
    /// Connects, asks hello whether the target has logical sessions, and logs in when
    /// `login` says so (neither is fed to the session: they are dbtap's, not the capture's).
    fn open(ctx: &Ctx, login: Option<&auth::Login>) -> Result<Conn, String> {
        let stream = Stream::connect(&ctx.target).map_err(|e| e.to_string())?;
        let id = ctx.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let session = new_session(id, &stream, &ctx.opts.session, proto::Protocol::Mongodb)
            .ok_or("no mongodb session")?;
        let mut c = Conn {
            id,
            stream,
            session,
            conv: Conv {
                sessions: false,
                lsid_salt: ctx.epoch_ns ^ id.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15,
            },
            next_rid: 1,
        };
        let deadline = Instant::now() + ctx.opts.reply_timeout.max(Duration::from_secs(5));
        let d = c
            .command(auth::hello(login), deadline)
            .map_err(|e| format!("hello: {e}"))?;
        c.conv.sessions = doc::get(&d, b"logicalSessionTimeoutMinutes")
            .is_some_and(|e| doc::int(&d, &e).is_some());
        if let Some(l) = login {
            auth::log_in(l, auth::choose(l, &d), &mut |d| c.command(d, deadline))
                .map_err(|e| format!("login refused: {e}"))?;
        }
        Ok(c)
    }

    /// Sends one command document of dbtap's own and returns its reply's body document.
    fn command(&mut self, d: Vec<u8>, deadline: Instant) -> Result<Vec<u8>, String> {
        let mut body = 0u32.to_le_bytes().to_vec();
        body.push(0);
        body.extend(d);
        let mut m = Vec::new();
        let rid = self.rid();
        put_message(&mut m, rid, 0, op::MSG, &body);
        self.stream.write_all(&m).map_err(|e| e.to_string())?;
        loop {
            let reply = self.read_message(deadline)?;
            if Header::parse(&reply).is_some_and(|h| h.response_to == rid) {
                return Ok(reply.get(HEADER_LEN + 5..).unwrap_or_default().to_vec());
            }
        }
    }

    fn rid(&mut self) -> i32 {
        let r = self.next_rid;
        self.next_rid = self.next_rid.checked_add(1).unwrap_or(1);
        r
    }

    /// Reads one whole message.
    fn read_message(&mut self, deadline: Instant) -> Result<Vec<u8>, String> {
        let mut head = [0u8; HEADER_LEN];
        self.read_exact(&mut head, deadline)?;
        let h = Header::parse(&head)
            .filter(Header::len_ok)
            .ok_or("not a MongoDB reply")?;
        let mut m = head.to_vec();
        m.resize(h.len as usize, 0);
        self.read_exact(m.get_mut(HEADER_LEN..).unwrap_or_default(), deadline)?;
        Ok(m)
    }

    fn read_exact(&mut self, b: &mut [u8], deadline: Instant) -> Result<(), String> {
        let left = deadline
            .checked_duration_since(Instant::now())
            .ok_or("timeout")?;
        self.stream.set_timeout(left).map_err(|e| e.to_string())?;
        self.stream.read_exact(b).map_err(|e| {
            if is_timeout(&e) {
                "timeout".to_string()
            } else {
                e.to_string()
            }
        })
    }

    /// Sends a message and, when it is answered, reads its reply (fed to the session).
    /// `Err(reason)` when the connection is no longer usable.
    fn exchange(
        &mut self,
        ctx: &Ctx,
        mut out: Vec<u8>,
        reply: bool,
    ) -> Result<Option<Vec<u8>>, &'static str> {
        let rid = self.rid();
        rewrite::set_request_id(&mut out, rid);
        self.stream.write_all(&out).map_err(|_| "connection_lost")?;
        feed(
            self.session.as_mut(),
            Direction::ToServer,
            &out,
            ctx.now_ns(),
            &ctx.tx,
        );
        if !reply {
            return Ok(None);
        }
        let deadline = Instant::now() + ctx.opts.reply_timeout;
        loop {
            let m = self.read_message(deadline).map_err(|e| match e.as_str() {
                "timeout" => "reply_timeout",
                "failed to fill whole buffer" => "connection_closed_by_target",
                _ => "connection_lost",
            })?;
            feed(
                self.session.as_mut(),
                Direction::ToClient,
                &m,
                ctx.now_ns(),
                &ctx.tx,
            );
            if Header::parse(&m).is_some_and(|h| h.response_to == rid) {
                return Ok(Some(m));
            }
        }
    }

    fn close(mut self, ctx: &Ctx) {
        super::close_session(self.session.as_mut(), self.id, ctx);
    }
}

/// The login of a session's connections: its captured user's (see [`auth::plan`]), found
/// in `batches` (a live session's first batch: the driver's hello, whose
/// speculativeAuthenticate names the user).
fn login_of(ctx: &Ctx, batches: &[Batch]) -> Option<auth::Login> {
    let msgs = batches.iter().flat_map(|b| &b.requests);
    let cap = auth::captured(msgs.map(|r| r.bytes.as_slice()));
    auth::plan(&cap, &ctx.opts.creds).unwrap_or_else(|e| {
        super::warn_once(&format!("dbtap: replay: mongodb: not logging in: {e}"));
        None
    })
}

/// Replays one MongoDB session copy.
pub(super) fn run_session(ctx: &Ctx, plan: &Plan, offsets: &[u64]) -> Tally {
    let mut t = Tally::default();
    let shared = &ctx.mongo;
    let copy = shared.copy_of(plan.conn);
    let mut login = plan
        .live
        .is_none()
        .then(|| login_of(ctx, &plan.batches))
        .flatten();
    let mut conn: Option<Conn> = None;
    // A refused login is not tried again for every batch of the session.
    let mut refused = false;
    for (batch, off) in super::batches(ctx, plan, offsets) {
        let n = batch.requests.len();
        if refused {
            t.skip("connect_failed", n as u64);
            continue;
        }
        let late = ctx.wait_until(off);
        if plan.live.is_some() && conn.is_none() && login.is_none() {
            login = login_of(ctx, std::slice::from_ref(batch.as_ref()));
        }
        let Some((c, _)) = super::connected(&mut conn, &mut t, n, "mongodb", || {
            let r = Conn::open(ctx, login.as_ref());
            refused = r.as_ref().is_err_and(|e| e.starts_with("login refused"));
            r
        }) else {
            continue;
        };
        ctx.record_lag(&mut t, late);
        let mut lost = false;
        for r in &batch.requests {
            let who = (
                plan.conn,
                Header::parse(&r.bytes).map_or(0, |h| h.request_id),
            );
            let wait = ctx.opts.reply_timeout;
            let mut map = |cur: i64| shared.lookup(copy, cur, wait);
            let (bytes, reply, getmore) = match rewrite::rewrite(&r.bytes, &c.conv, &mut map) {
                Out::Send {
                    bytes,
                    reply,
                    getmore,
                } => (bytes, reply, getmore),
                Out::Skip(why) => {
                    t.skip(why, 1);
                    if shared.opens(who) {
                        shared.publish(copy, who, 0);
                    }
                    continue;
                }
            };
            t.sent += 1;
            t.batches += 1;
            let got = match c.exchange(ctx, bytes, reply) {
                Ok(got) => got,
                Err(why) => {
                    t.skip(why, 1);
                    if shared.opens(who) {
                        shared.publish(copy, who, 0);
                    }
                    lost = true;
                    break;
                }
            };
            let Some(m) = got else {
                continue;
            };
            t.replies += 1;
            if login.is_none()
                && let Some(e) = auth::unauthorized(&m)
                && !UNAUTHORIZED_SAID.swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                super::warn_once(&format!(
                    "dbtap: replay: mongodb: the target requires a login ({e}): give the \
                     captured user's password with --credentials FILE or --user/--password"
                ));
            }
            let target = reply_cursor(&m).unwrap_or(0);
            match getmore {
                Some(cur) if target == 0 => shared.exhausted(copy, cur),
                Some(_) => {}
                // A live mirror may not have seen the captured reply yet: a cursor the target
                // opened is noted whether or not the capture's did.
                None if target != 0 || shared.opens(who) => shared.publish(copy, who, target),
                None => {}
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
