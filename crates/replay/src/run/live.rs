//! `dbtap replay --live`: what a live capture sees, mirrored onto the target as it happens.
//! The capture's hooks hand each connection's bytes here as they arrive; at each reply (the
//! client's turn is over) the connection's window of chunks since the last clean cut is framed
//! by the same framers as a capture file ([`crate::capture::frame`]), and the new batches go
//! to the connection's session thread(s) (one per `--scale` copy) over queues bounded
//! together by `--read-ahead` bytes ([`Feed`]), the same session loops as a file replay,
//! each batch due at its captured time. A session that falls behind (the target, or the
//! machine, slower than the source for a while) catches up from its queue. A window is cut
//! where its framing left nothing pending; the login exchange (and PostgreSQL's named Parse
//! messages) stay in a prefix framed again with every window, so each window is framed as
//! the connection's continuation. Nothing here blocks the capture: a full queue drops the
//! batch (counted). MongoDB connections' replies are scanned as they come for the cursors
//! they open, into the cursor map the sessions share.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use proto::{Protocol, QueryEvent};

use super::{Ctx, EventSink, Options, Target, mongo, run_session, start};
use crate::capture::{self, Batch, Chunk, Plan, Request, chunk_len};
use crate::fidelity::{Fidelity, Tally};
use crate::schedule;

/// Bytes queued for the live sessions together at most, unless [`Live::read_ahead`] says
/// otherwise (then a batch is dropped, counted `live_queue_full`).
const LIVE_QUEUE_BYTES: usize = 1 << 30;
/// Client bytes held per connection window at most (then the window is dropped, counted).
const MAX_WINDOW: usize = 16 << 20;
/// Prefix bytes (login, named statements) kept per connection at most.
const MAX_PREFIX: usize = 1 << 20;

/// What a queued batch holds, as counted against the read-ahead: its bytes and what holds them.
fn held(b: &Batch) -> usize {
    let per = std::mem::size_of::<Request>() + std::mem::size_of::<Batch>();
    b.requests
        .iter()
        .fold(std::mem::size_of::<Batch>(), |n, r| {
            n + per + r.bytes.len() + r.args.len() * std::mem::size_of::<(usize, usize)>()
        })
}

/// A live session's feed: the batches the capture framed for it, in order. What they hold
/// counts against the mirror's read-ahead until the session takes them.
#[derive(Debug)]
pub struct Feed {
    rx: Mutex<mpsc::Receiver<Batch>>,
    queued: Arc<AtomicUsize>,
}

impl Feed {
    /// The next batch (`None`: the connection ended and its batches were taken).
    pub fn recv(&self) -> Option<Batch> {
        let b = self
            .rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .recv()
            .ok()?;
        self.queued.fetch_sub(held(&b), Ordering::Relaxed);
        Some(b)
    }
}

#[derive(Default)]
struct LiveConn {
    saw_open: bool,
    protocol: Option<Protocol>,
    database: Option<Arc<str>>,
    prefix: Vec<Chunk>,
    prefix_bytes: usize,
    /// Batches the prefix frames to (already sent).
    prefix_batches: usize,
    /// Skips the prefix's framing counts (already counted).
    prefix_skips: (BTreeMap<String, u64>, BTreeMap<String, u64>),
    tail: Vec<Chunk>,
    tail_bytes: usize,
    /// Batches of the current window already sent.
    emitted: usize,
    /// Batches sent over the connection's life.
    sent_total: u64,
    feeds: Vec<mpsc::Sender<Batch>>,
    started: bool,
    /// Not replayed (not sampled, or over the connection cap): bytes are not kept; its
    /// requests are counted as skipped by its events.
    dead: bool,
    dead_why: &'static str,
    /// Events of the batch that found the connection dead, counted with that batch.
    owed: u64,
    /// MongoDB: the captured replies, scanned for the cursors they open.
    scan: Option<Box<crate::mongo::ReplyScan>>,
    /// Filters on: batches wait here for their verdicts (see [`super::gate`]).
    gate: Option<Box<super::gate::Gate>>,
    /// The session's user and database as last framed (for batches the gate lets go).
    who: (Option<Arc<str>>, Option<Arc<str>>),
}

/// The live mirror (see the module doc).
pub struct Live<S: EventSink> {
    ctx: Arc<Ctx>,
    collector: JoinHandle<S>,
    conns: HashMap<u64, LiveConn>,
    sessions: Vec<JoinHandle<Tally>>,
    tally: Tally,
    skipped_bytes: BTreeMap<String, u64>,
    fid: Fidelity,
    first_ts: Option<u64>,
    last_ts: u64,
    /// Filters are on: batches are sent when their events judged them ([`Live::verdict`]).
    filtering: bool,
    /// Connections whose gate has batches waiting.
    dirty: Vec<u64>,
    /// Bytes queued for the sessions (see [`Feed`]), and their bound.
    queued: Arc<AtomicUsize>,
    max_queued: usize,
}

fn add(
    total: &mut BTreeMap<String, u64>,
    now: &BTreeMap<String, u64>,
    base: &BTreeMap<String, u64>,
) {
    for (k, v) in now {
        let d = v.saturating_sub(base.get(k).copied().unwrap_or(0));
        if d > 0 {
            *total.entry(k.clone()).or_default() += d;
        }
    }
}

/// A PostgreSQL Parse of a named statement: the framer must remember it.
fn named_parse(p: Protocol, b: &Batch) -> bool {
    p == Protocol::Postgres
        && b.requests
            .iter()
            .any(|r| r.bytes.first() == Some(&b'P') && r.bytes.get(5).is_some_and(|&c| c != 0))
}

impl<S: EventSink> Live<S> {
    /// Starts the mirror onto `target` (the target's events go to `sink`).
    pub fn new(opts: &Options, target: &Target, sink: S) -> Live<S> {
        let (ctx, collector) = start(target, opts, sink, mongo::Shared::default());
        Live {
            ctx,
            collector,
            conns: HashMap::new(),
            sessions: Vec::new(),
            tally: Tally::default(),
            skipped_bytes: BTreeMap::new(),
            fid: Fidelity::default(),
            first_ts: None,
            last_ts: 0,
            filtering: false,
            dirty: Vec::new(),
            queued: Arc::new(AtomicUsize::new(0)),
            max_queued: LIVE_QUEUE_BYTES,
        }
    }

    /// Bounds the bytes queued for the sessions together (`--read-ahead`; default 1 GiB):
    /// beyond it a batch is dropped and its requests counted `live_queue_full`.
    pub fn read_ahead(&mut self, bytes: usize) {
        self.max_queued = bytes;
    }

    /// Turns the filters on: each framed request is then sent or left out by the
    /// [`verdict`](Live::verdict) of its event (see [`super::gate`]); call
    /// [`settle`](Live::settle) after each packet.
    pub fn filter(&mut self) {
        self.filtering = true;
    }

    /// The filters' verdict on an event of `conn` whose request started at `start_ns`.
    pub fn verdict(
        &mut self,
        conn: u64,
        start_ns: u64,
        command: &'static str,
        v: crate::filter::Verdict,
    ) {
        let Some(c) = self.conns.get_mut(&conn).filter(|c| !c.dead) else {
            return;
        };
        let j = crate::filter::Judged {
            start_ns,
            command,
            verdict: v,
        };
        c.gate
            .get_or_insert_default()
            .verdict(j, &mut self.fid.skipped_requests);
        if !self.dirty.contains(&conn) {
            self.dirty.push(conn);
        }
    }

    /// Sends what the filters judged since the last call (after each packet: by then the
    /// events of its replies came).
    pub fn settle(&mut self) {
        for conn in std::mem::take(&mut self.dirty) {
            self.settle_conn(conn, false);
        }
    }

    fn settle_conn(&mut self, conn: u64, end: bool) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let (Some(p), Some(g)) = (c.protocol, c.gate.as_mut()) else {
            return;
        };
        let out = g.settle(p, end, &mut self.fid.skipped_requests);
        let (user, database) = c.who.clone();
        for b in out {
            self.send(conn, p, &user, &database, b);
        }
    }

    /// A connection opened (`saw_open`: its start was seen).
    pub fn open(&mut self, conn: u64, saw_open: bool) {
        self.conns.entry(conn).or_default().saw_open = saw_open;
    }

    /// Bytes of `conn` handed to its session.
    pub fn bytes(&mut self, conn: u64, to_server: bool, ts_ns: u64, data: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn).filter(|c| !c.dead) else {
            return;
        };
        if !to_server {
            if c.scan.is_none() && c.protocol.is_none() && crate::mongo::looks_like_reply(data) {
                c.scan = Some(Box::new(crate::mongo::ReplyScan::live()));
            }
            if let Some(scan) = c.scan.as_mut() {
                scan.feed(data);
                for (rid, cur) in scan.opening.drain(..) {
                    self.ctx.mongo.opened(conn, rid, cur);
                }
            }
            if !matches!(c.tail.last(), Some(Chunk::Reply(..)) | None) {
                c.tail.push(Chunk::reply(data));
                self.frame(conn, false);
            }
            return;
        }
        if c.tail_bytes + data.len() > MAX_WINDOW {
            *self.skipped_bytes.entry("live_window".into()).or_default() += data.len() as u64;
            c.tail = vec![Chunk::Gap];
            c.tail_bytes = 0;
            c.emitted = 0;
            return;
        }
        c.tail_bytes += data.len();
        c.tail.push(Chunk::Client(ts_ns, data.to_vec()));
    }

    /// Reassembly lost bytes of `conn`.
    pub fn gap(&mut self, conn: u64, to_server: bool, len: u64) {
        if let Some(c) = self.conns.get_mut(&conn)
            && to_server
            && !c.dead
        {
            c.tail.push(Chunk::Gap);
            *self.skipped_bytes.entry("capture_gap".into()).or_default() += len;
        }
    }

    /// An event of the capture: tells the connection's protocol and database.
    pub fn event(&mut self, ev: &QueryEvent) {
        let Some(c) = self.conns.get_mut(&ev.conn) else {
            return;
        };
        if c.dead {
            if c.owed > 0 {
                c.owed -= 1;
            } else {
                self.tally.skip(c.dead_why, 1);
            }
            return;
        }
        if c.database.is_none() {
            c.database = ev.database.clone();
        }
        if c.protocol.is_none() {
            c.protocol = Some(ev.protocol);
            if ev.protocol != Protocol::Mongodb {
                c.scan = None;
            }
            self.frame(ev.conn, false);
        }
    }

    /// The connection ended: what is left is framed and its sessions end.
    pub fn close(&mut self, conn: u64) {
        self.frame(conn, true);
        if self.filtering {
            self.settle_conn(conn, true);
        }
        self.conns.remove(&conn);
    }

    /// Frames the connection's window at a reply (or its end) and sends the new batches.
    fn frame(&mut self, conn: u64, end: bool) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let Some(p) = c.protocol.filter(|_| !c.dead && !c.tail.is_empty()) else {
            return;
        };
        if !end && !matches!(c.tail.last(), Some(Chunk::Reply(..))) {
            return;
        }
        let (mut sb, mut sk) = (BTreeMap::new(), BTreeMap::new());
        let views = c.prefix.iter().chain(c.tail.iter()).map(Chunk::view);
        let f = capture::frame(p, c.saw_open, views, &mut sb, &mut sk);
        let fresh: Vec<Batch> = f
            .batches
            .into_iter()
            .skip(c.prefix_batches + c.emitted)
            .collect();
        let clean = !sb.contains_key("incomplete_at_end");
        let window = c.emitted + fresh.len();
        c.emitted = window;
        let keep = c.sent_total == 0 && window == 0 || fresh.iter().any(|b| named_parse(p, b));
        if clean || end {
            add(&mut self.skipped_bytes, &sb, &c.prefix_skips.0);
            add(&mut self.fid.skipped_requests, &sk, &c.prefix_skips.1);
            let tail_len: usize = c.tail.iter().map(chunk_len).sum();
            if keep && c.prefix_bytes + tail_len <= MAX_PREFIX {
                c.prefix.append(&mut c.tail);
                c.prefix_bytes += tail_len;
                c.prefix_batches += window;
                c.prefix_skips = (sb, sk);
            } else {
                c.tail.clear();
            }
            c.tail_bytes = 0;
            c.emitted = 0;
        }
        let user = f.user.map(Arc::from);
        let database = f.database.map(Arc::from).or_else(|| c.database.clone());
        if self.filtering {
            c.who = (user, database);
            let g = c.gate.get_or_insert_default();
            for b in fresh {
                g.push(b, &mut self.fid.skipped_requests);
            }
            if !self.dirty.contains(&conn) {
                self.dirty.push(conn);
            }
            return;
        }
        for b in fresh {
            self.send(conn, p, &user, &database, b);
        }
    }

    /// Hands a batch to the connection's sessions, started at its first batch.
    fn send(
        &mut self,
        conn: u64,
        p: Protocol,
        user: &Option<Arc<str>>,
        database: &Option<Arc<str>>,
        b: Batch,
    ) {
        let n = b.requests.len() as u64;
        let scale = u64::from(self.ctx.opts.scale);
        self.fid.requests_framed += n;
        self.first_ts = Some(self.first_ts.map_or(b.ts_ns, |f| f.min(b.ts_ns)));
        self.last_ts = self.last_ts.max(b.ts_ns);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !c.started {
            c.started = true;
            self.fid.sessions_captured += 1;
            let live_now = self.sessions.iter().filter(|h| !h.is_finished()).count();
            if !schedule::sampled(conn, self.ctx.opts.sessions_pct) {
                c.dead = true;
                c.dead_why = "session_not_sampled";
            } else if live_now + self.ctx.opts.scale as usize > self.ctx.opts.max_connections {
                c.dead = true;
                c.dead_why = "live_max_connections";
            } else {
                self.fid.sessions_replayed += scale;
                for _ in 0..scale {
                    let (tx, rx) = mpsc::channel();
                    let plan = Plan {
                        conn,
                        protocol: p,
                        saw_open: c.saw_open,
                        database: database.clone(),
                        user: user.clone(),
                        batches: Vec::new(),
                        end_ns: 0,
                        mongo_cursors: Vec::new(),
                        live: Some(Arc::new(Feed {
                            rx: Mutex::new(rx),
                            queued: Arc::clone(&self.queued),
                        })),
                    };
                    let ctx = Arc::clone(&self.ctx);
                    let h = std::thread::Builder::new()
                        .stack_size(512 << 10)
                        .spawn(move || run_session(&ctx, &plan, &[]));
                    match h {
                        Ok(h) => {
                            self.sessions.push(h);
                            c.feeds.push(tx);
                        }
                        Err(_) => self.tally.skip("thread_not_started", n),
                    }
                }
            }
            if c.dead {
                c.prefix = Vec::new();
                c.tail = Vec::new();
                // Under the filters the batch's events came before it (see `settle`).
                c.owed = if self.filtering { 0 } else { n };
                self.tally.skip(c.dead_why, n);
            }
        }
        if c.dead {
            return;
        }
        c.sent_total += 1;
        self.fid.requests_planned += n * scale;
        let cost = held(&b);
        for tx in &c.feeds {
            // Every copy holds its own; a session that ended takes nothing (its end counted).
            if self.queued.load(Ordering::Relaxed) + cost > self.max_queued {
                self.tally.skip("live_queue_full", n);
            } else if tx.send(b.clone()).is_ok() {
                self.queued.fetch_add(cost, Ordering::Relaxed);
            }
        }
    }

    /// Ends the mirror: every connection's rest is framed, the sessions finish their queues;
    /// returns the sink and the replay's counts.
    pub fn finish(mut self) -> (S, Fidelity) {
        let ids: Vec<u64> = self.conns.keys().copied().collect();
        for id in ids {
            self.close(id);
        }
        for h in std::mem::take(&mut self.sessions) {
            match h.join() {
                Ok(t) => self.tally.merge(&t),
                Err(_) => self.tally.skip("session_failed", 1),
            }
        }
        let mut fid = std::mem::take(&mut self.fid);
        fid.wall_s = self.ctx.start.elapsed().as_secs_f64();
        fid.capture_span_s =
            self.last_ts
                .saturating_sub(self.first_ts.unwrap_or(self.last_ts)) as f64
                / 1e9;
        fid.take(&self.tally);
        fid.skipped_bytes = std::mem::take(&mut self.skipped_bytes);
        drop(self.ctx);
        let sink = self
            .collector
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        (sink, fid)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;
    use crate::redis::Credentials;
    use crate::resp::{self, Frame};
    use proto::SessionConfig;

    struct Count(u64);
    impl EventSink for Count {
        fn event(&mut self, _: QueryEvent) {
            self.0 += 1;
        }
        fn close(&mut self, _: u64, _: u64) {}
    }

    /// A target answering every RESP command with +OK; returns the commands it got.
    fn fake_redis() -> (String, std::thread::JoinHandle<Vec<Vec<u8>>>) {
        let (go, wait) = mpsc::channel();
        drop(go);
        held_redis(wait)
    }

    /// [`fake_redis`], reading nothing until `wait` gives the word (or is dropped).
    fn held_redis(wait: mpsc::Receiver<()>) -> (String, std::thread::JoinHandle<Vec<Vec<u8>>>) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            let _ = wait.recv();
            let (mut buf, mut got) = (Vec::new(), Vec::new());
            let mut b = [0u8; 4096];
            while let Ok(n) = s.read(&mut b) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&b[..n]);
                while let Frame::Whole(len, _) = resp::request(&buf) {
                    got.push(buf.drain(..len).collect());
                    s.write_all(b"+OK\r\n").expect("write");
                }
            }
            got
        });
        (addr, h)
    }

    fn options() -> Options {
        Options {
            timing: crate::Timing::Speed(1.0),
            skip_idle_ns: None,
            scale: 1,
            sessions_pct: 100.0,
            max_connections: 10,
            creds: Credentials::default(),
            reply_timeout: std::time::Duration::from_secs(5),
            block_wait: std::time::Duration::from_secs(1),
            session: SessionConfig::default(),
            tls: None,
        }
    }

    #[test]
    fn windows_are_framed_at_replies_and_sent_once() {
        let (addr, server) = fake_redis();
        let opts = options();
        let mut live = Live::new(&opts, &Target::Tcp(addr), Count(0));
        let set = resp::encode(&[b"SET", b"k", b"v"]);
        let get = resp::encode(&[b"GET", b"k"]);
        live.open(1, true);
        // A pipeline of two, the second split, then its reply; the protocol is known at the
        // first event only.
        live.bytes(1, true, 1, &set);
        live.bytes(1, true, 2, &get[..4]);
        live.bytes(1, false, 3, b"+OK\r\n");
        let mut ev = proto::testing::event(Protocol::Redis, "set", 0, Some(1));
        ev.conn = 1;
        live.event(&ev);
        live.bytes(1, true, 4, &get[4..]);
        live.bytes(1, false, 5, b"$1\r\nv\r\n");
        live.event(&ev);
        live.bytes(1, true, 6, &get);
        live.bytes(1, false, 7, b"$1\r\nv\r\n");
        live.close(1);
        let (sink, fid) = live.finish();
        let got = server.join().expect("server");
        assert_eq!(got, vec![set.clone(), get.clone(), get.clone()]);
        assert_eq!((fid.requests_framed, fid.requests_sent), (3, 3));
        assert!(
            fid.skipped_requests.is_empty(),
            "{:?}",
            fid.skipped_requests
        );
        assert_eq!(sink.0, 3);
    }

    /// A session held up by its target: what the queue (bounded by the read-ahead) cannot
    /// hold is dropped and counted, what it holds is sent once the target reads, and every
    /// framed request is one or the other.
    #[test]
    fn a_lagging_session_queues_up_to_the_read_ahead() {
        let (go, wait) = mpsc::channel();
        let (addr, server) = held_redis(wait);
        let mut live = Live::new(&options(), &Target::Tcp(addr), Count(0));
        let set = resp::encode(&[b"SET", b"k", b"v"]);
        let one = held(&Batch {
            ts_ns: 0,
            requests: vec![Request {
                ts_ns: 0,
                bytes: set.clone(),
                args: vec![(0, 1); 3],
                prepared_id: None,
            }],
        });
        live.read_ahead(one * 3);
        live.open(1, true);
        for i in 0..40u64 {
            live.bytes(1, true, 2 * i + 1, &set);
            live.bytes(1, false, 2 * i + 2, b"+OK\r\n");
            if i == 0 {
                let mut ev = proto::testing::event(Protocol::Redis, "set", 0, Some(1));
                ev.conn = 1;
                live.event(&ev);
            }
        }
        // The session holds at most one batch it took, the queue at most 3.
        let dropped = live.tally.skipped.get("live_queue_full").copied();
        assert!(dropped.is_some_and(|d| d >= 36), "{dropped:?}");
        go.send(()).expect("go");
        live.close(1);
        let (_, fid) = live.finish();
        let got = server.join().expect("server");
        assert_eq!(fid.requests_framed, 40);
        let skipped = fid.skipped_requests.get("live_queue_full").copied();
        assert_eq!(Some(40 - fid.requests_sent), skipped, "{fid:?}");
        assert_eq!(got.len() as u64, fid.requests_sent);
        assert!((1..=4).contains(&fid.requests_sent), "{fid:?}");
    }
}
